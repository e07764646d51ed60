/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: argv and environment → config → agent → exit status. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "hp-config.h"
#include "hp-sys.h"
#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "hyperpod/logmon.h"
#include "hyperpod/operator.h"
#include "hyperpod/supervise.h"
#include "version.h"

/* Exit status for a bad command line or setup, before anything runs. */
#define EXIT_USAGE 2
/* --replay --expect: the log did not meet the expectation. */
#define EXIT_EXPECTATION_NOT_MET 1

/* --replay: the log through the rules, nothing started. */
static int replay(const struct hp_config *cfg)
{
        const struct logmon_check_opts opts = {
                .log = cfg->replay_log,
                .rules = cfg->log_monitoring_config,
                .expect = cfg->replay_expect,
                .rate = cfg->replay_rate,
                .layout = (enum logmon_replay_layout)cfg->replay_input,
                .monitored = cfg->replay_all_ranks ? NULL : cfg->monitored,
                .nmonitored = HP_MAX_NPROC,
                .until = cfg->replay_until,
                .strict = cfg->strict,
                .emit_expect = cfg->emit_expect,
                .text = cfg->replay_format == 0 ||
                        (cfg->replay_format < 0 && isatty(STDOUT_FILENO)),
        };
        char err[1024];
        int r;

        r = logmon_check_run(&opts, stdin, stdout, stderr, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "hyperpodrun: error: %s\n", err);
                return EXIT_USAGE;
        }
        return r > 0 ? EXIT_EXPECTATION_NOT_MET : 0;
}

/* The operator's state is private to its module: allocated here, freed
 * once the loop has closed its handles. */
static int new_operator(struct hp_operator **op, char *err, size_t len)
{
        *op = hp_operator_new();
        if (*op != NULL)
                return 0;
        snprintf(err, len, "out of memory");
        return -ENOMEM;
}

/* The operator's server could not start: nothing was spawned yet. */
static int server_failed(struct hp_operator *op, struct hp_agent *agent,
                         uv_loop_t *loop, const char *err)
{
        fprintf(stderr, "hyperpodrun: error: %s\n", err);
        if (op != NULL)
                hp_operator_close(op);
        hp_agent_close(agent);
        hp_agent_free(agent);
        uv_loop_close(loop);
        hp_operator_free(op);
        return EXIT_USAGE;
}

/* LOGLEVEL from the environment: 0, or -1 (told on stderr). */
static int log_level_from_env(void)
{
        const char *level_text = getenv("LOGLEVEL");
        enum hp_log_level level;

        if (level_text == NULL || *level_text == '\0')
                return 0;
        if (hp_log_level_parse(level_text, &level) < 0) {
                fprintf(stderr,
                        "hyperpodrun: error: invalid value '%s' for "
                        "LOGLEVEL (environment): expected DEBUG, INFO, "
                        "WARNING or ERROR\n",
                        level_text);
                return -1;
        }
        hp_log_set_level(level);
        return 0;
}

/* --help, --version, --check-rules and --replay run without an agent:
 * their exit status, or -1 for a job to run. */
static int one_shot(const struct hp_config *cfg)
{
        char err[1024];

        if (cfg->show_help) {
                fputs(hp_config_help(), stdout);
                return 0;
        }
        if (cfg->show_version) {
                hp_version_print(stdout);
                return 0;
        }
        if (cfg->check_rules != NULL) {
                if (logmon_rules_check(cfg->check_rules, cfg->strict, stdout,
                                       err, sizeof(err)) < 0) {
                        fprintf(stderr, "hyperpodrun: error: %s\n", err);
                        return EXIT_USAGE;
                }
                return 0;
        }
        if (cfg->replay_log != NULL) {
                /* No agent: Ctrl-C ends a replay at once. */
                (void)hp_signals_release();
                return replay(cfg);
        }
        return -1;
}

/* The driver: the operator, or the agent's own restarts. */
static struct hp_agent_setup agent_setup(const struct hp_config *cfg)
{
        return (struct hp_agent_setup){
                .round_from_driver = hp_config_operator_mode(cfg),
                .max_restarts = hp_config_operator_mode(cfg)
                                        ? HP_OPERATOR_MAX_RESTARTS
                                        : cfg->max_restarts,
        };
}

int main(int argc, char **argv)
{
        /* The config holds per-rank tables for HP_MAX_NPROC ranks; keep it
         * off the stack. */
        static struct hp_config cfg;
        struct hp_operator *op = NULL;
        struct hp_agent *agent;
        struct hp_agent_setup setup;
        char err[1024];
        uv_loop_t loop;
        int code, r;

        /* A stop sent while we start must not find the default action:
         * held until the agent's handlers are in place. */
        hp_signals_hold();
        /* Before anything opens a file: a closed standard stream would
         * lend its number to one. */
        r = hp_std_fds_open();
        if (r < 0) {
                /* stderr may be the closed one: the exit status says it. */
                fprintf(stderr,
                        "hyperpodrun: error: cannot open /dev/null "
                        "for a closed standard stream: %s\n",
                        strerror(-r));
                return EXIT_FAILURE;
        }
        if (log_level_from_env() < 0)
                return EXIT_USAGE;

        r = hp_config_parse(&cfg, argc, argv, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "hyperpodrun: error: %s\n", err);
                return EXIT_USAGE;
        }
        code = one_shot(&cfg);
        if (code >= 0)
                return code;
        if (cfg.rdzv_backend_reason != NULL)
                hp_log_info("rendezvous backend %s: %s",
                            cfg.rdzv_backend_name, cfg.rdzv_backend_reason);
        r = hp_config_check_files(&cfg, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "hyperpodrun: error: %s\n", err);
                return EXIT_USAGE;
        }
        r = hp_sys_check_kernel(err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "hyperpodrun: error: %s\n", err);
                return EXIT_USAGE;
        }

        r = uv_loop_init(&loop);
        if (r < 0) {
                fprintf(stderr, "hyperpodrun: error: event loop: %s\n",
                        uv_strerror(r));
                return 1;
        }
        agent = hp_agent_new();
        if (agent == NULL) {
                fprintf(stderr, "hyperpodrun: error: out of memory\n");
                uv_loop_close(&loop);
                return 1;
        }
        setup = agent_setup(&cfg);
        r = hp_agent_init(agent, &loop, &cfg, &setup, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "hyperpodrun: error: %s\n", err);
                uv_run(&loop, UV_RUN_DEFAULT);
                uv_loop_close(&loop);
                hp_agent_free(agent);
                return EXIT_USAGE;
        }
        if (hp_config_operator_mode(&cfg)) {
                /* Operator mode: the HyperPod operator starts, stops and
                 * watches the job over HTTP. */
                r = new_operator(&op, err, sizeof(err));
                if (r == 0)
                        r = hp_operator_init(op, agent, hp_agent_ipc(agent),
                                             hp_agent_ckpt(agent), &cfg, err,
                                             sizeof(err));
                if (r < 0)
                        return server_failed(op, agent, &loop, err);
                code = hp_operator_run(op);
                hp_operator_close(op);
        } else if (cfg.server_port_given || cfg.metrics_port_given) {
                /* Self-driven, with the read-only routes for monitoring. */
                r = new_operator(&op, err, sizeof(err));
                if (r == 0)
                        r = hp_operator_observe(op, agent,
                                                hp_agent_ipc(agent),
                                                hp_agent_ckpt(agent), &cfg,
                                                err, sizeof(err));
                if (r < 0)
                        return server_failed(op, agent, &loop, err);
                code = hp_agent_run(agent);
                hp_operator_close(op);
        } else {
                if (cfg.server_flag_given[0] != '\0')
                        hp_log_warn("%s has no effect in self-driven mode "
                                    "without --server-port, which serves "
                                    "/status, /metrics and /healthz",
                                    cfg.server_flag_given);
                code = hp_agent_run(agent);
        }
        hp_agent_pass_error_file(agent, code);
        hp_agent_close(agent);
        hp_agent_free(agent);
        r = uv_loop_close(&loop);
        if (r < 0)
                hp_log_warn("event loop closed with handles open: %s",
                            uv_strerror(r));
        /* After the loop ran the close callbacks of its handles. */
        hp_operator_free(op);
        return code;
}
