/* SPDX-License-Identifier: Apache-2.0 */
/* Command line and PET_* environment → struct hp_config. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "options.h"

struct option_row {
        const char *name;
        int letter;
        bool takes_arg;
        const char *env;
};

static const struct option_row option_rows[HP_OPT_COUNT] = {
#define XX(id, name, letter, metavar, env, kind, conv, help)                  \
        [HP_OPT_##id] = { name, letter, metavar != NULL, env },
        HP_OPTION_TABLE(XX)
#undef XX
};

/* A raw value and where it came from, kept until every option is known so
 * that cross-checks can name their sources too. */
struct raw_value {
        const char *text;
        char source[80];
};

/* Converts option id, or the options converted with it, from raw. */
typedef int (*convert_fn)(struct hp_config *cfg, const struct raw_value *raw,
                          enum hp_option_id id, char *errbuf, size_t errlen);

#define ERR(...)                                                             \
        do {                                                                 \
                snprintf(errbuf, errlen, __VA_ARGS__);                       \
                return HP_EUSAGE;                                            \
        } while (0)

static void config_defaults(struct hp_config *cfg)
{
        memset(cfg, 0, sizeof(*cfg));
        cfg->nnodes = 1;
        cfg->nproc = 1;
        cfg->master_addr = "127.0.0.1";
        cfg->master_port = 29500;
        cfg->rdzv_backend = HP_RDZV_HYPERPOD;
        cfg->rdzv_backend_name = "hyperpod";
        cfg->rdzv_endpoint = "";
        cfg->rdzv_id = "none";
        cfg->rdzv_conf = "";
        cfg->monitor_interval_ms = 100;
        cfg->start_method = "spawn";
        cfg->role = "default";
        cfg->shutdown_signal = SIGKILL;
        cfg->shutdown_timeout_ms = 15000;
        cfg->hang_dump = HP_HANG_DUMP_STACKS;
        cfg->hang_dump_timeout_ms = 3000;
        cfg->cgroup = true;
        cfg->kmsg = "/dev/kmsg";
        cfg->preflight_max_bytes = 64u << 20;
        cfg->preflight_timeout_ms = 120000;
        cfg->server_host = "0.0.0.0";
        cfg->server_port = 8080;
        cfg->server_log_level = "info";
        cfg->server_shutdown_timeout_ms = 300000;
        cfg->python_exec = "python3";
        cfg->ft_safety_factor = 5.0;
        cfg->straggler_windows = 3;
        cfg->straggler_window_ms = 5000;
}

/* Builds the getopt tables: each long option under its dashed name and,
 * where it has dashes, under torchrun's underscored spelling too. */
static void build_getopt_tables(struct option *longopts, char *names,
                                size_t names_len, char *shortopts)
{
        size_t n = 0, used = 0, s = 0;

        shortopts[s++] = '+'; /* stop at the training script */
        shortopts[s++] = ':'; /* report a missing argument as ':' */
        for (int id = 0; id < HP_OPT_COUNT; id++) {
                const struct option_row *row = &option_rows[id];
                int has_arg = row->takes_arg ? required_argument : no_argument;

                longopts[n++] = (struct option){ row->name, has_arg, NULL,
                                                 256 + id };
                if (strchr(row->name, '-') != NULL) {
                        char *alt = names + used;
                        size_t len = strlen(row->name) + 1;

                        if (used + len > names_len)
                                abort(); /* sized at compile time below */
                        memcpy(alt, row->name, len);
                        for (char *p = alt; *p; p++)
                                if (*p == '-')
                                        *p = '_';
                        used += len;
                        longopts[n++] = (struct option){ alt, has_arg, NULL,
                                                         256 + id };
                }
                if (row->letter) {
                        shortopts[s++] = (char)row->letter;
                        if (row->takes_arg)
                                shortopts[s++] = ':';
                }
        }
        longopts[n] = (struct option){ NULL, 0, NULL, 0 };
        shortopts[s] = '\0';
}

static int letter_to_id(int letter)
{
        for (int id = 0; id < HP_OPT_COUNT; id++)
                if (option_rows[id].letter == letter)
                        return id;
        return -1;
}

/* PET_* booleans follow torchrun's check_env, bool(int(value)): Python's
 * int() takes blanks around the number, a sign and single underscores
 * between digits. Returns 1, 0, or -1 for what int() refuses (torchrun
 * stops with a ValueError there). */
static int env_flag_value(const char *text)
{
        const char *p = text;
        bool nonzero = false, digits = false;

        while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
                p++;
        if (*p == '+' || *p == '-')
                p++;
        for (; *p; p++) {
                if (*p >= '0' && *p <= '9') {
                        digits = true;
                        nonzero |= *p != '0';
                } else if (*p == '_' && digits && p[1] >= '0' &&
                           p[1] <= '9') {
                        continue;
                } else {
                        break;
                }
        }
        while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
                p++;
        if (!digits || *p != '\0')
                return -1;
        return nonzero;
}

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

static int parse_nproc(const struct raw_value *v, int *out, char *errbuf,
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
                            NEURON_SYSFS "/neuron*/core_count)",
                            v->source);
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

static int parse_nnodes(const struct raw_value *v, int *out, char *errbuf,
                        size_t errlen)
{
        const char *colon = strchr(v->text, ':');
        char min_text[32];
        int min, max;

        if (colon == NULL) {
                if (hp_parse_int(v->text, 1, 1 << 20, &min) < 0)
                        ERR("invalid value '%s' for %s: expected a node count "
                            "N or MIN:MAX",
                            v->text, v->source);
                *out = min;
                return 0;
        }
        if ((size_t)(colon - v->text) >= sizeof(min_text))
                ERR("invalid value '%s' for %s: expected MIN:MAX", v->text,
                    v->source);
        memcpy(min_text, v->text, (size_t)(colon - v->text));
        min_text[colon - v->text] = '\0';
        if (hp_parse_int(min_text, 1, 1 << 20, &min) < 0 ||
            hp_parse_int(colon + 1, 1, 1 << 20, &max) < 0)
                ERR("invalid value '%s' for %s: expected MIN:MAX with two "
                    "node counts",
                    v->text, v->source);
        if (min != max)
                ERR("%s %s: an elastic cluster size is not supported (it "
                    "needs the c10d rendezvous); MIN must equal MAX, or "
                    "give one node count",
                    v->source, v->text);
        *out = min;
        return 0;
}

int hp_config_parse_std_spec(const char *text, int nproc, uint8_t *out,
                             char *errbuf, size_t errlen)
{
        int value;

        if (strchr(text, ':') == NULL) {
                if (hp_parse_int(text, 0, 3, &value) < 0) {
                        snprintf(errbuf, errlen,
                                 "'%s': expected 0 (none), 1 (stdout), "
                                 "2 (stderr), 3 (both) or a map like 0:3,1:1",
                                 text);
                        return HP_EUSAGE;
                }
                for (int i = 0; i < nproc; i++)
                        out[i] = (uint8_t)value;
                return 0;
        }
        /* The map form: local ranks that are not listed get 0. 0xff marks
         * a rank already given: a second value for it is a mistake that
         * would otherwise be settled silently by order. */
        for (int i = 0; i < nproc; i++)
                out[i] = 0xff;
        for (const char *p = text; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                char item[32], *colon;
                int rank;

                if (len == 0 || len >= sizeof(item))
                        goto bad_item;
                memcpy(item, p, len);
                item[len] = '\0';
                colon = strchr(item, ':');
                if (colon == NULL)
                        goto bad_item;
                *colon = '\0';
                if (hp_parse_int(item, 0, INT_MAX, &rank) < 0 ||
                    hp_parse_int(colon + 1, 0, 3, &value) < 0)
                        goto bad_item;
                if (rank >= nproc) {
                        snprintf(errbuf, errlen,
                                 "'%s': local rank %d is not below "
                                 "--nproc-per-node %d",
                                 text, rank, nproc);
                        return HP_EUSAGE;
                }
                if (out[rank] != 0xff) {
                        snprintf(errbuf, errlen,
                                 "'%s': local rank %d is given twice", text,
                                 rank);
                        return HP_EUSAGE;
                }
                out[rank] = (uint8_t)value;
                p += len;
                if (*p == ',') {
                        p++;
                        if (*p == '\0')
                                goto bad_item;
                }
                continue;
bad_item:
                snprintf(errbuf, errlen,
                         "'%s': expected LOCAL_RANK:VALUE items such as "
                         "0:3,1:1 with values 0 to 3",
                         text);
                return HP_EUSAGE;
        }
        for (int i = 0; i < nproc; i++)
                if (out[i] == 0xff)
                        out[i] = 0;
        return 0;
}

/* strict: a rank at or past nproc is an error. torchrun's
 * --local-ranks-filter takes such ranks and shows nothing for them, so
 * that one command line fits nodes of different sizes. */
static int parse_ranks_filter(const struct raw_value *v, int nproc,
                              bool strict, bool *shown, char *errbuf,
                              size_t errlen)
{
        for (int i = 0; i < nproc; i++)
                shown[i] = false;
        for (const char *p = v->text; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                char item[16];
                int rank;

                if (len == 0 || len >= sizeof(item))
                        ERR("invalid value '%s' for %s: expected a list of "
                            "local ranks like 0,3",
                            v->text, v->source);
                memcpy(item, p, len);
                item[len] = '\0';
                if (hp_parse_int(item, 0, INT_MAX, &rank) < 0)
                        ERR("invalid value '%s' for %s: '%s' is not a local "
                            "rank",
                            v->text, v->source, item);
                if (rank >= nproc && strict)
                        ERR("invalid value '%s' for %s: local rank %d is not "
                            "below --nproc-per-node %d",
                            v->text, v->source, rank, nproc);
                if (rank < nproc)
                        shown[rank] = true;
                p += len;
                if (*p == ',')
                        p++;
        }
        return 0;
}

int hp_config_check_template(const char *tmpl, char *errbuf, size_t errlen)
{
        static const struct hp_template_var probe[] = {
                { "role_name", "r" },     { "rank", "0" },
                { "local_rank", "0" },    { "group_rank", "0" },
                { "restart_count", "0" }, { "hostname", "h" },
                { "pid", "1" },               { "time", "\x01" },
        };
        char out[4096];
        int r;

        r = hp_template_expand(tmpl, probe, HP_ARRAY_SIZE(probe), out,
                               sizeof(out), NULL, errbuf, errlen);
        /* Each line's time is written into one place in its prefix. */
        if (r == 0 && strchr(out, '\x01') != strrchr(out, '\x01')) {
                snprintf(errbuf, errlen, "${time} appears more than once in "
                         "template '%s'", tmpl);
                return HP_ECONFIG;
        }
        return r;
}

static int parse_seconds(const struct raw_value *v, uint64_t *out,
                         char *errbuf, size_t errlen)
{
        if (hp_parse_seconds_ms(v->text, out) < 0)
                ERR("invalid value '%s' for %s: expected seconds, e.g. 15 or "
                    "0.5",
                    v->text, v->source);
        return 0;
}

static int parse_int_value(const struct raw_value *v, int min, int max,
                           int *out, char *errbuf, size_t errlen)
{
        if (hp_parse_int(v->text, min, max, out) < 0)
                ERR("invalid value '%s' for %s: expected an integer from %d "
                    "to %d",
                    v->text, v->source, min, max);
        return 0;
}

static int parse_choice(const struct raw_value *v, const char *const *choices,
                        size_t n, int *index, char *errbuf, size_t errlen)
{
        char list[256] = "";

        for (size_t i = 0; i < n; i++) {
                if (strcmp(v->text, choices[i]) == 0) {
                        *index = (int)i;
                        return 0;
                }
                if (i > 0)
                        strncat(list, ", ", sizeof(list) - strlen(list) - 1);
                strncat(list, choices[i], sizeof(list) - strlen(list) - 1);
        }
        ERR("invalid value '%s' for %s: expected one of %s", v->text,
            v->source, list);
}

/* --preflight and its companions, which need it. */
static int convert_preflight(struct hp_config *cfg, const struct raw_value *raw,
                             char *errbuf, size_t errlen)
{
        static const char *const kinds[] = { "none", "nccl" };
        static const enum hp_option_id needs[] = {
                HP_OPT_PREFLIGHT_MIN_BUSBW, HP_OPT_PREFLIGHT_MAX_BYTES,
                HP_OPT_PREFLIGHT_TIMEOUT, HP_OPT_PREFLIGHT_LIBRARY,
        };
        const struct raw_value *v;
        int index = 0, r;

        if (raw[HP_OPT_PREFLIGHT].text != NULL) {
                r = parse_choice(&raw[HP_OPT_PREFLIGHT], kinds,
                                 HP_ARRAY_SIZE(kinds), &index, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        cfg->preflight_nccl = index == 1;
        for (size_t i = 0; i < HP_ARRAY_SIZE(needs); i++)
                if (raw[needs[i]].text != NULL && !cfg->preflight_nccl)
                        ERR("%s was given without --preflight nccl",
                            raw[needs[i]].source);
        v = &raw[HP_OPT_PREFLIGHT_MIN_BUSBW];
        if (v->text != NULL) {
                char *end;
                errno = 0;
                cfg->preflight_min_busbw = strtod(v->text, &end);
                if (errno || end == v->text || *end != '\0' ||
                    !(cfg->preflight_min_busbw >= 0) ||
                    cfg->preflight_min_busbw > 1e6)
                        ERR("invalid value '%s' for %s: expected GB/s, a "
                            "number from 0 to 1000000",
                            v->text, v->source);
        }
        v = &raw[HP_OPT_PREFLIGHT_MAX_BYTES];
        if (v->text != NULL &&
            (hp_parse_u64(v->text, 1ull << 40, &cfg->preflight_max_bytes) < 0 ||
             cfg->preflight_max_bytes < 4))
                ERR("invalid value '%s' for %s: expected bytes, 4 to 2^40",
                    v->text, v->source);
        if (raw[HP_OPT_PREFLIGHT_TIMEOUT].text != NULL) {
                r = parse_seconds(&raw[HP_OPT_PREFLIGHT_TIMEOUT],
                                  &cfg->preflight_timeout_ms, errbuf, errlen);
                if (r < 0)
                        return r;
                if (cfg->preflight_timeout_ms == 0)
                        ERR("invalid value '0' for %s: the check needs some "
                            "time", raw[HP_OPT_PREFLIGHT_TIMEOUT].source);
        }
        v = &raw[HP_OPT_PREFLIGHT_LIBRARY];
        if (v->text != NULL) {
                if (v->text[0] == '\0')
                        ERR("empty value for %s", v->source);
                cfg->preflight_library = v->text;
        }
        return 0;
}

/* --node-problem-config and the flags that only mean something with it. */
static int convert_node_health(struct hp_config *cfg,
                               const struct raw_value *raw,
                               enum hp_option_id id, char *errbuf,
                               size_t errlen)
{
        static const char *const actions[] = { "none", "reboot", "replace" };
        const struct raw_value *conf = &raw[HP_OPT_NODE_PROBLEM_CONFIG];
        const struct raw_value *kmsg = &raw[HP_OPT_KMSG];
        const struct raw_value *action = &raw[HP_OPT_NODE_FAULT_ACTION];
        int index, r;

        if (conf->text != NULL) {
                if (conf->text[0] == '\0')
                        ERR("empty value for %s (node-problem-detector "
                            "kernel monitor configs, comma-separated)",
                            conf->source);
                cfg->node_problem_config = conf->text;
        }
        if (kmsg->text != NULL) {
                if (kmsg->text[0] == '\0')
                        ERR("empty value for %s", kmsg->source);
                if (conf->text == NULL)
                        ERR("%s was given without --node-problem-config, the "
                            "rules to read it with", kmsg->source);
                cfg->kmsg = kmsg->text;
                cfg->kmsg_given = true;
        }
        if (action->text != NULL) {
                r = parse_choice(action, actions, HP_ARRAY_SIZE(actions),
                                 &index, errbuf, errlen);
                if (r < 0)
                        return r;
                cfg->node_fault_action = (enum hp_node_fault_action)index;
        }
        return convert_preflight(cfg, raw, errbuf, errlen);
}

/* --replay and its companions. Launch options are still checked but
 * have no effect on a replay, except --log-monitor-ranks, which means in
 * a replay what it means live: the same default, local rank 0. */
static int convert_replay(struct hp_config *cfg, const struct raw_value *raw,
                          enum hp_option_id id, char *errbuf, size_t errlen)
{
        static const char *const inputs[] = { "auto", "plain", "console",
                                              "srun" };
        static const char *const formats[] = { "text", "json" };
        const struct raw_value *replay = &raw[HP_OPT_REPLAY];
        const struct raw_value *rate = &raw[HP_OPT_REPLAY_RATE];
        const struct raw_value *expect = &raw[HP_OPT_EXPECT];
        const struct raw_value *until = &raw[HP_OPT_REPLAY_UNTIL];
        const struct raw_value *input = &raw[HP_OPT_REPLAY_INPUT];
        const struct raw_value *format = &raw[HP_OPT_REPLAY_FORMAT];
        const struct raw_value *emit = &raw[HP_OPT_EMIT_EXPECT];
        char *end;
        int r;

        if (replay->text == NULL) {
                if (rate->text != NULL)
                        ERR("%s was given without --replay", rate->source);
                if (expect->text != NULL)
                        ERR("%s was given without --replay", expect->source);
                if (until->text != NULL)
                        ERR("%s was given without --replay", until->source);
                if (input->text != NULL)
                        ERR("%s was given without --replay", input->source);
                if (format->text != NULL)
                        ERR("%s was given without --replay", format->source);
                if (emit->text != NULL)
                        ERR("%s was given without --replay", emit->source);
                return 0;
        }
        if (emit->text != NULL) {
                if (emit->text[0] == '\0')
                        ERR("empty value for %s", emit->source);
                cfg->emit_expect = emit->text;
        }
        cfg->replay_format = -1;
        if (format->text != NULL) {
                r = parse_choice(format, formats, HP_ARRAY_SIZE(formats),
                                 &cfg->replay_format, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (until->text != NULL) {
                if (until->text[0] == '\0')
                        ERR("empty value for %s (an RFC 3339 time, "
                            "+SECONDS or verdict)", until->source);
                cfg->replay_until = until->text;
        }
        if (input->text != NULL) {
                r = parse_choice(input, inputs, HP_ARRAY_SIZE(inputs),
                                 &cfg->replay_input, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (replay->text[0] == '\0')
                ERR("empty value for %s (a log file, or - for standard "
                    "input)", replay->source);
        if (cfg->log_monitoring_config == NULL)
                ERR("%s was given without --log-monitoring-config, the "
                    "rules to replay the log through", replay->source);
        cfg->replay_log = replay->text;
        if (rate->text != NULL) {
                errno = 0;
                cfg->replay_rate = strtod(rate->text, &end);
                if (errno != 0 || end == rate->text || *end != '\0' ||
                    !isfinite(cfg->replay_rate) || cfg->replay_rate <= 0)
                        ERR("invalid value '%s' for %s: expected lines per "
                            "second, a number above 0 such as 10 or 0.5",
                            rate->text, rate->source);
        }
        if (expect->text != NULL) {
                if (expect->text[0] == '\0')
                        ERR("empty value for %s", expect->source);
                cfg->replay_expect = expect->text;
        }
        return 0;
}

/* --signals-to-handle: hyperpodrun always handles torchrun's default set
 * (SIGTERM, SIGINT, SIGHUP, SIGQUIT: stop the workers with the signal
 * received), and SIGUSR1 and SIGUSR2 (forwarded, the job running on), so
 * a list is taken when it holds the default set and nothing beyond those
 * six: torchrun's help suggests adding SIGUSR1,SIGUSR2 under Slurm. */
static int convert_signals_to_handle(struct hp_config *cfg,
                                     const struct raw_value *raw,
                                     enum hp_option_id id, char *errbuf,
                                     size_t errlen)
{
        const struct raw_value *v = &raw[id];
        static const char *const handled[] = { "SIGTERM", "SIGINT", "SIGHUP",
                                               "SIGQUIT", "SIGUSR1",
                                               "SIGUSR2" };
        const unsigned required = 0xf; /* torchrun's default four */
        unsigned seen = 0;

        for (const char *p = v->text; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                size_t i;

                for (i = 0; i < HP_ARRAY_SIZE(handled); i++)
                        if (strlen(handled[i]) == len &&
                            strncmp(p, handled[i], len) == 0)
                                break;
                if (i == HP_ARRAY_SIZE(handled))
                        ERR("invalid value '%s' for %s: hyperpodrun cannot "
                            "handle '%.*s'; it always stops the workers on "
                            "SIGTERM, SIGINT, SIGHUP and SIGQUIT (torchrun's "
                            "default), forwards SIGUSR1 and writes a stacks "
                            "report on SIGUSR2, so a list of those six is "
                            "taken; signal the workers' process groups "
                            "directly for any other",
                            v->text, v->source, (int)len, p);
                seen |= 1u << i;
                p += len;
                if (*p == ',')
                        p++;
        }
        if ((seen & required) != required)
                ERR("invalid value '%s' for %s: hyperpodrun always handles "
                    "all of SIGTERM, SIGINT, SIGHUP and SIGQUIT (torchrun's "
                    "default); a list without one of them is not "
                    "supported: give the default set, with SIGUSR1 and "
                    "SIGUSR2 if you like",
                    v->text, v->source);
        return 0;
}

/* --event-log-handler: torchrun's default, "null", records no event, as
 * hyperpodrun does; any other names a Python handler. */
static int convert_event_log_handler(struct hp_config *cfg,
                                     const struct raw_value *raw,
                                     enum hp_option_id id, char *errbuf,
                                     size_t errlen)
{
        (void)cfg;
        if (strcmp(raw[id].text, "null") == 0)
                return 0;
        ERR("%s %s is not supported: it names a Python event handler of "
            "torch.distributed.elastic.events, which a C launcher cannot "
            "load; only null (torchrun's default, no events) is taken, and "
            "hyperpodrun logs its own events to stderr",
            raw[id].source, raw[id].text);
}

int hp_config_parse_dup_filters(const char *text, struct hp_dup_filters *out,
                                char *errbuf, size_t errlen)
{
        size_t used = 0;

        /* As torchrun's comma_separated_list: ",," becomes a comma (read
         * left to right), then the text splits at each comma. */
        out->count = 1;
        out->at[0] = 0;
        out->len[0] = 0;
        for (const char *p = text; *p; p++) {
                if (*p == ',' && p[1] != ',') {
                        if (out->count == HP_DUP_FILTERS_MAX) {
                                snprintf(errbuf, errlen,
                                         "'%.100s': more than %d filters",
                                         text, HP_DUP_FILTERS_MAX);
                                return HP_EUSAGE;
                        }
                        out->at[out->count] = (uint16_t)used;
                        out->len[out->count++] = 0;
                        continue;
                }
                if (used + 1 >= sizeof(out->text)) {
                        snprintf(errbuf, errlen,
                                 "'%.100s...': the filters hold more than "
                                 "%zu bytes",
                                 text, sizeof(out->text) - 1);
                        return HP_EUSAGE;
                }
                out->text[used++] = *p;
                out->len[out->count - 1]++;
                if (*p == ',')
                        p++; /* the second of ",," */
        }
        out->text[used] = '\0';
        return 0;
}

/* --duplicate-stdout-filters, --duplicate-stderr-filters: torchrun's
 * list, kept for the streams of the training workers. */
static int convert_duplicate_filters(struct hp_config *cfg,
                                     const struct raw_value *raw,
                                     enum hp_option_id id, char *errbuf,
                                     size_t errlen)
{
        int which = id == HP_OPT_DUPLICATE_STDOUT_FILTERS ? 0 : 1;
        char detail[200];

        if (hp_config_parse_dup_filters(raw[id].text,
                                        &cfg->dup_filters[which], detail,
                                        sizeof(detail)) < 0)
                ERR("invalid value for %s: %s", raw[id].source, detail);
        if (cfg->log_to_devnull)
                ERR("%s copies lines into filtered_%s.log in the attempt's "
                    "log directory, but --log-dir /dev/null writes no "
                    "file: give a log directory, or drop the filters",
                    raw[id].source, which ? "stderr" : "stdout");
        return 0;
}

/*
 * The conversion of each option's raw text into struct hp_config, one
 * row per option in the order they are checked, so that with two bad
 * options the first in this order is the one reported. Most options are
 * one of a few kinds; an option whose conversion is its own, or that is
 * converted together with others, has a function.
 */
enum conversion_kind {
        CONV_NONE = 0,  /* converted with another option's row */
        CONV_REFUSED,   /* not taken: "is not supported: <text>" */
        CONV_FLAG,      /* bool at field */
        CONV_STRING,    /* const char * at field, any text */
        CONV_TEXT,      /* const char * at field, not empty; text: a hint */
        CONV_INT,       /* int at field, from min to max */
        CONV_SECONDS,   /* uint64_t milliseconds at field */
        CONV_CHOICE,    /* const char * at field, one of choices */
        CONV_FUNC,      /* fn, when the option is given */
        CONV_GROUP,     /* fn, always: it converts several options */
};

struct conversion {
        enum hp_option_id id;
        enum conversion_kind kind;
        size_t field;               /* offsetof(struct hp_config, ...) */
        bool has_given;
        size_t given;               /* a bool set when the option is given */
        int min, max;
        const char *text;
        const char *const *choices;
        size_t nchoices;
        convert_fn fn;
        int first;                  /* converted before the others, 1 first */
};

#define ROW(opt, k) .id = HP_OPT_##opt, .kind = CONV_##k
#define FIELD(f) .field = offsetof(struct hp_config, f)
#define GIVEN(f) .has_given = true, .given = offsetof(struct hp_config, f)
#define CHOICES(list) .choices = (list), .nchoices = HP_ARRAY_SIZE(list)

static const char *const start_methods[] = { "spawn", "fork", "forkserver" };
static const char *const log_levels[] = { "critical", "error", "warning",
                                          "info",     "debug", "trace" };

static int convert_nnodes(struct hp_config *cfg, const struct raw_value *raw,
                          enum hp_option_id id, char *errbuf, size_t errlen)
{
        int r = parse_nnodes(&raw[id], &cfg->nnodes, errbuf, errlen);

        if (r < 0)
                return r;
        cfg->nnodes_given = true;
        return 0;
}

static int convert_nproc(struct hp_config *cfg, const struct raw_value *raw,
                         enum hp_option_id id, char *errbuf, size_t errlen)
{
        return parse_nproc(&raw[id], &cfg->nproc, errbuf, errlen);
}

static int convert_master_addr(struct hp_config *cfg,
                               const struct raw_value *raw,
                               enum hp_option_id id, char *errbuf,
                               size_t errlen)
{
        const char *addr = raw[id].text;
        bool control = false;

        if (addr[0] == '\0')
                ERR("empty value for %s", raw[id].source);
        for (const char *p = addr; *p; p++)
                control |= (unsigned char)*p < 0x20 || *p == 0x7f;
        if (control || !hp_utf8_valid(addr, strlen(addr)))
                ERR("invalid value for %s: it holds %s; expected one host "
                    "name or address",
                    raw[id].source,
                    control ? "a control character (a newline?)"
                            : "bytes that are not UTF-8");
        cfg->master_addr = addr;
        cfg->master_addr_given = true;
        return 0;
}

static int convert_rdzv_backend(struct hp_config *cfg,
                                const struct raw_value *raw,
                                enum hp_option_id id, char *errbuf,
                                size_t errlen)
{
        /* Those from c10d on are PyTorch's own, refused with a reason. */
        static const char *const backends[] = {
                "hyperpod", "static", "slurm", "resource-config",
                "c10d",     "etcd",   "etcd-v2",
        };
        int r, index;

        r = parse_choice(&raw[id], backends, HP_ARRAY_SIZE(backends), &index,
                         errbuf, errlen);
        if (r < 0)
                return r;
        if (index >= 4)
                ERR("%s %s is not supported: hyperpodrun does not speak "
                    "PyTorch's TCPStore rendezvous protocol, so an elastic "
                    "node count is not possible; use static (with "
                    "--nnodes N, --node-rank, --master-addr), slurm, "
                    "resource-config or --standalone. A Kubeflow "
                    "PyTorchJob without elasticPolicy runs as it is: its "
                    "PET_MASTER_ADDR selects static",
                    raw[id].source, raw[id].text);
        cfg->rdzv_backend = (enum hp_rdzv_backend)index;
        cfg->rdzv_backend_name = backends[index];
        return 0;
}

static int convert_rdzv_id(struct hp_config *cfg, const struct raw_value *raw,
                           enum hp_option_id id, char *errbuf, size_t errlen)
{
        const char *text = raw[id].text;

        if (*text == '\0' || strchr(text, '/') != NULL)
                ERR("invalid value '%s' for %s: the run id names a "
                    "directory, so it must be non-empty and hold no '/'",
                    text, raw[id].source);
        cfg->rdzv_id = text;
        return 0;
}

static int convert_rdzv_conf(struct hp_config *cfg,
                             const struct raw_value *raw,
                             enum hp_option_id id, char *errbuf,
                             size_t errlen)
{
        const char *conf = raw[id].text;

        for (const char *p = conf; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                const char *eq = memchr(p, '=', len);

                if (eq == NULL || eq == p)
                        ERR("invalid value '%s' for %s: expected "
                            "KEY=VALUE[,KEY=VALUE...]",
                            conf, raw[id].source);
                p += len;
                if (*p == ',')
                        p++;
        }
        cfg->rdzv_conf = conf;
        return 0;
}

/* -m, --no-python and --run-path, which decide together how the script
 * is run. torchrun's --run-path runs the script with runpy.run_path in a
 * Python worker, ahead of --no-python and -m: here, python -u SCRIPT,
 * which runs it the same way. */
static int convert_launch_mode(struct hp_config *cfg,
                               const struct raw_value *raw,
                               enum hp_option_id id, char *errbuf,
                               size_t errlen)
{
        cfg->module = raw[HP_OPT_MODULE].text != NULL;
        cfg->no_python = raw[HP_OPT_NO_PYTHON].text != NULL;
        cfg->run_path = raw[HP_OPT_RUN_PATH].text != NULL;
        if (cfg->run_path) {
                cfg->module = false;
                cfg->no_python = false;
        }
        if (cfg->module && cfg->no_python)
                ERR("%s and %s cannot be used together: a module needs the "
                    "python interpreter",
                    raw[HP_OPT_MODULE].source, raw[HP_OPT_NO_PYTHON].source);
        return 0;
}

static int convert_log_dir(struct hp_config *cfg, const struct raw_value *raw,
                           enum hp_option_id id, char *errbuf, size_t errlen)
{
        const char *dir = raw[id].text;

        if (*dir == '\0')
                ERR("empty value for %s", raw[id].source);
        cfg->log_dir = dir;
        cfg->log_to_devnull = strcmp(dir, "/dev/null") == 0;
        return 0;
}

/* --redirects and --tee, per local rank. */
static int convert_std_spec(struct hp_config *cfg,
                            const struct raw_value *raw,
                            enum hp_option_id id, char *errbuf,
                            size_t errlen)
{
        uint8_t *out = id == HP_OPT_REDIRECTS ? cfg->redirects : cfg->tee;
        char detail[200];

        if (hp_config_parse_std_spec(raw[id].text, cfg->nproc, out, detail,
                                     sizeof(detail)) < 0)
                ERR("invalid value for %s: %s", raw[id].source, detail);
        return 0;
}

static int convert_local_ranks_filter(struct hp_config *cfg,
                                      const struct raw_value *raw,
                                      enum hp_option_id id, char *errbuf,
                                      size_t errlen)
{
        int r;

        /* Empty: every rank, as not given. */
        if (raw[id].text[0] == '\0')
                return 0;
        r = parse_ranks_filter(&raw[id], cfg->nproc, false,
                               cfg->console_shown, errbuf, errlen);
        if (r < 0)
                return r;
        cfg->console_filter_set = true;
        return 0;
}

static int convert_prefix_template(struct hp_config *cfg,
                                   const struct raw_value *raw,
                                   enum hp_option_id id, char *errbuf,
                                   size_t errlen)
{
        char detail[200];

        cfg->prefix_template = raw[id].text;
        if (hp_config_check_template(cfg->prefix_template, detail,
                                     sizeof(detail)) < 0)
                ERR("invalid value for %s: %s", raw[id].source, detail);
        return 0;
}

static int convert_shutdown_signal(struct hp_config *cfg,
                                   const struct raw_value *raw,
                                   enum hp_option_id id, char *errbuf,
                                   size_t errlen)
{
        static const char *const signals[] = { "SIGTERM", "SIGKILL" };
        int r, index;

        r = parse_choice(&raw[id], signals, HP_ARRAY_SIZE(signals), &index,
                         errbuf, errlen);
        if (r < 0)
                return r;
        cfg->shutdown_signal = index == 0 ? SIGTERM : SIGKILL;
        return 0;
}

static int convert_hang_dump(struct hp_config *cfg,
                             const struct raw_value *raw,
                             enum hp_option_id id, char *errbuf,
                             size_t errlen)
{
        static const char *const hang_dumps[] = { "off", "stacks", "full" };
        int r, index;

        r = parse_choice(&raw[id], hang_dumps, HP_ARRAY_SIZE(hang_dumps),
                         &index, errbuf, errlen);
        if (r < 0)
                return r;
        cfg->hang_dump = (enum hp_hang_dump)index;
        return 0;
}

static int convert_cgroup(struct hp_config *cfg, const struct raw_value *raw,
                          enum hp_option_id id, char *errbuf, size_t errlen)
{
        static const char *const cgroup_modes[] = { "auto", "off" };
        int r, index;

        r = parse_choice(&raw[id], cgroup_modes, HP_ARRAY_SIZE(cgroup_modes),
                         &index, errbuf, errlen);
        if (r < 0)
                return r;
        cfg->cgroup = index == 0;
        return 0;
}

/* --pre-train-script and --post-train-script, each with its arguments,
 * which need it. */
static int convert_train_scripts(struct hp_config *cfg,
                                 const struct raw_value *raw,
                                 enum hp_option_id id, char *errbuf,
                                 size_t errlen)
{
        for (int which = 0; which < 2; which++) {
                int script_id = which ? HP_OPT_POST_TRAIN_SCRIPT
                                      : HP_OPT_PRE_TRAIN_SCRIPT;
                int args_id = which ? HP_OPT_POST_TRAIN_ARGS
                                    : HP_OPT_PRE_TRAIN_ARGS;
                const char **script = which ? &cfg->post_train_script
                                            : &cfg->pre_train_script;
                const char **args = which ? &cfg->post_train_args
                                          : &cfg->pre_train_args;

                if (raw[script_id].text) {
                        if (raw[script_id].text[0] == '\0')
                                ERR("empty value for %s",
                                    raw[script_id].source);
                        *script = raw[script_id].text;
                }
                if (raw[args_id].text) {
                        if (*script == NULL)
                                ERR("%s was given without %s",
                                    raw[args_id].source,
                                    which ? "--post-train-script"
                                          : "--pre-train-script");
                        *args = raw[args_id].text;
                }
        }
        return 0;
}

/* Local rank 0's stdout by default, like the reference: progress lines
 * are often printed by rank 0 alone. */
static int convert_monitor_ranks(struct hp_config *cfg,
                                 const struct raw_value *raw,
                                 enum hp_option_id id, char *errbuf,
                                 size_t errlen)
{
        const struct raw_value *v = &raw[id];
        /* A replay has no --nproc-per-node to bound the ranks: the log
         * names them. */
        int bound = raw[HP_OPT_REPLAY].text ? HP_MAX_NPROC : cfg->nproc;
        int r;

        cfg->monitored[0] = true;
        if (v->text == NULL)
                return 0;
        if (strcmp(v->text, "all") == 0) {
                for (int i = 0; i < bound; i++)
                        cfg->monitored[i] = true;
                cfg->replay_all_ranks = true;
        } else {
                r = parse_ranks_filter(v, bound, true, cfg->monitored, errbuf,
                                       errlen);
                if (r < 0)
                        return r;
        }
        if (cfg->log_monitoring_config == NULL)
                ERR("%s was given without --log-monitoring-config",
                    v->source);
        return 0;
}

/* "name:SECS,name:SECS", as ft_launcher's --ft-rank-section-timeouts;
 * "name:null" (or none, or an empty value) keeps the name with no
 * timeout, so that the client may compute one. */
static int convert_section_timeouts(struct hp_config *cfg,
                                    const struct raw_value *raw,
                                    enum hp_option_id id, char *errbuf,
                                    size_t errlen)
{
        const struct raw_value *v = &raw[id];
        const char *p = v->text;

        while (*p != '\0') {
                const char *end = strchr(p, ',');
                const char *colon;
                size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
                size_t name_len;
                char secs[32];
                int n = cfg->ft_nsections;

                colon = memchr(p, ':', len);
                if (colon == NULL || colon == p)
                        ERR("invalid value '%s' for %s: expected "
                            "name:SECONDS[,name:SECONDS...], e.g. "
                            "setup:600,step:180",
                            v->text, v->source);
                name_len = (size_t)(colon - p);
                if (name_len > HP_FT_SECTION_NAME_MAX)
                        ERR("invalid value '%s' for %s: a section name is "
                            "at most %d characters",
                            v->text, v->source, HP_FT_SECTION_NAME_MAX);
                if (n == HP_FT_SECTIONS_MAX)
                        ERR("invalid value '%s' for %s: at most %d sections",
                            v->text, v->source, HP_FT_SECTIONS_MAX);
                memcpy(cfg->ft_section_names[n], p, name_len);
                cfg->ft_section_names[n][name_len] = '\0';
                for (int i = 0; i < n; i++)
                        if (strcmp(cfg->ft_section_names[i],
                                   cfg->ft_section_names[n]) == 0)
                                ERR("invalid value '%s' for %s: section %s "
                                    "is named twice",
                                    v->text, v->source,
                                    cfg->ft_section_names[n]);
                len -= name_len + 1;
                if (len >= sizeof(secs))
                        ERR("invalid value '%s' for %s: expected seconds "
                            "after %s:",
                            v->text, v->source, cfg->ft_section_names[n]);
                memcpy(secs, colon + 1, len);
                secs[len] = '\0';
                cfg->ft_section_ms[n] = 0;
                if (strcmp(secs, "null") != 0 && strcmp(secs, "none") != 0 &&
                    secs[0] != '\0' &&
                    (hp_parse_seconds_ms(secs, &cfg->ft_section_ms[n]) < 0 ||
                     cfg->ft_section_ms[n] == 0))
                        ERR("invalid value '%s' for %s: '%s' for section %s "
                            "is not seconds > 0 (or null)",
                            v->text, v->source, secs,
                            cfg->ft_section_names[n]);
                cfg->ft_nsections++;
                p = end != NULL ? end + 1 : p + strlen(p);
        }
        return 0;
}

/* A number in (min, max]. */
static int parse_double_value(const struct raw_value *v, double min,
                              double max, double *out, char *errbuf,
                              size_t errlen)
{
        char *end;
        double d;

        errno = 0;
        d = strtod(v->text, &end);
        if (v->text[0] == '\0' || *end != '\0' || errno != 0 ||
            !(d > min) || d > max)
                ERR("invalid value '%s' for %s: expected a number above %g, "
                    "at most %g",
                    v->text, v->source, min, max);
        *out = d;
        return 0;
}

static int convert_safety_factor(struct hp_config *cfg,
                                 const struct raw_value *raw,
                                 enum hp_option_id id, char *errbuf,
                                 size_t errlen)
{
        return parse_double_value(&raw[id], 0.0, 1000.0,
                                  &cfg->ft_safety_factor, errbuf, errlen);
}

/* 0 (the default) measures speeds and flags no straggler. */
static int convert_straggler_ratio(struct hp_config *cfg,
                                   const struct raw_value *raw,
                                   enum hp_option_id id, char *errbuf,
                                   size_t errlen)
{
        if (strcmp(raw[id].text, "0") == 0) {
                cfg->straggler_ratio = 0.0;
                return 0;
        }
        return parse_double_value(&raw[id], 0.0, 1.0, &cfg->straggler_ratio,
                                  errbuf, errlen);
}

static int convert_straggler_action(struct hp_config *cfg,
                                    const struct raw_value *raw,
                                    enum hp_option_id id, char *errbuf,
                                    size_t errlen)
{
        static const char *const actions[] = { "warn", "verdict" };
        int index, r;

        r = parse_choice(&raw[id], actions, HP_ARRAY_SIZE(actions), &index,
                         errbuf, errlen);
        if (r == 0)
                cfg->straggler_verdict = index == 1;
        return r;
}

#define HP_UNPAREN(...) __VA_ARGS__

/* The conversion columns of options.h's table. */
static const struct conversion conversions[HP_OPT_COUNT] = {
#define XX(id_, name, letter, metavar, env, kind_, conv, help)                \
        [HP_OPT_##id_] = { .id = HP_OPT_##id_, .kind = CONV_##kind_,           \
                           HP_UNPAREN conv },
        HP_OPTION_TABLE(XX)
#undef XX
};

static int convert_one(struct hp_config *cfg, const struct raw_value *raw,
                       const struct conversion *c, char *errbuf,
                       size_t errlen)
{
        const struct raw_value *v = &raw[c->id];
        char *field = (char *)cfg + c->field;
        int r = 0, index;

        if (c->kind == CONV_GROUP)
                return c->fn(cfg, raw, c->id, errbuf, errlen);
        if (v->text == NULL)
                return 0;
        switch (c->kind) {
        case CONV_NONE:
        case CONV_GROUP:
                return 0;
        case CONV_REFUSED:
                ERR("%s is not supported: %s", v->source, c->text);
        case CONV_FLAG:
                *(bool *)field = true;
                return 0;
        case CONV_STRING:
                *(const char **)field = v->text;
                return 0;
        case CONV_TEXT:
                if (v->text[0] == '\0' && c->text != NULL)
                        ERR("empty value for %s (%s)", v->source, c->text);
                if (v->text[0] == '\0')
                        ERR("empty value for %s", v->source);
                *(const char **)field = v->text;
                return 0;
        case CONV_INT:
                r = parse_int_value(v, c->min, c->max, (int *)field, errbuf,
                                    errlen);
                break;
        case CONV_SECONDS:
                r = parse_seconds(v, (uint64_t *)field, errbuf, errlen);
                break;
        case CONV_CHOICE:
                r = parse_choice(v, c->choices, c->nchoices, &index, errbuf,
                                 errlen);
                if (r == 0)
                        *(const char **)field = c->choices[index];
                break;
        case CONV_FUNC:
                r = c->fn(cfg, raw, c->id, errbuf, errlen);
                break;
        }
        if (r == 0 && c->has_given)
                *(bool *)((char *)cfg + c->given) = true;
        return r;
}

/*
 * How the other workers are stopped after a failure or a verdict, when
 * --shutdown-signal and --shutdown-timeout leave it open. Self-driven
 * modes stand in for torchrun: SIGTERM, then SIGKILL after
 * TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30 s, so that a SIGTERM handler
 * (a checkpoint, a log flush) runs. Operator mode stands in for the
 * HyperPod agent: SIGKILL, 15 s.
 */
static int shutdown_defaults(struct hp_config *cfg,
                             const struct raw_value *raw, char *errbuf,
                             size_t errlen)
{
        bool operator = hp_config_operator_mode(cfg);
        struct raw_value env = { .text = NULL };

        if (raw[HP_OPT_SHUTDOWN_SIGNAL].text == NULL)
                cfg->shutdown_signal = operator ? SIGKILL : SIGTERM;
        if (raw[HP_OPT_SHUTDOWN_TIMEOUT].text != NULL)
                return 0;
        cfg->shutdown_timeout_ms = operator ? 15000 : 30000;
        env.text = getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
        if (env.text == NULL || env.text[0] == '\0')
                return 0;
        snprintf(env.source, sizeof(env.source), "%s",
                 "TORCH_ELASTIC_SHUTDOWN_TIMEOUT (environment)");
        return parse_seconds(&env, &cfg->shutdown_timeout_ms, errbuf, errlen);
}

/* The rows with .first in its order, then the others in table order. */
static int convert_in_order(struct hp_config *cfg,
                            const struct raw_value *raw, char *errbuf,
                            size_t errlen)
{
        int r;

        for (int rank = 1; rank <= HP_OPT_COUNT; rank++)
                for (int id = 0; id < HP_OPT_COUNT; id++) {
                        if (conversions[id].first != rank)
                                continue;
                        r = convert_one(cfg, raw, &conversions[id], errbuf,
                                        errlen);
                        if (r < 0)
                                return r;
                }
        for (int id = 0; id < HP_OPT_COUNT; id++) {
                if (conversions[id].first != 0)
                        continue;
                r = convert_one(cfg, raw, &conversions[id], errbuf, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int convert_values(struct hp_config *cfg, struct raw_value *raw,
                          char *errbuf, size_t errlen)
{
        int r = convert_in_order(cfg, raw, errbuf, errlen);

        if (r < 0)
                return r;
        /* Two listeners on one port: the second could never listen. */
        if (cfg->metrics_port_given && cfg->metrics_port != 0 &&
            cfg->metrics_port == cfg->server_port &&
            (cfg->server_port_given || hp_config_operator_mode(cfg))) {
                snprintf(errbuf, errlen,
                         "--metrics-port %d is the --server-port too: give "
                         "the metrics their own port (0 for a free one), "
                         "or leave --metrics-port out to scrape /metrics "
                         "on the server port",
                         cfg->metrics_port);
                return HP_EUSAGE;
        }
        cfg->server_flag_given = raw[HP_OPT_SERVER_HOST].text ? "--server-host"
                : raw[HP_OPT_SERVER_LOG_LEVEL].text ? "--server-log-level"
                : raw[HP_OPT_SERVER_SHUTDOWN_TIMEOUT].text
                        ? "--server-shutdown-timeout"
                : raw[HP_OPT_SERVER_TOKEN_FILE].text ? "--server-token-file"
                        : "";
        /* The operator must reach the agent from its own pod, as in the
         * reference; a self-driven job's read-only routes are for this
         * node unless --server-host says otherwise. */
        if (!hp_config_operator_mode(cfg) &&
            raw[HP_OPT_SERVER_HOST].text == NULL)
                cfg->server_host = "127.0.0.1";

        /* Operator mode keeps the HyperPod layout every AWS sample asks
         * for (--tee 3 --log-dir /tmp/hyperpod); self-driven modes keep
         * torchrun's defaults. */
        if (hp_config_operator_mode(cfg)) {
                if (raw[HP_OPT_LOG_DIR].text == NULL)
                        cfg->log_dir = HP_OPERATOR_LOG_DIR;
                if (raw[HP_OPT_TEE].text == NULL &&
                    raw[HP_OPT_REDIRECTS].text == NULL)
                        for (int i = 0; i < cfg->nproc; i++)
                                cfg->tee[i] = 3;
        }

        r = shutdown_defaults(cfg, raw, errbuf, errlen);
        if (r < 0)
                return r;

        /* Cross-checks between options. */
        if (cfg->inprocess_restart && !hp_config_operator_mode(cfg))
                ERR("%s needs operator mode (--rdzv-backend hyperpod without "
                    "--standalone): the HyperPod operator's /start releases "
                    "the workers from their barrier; a self-driven run "
                    "restarts whole process groups",
                    raw[HP_OPT_INPROCESS_RESTART].source);
        if (raw[HP_OPT_INPROCESS_TIMEOUT].text && !cfg->inprocess_restart)
                ERR("%s only applies with --inprocess-restart",
                    raw[HP_OPT_INPROCESS_TIMEOUT].source);
        if (cfg->standalone && cfg->nnodes != 1)
                ERR("--standalone runs a single node, but --nnodes is %d",
                    cfg->nnodes);
        if (!cfg->standalone && cfg->node_rank >= cfg->nnodes &&
            cfg->rdzv_backend == HP_RDZV_STATIC)
                ERR("%s %d is out of range: --nnodes is %d, so node ranks "
                    "go from 0 to %d",
                    raw[HP_OPT_NODE_RANK].text ? raw[HP_OPT_NODE_RANK].source
                                               : "--node-rank",
                    cfg->node_rank, cfg->nnodes, cfg->nnodes - 1);
        return 0;
}

/*
 * With no backend named (neither --rdzv-backend nor PET_RDZV_BACKEND) and
 * no --standalone, a master given through torchrun's environment,
 * PET_MASTER_ADDR or PET_RDZV_ENDPOINT, means what it means to torchrun,
 * whose default backend is static: Kubeflow's training operator sets
 * them (with PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
 * PET_MASTER_PORT) for a PyTorchJob, where no HyperPod operator will ever
 * send /start. Anything else keeps the HyperPod operator's default.
 */
static void implied_backend(struct hp_config *cfg, struct raw_value *raw)
{
        static const enum hp_option_id hints[] = { HP_OPT_MASTER_ADDR,
                                                   HP_OPT_RDZV_ENDPOINT };
        struct raw_value *backend = &raw[HP_OPT_RDZV_BACKEND];

        if (backend->text != NULL || raw[HP_OPT_STANDALONE].text != NULL)
                return;
        for (size_t i = 0; i < HP_ARRAY_SIZE(hints); i++) {
                const char *env = option_rows[hints[i]].env;
                const char *value = getenv(env);

                if (value == NULL || value[0] == '\0')
                        continue;
                backend->text = "static";
                snprintf(backend->source, sizeof(backend->source),
                         "%s (environment)", env);
                cfg->rdzv_backend_reason =
                        hints[i] == HP_OPT_MASTER_ADDR
                                ? "PET_MASTER_ADDR is set and no "
                                  "--rdzv-backend or PET_RDZV_BACKEND "
                                  "names a backend (a Kubeflow PyTorchJob, "
                                  "or torchrun's environment): torchrun's "
                                  "default, static; --rdzv-backend "
                                  "hyperpod keeps the operator's"
                                : "PET_RDZV_ENDPOINT is set and no "
                                  "--rdzv-backend or PET_RDZV_BACKEND "
                                  "names a backend: torchrun's default, "
                                  "static; --rdzv-backend hyperpod keeps "
                                  "the operator's";
                return;
        }
}

int hp_config_parse(struct hp_config *cfg, int argc, char **argv,
                    char *errbuf, size_t errlen)
{
        struct option longopts[2 * HP_OPT_COUNT + 1];
        char alt_names[2048];
        char shortopts[2 * HP_OPT_COUNT + 4];
        struct raw_value raw[HP_OPT_COUNT];
        const char *env;
        int c;

        config_defaults(cfg);
        memset(raw, 0, sizeof(raw));
        build_getopt_tables(longopts, alt_names, sizeof(alt_names), shortopts);

        /* optind = 0 makes glibc re-initialise, so parsing twice (tests)
         * works. opterr = 0: errors are ours, with the value named. */
        optind = 0;
        opterr = 0;
        while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
                const char *culprit = argv[optind - 1];
                int id;

                if (c == '?') {
                        /* glibc puts a long option's val (256 + id) in
                         * optopt when it was given a value it takes none
                         * of; only a short option's letter is printable. */
                        if (optopt >= 256 && optopt < 256 + HP_OPT_COUNT) {
                                const char *eq = strchr(culprit, '=');
                                int len = eq ? (int)(eq - culprit)
                                             : (int)strlen(culprit);
                                ERR("option '%.*s' takes no value, but was "
                                    "given '%s' (see --help)",
                                    len, culprit, eq ? eq + 1 : "");
                        }
                        if (optopt > 0 && optopt < 256)
                                ERR("unrecognized option '-%c' (see --help)",
                                    optopt);
                        ERR("unrecognized option '%s' (see --help)", culprit);
                }
                if (c == ':')
                        ERR("option '%s' needs a value (see --help)", culprit);
                id = c >= 256 ? c - 256 : letter_to_id(c);
                if (id < 0 || id >= HP_OPT_COUNT)
                        ERR("unrecognized option '%s' (see --help)", culprit);
                raw[id].text = option_rows[id].takes_arg ? optarg : "1";
                if (c >= 256)
                        snprintf(raw[id].source, sizeof(raw[id].source),
                                 "--%s", option_rows[id].name);
                else
                        snprintf(raw[id].source, sizeof(raw[id].source),
                                 "-%c", c);
        }
        if (raw[HP_OPT_HELP].text) {
                cfg->show_help = true;
                return 0;
        }
        if (raw[HP_OPT_VERSION].text) {
                cfg->show_version = true;
                return 0;
        }

        /* The environment fills what the command line left unset. */
        for (int id = 0; id < HP_OPT_COUNT; id++) {
                const char *name = option_rows[id].env;

                if (raw[id].text != NULL || name == NULL)
                        continue;
                env = getenv(name);
                if (env == NULL)
                        continue;
                if (!option_rows[id].takes_arg) {
                        int on = env_flag_value(env);
                        if (on < 0)
                                ERR("invalid value '%s' for %s "
                                    "(environment): expected an integer, "
                                    "0 for off and anything else for on, "
                                    "as torchrun reads it",
                                    env, name);
                        if (on == 0)
                                continue;
                }
                raw[id].text = env;
                snprintf(raw[id].source, sizeof(raw[id].source),
                         "%s (environment)", name);
        }
        if (raw[HP_OPT_LOG_LINE_PREFIX_TEMPLATE].text == NULL) {
                env = getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
                if (env != NULL) {
                        raw[HP_OPT_LOG_LINE_PREFIX_TEMPLATE].text = env;
                        snprintf(raw[HP_OPT_LOG_LINE_PREFIX_TEMPLATE].source,
                                 sizeof(raw[0].source), "%s",
                                 "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE "
                                 "(environment)");
                }
        }

        implied_backend(cfg, raw);
        c = convert_values(cfg, raw, errbuf, errlen);
        if (c < 0)
                return c;

        env = getenv("PYTHON_EXEC");
        if (env != NULL && *env != '\0')
                cfg->python_exec = env;

        /* A replay or a rules check runs nothing: a training script
         * would be ignored, which is worse than refused. */
        if (cfg->check_rules != NULL) {
                if (cfg->replay_log != NULL)
                        ERR("--check-rules and --replay are two commands: "
                            "give one");
                if (optind < argc)
                        ERR("--check-rules runs no training script, but '%s' "
                            "was given", argv[optind]);
                return 0;
        }
        if (cfg->replay_log != NULL) {
                if (optind < argc)
                        ERR("--replay runs no training script, but '%s' was "
                            "given", argv[optind]);
                return 0;
        }
        if (optind >= argc)
                ERR("missing the training script (usage: hyperpodrun [OPTIONS] "
                    "TRAINING_SCRIPT [ARGS...]; see --help)");
        cfg->script = argv[optind];
        if (cfg->script[0] == '\0')
                ERR("the training script is an empty string");
        cfg->script_args = argv + optind + 1;
        cfg->script_argc = argc - optind - 1;
        return 0;
}

int hp_config_find_executable(const char *name, char *path, size_t len)
{
        const char *search;
        int result = -ENOENT;

        if (strchr(name, '/') != NULL) {
                struct stat st;
                if (stat(name, &st) < 0)
                        return -errno;
                if (S_ISDIR(st.st_mode))
                        return -EISDIR;
                if (access(name, X_OK) < 0)
                        return -EACCES;
                return hp_snprintf(path, len, "%s", name) < 0 ? -ENAMETOOLONG
                                                             : 0;
        }
        search = getenv("PATH");
        if (search == NULL)
                search = "/usr/local/bin:/usr/bin:/bin";
        while (*search) {
                const char *colon = strchr(search, ':');
                size_t dir_len = colon ? (size_t)(colon - search)
                                       : strlen(search);
                struct stat st;

                if (hp_snprintf(path, len, "%.*s/%s", (int)dir_len, search,
                                name) == 0 &&
                    stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                        if (access(path, X_OK) == 0)
                                return 0;
                        result = -EACCES;
                }
                search += dir_len;
                if (*search == ':')
                        search++;
        }
        return result;
}

static int check_executable(const char *what, const char *name, char *errbuf,
                            size_t errlen)
{
        char path[PATH_MAX];
        int r = hp_config_find_executable(name, path, sizeof(path));

        if (r == 0)
                return 0;
        if (r == -EACCES)
                ERR("%s '%s' is not executable (chmod +x it, and give it a "
                    "#! line)",
                    what, name);
        if (r == -EISDIR)
                ERR("%s '%s' is a directory", what, name);
        if (strchr(name, '/') == NULL)
                ERR("%s '%s' was not found in PATH", what, name);
        ERR("%s '%s' does not exist", what, name);
}

int hp_config_check_files(const struct hp_config *cfg, char *errbuf,
                          size_t errlen)
{
        int r;

        if (cfg->pre_train_script) {
                r = check_executable("--pre-train-script",
                                     cfg->pre_train_script, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (cfg->post_train_script) {
                r = check_executable("--post-train-script",
                                     cfg->post_train_script, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (cfg->no_python)
                return check_executable("training program", cfg->script,
                                        errbuf, errlen);
        r = check_executable("python interpreter (PYTHON_EXEC)",
                             cfg->python_exec, errbuf, errlen);
        if (r < 0)
                return r;
        if (!cfg->module) {
                struct stat st;
                if (stat(cfg->script, &st) < 0)
                        ERR("training script '%s' does not exist",
                            cfg->script);
                if (S_ISDIR(st.st_mode))
                        ERR("training script '%s' is a directory",
                            cfg->script);
                if (access(cfg->script, R_OK) < 0)
                        ERR("training script '%s' is not readable",
                            cfg->script);
        }
        return 0;
}

bool hp_config_operator_mode(const struct hp_config *cfg)
{
        return cfg->rdzv_backend == HP_RDZV_HYPERPOD && !cfg->standalone;
}
