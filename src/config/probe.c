/* SPDX-License-Identifier: Apache-2.0 */
/* --nproc-per-node: counting NVIDIA GPUs, NeuronCores and usable CPUs. */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "config-private.h"

static int count_gpus(void)
{
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        struct dirent *de;
        DIR *dir;
        int n = 0;

        /* CUDA_VISIBLE_DEVICES narrows what a worker can use, so it is the
         * count when set, as torch.cuda.device_count() would report. */
        if (visible != NULL) {
                if (*visible == '\0')
                        return 0;
                n = 1;
                for (const char *p = visible; *p; p++)
                        if (*p == ',')
                                n++;
                return n;
        }
        dir = opendir("/proc/driver/nvidia/gpus");
        if (dir == NULL)
                return 0;
        while ((de = readdir(dir)) != NULL)
                if (de->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

/* NEURON_RT_VISIBLE_CORES: "0-3,8,10-11" counts 7. -1 when malformed. */
static int count_core_list(const char *text)
{
        const char *p = text;
        int n = 0;

        while (*p) {
                char *end;
                long lo = strtol(p, &end, 10), hi;

                if (end == p || lo < 0)
                        return -1;
                hi = lo;
                p = end;
                if (*p == '-') {
                        hi = strtol(p + 1, &end, 10);
                        if (end == p + 1 || hi < lo)
                                return -1;
                        p = end;
                }
                if (hi - lo + 1 > HP_MAX_NPROC - n)
                        return HP_MAX_NPROC;
                n += (int)(hi - lo + 1);
                if (*p == ',')
                        p++;
                else if (*p != '\0')
                        return -1;
        }
        return n;
}

#define NEURON_SYSFS "/sys/devices/virtual/neuron_device"

/* NeuronCores: NEURON_RT_VISIBLE_CORES when set (the Neuron runtime's own
 * narrowing), else each device's core_count under the Neuron driver's
 * sysfs directory. Returns -1 for a malformed NEURON_RT_VISIBLE_CORES. */
static int count_neuron_cores(void)
{
        const char *visible = getenv("NEURON_RT_VISIBLE_CORES");
        struct dirent *de;
        DIR *dir;
        int n = 0;

        if (visible != NULL && *visible != '\0')
                return count_core_list(visible);
        dir = opendir(NEURON_SYSFS);
        if (dir == NULL)
                return 0;
        while ((de = readdir(dir)) != NULL) {
                char path[512];
                FILE *f;
                int cores = 0;

                if (strncmp(de->d_name, "neuron", 6) != 0)
                        continue;
                snprintf(path, sizeof(path), NEURON_SYSFS "/%s/core_count",
                         de->d_name);
                f = fopen(path, "r");
                if (f == NULL)
                        continue;
                if (fscanf(f, "%d", &cores) == 1 && cores > 0 &&
                    cores <= HP_MAX_NPROC)
                        n += cores;
                fclose(f);
                if (n >= HP_MAX_NPROC)
                        break;
        }
        closedir(dir);
        return n;
}

static int count_cpus(void)
{
        cpu_set_t set;

        if (sched_getaffinity(0, sizeof(set), &set) == 0)
                return CPU_COUNT(&set);
        return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

int config__parse_nproc(const struct raw_value *v, int *out, char *errbuf,
                        size_t errlen)
{
        int n;

        if (strcmp(v->text, "gpu") == 0 || strcmp(v->text, "cuda") == 0) {
                n = count_gpus();
                if (n == 0)
                        ERR("%s gpu: no NVIDIA GPU found (CUDA_VISIBLE_DEVICES "
                            "and /proc/driver/nvidia/gpus are empty)",
                            v->source);
        } else if (strcmp(v->text, "neuron") == 0) {
                n = count_neuron_cores();
                if (n < 0)
                        ERR("%s neuron: NEURON_RT_VISIBLE_CORES='%s' is not a "
                            "list of cores such as 0-3,8",
                            v->source, getenv("NEURON_RT_VISIBLE_CORES"));
                if (n == 0)
                        ERR("%s neuron: no NeuronCore found "
                            "(NEURON_RT_VISIBLE_CORES is unset and no "
                            "%s/neuron*/core_count)",
                            v->source, NEURON_SYSFS);
        } else if (strcmp(v->text, "xpu") == 0) {
                ERR("%s xpu is not supported: hyperpodrun does not count "
                    "Intel XPUs (torch.xpu asks the Level Zero runtime); "
                    "give their number, e.g. --nproc-per-node 8",
                    v->source);
        } else if (strcmp(v->text, "cpu") == 0) {
                n = count_cpus();
        } else if (strcmp(v->text, "auto") == 0) {
                n = count_gpus();
                if (n == 0) {
                        n = count_neuron_cores();
                        if (n < 0)
                                ERR("%s auto: NEURON_RT_VISIBLE_CORES='%s' "
                                    "is not a list of cores such as 0-3,8",
                                    v->source,
                                    getenv("NEURON_RT_VISIBLE_CORES"));
                }
                if (n == 0)
                        n = count_cpus();
        } else if (hp_parse_int(v->text, 1, HP_MAX_NPROC, &n) < 0) {
                ERR("invalid value '%s' for %s: expected a number from 1 to "
                    "%d, or gpu (cuda), neuron, cpu, auto",
                    v->text, v->source, HP_MAX_NPROC);
        }
        if (n > HP_MAX_NPROC)
                n = HP_MAX_NPROC;
        *out = n;
        return 0;
}
