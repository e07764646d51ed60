/* SPDX-License-Identifier: Apache-2.0 */
/* Self-driven mode: the driver that runs the job with no operator.
 *
 * It follows the agent through the same callbacks as the operator
 * (struct hp_agent_events) and decides alone what comes after a stage:
 *   success       → the next enabled stage, or exit 0 after the last
 *   failure       → a restart from the first stage while --max-restarts
 *                   allows, else the root cause's exit status
 *   rule verdict  → the group is stopped; then as a failure, exit 124
 *   node fault    → the group is stopped; exit 123, no restart
 * The decision itself is hp_selfdriven__next, a pure function.
 */
#include <errno.h>
#include <stdio.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

struct hp_next_step hp_selfdriven__next(const struct hp_attempt_end *e)
{
        bool restart = e->restart_count < e->max_restarts;

        /* A signal to the agent ends it whatever else happened. */
        if (e->signal != 0)
                return (struct hp_next_step){ HP_NEXT_EXIT, 128 + e->signal };
        /* No restart on a node the kernel says is faulty. */
        if (e->node_fault)
                return (struct hp_next_step){ HP_NEXT_NODE_FAULT,
                                              HP_EXIT_NODE_FAULT };
        /* The workers' exit statuses say nothing after a verdict: we
         * killed them. */
        if (e->verdict)
                return restart ? (struct hp_next_step){ HP_NEXT_RESTART, 0 }
                               : (struct hp_next_step){
                                         HP_NEXT_EXIT, HP_EXIT_RULE_VERDICT
                                 };
        switch (e->result) {
        case HP_GROUP_FAILED:
                return restart ? (struct hp_next_step){ HP_NEXT_RESTART, 0 }
                               : (struct hp_next_step){ HP_NEXT_EXIT,
                                                        e->failure_exit };
        case HP_GROUP_STOPPED:
                return (struct hp_next_step){ HP_NEXT_EXIT, 128 };
        case HP_GROUP_SUCCEEDED:
        default:
                return e->more_stages
                               ? (struct hp_next_step){ HP_NEXT_STAGE, 0 }
                               : (struct hp_next_step){ HP_NEXT_EXIT, 0 };
        }
}

const char *hp_selfdriven__next_name(enum hp_next what)
{
        static const char *const names[] = {
                [HP_NEXT_STAGE] = "next stage",
                [HP_NEXT_RESTART] = "restart",
                [HP_NEXT_EXIT] = "exit",
                [HP_NEXT_NODE_FAULT] = "node fault",
        };
        return what <= HP_NEXT_NODE_FAULT ? names[what] : "?";
}

/* Another node ended the round (the round coordinator's push): the
 * workers stop, and their end restarts with the others or exits. */
static void round_ended(void *ctx, enum hp_rdzv_end end, const char *why)
{
        struct hp_agent *a = ctx;

        if (a->round_ended != 0 || a->received_signal != 0)
                return;
        a->round_ended = (int)end + 1;
        if (!hp_group__active(&a->group))
                return;
        hp_log_warn("%s: stopping the workers%s", why,
                    end == HP_RDZV_END_EXIT ? "; the job ends"
                    : end == HP_RDZV_END_LOST
                            ? " for the next round, without it"
                            : " for the next round, with "
                              "every node");
        a->group.stop_requested = true;
        if (!a->group.stopping)
                hp_group__stop(&a->group, a->cfg->shutdown_signal,
                               a->cfg->shutdown_timeout_ms);
}

/* The restarts --max-restarts has seen: job-wide rounds that ended in a
 * failure with coordinated rounds, this node's otherwise. */
static int restarts_used(const struct hp_agent *a)
{
        return hp_rdzv_coordinated(&a->rdzv) ? a->failed_rounds
                                             : a->restart_count;
}

static void start_attempt(struct hp_agent *a, bool again)
{
        char err[512];
        int r;

        /* The first round was run by hp_agent_init, to fail before any
         * process starts; each later attempt asks again, so a replaced
         * node's address is picked up. */
        if (again) {
                r = hp_rdzv_next(&a->rdzv, &a->round, err, sizeof(err));
                if (r == HP_RDZV_PEER_EXIT) {
                        hp_log_error("%s (exit status %d)", err,
                                     HP_EXIT_PEER_FAILED);
                        hp_agent_finish(a, HP_EXIT_PEER_FAILED);
                        return;
                }
                if (r < 0) {
                        hp_log_error("rendezvous: %s", err);
                        hp_agent_finish(a, 1);
                        return;
                }
        }
        /* Coordinated rounds: the count is the job's, the round's. */
        if (hp_rdzv_coordinated(&a->rdzv))
                a->restart_count = a->rdzv.gen;
        a->round_ended = 0;
        r = hp_rdzv_watch(&a->rdzv, a->loop, round_ended, a);
        if (r < 0)
                hp_log_warn("rendezvous: cannot watch the round's end: %s",
                            hp_strerror(r));
        /* A stage that cannot start was logged; the job ends. */
        if (hp_agent_begin(a, &a->round, a->restart_count) < 0)
                hp_agent_finish(a, 1);
}

/* The end of an attempt that another node ended: restart with it, or
 * exit when it left the job. */
static void ended_elsewhere(struct hp_agent *a)
{
        if (a->round_ended == HP_RDZV_END_EXIT + 1) {
                hp_log_error("another node left the job; exit status %d",
                             HP_EXIT_PEER_FAILED);
                hp_agent_finish(a, HP_EXIT_PEER_FAILED);
                return;
        }
        if (a->round_ended == HP_RDZV_END_LOST + 1 &&
            restarts_used(a) >= a->cfg->max_restarts) {
                /* Leaving ends the round for the others with "exit". */
                hp_log_error("a node was lost and no restarts are left "
                             "(--max-restarts %d); exit status %d",
                             a->cfg->max_restarts, HP_EXIT_PEER_FAILED);
                hp_agent_finish(a, HP_EXIT_PEER_FAILED);
                return;
        }
        if (a->round_ended == HP_RDZV_END_JOIN + 1) {
                hp_log_info("a node joined the job; re-rendezvous with every "
                            "node (not a failure: %d of %d restarts used)",
                            restarts_used(a), a->cfg->max_restarts);
        } else if (a->round_ended == HP_RDZV_END_LOST + 1) {
                a->failed_rounds++;
                a->counts.restarts++;
                hp_log_warn("restarting the worker group with the nodes "
                            "left (restart %d of %d)",
                            restarts_used(a), a->cfg->max_restarts);
        } else {
                a->failed_rounds++;
                a->counts.restarts++;
                hp_log_warn("another node's workers failed; restarting the "
                            "worker group with every node (restart %d of %d)",
                            restarts_used(a), a->cfg->max_restarts);
        }
        a->restart_count++;
        hp_agent_clear_rules(a);
        start_attempt(a, true);
}

static void stage_ended(struct hp_agent *a, enum hp_stage stage,
                        enum hp_group_result result, const struct hp_group *g,
                        void *ctx)
{
        struct hp_attempt_end e = {
                .result = result,
                .node_fault = a->health.fault[0] != '\0',
                .verdict = a->verdict.state != LOGMON_WAITING,
                .more_stages = hp_agent__next_enabled(a, stage) >= 0,
                .restart_count = restarts_used(a),
                .max_restarts = a->cfg->max_restarts,
        };
        struct hp_next_step next;
        char reason[HP_VERDICT_REASON_MAX];

        (void)ctx;
        /* Stopped for another node's round end: not this node's failure
         * (a worker that failed on its own, a signal to this agent and a
         * node fault still win; the counts are the same on every node). */
        if (a->round_ended != 0 && a->received_signal == 0 && !e.node_fault &&
            result != HP_GROUP_FAILED) {
                ended_elsewhere(a);
                return;
        }
        (void)hp_verdict_reason(&a->verdict, reason, sizeof(reason));
        /* After a verdict or a node fault the failure is ours (we killed
         * the workers), not theirs: no summary. */
        if (result == HP_GROUP_FAILED && !e.node_fault && !e.verdict) {
                hp_agent_print_failure_summary(a, g);
                e.failure_exit = hp_agent_failure_exit_code(g);
        }
        next = hp_selfdriven__next(&e);
        /* The attempt's end, for /metrics: a node fault was counted when
         * it came. */
        if (!e.node_fault && e.verdict)
                a->counts.faults[a->verdict.kind == HP_VERDICT_RULE
                                         ? HP_FAULT_RULE
                                         : HP_FAULT_RANK]++;
        else if (!e.node_fault && result == HP_GROUP_FAILED)
                a->counts.faults[HP_FAULT_WORKER]++;
        switch (next.what) {
        case HP_NEXT_NODE_FAULT:
                hp_agent__health_finish(a);
                return;
        case HP_NEXT_RESTART:
                a->restart_count++;
                a->failed_rounds++;
                a->counts.restarts++;
                if (e.verdict)
                        hp_log_warn("%s: restarting the worker group "
                                    "(restart %d of %d)",
                                    reason, restarts_used(a),
                                    a->cfg->max_restarts);
                else
                        hp_log_warn("%s failed; restarting the worker group "
                                    "(restart %d of %d)",
                                    hp_stage_name(stage), restarts_used(a),
                                    a->cfg->max_restarts);
                hp_agent_clear_rules(a);
                start_attempt(a, true);
                return;
        case HP_NEXT_STAGE:
                if (hp_agent_next_stage(a) < 0)
                        hp_agent_finish(a, 1);
                return;
        case HP_NEXT_EXIT:
                if (e.verdict)
                        hp_log_error("%s ended the job: no restarts left "
                                     "(--max-restarts %d); exit status %d",
                                     reason, a->cfg->max_restarts,
                                     next.exit_code);
                else if (result == HP_GROUP_FAILED &&
                         a->cfg->max_restarts > 0)
                        hp_log_error("no restarts left (--max-restarts %d)",
                                     a->cfg->max_restarts);
                else if (result == HP_GROUP_STOPPED)
                        hp_log_info("stopped by %s", hp_signal_name(0));
                else if (result == HP_GROUP_SUCCEEDED)
                        hp_log_info("all stages succeeded");
                hp_agent_finish(a, next.exit_code);
                return;
        }
}

/* The workers are told with --shutdown-signal, as after a worker failure;
 * the group's end then restarts or ends the job. */
static void rule_verdict(struct hp_agent *a, const struct hp_verdict *v,
                         void *ctx)
{
        const struct hp_config *cfg = a->cfg;

        (void)v;
        (void)ctx;
        /* The hang report the verdict started is collected first: the
         * stop waits for it, at most --hang-dump-timeout. */
        if (hp_group__active(&a->group) && !a->group.stopping &&
            !(a->verdict_report &&
              hp_agent__defer_stop(a, cfg->shutdown_signal,
                                   cfg->shutdown_timeout_ms)))
                hp_group__stop(&a->group, cfg->shutdown_signal,
                               cfg->shutdown_timeout_ms);
}

static void node_fault(struct hp_agent *a, void *ctx)
{
        bool active = hp_group__active(&a->group);

        (void)ctx;
        a->counts.faults[HP_FAULT_NODE]++;
        hp_log_error("%s: %sno restart on this node (exit status %d)",
                     a->health.fault, active ? "stopping the workers; " : "",
                     HP_EXIT_NODE_FAULT);
        if (active) {
                a->group.stop_requested = true;
                if (!a->group.stopping)
                        hp_group__stop(&a->group, a->cfg->shutdown_signal,
                                       a->cfg->shutdown_timeout_ms);
        } else if (a->state == HP_AGENT_IDLE ||
                   a->state == HP_AGENT_PREFLIGHT) {
                hp_agent__health_finish(a);
        }
}

static void preflight_passed(struct hp_agent *a, void *ctx)
{
        (void)ctx;
        start_attempt(a, false);
}

/* Not the node's fault: the image lacks the libraries. */
static bool preflight_unavailable(struct hp_agent *a, const char *reason,
                                  void *ctx)
{
        (void)ctx;
        hp_log_error("--preflight nccl: %s", reason);
        hp_agent_finish(a, 2);
        return true;
}

const struct hp_agent_events hp_selfdriven__events = {
        .stage_ended = stage_ended,
        .rule_verdict = rule_verdict,
        .node_fault = node_fault,
        .preflight_passed = preflight_passed,
        .preflight_unavailable = preflight_unavailable,
};

int hp_agent_run(struct hp_agent *a)
{
        char err[1024];

        hp_agent_set_events(a, &hp_selfdriven__events, NULL);
        /* The signal's own handler, on the loop, then ends the agent. */
        if (a->signal_at_start)
                hp_log_warn("received %s while starting: nothing is started",
                            hp_signal_name(a->signal_at_start));
        else if (!a->cfg->preflight_nccl)
                start_attempt(a, false);
        else if (hp_agent_preflight_start(a, err, sizeof(err)) < 0) {
                hp_log_error("--preflight nccl: %s", err);
                hp_agent_finish(a, 2);
        }
        if (a->state != HP_AGENT_FINISHED)
                uv_run(a->loop, UV_RUN_DEFAULT);
        return a->exit_code;
}
