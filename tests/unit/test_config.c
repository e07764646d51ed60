/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the command line and PET_* parsing (src/config/config.c).
 *
 * Each case gives an environment and an argv. Accepted cases list the
 * fields they expect as text ("nproc" = "4", "tee" = "3,1"), so one table
 * can check any field; refused cases list what the one-line error must
 * mention: the bad value and where it came from.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"

#include "table.h"

extern char **environ;

struct env_var {
        const char *name; /* NULL ends the list */
        const char *value;
};

struct field_expect {
        const char *field; /* NULL ends the list */
        const char *value;
};

struct parse_case {
        const char *name;
        struct env_var env[6];
        const char *argv[16]; /* argv[0] included, NULL-terminated */
        struct field_expect expect[24];
};

/* A case that sets no variable (C forbids empty braces). */
#define NO_ENV                                                               \
        {                                                                    \
                {                                                            \
                        NULL, NULL                                           \
                }                                                            \
        }

struct error_case {
        const char *name;
        struct env_var env[6];
        const char *argv[16];
        const char *mentions[4]; /* substrings of the error message */
};

/* ---- The environment each case starts from ---- */

/* Removes everything that hp_config_parse reads from the environment, so
 * that no case sees another's variables or the test runner's. */
static void clear_config_env(void)
{
        static const char *const others[] = {
                "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
                "PYTHON_EXEC",
                "CUDA_VISIBLE_DEVICES",
                "NEURON_RT_VISIBLE_CORES",
                "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
        };
        char *names[256];
        size_t n = 0;

        /* Collect first: unsetenv while walking environ would skip some. */
        for (char **e = environ; *e != NULL && n < HP_ARRAY_SIZE(names);
             e++) {
                const char *eq = strchr(*e, '=');

                if (strncmp(*e, "PET_", 4) != 0 || eq == NULL)
                        continue;
                names[n] = strndup(*e, (size_t)(eq - *e));
                assert_non_null(names[n]);
                n++;
        }
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(unsetenv(names[i]), 0);
                free(names[i]);
        }
        for (size_t i = 0; i < HP_ARRAY_SIZE(others); i++)
                assert_int_equal(unsetenv(others[i]), 0);
}

static void set_case_env(const struct env_var *env, size_t n)
{
        clear_config_env();
        for (size_t i = 0; i < n && env[i].name != NULL; i++)
                assert_int_equal(setenv(env[i].name, env[i].value, 1), 0);
}

/* Runs hp_config_parse on a table argv. */
static int parse_argv(struct hp_config *cfg, const char *const *args,
                      size_t max, char *errbuf, size_t errlen)
{
        char *argv[32];
        int argc = 0;

        assert_true(max < HP_ARRAY_SIZE(argv));
        while ((size_t)argc < max && args[argc] != NULL) {
                /* getopt_long with '+' neither permutes nor writes argv. */
                argv[argc] = (char *)args[argc];
                argc++;
        }
        argv[argc] = NULL;
        errbuf[0] = '\0';
        return hp_config_parse(cfg, argc, argv, errbuf, errlen);
}

/* ---- Fields as text ---- */

/* One field a line, as the lists grow. */
/* clang-format off */
#define INT_FIELDS(X) \
        X(nnodes) \
        X(nproc) \
        X(node_rank) \
        X(master_port) \
        X(max_restarts) \
        X(server_port) \
        X(metrics_port) \
        X(script_argc) \
        X(ft_nsections) \
        X(straggler_windows)

#define BOOL_FIELDS(X) \
        X(master_port_given) \
        X(standalone) \
        X(module) \
        X(no_python) \
        X(log_to_devnull) \
        X(console_filter_set) \
        X(show_help) \
        X(show_version) \
        X(inprocess_restart) \
        X(metrics_port_given) \
        X(straggler_verdict)

#define U64_FIELDS(X) \
        X(monitor_interval_ms) \
        X(shutdown_timeout_ms) \
        X(server_shutdown_timeout_ms) \
        X(inprocess_timeout_ms) \
        X(ft_initial_hb_ms) \
        X(ft_hb_ms) \
        X(ft_oos_ms) \
        X(straggler_window_ms)

#define STRING_FIELDS(X) \
        X(master_addr) \
        X(rdzv_backend_name) \
        X(rdzv_endpoint) \
        X(rdzv_id) \
        X(rdzv_conf) \
        X(start_method) \
        X(role) \
        X(log_dir) \
        X(prefix_template) \
        X(local_addr) \
        X(pre_train_script) \
        X(pre_train_args) \
        X(post_train_script) \
        X(post_train_args) \
        X(server_host) \
        X(server_log_level) \
        X(python_exec) \
        X(script)
/* clang-format on */

static void join_ranks(const uint8_t *values, int n, char *buf, size_t len)
{
        size_t used = 0;

        buf[0] = '\0';
        for (int i = 0; i < n; i++)
                used += (size_t)snprintf(buf + used, len - used, "%s%d",
                                         i ? "," : "", values[i]);
        assert_true(used < len);
}

/* The value of one field of cfg as text, for comparing with a table. */
static const char *field_text(const struct hp_config *cfg, const char *field,
                              char *buf, size_t len)
{
#define X(f)                                                                 \
        if (strcmp(field, #f) == 0) {                                        \
                snprintf(buf, len, "%d", cfg->f);                            \
                return buf;                                                  \
        }
        INT_FIELDS(X)
#undef X
#define X(f)                                                                 \
        if (strcmp(field, #f) == 0)                                          \
                return cfg->f ? "true" : "false";
        BOOL_FIELDS(X)
#undef X
#define X(f)                                                                 \
        if (strcmp(field, #f) == 0) {                                        \
                snprintf(buf, len, "%llu", (unsigned long long)cfg->f);      \
                return buf;                                                  \
        }
        U64_FIELDS(X)
#undef X
#define X(f)                                                                 \
        if (strcmp(field, #f) == 0)                                          \
                return cfg->f ? cfg->f : "(null)";
        STRING_FIELDS(X)
#undef X
        if (strcmp(field, "ft_sections") == 0) {
                size_t used = 0;

                buf[0] = '\0';
                for (int i = 0; i < cfg->ft_nsections; i++)
                        used += (size_t)snprintf(
                                buf + used, len - used, "%s%s:%llu",
                                i ? "," : "", cfg->ft_section_names[i],
                                (unsigned long long)cfg->ft_section_ms[i]);
                return buf;
        }
        if (strcmp(field, "ft_safety_factor") == 0 ||
            strcmp(field, "straggler_ratio") == 0) {
                snprintf(buf, len, "%g",
                         field[0] == 'f' ? cfg->ft_safety_factor
                                         : cfg->straggler_ratio);
                return buf;
        }
        if (strcmp(field, "dup_stdout") == 0 ||
            strcmp(field, "dup_stderr") == 0) {
                const struct hp_dup_filters
                        *f = &cfg->dup_filters[field[7] == 'e' ? 1 : 0];
                size_t used = 0;

                buf[0] = '\0';
                for (int i = 0; i < f->count; i++)
                        used += (size_t)snprintf(buf + used, len - used,
                                                 "<%.*s>", (int)f->len[i],
                                                 f->text + f->at[i]);
                assert_true(used < len);
                return buf;
        }
        if (strcmp(field, "rdzv_backend_reason_set") == 0)
                return cfg->rdzv_backend_reason ? "true" : "false";
        if (strcmp(field, "shutdown_signal") == 0) {
                const char *name = hp_signal_name(cfg->shutdown_signal);

                return name ? name : "(unknown)";
        }
        if (strcmp(field, "tee") == 0 || strcmp(field, "redirects") == 0) {
                join_ranks(field[0] == 't' ? cfg->tee : cfg->redirects,
                           cfg->nproc, buf, len);
                return buf;
        }
        if (strcmp(field, "console_shown") == 0) {
                uint8_t shown[HP_MAX_NPROC];

                for (int i = 0; i < cfg->nproc; i++)
                        shown[i] = cfg->console_shown[i];
                join_ranks(shown, cfg->nproc, buf, len);
                return buf;
        }
        if (strcmp(field, "script_args") == 0) {
                size_t used = 0;

                buf[0] = '\0';
                for (int i = 0; i < cfg->script_argc; i++)
                        used += (size_t)snprintf(buf + used, len - used,
                                                 "%s%s", i ? " " : "",
                                                 cfg->script_args[i]);
                assert_true(used < len);
                return buf;
        }
        fail_msg("the test asks for an unknown field '%s'", field);
        return NULL;
}

/* ---- Accepted command lines ---- */

static const struct parse_case parse_cases[] = {
        {
                .name = "rank monitor defaults",
                .argv = { "hyperpodrun", "train.py" },
                .expect = {
                        { "ft_initial_hb_ms", "0" },
                        { "ft_hb_ms", "0" },
                        { "ft_oos_ms", "0" },
                        { "ft_nsections", "0" },
                        { "ft_safety_factor", "5" },
                        { "straggler_ratio", "0" },
                        { "straggler_windows", "3" },
                        { "straggler_window_ms", "5000" },
                        { "straggler_verdict", "false" },
                },
        },
        {
                .name = "rank monitor flags",
                .argv = { "hyperpodrun", "--ft-initial-rank-heartbeat-timeout",
                          "600", "--ft-rank-heartbeat-timeout", "1.5",
                          "--ft-rank-section-timeouts",
                          "setup:600,step:0.25,eval:null",
                          "--ft-rank-out-of-section-timeout", "30",
                          "--ft-safety-factor", "2.5", "train.py" },
                .expect = {
                        { "ft_initial_hb_ms", "600000" },
                        { "ft_hb_ms", "1500" },
                        { "ft_oos_ms", "30000" },
                        { "ft_sections", "setup:600000,step:250,eval:0" },
                        { "ft_safety_factor", "2.5" },
                },
        },
        {
                .name = "straggler flags",
                .argv = { "hyperpodrun", "--straggler-ratio", "0.5",
                          "--straggler-windows", "4", "--straggler-window",
                          "2", "--straggler-action", "verdict", "train.py" },
                .expect = {
                        { "straggler_ratio", "0.5" },
                        { "straggler_windows", "4" },
                        { "straggler_window_ms", "2000" },
                        { "straggler_verdict", "true" },
                },
        },
        {
                .name = "defaults",
                .argv = { "hyperpodrun", "train.py" },
                .expect = {
                        { "nproc", "1" },
                        { "nnodes", "1" },
                        { "node_rank", "0" },
                        { "shutdown_signal", "SIGKILL" },
                        { "shutdown_timeout_ms", "15000" },
                        { "server_port", "8080" },
                        { "server_host", "0.0.0.0" },
                        { "role", "default" },
                        { "rdzv_id", "none" },
                        { "rdzv_backend_name", "hyperpod" },
                        { "master_addr", "127.0.0.1" },
                        { "master_port", "29500" },
                        { "master_port_given", "false" },
                        { "max_restarts", "0" },
                        { "standalone", "false" },
                        { "module", "false" },
                        { "no_python", "false" },
                        { "python_exec", "python3" },
                        /* Operator mode: the HyperPod layout. */
                        { "log_dir", "/tmp/hyperpod" },
                        { "prefix_template", "(null)" },
                        { "tee", "3" },
                        { "redirects", "0" },
                        { "script", "train.py" },
                        { "script_argc", "0" },
                },
        },
        {
                .name = "options stop at the training script",
                .argv = { "hyperpodrun", "--nproc-per-node", "2", "train.py",
                          "--lr", "3" },
                .expect = { { "nproc", "2" },
                            { "script", "train.py" },
                            { "script_argc", "2" },
                            { "script_args", "--lr 3" } },
        },
        {
                .name = "hyperpodrun flags after the script are the "
                        "script's",
                .argv = { "hyperpodrun", "train.py", "--nproc-per-node", "8",
                          "-m" },
                .expect = { { "nproc", "1" },
                            { "module", "false" },
                            { "script_argc", "3" },
                            { "script_args", "--nproc-per-node 8 -m" } },
        },
        {
                .name = "-- ends the options",
                .argv = { "hyperpodrun", "--nproc-per-node", "2", "--",
                          "train.py", "--x" },
                .expect = { { "nproc", "2" },
                            { "script", "train.py" },
                            { "script_args", "--x" } },
        },
        {
                .name = "underscore spelling with a separate value",
                .argv = { "hyperpodrun", "--nproc_per_node", "4", "t.py" },
                .expect = { { "nproc", "4" } },
        },
        {
                .name = "underscore spelling with =",
                .argv = { "hyperpodrun", "--nproc_per_node=4", "t.py" },
                .expect = { { "nproc", "4" } },
        },
        {
                .name = "dash spelling with =",
                .argv = { "hyperpodrun", "--nproc-per-node=3", "t.py" },
                .expect = { { "nproc", "3" } },
        },
        {
                .name = "max restarts, both spellings",
                .argv = { "hyperpodrun", "--max_restarts", "3", "t.py" },
                .expect = { { "max_restarts", "3" } },
        },
        {
                .name = "max restarts with = and dashes",
                .argv = { "hyperpodrun", "--max-restarts=7", "t.py" },
                .expect = { { "max_restarts", "7" } },
        },
        {
                .name = "the static backend's flags",
                .argv = { "hyperpodrun", "--nnodes", "2", "--node_rank", "1",
                          "--rdzv_backend", "static", "--master_addr",
                          "10.0.0.1", "--master-port=1234", "t.py" },
                .expect = { { "nnodes", "2" },
                            { "node_rank", "1" },
                            { "rdzv_backend_name", "static" },
                            { "master_addr", "10.0.0.1" },
                            { "master_port", "1234" },
                            { "master_port_given", "true" } },
        },
        {
                .name = "nnodes MIN:MAX with MIN equal to MAX",
                .argv = { "hyperpodrun", "--nnodes", "2:2", "t.py" },
                .expect = { { "nnodes", "2" } },
        },
        {
                .name = "rdzv endpoint, id and role",
                .argv = { "hyperpodrun", "--rdzv-endpoint", "[::1]:29400",
                          "--rdzv-id", "job7", "--role", "trainer",
                          "--rdzv-conf", "a=1,b=2", "t.py" },
                .expect = { { "rdzv_endpoint", "[::1]:29400" },
                            { "rdzv_id", "job7" },
                            { "role", "trainer" },
                            { "rdzv_conf", "a=1,b=2" } },
        },
        {
                .name = "-t with one value for every rank",
                .argv = { "hyperpodrun", "--nproc-per-node", "2", "-t", "3",
                          "t.py" },
                .expect = { { "tee", "3,3" }, { "redirects", "0,0" } },
        },
        {
                .name = "-t with a map, attached; unlisted ranks get 0",
                .argv = { "hyperpodrun", "--nproc-per-node", "3",
                          "-t0:3,1:1", "t.py" },
                .expect = { { "tee", "3,1,0" } },
        },
        {
                .name = "--tee= with a map",
                .argv = { "hyperpodrun", "--nproc-per-node", "2",
                          "--tee=1:2", "t.py" },
                .expect = { { "tee", "0,2" } },
        },
        {
                .name = "-r and --redirects",
                .argv = { "hyperpodrun", "--nproc-per-node", "2", "-r", "2",
                          "t.py" },
                .expect = { { "redirects", "2,2" }, { "tee", "0,0" } },
        },
        {
                .name = "a map read before --nproc-per-node is known",
                .argv = { "hyperpodrun", "--redirects", "1:1",
                          "--nproc-per-node", "2", "t.py" },
                .expect = { { "redirects", "0,1" } },
        },
        {
                .name = "local ranks filter",
                .argv = { "hyperpodrun", "--nproc-per-node", "3",
                          "--local-ranks-filter", "0,2", "t.py" },
                .expect = { { "console_filter_set", "true" },
                            { "console_shown", "1,0,1" } },
        },
        {
                .name = "an empty local ranks filter shows every rank",
                .argv = { "hyperpodrun", "--local-ranks-filter", "", "t.py" },
                .expect = { { "console_filter_set", "false" } },
        },
        {
                .name = "standalone",
                .argv = { "hyperpodrun", "--standalone", "t.py" },
                .expect = { { "standalone", "true" } },
        },
        {
                .name = "-m runs a module",
                .argv = { "hyperpodrun", "-m", "pkg.train", "--epochs", "2" },
                .expect = { { "module", "true" },
                            { "script", "pkg.train" },
                            { "script_args", "--epochs 2" } },
        },
        {
                .name = "--no-python runs a program",
                .argv = { "hyperpodrun", "--no_python", "./run.sh" },
                .expect = { { "no_python", "true" },
                            { "script", "./run.sh" } },
        },
        {
                .name = "graceful shutdown",
                .argv = { "hyperpodrun", "--shutdown-signal", "SIGTERM",
                          "--shutdown-timeout", "0.5", "t.py" },
                .expect = { { "shutdown_signal", "SIGTERM" },
                            { "shutdown_timeout_ms", "500" } },
        },
        {
                .name = "in-process restart with a barrier timeout",
                .argv = { "hyperpodrun", "--inprocess-restart",
                          "--inprocess-timeout", "30", "t.py" },
                .expect = { { "inprocess_restart", "true" },
                            { "inprocess_timeout_ms", "30000" } },
        },
        {
                .name = "server flags",
                .argv = { "hyperpodrun", "--server-host", "127.0.0.1",
                          "--server-port=9000", "--server-log-level",
                          "debug", "--server-shutdown-timeout", "2", "t.py" },
                .expect = { { "server_host", "127.0.0.1" },
                            { "server_port", "9000" },
                            { "server_log_level", "debug" },
                            { "server_shutdown_timeout_ms", "2000" } },
        },
        {
                .name = "a metrics port of its own",
                .argv = { "hyperpodrun", "--server-port", "9000",
                          "--metrics-port", "9001", "t.py" },
                .expect = { { "metrics_port", "9001" },
                            { "metrics_port_given", "true" } },
        },
        {
                .name = "a free metrics port, self-driven without a "
                        "server port",
                .argv = { "hyperpodrun", "--standalone", "--metrics-port",
                          "0", "t.py" },
                .expect = { { "metrics_port", "0" },
                            { "metrics_port_given", "true" },
                            { "server_host", "127.0.0.1" } },
        },
        {
                .name = "the server port unused: a metrics port may be "
                        "its number",
                .argv = { "hyperpodrun", "--standalone", "--metrics-port",
                          "8080", "t.py" },
                .expect = { { "metrics_port", "8080" } },
        },
        {
                .name = "hooks with their one argument",
                .argv = { "hyperpodrun", "--pre-train-script", "/bin/pre",
                          "--pre-train-args", "a b", "--post-train-script",
                          "/bin/post", "t.py" },
                .expect = { { "pre_train_script", "/bin/pre" },
                            { "pre_train_args", "a b" },
                            { "post_train_script", "/bin/post" },
                            { "post_train_args", "(null)" } },
        },
        {
                .name = "self-driven modes keep torchrun's log defaults",
                .argv = { "hyperpodrun", "--standalone", "--nproc-per-node",
                          "2", "t.py" },
                .expect = { { "log_dir", "(null)" }, { "tee", "0,0" } },
        },
        {
                .name = "static keeps torchrun's log defaults too",
                .argv = { "hyperpodrun", "--rdzv-backend", "static", "t.py" },
                .expect = { { "log_dir", "(null)" }, { "tee", "0" } },
        },
        {
                .name = "operator mode: --redirects alone turns off the "
                        "default tee",
                .argv = { "hyperpodrun", "--nproc-per-node", "2", "-r", "1",
                          "t.py" },
                .expect = { { "tee", "0,0" }, { "redirects", "1,1" } },
        },
        {
                .name = "operator mode: --tee overrides its default",
                .argv = { "hyperpodrun", "--nproc-per-node", "2", "--tee",
                          "0:1", "t.py" },
                .expect = { { "tee", "1,0" } },
        },
        {
                .name = "log dir /dev/null means no files",
                .argv = { "hyperpodrun", "--log-dir", "/dev/null", "t.py" },
                .expect = { { "log_dir", "/dev/null" },
                            { "log_to_devnull", "true" } },
        },
        {
                .name = "a log dir",
                .argv = { "hyperpodrun", "--log_dir=/tmp/logs", "t.py" },
                .expect = { { "log_dir", "/tmp/logs" },
                            { "log_to_devnull", "false" } },
        },
        {
                .name = "a prefix template on the command line",
                .argv = { "hyperpodrun", "--log-line-prefix-template",
                          "[${role_name}${rank}]", "t.py" },
                .expect = { { "prefix_template", "[${role_name}${rank}]" } },
        },
        {
                .name = "--help needs no script",
                .argv = { "hyperpodrun", "--help" },
                .expect = { { "show_help", "true" } },
        },
        {
                .name = "-h",
                .argv = { "hyperpodrun", "-h" },
                .expect = { { "show_help", "true" } },
        },
        {
                .name = "--help wins over a bad value",
                .argv = { "hyperpodrun", "--nproc-per-node", "abc",
                          "--help" },
                .expect = { { "show_help", "true" } },
        },
        {
                .name = "--version",
                .argv = { "hyperpodrun", "--version" },
                .expect = { { "show_version", "true" },
                            { "show_help", "false" } },
        },

        /* The environment fills what the command line leaves unset. */
        {
                .name = "PET_NPROC_PER_NODE",
                .env = { { "PET_NPROC_PER_NODE", "4" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "nproc", "4" } },
        },
        {
                .name = "the command line wins over PET_*",
                .env = { { "PET_NPROC_PER_NODE", "4" } },
                .argv = { "hyperpodrun", "--nproc-per-node", "2", "t.py" },
                .expect = { { "nproc", "2" } },
        },
        {
                .name = "PET_STANDALONE=1",
                .env = { { "PET_STANDALONE", "1" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "standalone", "true" } },
        },
        {
                .name = "PET_STANDALONE=0",
                .env = { { "PET_STANDALONE", "0" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "standalone", "false" } },
        },
        {
                .name = "PET_STANDALONE as Python's int() reads it",
                .env = { { "PET_STANDALONE", " +1_0 " } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "standalone", "true" } },
        },
        {
                .name = "--run-path wins over --no-python and -m",
                .argv = { "hyperpodrun", "--no-python", "--run-path", "-m",
                          "/abs/t.py" },
                .expect = { { "no_python", "false" }, { "module", "false" },
                            { "script", "/abs/t.py" } },
        },
        {
                .name = "Kubeflow's PyTorchJob: static, self-driven stops",
                .env = { { "PET_NNODES", "2" },
                         { "PET_NPROC_PER_NODE", "3" },
                         { "PET_NODE_RANK", "1" },
                         { "PET_MASTER_ADDR", "job-master-0" },
                         { "PET_MASTER_PORT", "23456" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "rdzv_backend_name", "static" },
                            { "nnodes", "2" },
                            { "nproc", "3" },
                            { "node_rank", "1" },
                            { "master_addr", "job-master-0" },
                            { "master_port", "23456" },
                            { "rdzv_backend_reason_set", "true" },
                            { "shutdown_signal", "SIGTERM" },
                            { "shutdown_timeout_ms", "30000" },
                            /* self-driven: torchrun's layout */
                            { "log_dir", "(null)" },
                            { "tee", "0,0,0" } },
        },
        {
                .name = "Kubeflow's env with --rdzv-backend hyperpod",
                .env = { { "PET_NNODES", "2" },
                         { "PET_MASTER_ADDR", "job-master-0" },
                         { "PET_MASTER_PORT", "23456" } },
                .argv = { "hyperpodrun", "--rdzv-backend", "hyperpod",
                          "t.py" },
                .expect = { { "rdzv_backend_name", "hyperpod" },
                            { "rdzv_backend_reason_set", "false" },
                            { "shutdown_signal", "SIGKILL" },
                            { "shutdown_timeout_ms", "15000" } },
        },
        {
                .name = "PET_RDZV_BACKEND names the backend, not the master",
                .env = { { "PET_RDZV_BACKEND", "slurm" },
                         { "PET_MASTER_ADDR", "10.0.0.1" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "rdzv_backend_name", "slurm" },
                            { "rdzv_backend_reason_set", "false" } },
        },
        {
                .name = "PET_RDZV_ENDPOINT alone: static",
                .env = { { "PET_RDZV_ENDPOINT", "10.0.0.1:29400" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "rdzv_backend_name", "static" },
                            { "rdzv_endpoint", "10.0.0.1:29400" },
                            { "rdzv_backend_reason_set", "true" } },
        },
        {
                .name = "--master-addr on the command line keeps the "
                        "operator",
                .argv = { "hyperpodrun", "--master-addr", "10.0.0.1",
                          "t.py" },
                .expect = { { "rdzv_backend_name", "hyperpod" },
                            { "rdzv_backend_reason_set", "false" } },
        },
        {
                .name = "PET_STANDALONE wins over PET_MASTER_ADDR",
                .env = { { "PET_STANDALONE", "1" },
                         { "PET_MASTER_ADDR", "10.0.0.1" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "standalone", "true" },
                            { "rdzv_backend_reason_set", "false" },
                            { "shutdown_signal", "SIGTERM" } },
        },
        {
                .name = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, self-driven",
                .env = { { "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120" } },
                .argv = { "hyperpodrun", "--standalone", "t.py" },
                .expect = { { "shutdown_signal", "SIGTERM" },
                            { "shutdown_timeout_ms", "120000" } },
        },
        {
                .name = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, operator mode",
                .env = { { "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "shutdown_signal", "SIGKILL" },
                            { "shutdown_timeout_ms", "120000" } },
        },
        {
                .name = "PET_SHUTDOWN_TIMEOUT wins over "
                        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                .env = { { "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120" },
                         { "PET_SHUTDOWN_TIMEOUT", "7" } },
                .argv = { "hyperpodrun", "--standalone", "t.py" },
                .expect = { { "shutdown_timeout_ms", "7000" } },
        },
        {
                .name = "--shutdown-timeout wins over PET_SHUTDOWN_TIMEOUT",
                .env = { { "PET_SHUTDOWN_TIMEOUT", "7" } },
                .argv = { "hyperpodrun", "--standalone",
                          "--shutdown_timeout", "2", "--shutdown-signal",
                          "SIGKILL", "t.py" },
                .expect = { { "shutdown_timeout_ms", "2000" },
                            { "shutdown_signal", "SIGKILL" } },
        },
        {
                .name = "--signals-to-handle with SIGUSR1 and SIGUSR2, as "
                        "torchrun's help suggests under Slurm",
                .argv = { "hyperpodrun", "--signals-to-handle",
                          "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2",
                          "t.py" },
                .expect = { { "script", "t.py" } },
        },
        {
                .name = "--event-log-handler null, torchrun's default",
                .argv = { "hyperpodrun", "--event-log-handler", "null",
                          "t.py" },
                .expect = { { "script", "t.py" },
                            { "dup_stdout", "" },
                            { "dup_stderr", "" } },
        },
        {
                .name = "duplicate filters as torchrun splits them",
                .env = { { "PET_DUPLICATE_STDERR_FILTERS", "NCCL WARN" } },
                .argv = { "hyperpodrun", "--duplicate_stdout_filters",
                          "loss,,acc,step,", "t.py" },
                .expect = { { "dup_stdout", "<loss,acc><step><>" },
                            { "dup_stderr", "<NCCL WARN>" } },
        },
        {
                .name = "an empty duplicate filter list is one empty "
                        "filter, as in torchrun",
                .argv = { "hyperpodrun", "--duplicate-stdout-filters", "",
                          "t.py" },
                .expect = { { "dup_stdout", "<>" } },
        },
        {
                .name = "--signals-to-handle with torchrun's default set",
                .argv = { "hyperpodrun", "--signals_to_handle",
                          "SIGINT,SIGTERM,SIGQUIT,SIGHUP", "t.py" },
                .expect = { { "script", "t.py" } },
        },
        {
                .name = "PET_STANDALONE=-0 is off",
                .env = { { "PET_STANDALONE", "-0" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "standalone", "false" } },
        },
        {
                .name = "local ranks filter past nproc, as torchrun",
                .argv = { "hyperpodrun", "--nproc-per-node", "2",
                          "--local-ranks-filter", "0,5", "t.py" },
                .expect = { { "console_filter_set", "true" },
                            { "console_shown", "1,0" } },
        },
        {
                .name = "PET_* for the static backend",
                .env = { { "PET_NNODES", "3" },
                         { "PET_NODE_RANK", "2" },
                         { "PET_RDZV_BACKEND", "static" },
                         { "PET_MAX_RESTARTS", "5" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "nnodes", "3" },
                            { "node_rank", "2" },
                            { "rdzv_backend_name", "static" },
                            { "max_restarts", "5" } },
        },
        {
                .name = "PET_TEE and PET_MODULE",
                .env = { { "PET_TEE", "3" }, { "PET_MODULE", "1" } },
                .argv = { "hyperpodrun", "pkg.mod" },
                .expect = { { "tee", "3" }, { "module", "true" } },
        },
        {
                .name = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
                .env = { { "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
                           "<${local_rank}>" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "prefix_template", "<${local_rank}>" } },
        },
        {
                .name = "PET_LOG_LINE_PREFIX_TEMPLATE wins over "
                        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
                .env = { { "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
                           "<${local_rank}>" },
                         { "PET_LOG_LINE_PREFIX_TEMPLATE", "{${rank}}" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "prefix_template", "{${rank}}" } },
        },
        {
                .name = "the command line wins over both templates",
                .env = { { "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
                           "<${local_rank}>" },
                         { "PET_LOG_LINE_PREFIX_TEMPLATE", "{${rank}}" } },
                .argv = { "hyperpodrun", "--log-line-prefix-template",
                          "${pid}", "t.py" },
                .expect = { { "prefix_template", "${pid}" } },
        },
        {
                .name = "PYTHON_EXEC",
                .env = { { "PYTHON_EXEC", "/opt/py/bin/python" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "python_exec", "/opt/py/bin/python" } },
        },
        {
                .name = "an empty PYTHON_EXEC is ignored",
                .env = { { "PYTHON_EXEC", "" } },
                .argv = { "hyperpodrun", "t.py" },
                .expect = { { "python_exec", "python3" } },
        },
        {
                .name = "gpu counts CUDA_VISIBLE_DEVICES",
                .env = { { "CUDA_VISIBLE_DEVICES", "0,1,2" } },
                .argv = { "hyperpodrun", "--nproc-per-node", "gpu", "t.py" },
                .expect = { { "nproc", "3" } },
        },
        {
                .name = "auto is gpu when there are GPUs",
                .env = { { "CUDA_VISIBLE_DEVICES", "4,5" } },
                .argv = { "hyperpodrun", "--nproc-per-node", "auto", "t.py" },
                .expect = { { "nproc", "2" } },
        },
        {
                .name = "neuron counts NEURON_RT_VISIBLE_CORES",
                .env = { { "NEURON_RT_VISIBLE_CORES", "0-3,8,10-11" } },
                .argv = { "hyperpodrun", "--nproc-per-node", "neuron",
                          "t.py" },
                .expect = { { "nproc", "7" } },
        },
        {
                .name = "auto is neuron when there is no GPU",
                .env = { { "CUDA_VISIBLE_DEVICES", "" },
                         { "NEURON_RT_VISIBLE_CORES", "16-31" } },
                .argv = { "hyperpodrun", "--nproc-per-node", "auto", "t.py" },
                .expect = { { "nproc", "16" } },
        },
};

static void test_accepted_command_lines(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(parse_cases); k++) {
                const struct parse_case *c = &parse_cases[k];
                struct hp_config cfg;
                char errbuf[512], text[512];
                int r;

                set_case_env(c->env, HP_ARRAY_SIZE(c->env));
                r = parse_argv(&cfg, c->argv, HP_ARRAY_SIZE(c->argv), errbuf,
                               sizeof(errbuf));
                if (r != 0) {
                        CASE_FAILED(failures, "%s: refused with %s: %s",
                                    c->name, hp_err_name(r), errbuf);
                        continue;
                }
                for (size_t i = 0; i < HP_ARRAY_SIZE(c->expect); i++) {
                        const struct field_expect *e = &c->expect[i];
                        const char *got;

                        if (e->field == NULL)
                                break;
                        got = field_text(&cfg, e->field, text, sizeof(text));
                        if (strcmp(got, e->value) != 0)
                                CASE_FAILED(failures,
                                            "%s: %s is '%s', expected '%s'",
                                            c->name, e->field, got, e->value);
                }
        }
        clear_config_env();
        assert_int_equal(failures, 0);
}

/* "cpu" is whatever this process may run on, which the test asks too. */
static void test_nproc_cpu_counts_usable_cpus(void **state)
{
        const char *argv[] = { "hyperpodrun", "--nproc-per-node", "cpu",
                               "t.py", NULL };
        struct hp_config cfg;
        cpu_set_t set;
        char errbuf[256];

        (void)state;
        clear_config_env();
        assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
        assert_int_equal(parse_argv(&cfg, argv, HP_ARRAY_SIZE(argv), errbuf,
                                    sizeof(errbuf)),
                         0);
        assert_int_equal(cfg.nproc, CPU_COUNT(&set));
}

/* ---- Refused command lines ---- */

static const struct error_case error_cases[] = {
        { "section timeouts without seconds",
          NO_ENV,
          { "hyperpodrun", "--ft-rank-section-timeouts", "step", "t.py" },
          { "'step'", "--ft-rank-section-timeouts", "name:SECONDS" } },
        { "section timeout not a number",
          NO_ENV,
          { "hyperpodrun", "--ft-rank-section-timeouts", "step:soon",
            "t.py" },
          { "'soon'", "section step", "--ft-rank-section-timeouts" } },
        { "section named twice",
          NO_ENV,
          { "hyperpodrun", "--ft-rank-section-timeouts", "a:1,a:2", "t.py" },
          { "section a is named twice" } },
        { "safety factor zero",
          NO_ENV,
          { "hyperpodrun", "--ft-safety-factor", "0", "t.py" },
          { "'0'", "--ft-safety-factor" } },
        { "straggler ratio above 1",
          NO_ENV,
          { "hyperpodrun", "--straggler-ratio", "1.5", "t.py" },
          { "'1.5'", "--straggler-ratio" } },
        { "straggler action unknown",
          NO_ENV,
          { "hyperpodrun", "--straggler-action", "kill", "t.py" },
          { "'kill'", "--straggler-action", "warn, verdict" } },
        { "heartbeat timeout not seconds",
          NO_ENV,
          { "hyperpodrun", "--ft-rank-heartbeat-timeout", "1m", "t.py" },
          { "'1m'", "--ft-rank-heartbeat-timeout" } },
        { "nproc 0",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "0", "t.py" },
          { "'0'", "--nproc-per-node" } },
        { "nproc abc",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "abc", "t.py" },
          { "'abc'", "--nproc-per-node" } },
        { "nproc -1 with the underscore spelling",
          NO_ENV,
          { "hyperpodrun", "--nproc_per_node=-1", "t.py" },
          { "'-1'", "--nproc-per-node" } },
        { "nproc above the limit",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "1025", "t.py" },
          { "'1025'", "--nproc-per-node" } },
        { "nproc from the environment",
          { { "PET_NPROC_PER_NODE", "abc" } },
          { "hyperpodrun", "t.py" },
          { "'abc'", "PET_NPROC_PER_NODE" } },
        { "gpu with no GPU visible",
          { { "CUDA_VISIBLE_DEVICES", "" } },
          { "hyperpodrun", "--nproc-per-node", "gpu", "t.py" },
          { "gpu", "--nproc-per-node" } },
        { "neuron with a malformed core list",
          { { "NEURON_RT_VISIBLE_CORES", "3-1" } },
          { "hyperpodrun", "--nproc-per-node", "neuron", "t.py" },
          { "NEURON_RT_VISIBLE_CORES='3-1'", "--nproc-per-node neuron" } },
        { "node problem flags without a config",
          NO_ENV,
          { "hyperpodrun", "--kmsg", "/tmp/f", "t.py" },
          { "--kmsg", "without --node-problem-config" } },
        { "node fault action",
          NO_ENV,
          { "hyperpodrun", "--node-fault-action", "drain", "t.py" },
          { "'drain'", "--node-fault-action", "none, reboot, replace" } },
        { "preflight kind",
          NO_ENV,
          { "hyperpodrun", "--preflight", "rccl", "t.py" },
          { "'rccl'", "--preflight" } },
        { "preflight floor without preflight",
          NO_ENV,
          { "hyperpodrun", "--preflight-min-busbw", "10", "t.py" },
          { "--preflight-min-busbw", "without --preflight nccl" } },
        { "preflight floor",
          NO_ENV,
          { "hyperpodrun", "--preflight", "nccl", "--preflight-min-busbw",
            "fast", "t.py" },
          { "'fast'", "--preflight-min-busbw" } },
        { "preflight size",
          NO_ENV,
          { "hyperpodrun", "--preflight", "nccl", "--preflight-max-bytes",
            "2", "t.py" },
          { "'2'", "--preflight-max-bytes" } },
        { "nnodes MIN above MAX",
          NO_ENV,
          { "hyperpodrun", "--nnodes", "4:1", "t.py" },
          { "'4:1'", "--nnodes", "MIN 4 is above MAX 1" } },
        { "nnodes MIN above MAX from the environment",
          { { "PET_NNODES", "3:2" } },
          { "hyperpodrun", "t.py" },
          { "'3:2'", "PET_NNODES", "MIN 3 is above MAX 2" } },
        { "nnodes 0",
          NO_ENV,
          { "hyperpodrun", "--nnodes", "0", "t.py" },
          { "'0'", "--nnodes" } },
        { "node rank not below nnodes, static",
          NO_ENV,
          { "hyperpodrun", "--nnodes", "2", "--node-rank", "5",
            "--rdzv-backend", "static", "t.py" },
          { "5", "--node-rank", "--nnodes is 2" } },
        { "node rank from the environment not below nnodes",
          { { "PET_NODE_RANK", "5" } },
          { "hyperpodrun", "--nnodes", "2", "--rdzv-backend", "static",
            "t.py" },
          { "5", "PET_NODE_RANK" } },
        { "node rank -1",
          NO_ENV,
          { "hyperpodrun", "--node-rank", "-1", "t.py" },
          { "'-1'", "--node-rank" } },
        { "master port 0",
          NO_ENV,
          { "hyperpodrun", "--master-port", "0", "t.py" },
          { "'0'", "--master-port" } },
        { "master port 70000",
          NO_ENV,
          { "hyperpodrun", "--master_port=70000", "t.py" },
          { "'70000'", "--master-port" } },
        { "master port from the environment",
          { { "PET_MASTER_PORT", "70000" } },
          { "hyperpodrun", "t.py" },
          { "'70000'", "PET_MASTER_PORT" } },
        { "an empty master address",
          NO_ENV,
          { "hyperpodrun", "--master-addr", "", "t.py" },
          { "--master-addr" } },
        { "shutdown signal SIGINT",
          NO_ENV,
          { "hyperpodrun", "--shutdown-signal", "SIGINT", "t.py" },
          { "'SIGINT'", "--shutdown-signal" } },
        { "a negative shutdown timeout",
          NO_ENV,
          { "hyperpodrun", "--shutdown-timeout", "-1", "t.py" },
          { "'-1'", "--shutdown-timeout" } },
        { "tee 4",
          NO_ENV,
          { "hyperpodrun", "--tee", "4", "t.py" },
          { "'4'", "--tee" } },
        { "-t 4 names the short flag",
          NO_ENV,
          { "hyperpodrun", "-t", "4", "t.py" },
          { "'4'", "-t" } },
        { "tee map with a rank not below nproc",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "2", "--tee", "0:3,9:1",
            "t.py" },
          { "'0:3,9:1'", "--tee", "9" } },
        { "tee from the environment",
          { { "PET_TEE", "4" } },
          { "hyperpodrun", "t.py" },
          { "'4'", "PET_TEE" } },
        { "redirects map with a bad value",
          NO_ENV,
          { "hyperpodrun", "--redirects", "0:7", "t.py" },
          { "'0:7'", "--redirects" } },
        { "log monitor ranks beyond nproc",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "2", "--log-monitoring-config",
            "r.json", "--log-monitor-ranks", "5", "t.py" },
          { "'5'", "--log-monitor-ranks" } },
        { "--signals-to-handle with a signal not handled",
          NO_ENV,
          { "hyperpodrun", "--signals-to-handle",
            "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGALRM", "t.py" },
          { "--signals-to-handle", "cannot handle 'SIGALRM'",
            "forwards SIGUSR1" } },
        { "--signals-to-handle with a subset",
          NO_ENV,
          { "hyperpodrun", "--signals-to-handle", "SIGTERM,SIGUSR1", "t.py" },
          { "'SIGTERM,SIGUSR1'", "--signals-to-handle",
            "without one of them" } },
        { "--event-log-handler other than null",
          NO_ENV,
          { "hyperpodrun", "--event-log-handler", "dynamo", "t.py" },
          { "--event-log-handler dynamo", "not supported", "only null" } },
        { "--duplicate-stdout-filters with --log-dir /dev/null",
          NO_ENV,
          { "hyperpodrun", "--log-dir", "/dev/null",
            "--duplicate-stdout-filters", "loss", "t.py" },
          { "--duplicate-stdout-filters", "filtered_stdout.log",
            "/dev/null writes no file" } },
        /* Two bad options: the one converted first is reported
         * (options.h: .first rows, then table order, AFTER(ID) right
         * after ID). */
        { "first of two bad: the filters before --redirects",
          NO_ENV,
          { "hyperpodrun", "--redirects", "9", "--log-dir", "/dev/null",
            "--duplicate-stdout-filters", "loss", "t.py" },
          { "--duplicate-stdout-filters", "/dev/null writes no file" } },
        { "first of two bad: --shutdown-signal before --shutdown-timeout",
          NO_ENV,
          { "hyperpodrun", "--shutdown-timeout", "soon", "--shutdown-signal",
            "SIGHUP", "t.py" },
          { "--shutdown-signal", "SIGHUP" } },
        { "first of two bad: --server-log-level before --metrics-port",
          NO_ENV,
          { "hyperpodrun", "--metrics-port", "x", "--server-token-file", "",
            "--server-log-level", "loud", "t.py" },
          { "--server-log-level", "loud" } },
        { "first of two bad: --server-token-file before --metrics-port",
          NO_ENV,
          { "hyperpodrun", "--metrics-port", "x", "--server-token-file", "",
            "t.py" },
          { "--server-token-file" } },
        { "first of two bad: the refused --logs-specs before the backend",
          NO_ENV,
          { "hyperpodrun", "--rdzv-backend", "c10d", "--logs-specs", "x",
            "t.py" },
          { "--logs-specs", "not supported" } },
        { "PET_DUPLICATE_STDERR_FILTERS with too many filters",
          { { "PET_DUPLICATE_STDERR_FILTERS",
              "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z,"
              "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z,"
              "a,b,c,d,e,f,g,h,i,j,k,l,m,n" } },
          { "hyperpodrun", "t.py" },
          { "PET_DUPLICATE_STDERR_FILTERS (environment)",
            "more than 64 filters" } },
        { "--nproc-per-node xpu",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "xpu", "t.py" },
          { "--nproc-per-node xpu", "Intel XPUs", "give their number" } },
        { "a bad TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
          { { "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon" } },
          { "hyperpodrun", "--standalone", "t.py" },
          { "'soon'", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT (environment)" } },
        { "a bad PET_SHUTDOWN_TIMEOUT",
          { { "PET_SHUTDOWN_TIMEOUT", "-3" } },
          { "hyperpodrun", "--standalone", "t.py" },
          { "'-3'", "PET_SHUTDOWN_TIMEOUT (environment)" } },
        { "--numa-binding",
          NO_ENV,
          { "hyperpodrun", "--numa-binding", "node", "t.py" },
          { "--numa-binding", "not supported" } },
        { "--logs-specs",
          NO_ENV,
          { "hyperpodrun", "--logs_specs", "x", "t.py" },
          { "--logs-specs", "not supported" } },
        { "PET_EVENT_LOG_HANDLER",
          { { "PET_EVENT_LOG_HANDLER", "json" } },
          { "hyperpodrun", "t.py" },
          { "PET_EVENT_LOG_HANDLER", "not supported" } },
        { "--virtual-local-rank",
          NO_ENV,
          { "hyperpodrun", "--virtual-local-rank", "t.py" },
          { "--virtual-local-rank", "not supported" } },
        { "tee map with a rank twice",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "2", "--tee", "0:3,0:1",
            "t.py" },
          { "'0:3,0:1'", "--tee", "twice" } },
        { "redirects map with a rank twice",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "2", "-r", "1:3,1:3", "t.py" },
          { "'1:3,1:3'", "-r", "twice" } },
        { "PET_STANDALONE=true (torchrun's int() refuses it)",
          { { "PET_STANDALONE", "true" } },
          { "hyperpodrun", "t.py" },
          { "'true'", "PET_STANDALONE" } },
        { "PET_NO_PYTHON=yes",
          { { "PET_NO_PYTHON", "yes" } },
          { "hyperpodrun", "t.py" },
          { "'yes'", "PET_NO_PYTHON" } },
        { "PET_STANDALONE empty",
          { { "PET_STANDALONE", "" } },
          { "hyperpodrun", "t.py" },
          { "PET_STANDALONE" } },
        { "PET_STANDALONE=1__0",
          { { "PET_STANDALONE", "1__0" } },
          { "hyperpodrun", "t.py" },
          { "'1__0'", "PET_STANDALONE" } },
        { "a newline in the master address",
          NO_ENV,
          { "hyperpodrun", "--master-addr", "10.0.0.1\nx", "t.py" },
          { "--master-addr", "control character" } },
        { "a master address that is not UTF-8",
          { { "PET_MASTER_ADDR", "h\xff" } },
          { "hyperpodrun", "t.py" },
          { "PET_MASTER_ADDR", "UTF-8" } },
        { "local ranks filter that is not a number",
          NO_ENV,
          { "hyperpodrun", "--local-ranks-filter", "0,x", "t.py" },
          { "'0,x'", "--local-ranks-filter" } },
        { "an unknown template variable",
          NO_ENV,
          { "hyperpodrun", "--log-line-prefix-template", "[${nope}]",
            "t.py" },
          { "nope", "--log-line-prefix-template" } },
        { "an unknown template variable from TORCHELASTIC_*",
          { { "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "$nope" } },
          { "hyperpodrun", "t.py" },
          { "nope", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" } },
        { "-m with --no-python",
          NO_ENV,
          { "hyperpodrun", "-m", "--no-python", "mod" },
          { "-m", "--no-python" } },
        { "-m with PET_NO_PYTHON",
          { { "PET_NO_PYTHON", "1" } },
          { "hyperpodrun", "--module", "mod" },
          { "--module", "PET_NO_PYTHON" } },
        { "in-process restart in a self-driven mode",
          NO_ENV,
          { "hyperpodrun", "--standalone", "--inprocess-restart", "t.py" },
          { "--inprocess-restart", "operator mode" } },
        { "in-process timeout without in-process restart",
          NO_ENV,
          { "hyperpodrun", "--inprocess-timeout", "5", "t.py" },
          { "--inprocess-timeout", "--inprocess-restart" } },
        { "in-process timeout that is not a number",
          NO_ENV,
          { "hyperpodrun", "--inprocess-restart", "--inprocess-timeout",
            "soon", "t.py" },
          { "--inprocess-timeout", "soon" } },
        { "the c10d backend without an endpoint",
          NO_ENV,
          { "hyperpodrun", "--rdzv-backend", "c10d", "t.py" },
          { "c10d", "--rdzv-endpoint", "29400" } },
        { "the etcd-v2 backend without an endpoint",
          NO_ENV,
          { "hyperpodrun", "--rdzv-backend", "etcd-v2", "t.py" },
          { "etcd-v2", "--rdzv-endpoint", "2379" } },
        { "torchrun's older etcd backend",
          NO_ENV,
          { "hyperpodrun", "--rdzv-backend", "etcd", "t.py" },
          { "etcd", "--rdzv-backend", "not supported", "etcd-v2" } },
        { "the etcd backend from the environment",
          { { "PET_RDZV_BACKEND", "etcd" } },
          { "hyperpodrun", "t.py" },
          { "etcd", "PET_RDZV_BACKEND", "not supported" } },
        { "an unknown backend",
          NO_ENV,
          { "hyperpodrun", "--rdzv-backend", "bogus", "t.py" },
          { "'bogus'", "--rdzv-backend" } },
        { "a run id with a slash",
          NO_ENV,
          { "hyperpodrun", "--rdzv-id", "a/b", "t.py" },
          { "'a/b'", "--rdzv-id" } },
        { "a rdzv conf item without =",
          NO_ENV,
          { "hyperpodrun", "--rdzv-conf", "a=1,b", "t.py" },
          { "'a=1,b'", "--rdzv-conf" } },
        { "pre-train args without a pre-train script",
          NO_ENV,
          { "hyperpodrun", "--pre-train-args", "x", "t.py" },
          { "--pre-train-args", "--pre-train-script" } },
        { "post-train args without a post-train script",
          NO_ENV,
          { "hyperpodrun", "--post-train-args", "x", "t.py" },
          { "--post-train-args", "--post-train-script" } },
        { "an empty pre-train script",
          NO_ENV,
          { "hyperpodrun", "--pre-train-script", "", "t.py" },
          { "--pre-train-script" } },
        { "standalone with several nodes",
          NO_ENV,
          { "hyperpodrun", "--standalone", "--nnodes", "2", "t.py" },
          { "--standalone", "2" } },
        { "negative max restarts",
          NO_ENV,
          { "hyperpodrun", "--max-restarts", "-1", "t.py" },
          { "'-1'", "--max-restarts" } },
        { "server port 70000",
          NO_ENV,
          { "hyperpodrun", "--server-port", "70000", "t.py" },
          { "'70000'", "--server-port" } },
        { "metrics port 70000",
          NO_ENV,
          { "hyperpodrun", "--metrics-port", "70000", "t.py" },
          { "'70000'", "--metrics-port" } },
        { "the metrics port is the operator API's default",
          NO_ENV,
          { "hyperpodrun", "--metrics-port", "8080", "t.py" },
          { "--metrics-port 8080 is the --server-port too" } },
        { "the metrics port is the self-driven server port",
          NO_ENV,
          { "hyperpodrun", "--standalone", "--server-port", "9000",
            "--metrics-port", "9000", "t.py" },
          { "--metrics-port 9000 is the --server-port too" } },
        { "an unknown start method",
          NO_ENV,
          { "hyperpodrun", "--start-method", "thread", "t.py" },
          { "'thread'", "--start-method" } },
        { "an unknown long option",
          NO_ENV,
          { "hyperpodrun", "--bogus", "t.py" },
          { "--bogus" } },
        { "an unknown short option",
          NO_ENV,
          { "hyperpodrun", "-x", "t.py" },
          { "-x" } },
        { "a missing option value",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node" },
          { "--nproc-per-node", "needs a value" } },
        { "a missing short option value",
          NO_ENV,
          { "hyperpodrun", "-t" },
          { "-t", "needs a value" } },
        { "a missing training script",
          NO_ENV,
          { "hyperpodrun", "--nproc-per-node", "2" },
          { "missing the training script" } },
        { "an empty training script",
          NO_ENV,
          { "hyperpodrun", "" },
          { "empty" } },
};

/* Checks one refused command line; returns the number of failures. */
static int check_refused(const struct error_case *c)
{
        struct hp_config cfg;
        char errbuf[512];
        int failures = 0;
        int r;

        set_case_env(c->env, HP_ARRAY_SIZE(c->env));
        r = parse_argv(&cfg, c->argv, HP_ARRAY_SIZE(c->argv), errbuf,
                       sizeof(errbuf));
        if (r != HP_EUSAGE) {
                CASE_FAILED(failures,
                            "%s: returned %s, expected HP_EUSAGE "
                            "(%s)",
                            c->name, r ? hp_err_name(r) : "0", errbuf);
                return failures;
        }
        for (const char *p = errbuf; *p != '\0'; p++) {
                if (*p < ' ') {
                        CASE_FAILED(failures,
                                    "%s: the error holds a control "
                                    "character: '%s'",
                                    c->name, errbuf);
                        break;
                }
        }
        for (size_t i = 0; i < HP_ARRAY_SIZE(c->mentions); i++) {
                if (c->mentions[i] == NULL)
                        break;
                if (strstr(errbuf, c->mentions[i]) == NULL)
                        CASE_FAILED(failures,
                                    "%s: '%s' does not mention '%s'", c->name,
                                    errbuf, c->mentions[i]);
        }
        return failures;
}

static void test_refused_command_lines(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(error_cases); k++)
                failures += check_refused(&error_cases[k]);
        clear_config_env();
        assert_int_equal(failures, 0);
}

/* A flag that takes no value, given one with '=': the error must name the
 * flag, as for any other bad option. */
static const struct error_case flag_value_cases[] = {
        { "--standalone=1",
          NO_ENV,
          { "hyperpodrun", "--standalone=1", "t.py" },
          { "--standalone" } },
        { "--no_python=1",
          NO_ENV,
          { "hyperpodrun", "--no_python=1", "t.py" },
          { "--no_python" } },
        { "--inprocess-restart=1",
          NO_ENV,
          { "hyperpodrun", "--inprocess-restart=1", "t.py" },
          { "--inprocess-restart" } },
};

static void test_flag_given_a_value_is_named(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(flag_value_cases); k++)
                failures += check_refused(&flag_value_cases[k]);
        clear_config_env();
        assert_int_equal(failures, 0);
}

/* ---- Stream specs, directly ---- */

struct spec_case {
        const char *text;
        int nproc;
        int result;
        const char *values; /* per rank, on success */
};

static const struct spec_case spec_cases[] = {
        { "3", 2, 0, "3,3" },
        { "0", 1, 0, "0" },
        { "2", 4, 0, "2,2,2,2" },
        { "0:3,1:1", 3, 0, "3,1,0" },
        { "1:2", 2, 0, "0,2" },
        { "2:1,0:2", 3, 0, "2,0,1" },
        { "0:1,0:2", 1, HP_EUSAGE, NULL }, /* a rank given twice */
        { "4", 2, HP_EUSAGE, NULL },
        { "-1", 2, HP_EUSAGE, NULL },
        { "", 2, HP_EUSAGE, NULL },
        { "x", 2, HP_EUSAGE, NULL },
        { "0:3,9:1", 2, HP_EUSAGE, NULL },
        { "2:1", 2, HP_EUSAGE, NULL },
        { "0:4", 2, HP_EUSAGE, NULL },
        { "0:3,", 2, HP_EUSAGE, NULL },
        { ",0:3", 2, HP_EUSAGE, NULL },
        { "0:3,,1:1", 2, HP_EUSAGE, NULL },
        { "a:1", 2, HP_EUSAGE, NULL },
        { "0:", 2, HP_EUSAGE, NULL },
        { ":1", 2, HP_EUSAGE, NULL },
        { "0:3:1", 2, HP_EUSAGE, NULL },
        { "-1:3", 2, HP_EUSAGE, NULL },
};

static void test_std_spec(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(spec_cases); k++) {
                const struct spec_case *c = &spec_cases[k];
                uint8_t out[8];
                char errbuf[256] = "", text[64];
                int r;

                assert_true((size_t)c->nproc < sizeof(out));
                memset(out, 0xad, sizeof(out));
                r = hp_config_parse_std_spec(c->text, c->nproc, out, errbuf,
                                             sizeof(errbuf));
                if (r != c->result)
                        fail_msg("'%s' with nproc %d: returned %d, expected "
                                 "%d (%s)",
                                 c->text, c->nproc, r, c->result, errbuf);
                /* Ranks past nproc are never written. */
                for (size_t i = (size_t)c->nproc; i < sizeof(out); i++)
                        if (out[i] != 0xad)
                                fail_msg("'%s': wrote past nproc %d", c->text,
                                         c->nproc);
                if (r == 0) {
                        join_ranks(out, c->nproc, text, sizeof(text));
                        if (strcmp(text, c->values) != 0)
                                fail_msg("'%s' with nproc %d gave %s, "
                                         "expected %s",
                                         c->text, c->nproc, text, c->values);
                } else if (strstr(errbuf, c->text) == NULL) {
                        fail_msg("'%s': the error '%s' does not quote it",
                                 c->text, errbuf);
                }
        }
}

/* ---- Templates ---- */

struct template_check_case {
        const char *tmpl;
        int result;
};

static const struct template_check_case template_check_cases[] = {
        { "[${role_name}${local_rank}]:", 0 },
        { "${rank}/${group_rank}/${restart_count}", 0 },
        { "$hostname:$pid", 0 },
        { "no variables", 0 },
        { "${nope}", HP_ECONFIG },
        { "${rank", HP_ECONFIG },
        { "cost $", HP_ECONFIG },
        { "${time} [${role_name}${local_rank}]:", 0 },
        { "[$time]", 0 },
        /* One place per prefix is stamped with the line's time. */
        { "${time} ${time}", HP_ECONFIG },
};

static void test_check_template(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(template_check_cases); k++) {
                const struct template_check_case
                        *c = &template_check_cases[k];
                char errbuf[256] = "";
                int r = hp_config_check_template(c->tmpl, errbuf,
                                                 sizeof(errbuf));

                if (r != c->result)
                        fail_msg("'%s': returned %d, expected %d (%s)",
                                 c->tmpl, r, c->result, errbuf);
        }
}

/* ---- Finding executables ---- */

struct exec_fixture {
        char dir[64];
        char dir2[80];
        char path_saved[4096];
        bool had_path;
};

static void write_file(const char *dir, const char *name, mode_t mode)
{
        char path[PATH_MAX];
        int fd;

        assert_int_equal(hp_snprintf(path, sizeof(path), "%s/%s", dir, name),
                         0);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "#!/bin/sh\n", 10), 10);
        assert_int_equal(close(fd), 0);
        /* chmod, not open's mode, so that the umask cannot add or drop
         * the bits the test is about. */
        assert_int_equal(chmod(path, mode), 0);
}

static int exec_setup(void **state)
{
        struct exec_fixture *fx = calloc(1, sizeof(*fx));
        const char *path = getenv("PATH");
        char sub[PATH_MAX];

        if (fx == NULL)
                return -1;
        snprintf(fx->dir, sizeof(fx->dir), "/tmp/hp-test-config-XXXXXX");
        if (mkdtemp(fx->dir) == NULL)
                return -1;
        snprintf(fx->dir2, sizeof(fx->dir2), "%s/second", fx->dir);
        if (mkdir(fx->dir2, 0755) < 0)
                return -1;
        write_file(fx->dir, "runme", 0755);
        write_file(fx->dir, "plain", 0644);
        write_file(fx->dir, "tool", 0644);
        write_file(fx->dir2, "tool", 0755);
        snprintf(sub, sizeof(sub), "%s/subdir", fx->dir);
        if (mkdir(sub, 0755) < 0)
                return -1;
        fx->had_path = path != NULL;
        if (path != NULL)
                snprintf(fx->path_saved, sizeof(fx->path_saved), "%s", path);
        *state = fx;
        return 0;
}

static int exec_teardown(void **state)
{
        struct exec_fixture *fx = *state;
        int r = hp_remove_tree(fx->dir);

        if (fx->had_path)
                setenv("PATH", fx->path_saved, 1);
        else
                unsetenv("PATH");
        free(fx);
        return r;
}

struct exec_case {
        const char *name;
        const char *lookup; /* "@" stands for the temp dir */
        const char *path;   /* PATH, "@" the temp dir, "@2" the second */
        size_t len;         /* the path buffer size, 0 for PATH_MAX */
        int result;
        const char *found; /* "@" the temp dir */
};

static const struct exec_case exec_cases[] = {
        { "an executable by path", "@/runme", "/nonexistent", 0, 0,
          "@/runme" },
        { "a non-executable file by path", "@/plain", "/nonexistent", 0,
          -EACCES, NULL },
        { "a missing file by path", "@/missing", "/nonexistent", 0, -ENOENT,
          NULL },
        { "a directory by path", "@/subdir", "/nonexistent", 0, -EISDIR,
          NULL },
        { "a path too long for the buffer", "@/runme", "/nonexistent", 8,
          -ENAMETOOLONG, NULL },
        { "an executable in PATH", "runme", "@", 0, 0, "@/runme" },
        { "an executable in the second PATH entry", "runme", "/nonexistent:@",
          0, 0, "@/runme" },
        { "a non-executable file in PATH", "plain", "@", 0, -EACCES, NULL },
        { "a name not in PATH", "missing", "@", 0, -ENOENT, NULL },
        { "a directory in PATH is not a program", "subdir", "@", 0, -ENOENT,
          NULL },
        { "a non-executable match is skipped for a later executable", "tool",
          "@:@2", 0, 0, "@2/tool" },
};

/* Replaces "@2" and "@" in text with the fixture's directories. */
static void substitute(const struct exec_fixture *fx, const char *text,
                       char *out, size_t len)
{
        size_t used = 0;

        for (const char *p = text; *p != '\0';) {
                const char *put = p;
                size_t n = 1;

                if (p[0] == '@' && p[1] == '2') {
                        put = fx->dir2;
                        n = strlen(fx->dir2);
                        p += 2;
                } else if (p[0] == '@') {
                        put = fx->dir;
                        n = strlen(fx->dir);
                        p++;
                } else {
                        p++;
                }
                assert_true(used + n < len);
                memcpy(out + used, put, n);
                used += n;
        }
        out[used] = '\0';
}

static void test_find_executable(void **state)
{
        const struct exec_fixture *fx = *state;

        for (size_t k = 0; k < HP_ARRAY_SIZE(exec_cases); k++) {
                const struct exec_case *c = &exec_cases[k];
                char lookup[PATH_MAX], search[PATH_MAX], want[PATH_MAX];
                char found[PATH_MAX] = "";
                size_t len = c->len ? c->len : sizeof(found);
                int r;

                substitute(fx, c->lookup, lookup, sizeof(lookup));
                substitute(fx, c->path, search, sizeof(search));
                assert_int_equal(setenv("PATH", search, 1), 0);
                r = hp_config_find_executable(lookup, found, len);
                if (r != c->result)
                        fail_msg("%s: returned %s, expected %s", c->name,
                                 r ? hp_err_name(r) : "0",
                                 c->result ? hp_err_name(c->result) : "0");
                if (c->found == NULL)
                        continue;
                substitute(fx, c->found, want, sizeof(want));
                if (strcmp(found, want) != 0)
                        fail_msg("%s: found '%s', expected '%s'", c->name,
                                 found, want);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_accepted_command_lines),
                cmocka_unit_test(test_nproc_cpu_counts_usable_cpus),
                cmocka_unit_test(test_refused_command_lines),
                cmocka_unit_test(test_flag_given_a_value_is_named),
                cmocka_unit_test(test_std_spec),
                cmocka_unit_test(test_check_template),
                cmocka_unit_test_setup_teardown(test_find_executable,
                                                exec_setup, exec_teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
