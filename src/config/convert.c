/* SPDX-License-Identifier: Apache-2.0 */
/* Raw option values into struct hp_config, row by row of options.h. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "config-private.h"

/* --preflight and its companions, which need it. */
static int convert_preflight(struct hp_config *cfg,
                             const struct raw_value *raw, char *errbuf,
                             size_t errlen)
{
        static const char *const kinds[] = { "none", "nccl" };
        static const enum hp_option_id needs[] = {
                HP_OPT_PREFLIGHT_MIN_BUSBW,
                HP_OPT_PREFLIGHT_MAX_BYTES,
                HP_OPT_PREFLIGHT_TIMEOUT,
                HP_OPT_PREFLIGHT_LIBRARY,
        };
        const struct raw_value *v;
        int index = 0, r;

        if (raw[HP_OPT_PREFLIGHT].text != NULL) {
                r = config__parse_choice(&raw[HP_OPT_PREFLIGHT], kinds,
                                         HP_ARRAY_SIZE(kinds), &index, errbuf,
                                         errlen);
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
        if (v->text != NULL && (hp_parse_u64(v->text, 1ull << 40,
                                             &cfg->preflight_max_bytes) < 0 ||
                                cfg->preflight_max_bytes < 4))
                ERR("invalid value '%s' for %s: expected bytes, 4 to 2^40",
                    v->text, v->source);
        if (raw[HP_OPT_PREFLIGHT_TIMEOUT].text != NULL) {
                r = config__parse_seconds(&raw[HP_OPT_PREFLIGHT_TIMEOUT],
                                          &cfg->preflight_timeout_ms, errbuf,
                                          errlen);
                if (r < 0)
                        return r;
                if (cfg->preflight_timeout_ms == 0)
                        ERR("invalid value '0' for %s: the check needs some "
                            "time",
                            raw[HP_OPT_PREFLIGHT_TIMEOUT].source);
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
                            "rules to read it with",
                            kmsg->source);
                cfg->kmsg = kmsg->text;
                cfg->kmsg_given = true;
        }
        if (action->text != NULL) {
                r = config__parse_choice(action, actions,
                                         HP_ARRAY_SIZE(actions), &index,
                                         errbuf, errlen);
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
                r = config__parse_choice(format, formats,
                                         HP_ARRAY_SIZE(formats),
                                         &cfg->replay_format, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (until->text != NULL) {
                if (until->text[0] == '\0')
                        ERR("empty value for %s (an RFC 3339 time, "
                            "+SECONDS or verdict)",
                            until->source);
                cfg->replay_until = until->text;
        }
        if (input->text != NULL) {
                r = config__parse_choice(input, inputs, HP_ARRAY_SIZE(inputs),
                                         &cfg->replay_input, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        if (replay->text[0] == '\0')
                ERR("empty value for %s (a log file, or - for standard "
                    "input)",
                    replay->source);
        if (cfg->log_monitoring_config == NULL)
                ERR("%s was given without --log-monitoring-config, the "
                    "rules to replay the log through",
                    replay->source);
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
        static const char *const handled[] = {
                "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"
        };
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
 * The conversion of each option's raw text into struct hp_config: the
 * kind and fields of its row in options.h, converted in a fixed order
 * (convert_in_order) so that with two bad options the first in this
 * order is the one reported. Most options are one of a few kinds; an
 * option whose conversion is its own, or that is converted together with
 * others, has a function.
 */
enum conversion_kind {
        CONV_NONE = 0, /* converted with another option's row */
        CONV_REFUSED,  /* not taken: "is not supported: <text>" */
        CONV_FLAG,     /* bool at field */
        CONV_STRING,   /* const char * at field, any text */
        CONV_TEXT,     /* const char * at field, not empty; text: a hint */
        CONV_INT,      /* int at field, from min to max */
        CONV_SECONDS,  /* uint64_t milliseconds at field */
        CONV_CHOICE,   /* const char * at field, one of choices */
        CONV_FUNC,     /* fn, when the option is given */
        CONV_GROUP,    /* fn, always: it converts several options */
};

struct conversion {
        enum hp_option_id id;
        enum conversion_kind kind;
        size_t field; /* offsetof(struct hp_config, ...) */
        bool has_given;
        size_t given; /* a bool set when the option is given */
        int min, max;
        const char *text;
        const char *const *choices;
        size_t nchoices;
        convert_fn fn;
        int first; /* converted before the others, 1 first */
        int after; /* converted right after option after - 1 */
};

#define AFTER(opt) .after = HP_OPT_##opt + 1
#define FIELD(f) .field = offsetof(struct hp_config, f)
#define GIVEN(f) .has_given = true, .given = offsetof(struct hp_config, f)
#define CHOICES(list) .choices = (list), .nchoices = HP_ARRAY_SIZE(list)

static const char *const start_methods[] = { "spawn", "fork", "forkserver" };
static const char *const log_levels[] = { "critical", "error", "warning",
                                          "info",     "debug", "trace" };

static int convert_nnodes(struct hp_config *cfg, const struct raw_value *raw,
                          enum hp_option_id id, char *errbuf, size_t errlen)
{
        int r = config__parse_nnodes(&raw[id], &cfg->nnodes_min, &cfg->nnodes,
                                     errbuf, errlen);

        if (r < 0)
                return r;
        cfg->nnodes_given = true;
        return 0;
}

static int convert_nproc(struct hp_config *cfg, const struct raw_value *raw,
                         enum hp_option_id id, char *errbuf, size_t errlen)
{
        return config__parse_nproc(&raw[id], &cfg->nproc, errbuf, errlen);
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
        /* The order is enum hp_rdzv_backend's; torchrun's older etcd
         * backend, last, is refused with a reason. */
        static const char *const backends[] = {
                "hyperpod", "static",  "slurm", "resource-config",
                "c10d",     "etcd-v2", "etcd",
        };
        int r, index;

        r = config__parse_choice(&raw[id], backends, HP_ARRAY_SIZE(backends),
                                 &index, errbuf, errlen);
        if (r < 0)
                return r;
        if (index > HP_RDZV_ETCD_V2)
                ERR("%s %s is not supported: torchrun's older etcd "
                    "rendezvous is not spoken; use etcd-v2 (the same etcd "
                    "server and --rdzv-endpoint), c10d (with "
                    "--rdzv-endpoint), static (with --nnodes N, "
                    "--node-rank, --master-addr), slurm, resource-config "
                    "or --standalone. A Kubeflow PyTorchJob without "
                    "elasticPolicy runs as it is: its PET_MASTER_ADDR "
                    "selects static",
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
                            const struct raw_value *raw, enum hp_option_id id,
                            char *errbuf, size_t errlen)
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
        r = config__parse_ranks_filter(&raw[id], cfg->nproc, false,
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

        r = config__parse_choice(&raw[id], signals, HP_ARRAY_SIZE(signals),
                                 &index, errbuf, errlen);
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

        r = config__parse_choice(&raw[id], hang_dumps,
                                 HP_ARRAY_SIZE(hang_dumps), &index, errbuf,
                                 errlen);
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

        r = config__parse_choice(&raw[id], cgroup_modes,
                                 HP_ARRAY_SIZE(cgroup_modes), &index, errbuf,
                                 errlen);
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
                r = config__parse_ranks_filter(v, bound, true, cfg->monitored,
                                               errbuf, errlen);
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

static int convert_safety_factor(struct hp_config *cfg,
                                 const struct raw_value *raw,
                                 enum hp_option_id id, char *errbuf,
                                 size_t errlen)
{
        return config__parse_double_value(&raw[id], 0.0, 1000.0,
                                          &cfg->ft_safety_factor, errbuf,
                                          errlen);
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
        return config__parse_double_value(&raw[id], 0.0, 1.0,
                                          &cfg->straggler_ratio, errbuf,
                                          errlen);
}

static int convert_straggler_action(struct hp_config *cfg,
                                    const struct raw_value *raw,
                                    enum hp_option_id id, char *errbuf,
                                    size_t errlen)
{
        static const char *const actions[] = { "warn", "verdict" };
        int index, r;

        r = config__parse_choice(&raw[id], actions, HP_ARRAY_SIZE(actions),
                                 &index, errbuf, errlen);
        if (r == 0)
                cfg->straggler_verdict = index == 1;
        return r;
}

#define HP_UNPAREN(...) __VA_ARGS__

/* The conversion columns of options.h's table. */
static const struct conversion conversions[HP_OPT_COUNT] = {
#define XX(id_, name, letter, metavar, env, kind_, conv, help)               \
        [HP_OPT_##id_] = { .id = HP_OPT_##id_,                               \
                           .kind = CONV_##kind_,                             \
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
                r = config__parse_int_value(v, c->min, c->max, (int *)field,
                                            errbuf, errlen);
                break;
        case CONV_SECONDS:
                r = config__parse_seconds(v, (uint64_t *)field, errbuf,
                                          errlen);
                break;
        case CONV_CHOICE:
                r = config__parse_choice(v, c->choices, c->nchoices, &index,
                                         errbuf, errlen);
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
        bool operator_mode = hp_config_operator_mode(cfg);
        struct raw_value env = { .text = NULL };

        if (raw[HP_OPT_SHUTDOWN_SIGNAL].text == NULL)
                cfg->shutdown_signal = operator_mode ? SIGKILL : SIGTERM;
        if (raw[HP_OPT_SHUTDOWN_TIMEOUT].text != NULL)
                return 0;
        cfg->shutdown_timeout_ms = operator_mode ? 15000 : 30000;
        env.text = getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
        if (env.text == NULL || env.text[0] == '\0')
                return 0;
        snprintf(env.source, sizeof(env.source), "%s",
                 "TORCH_ELASTIC_SHUTDOWN_TIMEOUT (environment)");
        return config__parse_seconds(&env, &cfg->shutdown_timeout_ms, errbuf,
                                     errlen);
}

/* Converts option id, then the rows marked AFTER(id), and theirs. */
static int convert_with_followers(struct hp_config *cfg,
                                  const struct raw_value *raw, int id,
                                  char *errbuf, size_t errlen)
{
        int r = convert_one(cfg, raw, &conversions[id], errbuf, errlen);

        for (int next = 0; r == 0 && next < HP_OPT_COUNT; next++)
                if (conversions[next].after == id + 1)
                        r = convert_with_followers(cfg, raw, next, errbuf,
                                                   errlen);
        return r;
}

/* The rows with .first in its order, then the others in table order,
 * each followed by the rows converted after it. */
static int convert_in_order(struct hp_config *cfg,
                            const struct raw_value *raw, char *errbuf,
                            size_t errlen)
{
        int r;

        for (int rank = 1; rank <= HP_OPT_COUNT; rank++)
                for (int id = 0; id < HP_OPT_COUNT; id++) {
                        if (conversions[id].first != rank)
                                continue;
                        r = convert_with_followers(cfg, raw, id, errbuf,
                                                   errlen);
                        if (r < 0)
                                return r;
                }
        for (int id = 0; id < HP_OPT_COUNT; id++) {
                if (conversions[id].first != 0 || conversions[id].after != 0)
                        continue;
                r = convert_with_followers(cfg, raw, id, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

int config__convert_values(struct hp_config *cfg, struct raw_value *raw,
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
        cfg->server_flag_given = raw[HP_OPT_SERVER_HOST].text
                                         ? "--server-host"
                                 : raw[HP_OPT_SERVER_LOG_LEVEL].text
                                         ? "--server-log-level"
                                 : raw[HP_OPT_SERVER_SHUTDOWN_TIMEOUT].text
                                         ? "--server-shutdown-timeout"
                                 : raw[HP_OPT_SERVER_TOKEN_FILE].text
                                         ? "--server-token-file"
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
                ERR("--standalone runs a single node, but %s is '%s'",
                    raw[HP_OPT_NNODES].source, raw[HP_OPT_NNODES].text);
        if (!cfg->standalone && cfg->rdzv_backend == HP_RDZV_C10D &&
            cfg->rdzv_endpoint[0] == '\0')
                ERR("--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]: "
                    "the address where the agents meet (port %d when not "
                    "given)",
                    HP_RDZV_C10D_PORT);
        if (!cfg->standalone && cfg->rdzv_backend == HP_RDZV_ETCD_V2 &&
            cfg->rdzv_endpoint[0] == '\0')
                ERR("--rdzv-backend etcd-v2 needs --rdzv-endpoint "
                    "HOST[:PORT]: the etcd server where the agents meet "
                    "(port %d when not given)",
                    HP_RDZV_ETCD_PORT);
        if (!cfg->standalone && cfg->node_rank >= cfg->nnodes &&
            cfg->rdzv_backend == HP_RDZV_STATIC)
                ERR("%s %d is out of range: --nnodes is %d, so node ranks "
                    "go from 0 to %d",
                    raw[HP_OPT_NODE_RANK].text ? raw[HP_OPT_NODE_RANK].source
                                               : "--node-rank",
                    cfg->node_rank, cfg->nnodes, cfg->nnodes - 1);
        return 0;
}
