/* SPDX-License-Identifier: Apache-2.0 */
/* Process-level restart, the operator's default driver
 * (docs/operator-api.md, "States"): /start spawns pre-train, train and
 * post-train with the operator's rendezvous; a worker failure, a rule
 * verdict or a node fault moves the agent to FAULTED and the workers keep
 * running until the operator's /stop, which stops them and goes back to
 * READY. The agent's events land here. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

#include "hp-config.h"
#include "operator-private.h"

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
                hp_op__fault(op, "WorkerFault", msg);
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
                        hp_op__fault(
                                op, "WorkerFault",
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
        hp_op__fault(op, "WorkerFault", "cannot start the next stage");
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
static void plr_kick(struct hp_operator *op)
{
        struct hp_agent *a = op->agent;

        switch (op->plr.state) {
        case HP_OP_RUNNING:
                if (op->start_pending && op->can_start &&
                    !hp_agent_workers_active(a) &&
                    !hp_agent_preflight_pending(a))
                        start_workers(op);
                else if (op->next_stage_pending &&
                         !hp_agent_workers_active(a))
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
        default:
                break;
        }
}

/* ---- Agent events ---- */

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
        hp_op__fault(op,
                     failed && w.start_failed ? "WorkerStartFailed"
                                              : "WorkerCrash",
                     msg);
        if (failed && w.exit_time > 0)
                op->last_detection_latency_s = (double)hp_op__wall_us() /
                                                       1e6 -
                                               w.exit_time;
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
                        hp_op__fault(op, "WorkerFault",
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
        hp_op__fault(op, reason, msg);
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
        op->last_detection_latency_s = (double)hp_op__wall_us() / 1e6 - wall;
        hp_op__fault(op, reason, msg);
}

static void preflight_passed(struct hp_agent *a, void *ctx)
{
        hp_op__kick(ctx);
}

static const struct hp_agent_events plr_events = {
        .stage_ended = stage_ended,
        .rule_verdict = rule_verdict,
        .worker_failed = worker_failed,
        .node_fault = node_fault,
        .preflight_passed = preflight_passed,
};

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

/* ---- Requests ---- */

static int plr_start(struct hp_operator *op, struct hp_op_request *body,
                     char *err, size_t len)
{
        bool running;
        int r;

        /* A /start while RUNNING has no effect on the attempt: one whose
         * workers are not spawned yet keeps the data it was started with. */
        if (op->plr.state == HP_OP_RUNNING && op->start_pending) {
                hp_log_info("/start while the attempt it would change is "
                            "starting: ignored");
                return 0;
        }
        r = hp_op__store_ip_table(op, body, err, len);
        if (r < 0)
                return r;
        running = hp_op__set_state(op, HP_OP_RUNNING, "Running", NULL);
        hp_op__store_job(op, body, false);
        if (running) {
                op->start_pending = true;
                hp_op__kick(op);
        } else {
                hp_log_info("/start in state %s: the data is kept for the "
                            "next start",
                            hp_op_state_name(op->plr.state));
        }
        return 0;
}

static void plr_update(struct hp_operator *op, struct hp_op_request *body)
{
        hp_op__store_job(op, body, true);
}

static void plr_stop(struct hp_operator *op, const struct hp_op_request *body)
{
        (void)body;
        if (hp_op__set_state(op, HP_OP_STOPPING, NULL, NULL))
                hp_op__kick(op);
}

static void plr_status(const struct hp_operator *op, struct hp_op_status *st,
                       cJSON **owned)
{
        /* The reference's PLR agent never changes its spare flag from the
         * initial True, and has none of the IPR keys. */
        (void)op;
        st->spare = true;
        *owned = NULL;
}

/* ---- Startup ---- */

static int plr_open(struct hp_operator *op, char *errbuf, size_t len)
{
        (void)op;
        (void)errbuf;
        (void)len;
        return 0;
}

static void plr_ready(struct hp_operator *op)
{
        hp_op__set_state(op, HP_OP_READY, NULL, NULL);
        hp_log_info("operator mode (--rdzv-backend hyperpod, the default): "
                    "no worker starts until the HyperPod operator sends "
                    "POST /start to port %d; to run without an operator, "
                    "use --standalone (one node) or --rdzv-backend static "
                    "(--nnodes, --node-rank, --master-addr)",
                    op->listening ? hp_httpd_port(&op->httpd)
                                  : op->cfg->server_port);
        uv_timer_start(&op->remind, remind_cb, REMIND_MS, REMIND_MS);
        uv_unref((uv_handle_t *)&op->remind);
}

static void plr_close(struct hp_operator *op)
{
        (void)op;
}

const struct hp_op_driver hp_op__driver_plr = {
        .mode = "operator",
        .events = &plr_events,
        .open = plr_open,
        .ready = plr_ready,
        .start = plr_start,
        .update = plr_update,
        .stop = plr_stop,
        .status = plr_status,
        .kick = plr_kick,
        .close = plr_close,
};
