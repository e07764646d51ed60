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
#include "config-private.h"
#include "options.h"

struct option_row {
        const char *name;
        int letter;
        bool takes_arg;
        const char *env;
};

static const struct option_row option_rows[HP_OPT_COUNT] = {
#define XX(id, name, letter, metavar, env, kind, conv, help)                 \
        [HP_OPT_##id] = { name, letter, metavar != NULL, env },
        HP_OPTION_TABLE(XX)
#undef XX
};

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
                int has_arg = row->takes_arg ? required_argument
                                             : no_argument;

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

/* The command line into raw, each value with the flag that gave it. */
static int read_command_line(int argc, char **argv, struct raw_value *raw,
                             char *errbuf, size_t errlen)
{
        struct option longopts[2 * HP_OPT_COUNT + 1];
        char alt_names[2048];
        char shortopts[2 * HP_OPT_COUNT + 4];
        int c;

        build_getopt_tables(longopts, alt_names, sizeof(alt_names),
                            shortopts);
        /* optind = 0 makes glibc re-initialise, so parsing twice (tests)
         * works. opterr = 0: errors are ours, with the value named. */
        optind = 0;
        opterr = 0;
        while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) !=
               -1) {
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
                        ERR("option '%s' needs a value (see --help)",
                            culprit);
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
        return 0;
}

/* The environment fills what the command line left unset. */
static int read_environment(struct raw_value *raw, char *errbuf,
                            size_t errlen)
{
        const char *env;

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

        return 0;
}

int hp_config_parse(struct hp_config *cfg, int argc, char **argv,
                    char *errbuf, size_t errlen)
{
        struct raw_value raw[HP_OPT_COUNT];
        const char *env;
        int c;

        config_defaults(cfg);
        memset(raw, 0, sizeof(raw));

        c = read_command_line(argc, argv, raw, errbuf, errlen);
        if (c < 0)
                return c;
        if (raw[HP_OPT_HELP].text) {
                cfg->show_help = true;
                return 0;
        }
        if (raw[HP_OPT_VERSION].text) {
                cfg->show_version = true;
                return 0;
        }

        c = read_environment(raw, errbuf, errlen);
        if (c < 0)
                return c;

        implied_backend(cfg, raw);
        c = config__convert_values(cfg, raw, errbuf, errlen);
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
                            "was given",
                            argv[optind]);
                return 0;
        }
        if (cfg->replay_log != NULL) {
                if (optind < argc)
                        ERR("--replay runs no training script, but '%s' was "
                            "given",
                            argv[optind]);
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
