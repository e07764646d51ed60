/* SPDX-License-Identifier: Apache-2.0 */
/* The operator's control API: routes, the agent state machine in motion,
 * and the hyperpod rendezvous (docs/operator-api.md; docs/multi-node.md,
 * "The backends").
 *
 * Requests only record what the operator asked and move the state
 * machine; the `kick` timer then acts on the new state from the loop
 * (starting workers, stopping them), so every response is written before
 * anything slow happens. The agent reports back through its events: a
 * worker failure, a stage's end, a rule verdict.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

#include "hp-config.h"
#include "operator-private.h"

static int64_t wall_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const char *state_sentence(enum hp_op_state s)
{
        switch (s) {
        case HP_OP_READY:
                return "waiting for /start";
        case HP_OP_RUNNING:
                return "running the stages";
        case HP_OP_COMPLETED:
                return "every stage succeeded; waiting for /shutdown or "
                       "/stop";
        case HP_OP_FAULTED:
                return "waiting for the operator's /stop";
        case HP_OP_STOPPING:
                return "stopping the workers";
        case HP_OP_SHUTDOWN:
                return "stopping the workers, then exiting";
        default:
                return "";
        }
}

bool hp_op__set_state(struct hp_operator *op, enum hp_op_state to,
                      const char *reason, const char *message)
{
        enum hp_op_state from = op->plr.state;

        if (hp_plr_transition(&op->plr, to, wall_us(), reason, message) < 0) {
                hp_log_info("agent state stays %s: %s → %s is not a valid "
                            "transition",
                            hp_op_state_name(from), hp_op_state_name(from),
                            hp_op_state_name(to));
                return false;
        }
        hp_log_info("agent state %s → %s%s%s: %s", hp_op_state_name(from),
                    hp_op_state_name(to), reason && *reason ? " " : "",
                    reason ? reason : "", state_sentence(to));
        return true;
}

static void kick_cb(uv_timer_t *timer);

void hp_op__kick(struct hp_operator *op)
{
        if (!op->closing)
                uv_timer_start(&op->kick, kick_cb, 0, 0);
}

/* The hyperpod rendezvous: everything comes from the operator. GROUP_
 * WORLD_SIZE is the number of nodes, torchrun's meaning (the reference
 * agent puts the world size there; nothing in torch reads it, and users
 * who do expect the node count). */
void hp_op__round_from_job(const struct hp_operator *op,
                           struct hp_rdzv_info *round)
{
        const struct hp_op_request *job = &op->job;

        memset(round, 0, sizeof(*round));
        round->nproc = op->cfg->nproc;
        round->nnodes = job->nnodes;
        round->node_rank = job->rank;
        round->world_size = job->nnodes * op->cfg->nproc;
        round->group_world_size = job->nnodes;
        round->base_rank = job->rank * op->cfg->nproc;
        snprintf(round->master_addr, sizeof(round->master_addr), "%s",
                 job->master_addr);
        round->master_port = job->master_port;
}

static void fault(struct hp_operator *op, const char *reason,
                  const char *message)
{
        if (hp_op__set_state(op, HP_OP_FAULTED, reason, message)) {
                op->faults[hp_fault_cause_of(reason)]++;
                hp_log_error("%s: %s", reason, message);
        }
}

static void node_fault(struct hp_agent *a, void *ctx);

static void start_workers(struct hp_operator *op)
{
        struct hp_rdzv_info round;
        int r;

        op->start_pending = false;
        op->rules_changed = false;
        /* A node that already faulted (kernel log, pre-flight) cannot run
         * the job: the operator is told instead. */
        if (hp_agent_node_fault(op->agent, NULL, NULL) != NULL) {
                node_fault(op->agent, op);
                return;
        }
        hp_op__round_from_job(op, &round);
        r = hp_agent_use_rules(op->agent, op->job.ruleset);
        if (r == 0) {
                op->last_failure_code = 0;
                r = hp_agent_begin(op->agent, &round, op->job.fault_count);
        }
        if (r < 0) {
                char msg[512];
                snprintf(msg, sizeof(msg),
                         "cannot start the workers of attempt %d: %s",
                         op->job.fault_count, hp_strerror(r));
                fault(op, "WorkerFault", msg);
                return;
        }
        op->attempts_started++;
}

static void next_stage(struct hp_operator *op)
{
        struct hp_rdzv_info round;
        int r;

        op->next_stage_pending = false;
        /* Each stage runs with the operator's current data, as in the
         * reference: an /update between stages is picked up, its rules
         * included. */
        hp_op__round_from_job(op, &round);
        round.nproc = hp_agent_round(op->agent)->nproc;
        hp_agent_set_round(op->agent, &round);
        if (op->rules_changed) {
                op->rules_changed = false;
                r = hp_agent_use_rules(op->agent, op->job.ruleset);
                if (r < 0) {
                        fault(op, "WorkerFault",
                              "cannot watch the next stage with the rules "
                              "of the last /update");
                        return;
                }
        }
        r = hp_agent_next_stage(op->agent);
        if (r > 0)
                return;
        if (r == 0) {
                hp_agent_clear_rules(op->agent);
                hp_op__set_state(op, HP_OP_COMPLETED, NULL, NULL);
                return;
        }
        fault(op, "WorkerFault", "cannot start the next stage");
}

static uint64_t stop_timeout_ms(const struct hp_operator *op)
{
        /* 0 means "not given", as in the reference, whose `timeout or
         * shutdown_timeout` falls back on it. */
        return op->stop_timeout_s > 0 ? (uint64_t)op->stop_timeout_s * 1000
                                      : op->cfg->shutdown_timeout_ms;
}

static void stopped(struct hp_operator *op)
{
        /* The attempt is over: rule state goes, and the next /start
         * begins again with pre-train. The run result goes too, as in the
         * reference: a failed attempt that was stopped is not what a
         * later /shutdown reports. */
        hp_agent_clear_rules(op->agent);
        op->last_failure_code = 0;
        hp_op__set_state(op, HP_OP_READY, NULL, NULL);
}

/* Acts on the state the requests and events left. Idempotent. */
static void kick_cb(uv_timer_t *timer)
{
        struct hp_operator *op = hp_container_of(timer, struct hp_operator,
                                                 kick);
        struct hp_agent *a = op->agent;

        if (op->plr.inprocess && op->plr.state != HP_OP_SHUTDOWN) {
                hp_op__ipr_kick(op);
                return;
        }
        switch (op->plr.state) {
        case HP_OP_RUNNING:
                if (op->start_pending && op->can_start &&
                    !hp_agent_workers_active(a) &&
                    !hp_agent_preflight_pending(a))
                        start_workers(op);
                else if (op->next_stage_pending && !hp_agent_workers_active(a))
                        next_stage(op);
                break;
        case HP_OP_STOPPING:
                if (!hp_agent_workers_active(a)) {
                        stopped(op);
                } else if (!hp_agent_workers_stopping(a)) {
                        int sig = op->stop_graceful == 1
                                          ? SIGUSR1
                                          : op->cfg->shutdown_signal;
                        hp_log_info("stopping the workers with %s (SIGKILL "
                                    "after %llu ms)",
                                    hp_signal_name(sig),
                                    (unsigned long long)stop_timeout_ms(op));
                        hp_agent_stop_workers(a, sig, stop_timeout_ms(op));
                }
                break;
        case HP_OP_SHUTDOWN:
                if (!hp_agent_workers_active(a))
                        hp_agent_finish(a, op->last_failure_code);
                else if (!hp_agent_workers_stopping(a))
                        /* torch's final shutdown: SIGTERM, then SIGKILL. */
                        hp_agent_stop_workers(a, SIGTERM,
                                              op->cfg->shutdown_timeout_ms);
                break;
        default:
                break;
        }
}

/* ---- Agent events ---- */

void hp_op__failure_message(struct hp_agent *a, const struct hp_group *g,
                            char *msg, size_t len)
{
        const char *silence = hp_agent_silence(a);

        hp_agent_failure_message(a, g, msg, len);
        if (silence[0] != '\0') {
                size_t used = strlen(msg);
                snprintf(msg + used, len - used, "\n%s", silence);
        }
}

void hp_op__verdict_message(struct hp_agent *a, const struct hp_verdict *v,
                            char *reason, size_t reason_len, char *msg,
                            size_t len)
{
        const char *silence = hp_agent_silence(a);

        (void)hp_verdict_reason(v, reason, reason_len);
        (void)hp_verdict_describe(v, msg, len);
        if (silence[0] != '\0') {
                size_t used = strlen(msg);
                snprintf(msg + used, len - used, "; %s", silence);
        }
}

static void worker_failed(struct hp_agent *a, const struct hp_group *g,
                          void *ctx)
{
        struct hp_operator *op = ctx;
        char msg[HP_OP_MESSAGE_MAX];
        struct hp_failure w;
        bool failed = hp_group_failure(g, &w);

        op->last_failure_code = hp_agent_failure_exit_code(g);
        if (op->plr.state != HP_OP_RUNNING)
                return;
        hp_op__failure_message(a, g, msg, sizeof(msg));
        /* A rank that never ran (its log directory, its pipes, its
         * process could not be made) is not a crash of the job. */
        fault(op, failed && w.start_failed ? "WorkerStartFailed"
                                           : "WorkerCrash",
              msg);
        if (failed && w.exit_time > 0)
                op->last_detection_latency_s =
                        (double)wall_us() / 1e6 - w.exit_time;
}

static void stage_ended(struct hp_agent *a, enum hp_stage stage,
                        enum hp_group_result result, const struct hp_group *g,
                        void *ctx)
{
        struct hp_operator *op = ctx;

        if (result == HP_GROUP_FAILED)
                hp_agent_print_failure_summary(a, g);
        if (result == HP_GROUP_FAILED) {
                op->last_failure_code = hp_agent_failure_exit_code(g);
                /* Normally reported at the first failure already. */
                if (op->plr.state == HP_OP_RUNNING)
                        worker_failed(a, g, op);
        }
        switch (op->plr.state) {
        case HP_OP_RUNNING:
                if (result == HP_GROUP_SUCCEEDED) {
                        op->next_stage_pending = true;
                        hp_op__kick(op);
                } else if (result == HP_GROUP_STOPPED) {
                        fault(op, "WorkerFault",
                              "the workers were stopped unexpectedly");
                }
                break;
        case HP_OP_STOPPING:
        case HP_OP_SHUTDOWN:
                /* The group is released right after this call. */
                hp_op__kick(op);
                break;
        default:
                break;
        }
        (void)stage;
}

static void rule_verdict(struct hp_agent *a, const struct hp_verdict *v,
                         void *ctx)
{
        struct hp_operator *op = ctx;
        char msg[HP_OP_MESSAGE_MAX];
        char reason[HP_VERDICT_REASON_MAX];

        if (op->plr.state != HP_OP_RUNNING)
                return;
        hp_op__verdict_message(a, v, reason, sizeof(reason), msg,
                               sizeof(msg));
        op->last_detection_latency_s = (double)v->latency_ms / 1000.0;
        /* The workers keep running until the operator's /stop. */
        fault(op, reason, msg);
}

/* Distinct from WorkerCrash and the log rules' reasons: the operator can
 * replace the node instead of restarting the job in place on it. */
static void node_fault(struct hp_agent *a, void *ctx)
{
        struct hp_operator *op = ctx;
        char msg[HP_OP_MESSAGE_MAX];
        const char *line;
        double wall;
        const char *reason = hp_agent_node_fault(a, &line, &wall);

        if (op->plr.state != HP_OP_RUNNING || reason == NULL)
                return; /* reported when the next /start runs */
        hp_op__node_fault_message(op, reason, line, msg, sizeof(msg));
        op->last_detection_latency_s = (double)wall_us() / 1e6 - wall;
        fault(op, reason, msg);
}

void hp_op__node_fault_message(const struct hp_operator *op,
                               const char *reason, const char *line,
                               char *msg, size_t len)
{
        if (strcmp(reason, "NodeFault_NCCLPreflight") == 0)
                snprintf(msg, len,
                         "The NCCL pre-flight check failed on this node "
                         "(--preflight nccl): %s",
                         line);
        else
                snprintf(msg, len,
                         "The kernel log reports a hardware fault on this "
                         "node (%s): %s",
                         op->cfg->kmsg, line);
}

static void preflight_passed(struct hp_agent *a, void *ctx)
{
        hp_op__kick(ctx);
}

static const struct hp_agent_events events = {
        .stage_ended = stage_ended,
        .rule_verdict = rule_verdict,
        .worker_failed = worker_failed,
        .node_fault = node_fault,
        .preflight_passed = preflight_passed,
};

/* ---- Startup ---- */

static int env_int(const char *name, int def, int min, int max, int *out,
                   char *errbuf, size_t len)
{
        const char *v = getenv(name);

        *out = def;
        if (v == NULL || *v == '\0')
                return 0;
        if (hp_parse_int(v, min, max, out) < 0) {
                snprintf(errbuf, len,
                         "%s='%s' is not a whole number from %d to %d", name,
                         v, min, max);
                return HP_ECONFIG;
        }
        return 0;
}

/* The resource config directory is made at start, and an agent that
 * cannot make it does not start, as the reference's: a training script
 * that reads pod_resourceconfig.json finds its directory, and a bad path
 * is told at once rather than at the first /start. An agent restarted on
 * the same file system reports the saved IP table version at once. */
static int open_resource_dir(struct hp_operator *op, char *errbuf,
                             size_t len)
{
        const struct hp_rdzv_options *opt = hp_agent_rdzv_options(op->agent);
        char err[512];
        cJSON *doc = NULL;
        const cJSON *ts;
        int r;

        snprintf(op->resource_dir, sizeof(op->resource_dir), "%s",
                 opt->resource_config_dir);
        r = hp_mkdir_p(op->resource_dir, 0755);
        if (r < 0) {
                snprintf(errbuf, len,
                         "cannot create the resource config directory '%s' "
                         "(--rdzv-conf resource_config_dir=DIR): %s",
                         op->resource_dir, strerror(-r));
                return r;
        }
        if (hp_podcfg_read(op->resource_dir, &doc, err, sizeof(err)) < 0) {
                hp_log_warn("ignoring the saved IP table: %s", err);
                return 0;
        }
        ts = cJSON_GetObjectItemCaseSensitive(doc, "ips_timestamp");
        if (cJSON_IsString(ts))
                snprintf(op->ip_version, sizeof(op->ip_version), "%s",
                         ts->valuestring);
        cJSON_Delete(doc);
        return 0;
}

static void retry_cb(uv_timer_t *timer);

/* A torchrun command line lands here by default and would wait in
 * silence: say what the agent waits for, and how to run without it. */
#define REMIND_MS 60000

static void remind_cb(uv_timer_t *timer)
{
        struct hp_operator *op = hp_container_of(timer, struct hp_operator,
                                                 remind);

        if (op->have_job) {
                uv_timer_stop(timer);
                return;
        }
        if (op->plr.state == HP_OP_READY)
                hp_log_info("still waiting for the operator's POST /start "
                            "(--standalone or --rdzv-backend static run "
                            "without one)");
}

static int try_listen(struct hp_operator *op, char *errbuf, size_t len)
{
        const char *host = op->cfg->server_host;
        bool v6 = strchr(host, ':') != NULL;
        int r;

        op->listen_tries++;
        r = hp_httpd_listen(&op->httpd, host, op->cfg->server_port, errbuf,
                            len);
        if (r == 0) {
                op->listening = true;
                hp_log_info("%s listening on http://%s%s%s:%d%s",
                            op->observer ? "read-only API (/status, "
                                           "/metrics, /healthz)"
                                         : "operator API",
                            v6 ? "[" : "", host, v6 ? "]" : "",
                            hp_httpd_port(&op->httpd),
                            op->token ? ", a token required but for "
                                        "/healthz (--server-token-file)"
                                      : "");
        }
        return r;
}

static void retry_cb(uv_timer_t *timer)
{
        struct hp_operator *op = hp_container_of(timer, struct hp_operator,
                                                 retry);
        char err[512];
        int r = try_listen(op, err, sizeof(err));

        if (r == 0)
                return;
        if (r == -EADDRINUSE && op->listen_tries < op->listen_max_tries) {
                hp_log_warn("%s; retrying in %.3g s (attempt %d of %d)", err,
                            (double)op->listen_delay_ms / 1000.0,
                            op->listen_tries + 1, op->listen_max_tries);
                uv_timer_start(&op->retry, retry_cb, op->listen_delay_ms, 0);
                return;
        }
        hp_log_error("%s (after %d attempts)", err, op->listen_tries);
        hp_agent_finish(op->agent, 2);
}

/* --metrics-port: GET /metrics alone, on --server-host, so that a
 * network policy can let Prometheus reach it and nothing else. No retry:
 * a port that cannot be had is an error before any worker starts. */
static int start_metrics_listener(struct hp_operator *op, char *errbuf,
                                  size_t len)
{
        const char *host = op->cfg->server_host;
        bool v6 = strchr(host, ':') != NULL;
        struct hp_httpd_limits limits;
        char err[512];
        int r;

        if (!op->cfg->metrics_port_given)
                return 0;
        hp_httpd_limits_default(&limits);
        r = hp_httpd_init(&op->metrics_httpd, hp_agent_loop(op->agent),
                          &limits, hp_op__metrics_handle, op);
        if (r < 0) {
                snprintf(errbuf, len, "cannot start the metrics server: %s",
                         hp_strerror(r));
                return r;
        }
        op->metrics_httpd_ready = true;
        r = hp_httpd_listen(&op->metrics_httpd, host, op->cfg->metrics_port,
                            err, sizeof(err));
        if (r < 0) {
                snprintf(errbuf, len, "--metrics-port %d: %s",
                         op->cfg->metrics_port, err);
                return r;
        }
        hp_log_info("metrics (GET /metrics only) listening on "
                    "http://%s%s%s:%d%s",
                    v6 ? "[" : "", host, v6 ? "]" : "",
                    hp_httpd_port(&op->metrics_httpd),
                    op->token ? ", a token required (--server-token-file)"
                              : "");
        return 0;
}

/* What both ways of serving start from: nothing stopping, no fault yet. */
static void init_fields(struct hp_operator *op, struct hp_agent *agent,
                        const struct hp_config *cfg, int64_t now)
{
        memset(op, 0, sizeof(*op));
        op->agent = agent;
        op->cfg = cfg;
        op->stop_graceful = -1;
        op->stop_timeout_s = -1;
        op->last_detection_latency_s = -1;
        op->start_time_s = (double)now / 1e6;
        op->log_requests = strcmp(cfg->server_log_level, "debug") == 0 ||
                           strcmp(cfg->server_log_level, "trace") == 0;
        hp_plr_init(&op->plr, now);
}

/* The per-rank stream totals, the HTTP server and the timers, not yet
 * listening. */
static int init_server(struct hp_operator *op, char *errbuf, size_t len)
{
        struct hp_httpd_limits limits;
        int r;

        if (op->cfg->server_token_file != NULL) {
                r = hp_op_token_load(op->cfg->server_token_file, &op->token,
                                     &op->token_len, errbuf, len);
                if (r < 0)
                        return r;
        }

        hp_httpd_limits_default(&limits);
        r = hp_httpd_init(&op->httpd, hp_agent_loop(op->agent), &limits,
                          hp_operator_handle, op);
        if (r < 0) {
                snprintf(errbuf, len, "cannot start the HTTP server: %s",
                         hp_strerror(r));
                return r;
        }
        op->httpd_ready = true;
        uv_timer_init(hp_agent_loop(op->agent), &op->kick);
        uv_timer_init(hp_agent_loop(op->agent), &op->retry);
        uv_timer_init(hp_agent_loop(op->agent), &op->remind);
        op->timers_ready = true;
        return 0;
}

/* Self-driven mode with --server-port: the read-only routes for whoever
 * watches the job (Prometheus, a liveness probe). Nothing drives the
 * state machine, which says RUNNING for as long as the agent runs; the
 * node rank is the assigned rank. A port that cannot be had is an error
 * before any worker starts, with no retry. */
int hp_operator_observe(struct hp_operator *op, struct hp_agent *agent,
                        const struct hp_config *cfg, char *errbuf, size_t len)
{
        int64_t now = wall_us();
        int r;

        init_fields(op, agent, cfg, now);
        op->observer = true;
        op->assigned_rank = hp_agent_round(agent)->node_rank;
        hp_plr_transition(&op->plr, HP_OP_READY, now, NULL, NULL);
        hp_plr_transition(&op->plr, HP_OP_RUNNING, now, NULL, NULL);
        r = init_server(op, errbuf, len);
        if (r < 0)
                return r;
        r = start_metrics_listener(op, errbuf, len);
        if (r < 0 || !cfg->server_port_given)
                return r;
        return try_listen(op, errbuf, len);
}

int hp_operator_init(struct hp_operator *op, struct hp_agent *agent,
                     const struct hp_config *cfg, char *errbuf, size_t len)
{
        const char *delay;
        int r;

        init_fields(op, agent, cfg, wall_us());
        op->assigned_rank = -1;

        r = env_int("HYPERPOD_ELASTICAGENT_SERVER_MAX_RETRY", 5, 1, 1000,
                    &op->listen_max_tries, errbuf, len);
        if (r < 0)
                return r;
        delay = getenv("HYPERPOD_ELASTICAGENT_SERVER_DELAY");
        op->listen_delay_ms = 5000;
        if (delay != NULL && *delay != '\0' &&
            hp_parse_seconds_ms(delay, &op->listen_delay_ms) < 0) {
                snprintf(errbuf, len,
                         "HYPERPOD_ELASTICAGENT_SERVER_DELAY='%s' is not a "
                         "number of seconds",
                         delay);
                return HP_ECONFIG;
        }
        r = open_resource_dir(op, errbuf, len);
        if (r < 0)
                return r;
        r = init_server(op, errbuf, len);
        if (r < 0)
                return r;
        r = start_metrics_listener(op, errbuf, len);
        if (r < 0)
                return r;

        r = try_listen(op, errbuf, len);
        if (r == -EADDRINUSE && op->listen_max_tries > 1) {
                hp_log_warn("%s; retrying in %.3g s (attempt 2 of %d)",
                            errbuf, (double)op->listen_delay_ms / 1000.0,
                            op->listen_max_tries);
                uv_timer_start(&op->retry, retry_cb, op->listen_delay_ms, 0);
        } else if (r < 0) {
                return r;
        }

        hp_agent_set_events(agent, &events, op);
        if (cfg->inprocess_restart) {
                r = hp_op__ipr_init(op, errbuf, len);
                if (r < 0)
                        return r;
        }
        if (cfg->preflight_nccl) {
                char why[1024];
                r = hp_agent_preflight_start(agent, why, sizeof(why));
                if (r < 0) {
                        snprintf(errbuf, len, "--preflight nccl: %s", why);
                        return r;
                }
        }
        /* The in-process-restart agent is READY once its workers are at
         * the barrier. */
        if (cfg->inprocess_restart)
                return 0;
        hp_op__set_state(op, HP_OP_READY, NULL, NULL);
        hp_log_info("operator mode (--rdzv-backend hyperpod, the default): "
                    "no worker starts until the HyperPod operator sends "
                    "POST /start to port %d; to run without an operator, "
                    "use --standalone (one node) or --rdzv-backend static "
                    "(--nnodes, --node-rank, --master-addr)",
                    op->listening ? hp_httpd_port(&op->httpd)
                                  : cfg->server_port);
        uv_timer_start(&op->remind, remind_cb, REMIND_MS, REMIND_MS);
        uv_unref((uv_handle_t *)&op->remind);
        return 0;
}

int hp_operator_run(struct hp_operator *op)
{
        struct hp_agent *a = op->agent;

        uv_run(hp_agent_loop(a), UV_RUN_DEFAULT);
        return hp_agent_exit_code(a);
}

void hp_operator_close(struct hp_operator *op)
{
        op->closing = true;
        hp_op__ipr_close(op);
        if (op->timers_ready) {
                uv_close((uv_handle_t *)&op->kick, NULL);
                uv_close((uv_handle_t *)&op->retry, NULL);
                uv_close((uv_handle_t *)&op->remind, NULL);
                op->timers_ready = false;
        }
        if (op->httpd_ready) {
                hp_httpd_close(&op->httpd, NULL);
                op->httpd_ready = false;
        }
        if (op->metrics_httpd_ready) {
                hp_httpd_close(&op->metrics_httpd, NULL);
                op->metrics_httpd_ready = false;
        }
        hp_agent_set_events(op->agent, NULL, NULL);
        hp_op_request_free(&op->job);
        free(op->response);
        op->response = NULL;
        if (op->token != NULL) {
                explicit_bzero(op->token, op->token_len);
                free(op->token);
                op->token = NULL;
        }
}
