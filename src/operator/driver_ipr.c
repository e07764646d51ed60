/* SPDX-License-Identifier: Apache-2.0 */
/* In-process restart (--inprocess-restart): the operator's third way of
 * driving the agent, beside self-driven and process-level restart.
 *
 * The training processes start with the agent, before any /start, and
 * wait at a barrier on the worker socket; /start releases them with
 * job_start, a fault sends every rank back to the barrier (job_fault), and
 * only a dropped client, a barrier timeout, a worker's request or a spare
 * flip restarts the processes themselves (a full stop). Everything that
 * happens (a request, a worker's message, a stage's end, the barrier's
 * deadline) kicks the one decision in ipr.c; this file does what it says
 * and logs it. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

#include "operator-private.h"

/* Decisions acted on per kick: each changes the state, so a handful
 * covers the longest chain (fault → full stop → start). */
#define DECISIONS_MAX 8

/* The rendezvous before the operator's first /start
 * (docs/inprocess-restart-and-checkpoints.md, "One cycle", step 1): no
 * node rank, no master, the node count the command line gave. */
static void placeholder_round(const struct hp_operator *op,
                              struct hp_rdzv_info *round)
{
        memset(round, 0, sizeof(*round));
        round->nproc = op->cfg->nproc;
        round->nnodes = op->cfg->nnodes;
        round->node_rank = -1;
        round->world_size = op->cfg->nnodes * op->cfg->nproc;
        round->group_world_size = op->cfg->nnodes;
        round->base_rank = -op->cfg->nproc;
        round->master_port = -1;
}

static void current_round(const struct hp_operator *op,
                          struct hp_rdzv_info *round)
{
        if (op->have_job)
                hp_op__round_from_job(op, round);
        else
                placeholder_round(op, round);
}

static int restart_count(const struct hp_operator *op)
{
        return op->have_job ? op->job.fault_count : 0;
}

static void timer_cb(uv_timer_t *t)
{
        struct hp_operator *op = hp_container_of(t, struct hp_operator,
                                                 ipr.timer);

        hp_op__kick(op);
}

static void begin_wait(struct hp_operator *op, enum hp_ipr_wait kind)
{
        struct hp_op_ipr *ipr = &op->ipr;
        struct hp_ipc_ranks *ranks = &op->ipc->ranks;
        uint64_t timeout = op->cfg->inprocess_timeout_ms;
        char limit[48], held[128], missing[128];
        int n;

        ipr->wait = kind;
        n = hp_ipc_ranks_wait_begin(ranks);
        ipr->deadline = 0;
        if (timeout > 0) {
                ipr->deadline = uv_now(hp_agent_loop(op->agent)) + timeout;
                uv_timer_start(&ipr->timer, timer_cb, timeout, 0);
                snprintf(limit, sizeof(limit), "at most %.3g s",
                         (double)timeout / 1000.0);
        } else {
                snprintf(limit, sizeof(limit), "no limit");
        }
        if (n == 0) {
                hp_log_info("in-process restart: waiting for local ranks "
                            "0-%d at the barrier (%s)",
                            op->cfg->nproc - 1, limit);
                return;
        }
        /* Held ranks (at the barrier since the last wait, or back there
         * before it began) count at once: they never answer again. */
        hp_ipc_ranks_list(ranks, HP_IPC_RANK_AT_BARRIER, true, held,
                          sizeof(held));
        hp_ipc_ranks_list(ranks, HP_IPC_RANK_AT_BARRIER, false, missing,
                          sizeof(missing));
        hp_log_info("in-process restart: local rank%s %s already at the "
                    "barrier; waiting for %s (%s)",
                    n > 1 ? "s" : "", held, missing[0] ? missing : "none",
                    limit);
}

static void end_wait(struct hp_operator *op)
{
        op->ipr.wait = HP_IPR_WAIT_NONE;
        op->ipr.deadline = 0;
        hp_ipc_ranks_wait_end(&op->ipc->ranks);
        uv_timer_stop(&op->ipr.timer);
}

/* Whether pod_resourceconfig.json's IP list is free of nulls: job_start
 * hands the workers an IP table they may connect by. No file passes, as
 * in the reference. */
static bool ip_table_complete(const struct hp_operator *op, char *missing,
                              size_t len)
{
        char err[512];
        cJSON *doc = NULL;
        const cJSON *ips, *ip;
        size_t used = 0;
        int i = 0;
        bool complete = true;

        missing[0] = '\0';
        if (hp_podcfg_read(op->resource_dir, &doc, err, sizeof(err)) < 0 ||
            doc == NULL) {
                cJSON_Delete(doc);
                return true;
        }
        ips = cJSON_GetObjectItemCaseSensitive(doc, "ips");
        cJSON_ArrayForEach (ip, ips) {
                if (cJSON_IsNull(ip)) {
                        complete = false;
                        if (used < len)
                                used += (size_t)snprintf(missing + used,
                                                         len - used, "%s%d",
                                                         used ? ", " : "", i);
                }
                i++;
        }
        cJSON_Delete(doc);
        return complete;
}

static bool clients_missing(const struct hp_operator *op)
{
        for (int lr = 0; lr < op->cfg->nproc; lr++)
                if (hp_ipc_rank_clients(op->ipc, lr) == 0)
                        return true;
        return false;
}

static void view_of(const struct hp_operator *op, struct hp_ipr_view *v)
{
        const struct hp_ipc_ranks *ranks = &op->ipc->ranks;
        char missing[64];

        memset(v, 0, sizeof(*v));
        v->state = op->plr.state;
        v->group = op->ipr.group;
        v->stage = hp_agent_stage(op->agent);
        v->has_post_train = op->cfg->post_train_script != NULL;
        v->wait = op->ipr.wait;
        v->wait_deadline = op->ipr.deadline;
        v->all_at_barrier = hp_ipc_ranks_all_at_barrier(ranks);
        v->any_failed = hp_ipc_ranks_any_failed(ranks);
        v->local_plr_requested = hp_ipc_ranks_local_plr(ranks);
        v->clients_missing = clients_missing(op);
        v->can_start = op->can_start;
        v->plr_armed = op->ipr.plr_armed;
        /* Read from disk only when it decides something. */
        v->ip_table_complete = true;
        if (v->state == HP_OP_RUNNING && v->all_at_barrier && v->can_start)
                v->ip_table_complete = ip_table_complete(op, missing,
                                                         sizeof(missing));
}

/* ---- job_start and job_rank_info ---- */

/* rankIps as the reference's model holds them: {"rank": int, "ip": ...}
 * with the rank a number even when it came as a numeric string, and no
 * other keys. NULL (null) when the request had none. */
static cJSON *rank_ips(const struct hp_operator *op)
{
        const cJSON *item;
        cJSON *list;

        if (op->job.rank_ips == NULL)
                return cJSON_CreateNull();
        list = cJSON_CreateArray();
        cJSON_ArrayForEach (item, op->job.rank_ips) {
                const cJSON *r = cJSON_GetObjectItemCaseSensitive(item,
                                                                  "rank");
                const cJSON *ip = cJSON_GetObjectItemCaseSensitive(item,
                                                                   "ip");
                cJSON *out = cJSON_CreateObject();
                int rank = 0;

                if (cJSON_IsString(r))
                        (void)hp_parse_int(r->valuestring, 0, INT32_MAX,
                                           &rank);
                else if (cJSON_IsNumber(r))
                        rank = (int)r->valuedouble;
                if (out == NULL || list == NULL ||
                    cJSON_AddNumberToObject(out, "rank", rank) == NULL ||
                    !cJSON_AddItemToObject(out, "ip",
                                           cJSON_Duplicate(ip, true)) ||
                    !cJSON_AddItemToArray(list, out)) {
                        cJSON_Delete(out);
                        cJSON_Delete(list);
                        return NULL;
                }
        }
        return list;
}

/* {"worker_envs": {...}, "aggregate_worker_data": {"rank_ips",
 * "aggregate_worker_data"}} for one local rank, as
 * docs/inprocess-restart-and-checkpoints.md ("One cycle", step 2) has it. */
static cJSON *rank_payload(const struct hp_operator *op,
                           const struct hp_rdzv_info *round, int lr)
{
        cJSON *msg = cJSON_CreateObject();
        cJSON *envs = cJSON_AddObjectToObject(msg, "worker_envs");
        cJSON *agg = cJSON_AddObjectToObject(msg, "aggregate_worker_data");
        char v[11][288];
        static const char *const keys[11] = {
                "RANK",
                "GROUP_RANK",
                "ROLE_RANK",
                "WORLD_SIZE",
                "GROUP_WORLD_SIZE",
                "ROLE_WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT",
                "JOB_RESTART_COUNT",
                "TORCHELASTIC_RESTART_COUNT",
                "SPARE",
        };
        int rank = round->base_rank + lr;

        if (msg == NULL || envs == NULL || agg == NULL)
                goto oom;
        snprintf(v[0], sizeof(v[0]), "%d", rank);
        snprintf(v[1], sizeof(v[1]), "%d", round->node_rank);
        snprintf(v[2], sizeof(v[2]), "%d", rank);
        snprintf(v[3], sizeof(v[3]), "%d", round->world_size);
        /* The number of nodes, as in the workers' environment. */
        snprintf(v[4], sizeof(v[4]), "%d", round->group_world_size);
        snprintf(v[5], sizeof(v[5]), "%d", round->world_size);
        snprintf(v[6], sizeof(v[6]), "%s", round->master_addr);
        snprintf(v[7], sizeof(v[7]), "%d", round->master_port);
        snprintf(v[8], sizeof(v[8]), "%d", restart_count(op));
        snprintf(v[9], sizeof(v[9]), "%d", restart_count(op));
        snprintf(v[10], sizeof(v[10]), "%s",
                 op->ipr.spare ? "True" : "False");
        for (size_t i = 0; i < HP_ARRAY_SIZE(keys); i++)
                if (cJSON_AddStringToObject(envs, keys[i], v[i]) == NULL)
                        goto oom;
        if (!cJSON_AddItemToObject(agg, "rank_ips", rank_ips(op)) ||
            !cJSON_AddItemToObject(
                    agg, "aggregate_worker_data",
                    op->job.worker_data
                            ? cJSON_Duplicate(op->job.worker_data, true)
                            : cJSON_CreateNull()))
                goto oom;
        return msg;
oom:
        cJSON_Delete(msg);
        return NULL;
}

/* Sends type with each rank's data to every local rank: 0, or -1 with
 * why (a rank without a client, a write that failed). */
static int send_rank_info(struct hp_operator *op, const char *type,
                          bool release, char *why, size_t len)
{
        struct hp_rdzv_info round;
        size_t used = 0;

        current_round(op, &round);
        for (int lr = 0; lr < op->cfg->nproc; lr++) {
                if (hp_ipc_rank_clients(op->ipc, lr) > 0)
                        continue;
                if (used == 0)
                        used = (size_t)snprintf(why, len,
                                                "Missing client connections "
                                                "from local ranks ");
                if (used < len)
                        used += (size_t)snprintf(why + used, len - used,
                                                 "%s%d",
                                                 used > 44 ? ", " : "", lr);
        }
        if (used > 0)
                return -1;
        for (int lr = 0; lr < op->cfg->nproc; lr++) {
                cJSON *msg = rank_payload(op, &round, lr);
                int r = msg ? hp_ipc_send_to_rank(op->ipc, lr, type, msg)
                            : -ENOMEM;
                cJSON_Delete(msg);
                if (r < 0) {
                        snprintf(why, len,
                                 "Failed to send %s to local rank "
                                 "%d: %s",
                                 type, lr, hp_strerror(r));
                        return -1;
                }
                hp_ipc_ranks_set_rank_info(&op->ipc->ranks, lr,
                                           round.base_rank + lr,
                                           round.node_rank);
                if (release)
                        hp_ipc_ranks_release(&op->ipc->ranks, lr);
        }
        return 0;
}

static int send_update(struct hp_operator *op)
{
        char why[256];

        if (op->ipr.group != HP_IPR_GROUP_HEALTHY ||
            hp_agent_stage(op->agent) != HP_STAGE_TRAIN) {
                hp_log_info("/update: the training processes are not "
                            "running; no job_rank_info sent, ipversion "
                            "cleared for the operator to send again");
                return -1;
        }
        if (send_rank_info(op, "job_rank_info", false, why, sizeof(why)) <
            0) {
                hp_log_warn("/update: %s; ipversion cleared for the operator "
                            "to send again",
                            why);
                return -1;
        }
        hp_log_info("/update: job_rank_info sent to local ranks 0-%d",
                    op->cfg->nproc - 1);
        return 0;
}

/* ---- The actions ---- */

static void fault(struct hp_operator *op, const char *why)
{
        const struct hp_ipc_ranks *ranks = &op->ipc->ranks;
        char reason[HP_OP_REASON_MAX], message[HP_OP_MESSAGE_MAX];

        if (hp_ipc_ranks_fault(ranks, reason, sizeof(reason), message,
                               sizeof(message)) < 0) {
                if (op->ipr.failure_reason[0] != '\0') {
                        snprintf(reason, sizeof(reason), "%s",
                                 op->ipr.failure_reason);
                        snprintf(message, sizeof(message), "%s",
                                 op->ipr.failure);
                } else {
                        snprintf(reason, sizeof(reason), "WorkerFault");
                        snprintf(message, sizeof(message), "%s", why);
                }
        }
        if (op->ipr.wait != HP_IPR_WAIT_NONE)
                end_wait(op);
        hp_op__fault(op, reason, message);
}

static void finish_full_stop(struct hp_operator *op)
{
        struct hp_op_ipr *ipr = &op->ipr;

        hp_agent_clear_rules(op->agent);
        ipr->group = HP_IPR_GROUP_INIT;
        ipr->priority = false;
        ipr->verdict = false;
        ipr->holding = false;
        ipr->failure[0] = ipr->failure_reason[0] = '\0';
        hp_ipc_ranks_reset(&op->ipc->ranks, true);
        /* The operator sends the IP table again. */
        op->ip_version[0] = '\0';
        op->last_failure_code = 0;
        hp_op__set_state(op, HP_OP_INIT, NULL, NULL);
}

static void full_stop(struct hp_operator *op)
{
        struct hp_agent *a = op->agent;

        op->ipr.plr_armed = false;
        if (op->ipr.wait != HP_IPR_WAIT_NONE)
                end_wait(op);
        hp_ipc_drop_clients(op->ipc);
        if (!hp_agent_workers_active(a)) {
                finish_full_stop(op);
                return;
        }
        op->ipr.group = HP_IPR_GROUP_STOPPING;
        if (!hp_agent_workers_stopping(a)) {
                hp_log_info("in-process restart: stopping the processes "
                            "with %s (SIGKILL after %llu ms)",
                            hp_signal_name(op->cfg->shutdown_signal),
                            (unsigned long long)op->cfg->shutdown_timeout_ms);
                hp_agent_stop_workers(a, op->cfg->shutdown_signal,
                                      op->cfg->shutdown_timeout_ms);
        }
}

static void failed_to_start(struct hp_operator *op, const char *what, int r)
{
        op->ipr.group = HP_IPR_GROUP_FAILED;
        snprintf(op->ipr.failure_reason, sizeof(op->ipr.failure_reason),
                 "WorkerStartFailed");
        snprintf(op->ipr.failure, sizeof(op->ipr.failure),
                 "cannot start %s: %s", what, hp_strerror(r));
}

/* Keeps a fault's reason and message for the next FAULTED. */
static void verdict_on(struct hp_operator *op, const char *reason,
                       const char *message)
{
        struct hp_op_ipr *ipr = &op->ipr;
        size_t n = strnlen(reason, sizeof(ipr->failure_reason) - 1);

        memcpy(ipr->failure_reason, reason, n);
        ipr->failure_reason[n] = '\0';
        snprintf(ipr->failure, sizeof(ipr->failure), "%s", message);
}

/* Training runs from here to the first job_start without rules
 * watching: the processes only wait. */
static void training_started(struct hp_operator *op)
{
        hp_agent_suspend_rules(op->agent);
        begin_wait(op, HP_IPR_WAIT_INIT);
}

static void start_first(struct hp_operator *op)
{
        struct hp_agent *a = op->agent;
        struct hp_rdzv_info round;
        const char *fault_line;
        const char *fault = hp_agent_node_fault(a, &fault_line, NULL);
        int r;

        /* A node the kernel log already condemned runs nothing: the
         * operator is told instead, as in process-level restart. */
        if (fault != NULL) {
                char msg[HP_OP_MESSAGE_MAX];
                hp_op__node_fault_message(op, fault, fault_line, msg,
                                          sizeof(msg));
                verdict_on(op, fault, msg);
                op->ipr.group = HP_IPR_GROUP_FAILED;
                return;
        }
        current_round(op, &round);
        r = hp_agent_use_rules(a, op->have_job ? op->job.ruleset : NULL);
        if (r == 0)
                r = hp_agent_begin(a, &round, restart_count(op));
        if (r < 0) {
                failed_to_start(op, "the first stage", r);
                return;
        }
        op->attempts_started++;
        op->ipr.group = HP_IPR_GROUP_HEALTHY;
        if (hp_agent_stage(a) == HP_STAGE_TRAIN)
                training_started(op);
}

static void next_stage(struct hp_operator *op, bool training)
{
        struct hp_agent *a = op->agent;
        struct hp_rdzv_info round;
        int r;

        current_round(op, &round);
        hp_agent_set_round(a, &round);
        /* The processes outlive the rounds; the next stage's processes
         * are new, and run at the last /start's count, as the
         * reference's would. */
        hp_agent_set_restart_count(a, restart_count(op));
        r = hp_agent_next_stage(a);
        if (r == 0) {
                hp_agent_clear_rules(a);
                hp_op__set_state(op, HP_OP_COMPLETED, NULL, NULL);
                return;
        }
        if (r < 0) {
                failed_to_start(op, training ? "training" : "post-train", r);
                return;
        }
        op->ipr.group = HP_IPR_GROUP_HEALTHY;
        if (training)
                training_started(op);
}

static void send_start(struct hp_operator *op)
{
        struct hp_agent *a = op->agent;
        struct hp_rdzv_info round;
        char why[256];

        hp_ipc_ranks_reset(&op->ipc->ranks, false);
        if (send_rank_info(op, "job_start", true, why, sizeof(why)) < 0) {
                hp_log_error("in-process restart: job_start: %s", why);
                snprintf(op->ipr.failure_reason,
                         sizeof(op->ipr.failure_reason), "WorkerFault");
                snprintf(op->ipr.failure, sizeof(op->ipr.failure), "%s", why);
                fault(op, why);
                return;
        }
        /* The processes now have their ranks: what the agent prints and
         * its rules' verdicts name them too. */
        current_round(op, &round);
        hp_agent_rerank(a, &round);
        hp_log_info("in-process restart: job_start sent to local ranks 0-%d "
                    "(node rank %d, ranks %d-%d, master %s:%d, "
                    "JOB_RESTART_COUNT %d)",
                    op->cfg->nproc - 1, round.node_rank, round.base_rank,
                    round.base_rank + op->cfg->nproc - 1, round.master_addr,
                    round.master_port, restart_count(op));
        snprintf(op->plr.reason, sizeof(op->plr.reason), "Running");
        op->ipr.priority = false;
        op->ipr.holding = false;
        op->ipr.verdict = false;
        op->ipr.failure[0] = op->ipr.failure_reason[0] = '\0';
        op->attempts_started++;
        /* The /start's rules, fresh. */
        if (hp_agent_use_rules(a, op->job.ruleset) < 0)
                hp_log_error("in-process restart: out of memory for the "
                             "rules; training runs unwatched");
        hp_agent_resume_rules(a);
}

static void hold(struct hp_operator *op)
{
        char missing[256];

        if (op->ipr.holding)
                return;
        op->ipr.holding = true;
        ip_table_complete(op, missing, sizeof(missing));
        hp_log_warn("in-process restart: job_start held: %s/%s has no IP "
                    "for node ranks %s; an /update with their rankIps "
                    "releases the workers",
                    op->resource_dir, HP_OP_PODCFG_NAME, missing);
}

static void pause_workers(struct hp_operator *op)
{
        cJSON *msg = cJSON_CreateObject();
        int r;

        op->ipr.priority = true;
        if (msg == NULL || cJSON_AddNumberToObject(msg, "restart_count",
                                                   restart_count(op)) == NULL)
                r = -ENOMEM;
        else
                r = hp_ipc_broadcast(op->ipc, "job_fault", msg);
        cJSON_Delete(msg);
        hp_agent_clear_rules(op->agent);
        if (r < 0) {
                hp_log_error("in-process restart: cannot send job_fault to "
                             "every rank (%s): restarting the processes",
                             hp_strerror(r));
                op->ipr.plr_armed = true;
                return;
        }
        hp_log_info("in-process restart: job_fault (restart_count %d) sent "
                    "to %d clients",
                    restart_count(op), r);
        begin_wait(op, HP_IPR_WAIT_PAUSE);
}

static void apply(struct hp_operator *op, const struct hp_ipr_decision *d)
{
        switch (d->action) {
        case HP_IPR_NONE:
                break;
        case HP_IPR_FULL_STOP:
                full_stop(op);
                break;
        case HP_IPR_START_FIRST:
                start_first(op);
                break;
        case HP_IPR_START_TRAINING:
                next_stage(op, true);
                break;
        case HP_IPR_READY:
                end_wait(op);
                hp_op__set_state(op, HP_OP_READY, NULL, NULL);
                break;
        case HP_IPR_SEND_START:
                send_start(op);
                break;
        case HP_IPR_HOLD:
                hold(op);
                break;
        case HP_IPR_FAULT:
                if (d->arm_local_plr) {
                        hp_log_warn("in-process restart: a rank asked for "
                                    "local_process_level_restart: the "
                                    "node's processes restart next");
                        op->ipr.plr_armed = true;
                }
                fault(op, d->why);
                break;
        case HP_IPR_PAUSE:
                pause_workers(op);
                break;
        case HP_IPR_POST_TRAIN:
                next_stage(op, false);
                break;
        case HP_IPR_COMPLETE:
                hp_agent_clear_rules(op->agent);
                hp_op__set_state(op, HP_OP_COMPLETED, NULL, NULL);
                break;
        default:
                break;
        }
}

static void ipr_kick(struct hp_operator *op)
{
        struct hp_op_ipr *ipr = &op->ipr;

        if (ipr->deciding)
                return;
        ipr->deciding = true;
        for (int i = 0; i < DECISIONS_MAX; i++) {
                struct hp_ipr_view v;
                struct hp_ipr_decision d;

                if (ipr->group == HP_IPR_GROUP_INIT &&
                    hp_agent_preflight_pending(op->agent))
                        break;
                view_of(op, &v);
                d = hp_ipr_decide(&v, uv_now(hp_agent_loop(op->agent)));
                if (d.action == HP_IPR_NONE)
                        break;
                if (d.action != HP_IPR_HOLD || !ipr->holding)
                        hp_log_info("in-process restart: %s (agent %s, %s "
                                    "%s): %s",
                                    hp_ipr_action_name(d.action),
                                    hp_op_state_name(v.state),
                                    hp_stage_name(v.stage),
                                    hp_ipr_group_name(v.group), d.why);
                apply(op, &d);
                /* Nothing moved (a refused transition, a hold): asking
                 * again would give the same answer. */
                if (op->plr.state == v.state && ipr->group == v.group &&
                    ipr->wait == v.wait && ipr->plr_armed == v.plr_armed)
                        break;
        }
        ipr->deciding = false;
}

/* ---- Requests ---- */

static void take_spare(struct hp_operator *op, bool spare, int fault_count)
{
        struct hp_op_ipr *ipr = &op->ipr;

        if (!spare && fault_count == 0 && op->plr.state == HP_OP_INIT)
                ipr->priority = true;
        if (ipr->spare == spare)
                return;
        if (!ipr->spare) {
                hp_log_info("in-process restart: spare %s → %s: the node's "
                            "processes restart",
                            ipr->spare ? "True" : "False",
                            spare ? "True" : "False");
                ipr->plr_armed = true;
        }
        ipr->spare = spare;
}

static void take_stop_mode(struct hp_operator *op, const char *mode)
{
        /* The default, and the reference's other RestartMode names: no
         * local restart, nothing to say. */
        if (mode == NULL || strcasecmp(mode, "ipr") == 0 ||
            strcasecmp(mode, "in_process_restart") == 0 ||
            strcasecmp(mode, "job_level_restart") == 0 ||
            strcasecmp(mode, "local_prl") == 0)
                return;
        if (strcasecmp(mode, "process_level_restart") == 0) {
                hp_log_info("/stop asks for a process-level restart: the "
                            "node's processes restart");
                op->ipr.plr_armed = true;
                return;
        }
        hp_log_error("/stop: restart_mode \"%s\" is not process_level_restart"
                     "; an in-process restart follows",
                     mode);
}

static int ipr_start(struct hp_operator *op, struct hp_op_request *body,
                     char *err, size_t len)
{
        bool running;
        int r;

        r = hp_op__store_ip_table(op, body, err, len);
        if (r < 0)
                return r;
        running = hp_op__set_state(op, HP_OP_RUNNING, "RunningStarted", NULL);
        take_spare(op, body->spare, body->fault_count);
        hp_op__store_job(op, body, false);
        /* job_start goes once every rank is at the barrier. */
        hp_op__kick(op);
        if (!running)
                hp_log_info("/start in state %s: kept; job_start goes when "
                            "the agent is READY and a /start follows",
                            hp_op_state_name(op->plr.state));
        return 0;
}

static void ipr_update(struct hp_operator *op, struct hp_op_request *body)
{
        take_spare(op, body->spare, body->fault_count);
        hp_op__store_job(op, body, true);
        /* As the reference: the rank is assigned once the workers have
         * it, else the operator sends again. */
        if (send_update(op) == 0)
                op->assigned_rank = op->job.rank;
        else
                op->ip_version[0] = '\0';
        hp_op__kick(op);
}

static void ipr_stop(struct hp_operator *op, const struct hp_op_request *body)
{
        take_stop_mode(op, body->restart_mode);
        /* A refused STOPPING still kicks: the decision may pause. */
        hp_op__set_state(op, HP_OP_STOPPING, NULL, NULL);
        hp_op__kick(op);
}

/* Fills the IPR keys of /status; *owned is for the caller to delete. */
static void ipr_status(const struct hp_operator *op, struct hp_op_status *st,
                       cJSON **owned)
{
        const struct hp_ipc_ranks *ranks = &op->ipc->ranks;
        int mode = hp_ipc_ranks_operator_mode(ranks);

        st->inprocess = true;
        st->spare = op->ipr.spare;
        st->priority = op->ipr.priority;
        st->restart_mode = mode >= 0 ? hp_restart_mode_name(
                                               (enum hp_restart_mode)mode)
                                     : NULL;
        st->rank_labels = ranks->labels;
        *owned = hp_ipc_ranks_worker_data(ranks);
        st->worker_data = *owned;
}

/* ---- Agent events ---- */

static void stage_ended(struct hp_agent *a, enum hp_stage stage,
                        enum hp_group_result result, const struct hp_group *g,
                        void *ctx)
{
        struct hp_operator *op = ctx;
        struct hp_op_ipr *ipr = &op->ipr;

        if (result == HP_GROUP_FAILED)
                hp_agent_print_failure_summary(a, g);
        if (ipr->group == HP_IPR_GROUP_STOPPING) {
                finish_full_stop(op);
        } else if (result == HP_GROUP_SUCCEEDED) {
                ipr->group = HP_IPR_GROUP_SUCCEEDED;
        } else {
                if (result == HP_GROUP_FAILED)
                        op->last_failure_code = hp_agent_failure_exit_code(g);
                if (ipr->failure_reason[0] == '\0') {
                        snprintf(ipr->failure_reason,
                                 sizeof(ipr->failure_reason), "WorkerCrash");
                        if (result == HP_GROUP_FAILED)
                                hp_agent_failure_message(
                                        a, g, ipr->failure,
                                        sizeof(ipr->failure));
                        else
                                snprintf(ipr->failure, sizeof(ipr->failure),
                                         "the %s processes were stopped",
                                         hp_stage_name(stage));
                }
                ipr->group = HP_IPR_GROUP_FAILED;
        }
        hp_op__kick(op);
}

static void worker_failed(struct hp_agent *a, const struct hp_group *g,
                          void *ctx)
{
        struct hp_operator *op = ctx;
        struct hp_op_ipr *ipr = &op->ipr;
        struct hp_failure w;
        bool failed = hp_group_failure(g, &w);

        op->last_failure_code = hp_agent_failure_exit_code(g);
        if (ipr->group == HP_IPR_GROUP_STOPPING)
                return;
        if (ipr->failure_reason[0] == '\0' || ipr->verdict) {
                snprintf(ipr->failure_reason, sizeof(ipr->failure_reason),
                         "%s",
                         failed && w.start_failed ? "WorkerStartFailed"
                                                  : "WorkerCrash");
                hp_op__failure_message(a, g, ipr->failure,
                                       sizeof(ipr->failure));
                ipr->verdict = false;
        }
        ipr->group = HP_IPR_GROUP_FAILED;
        hp_op__kick(op);
}

static void verdict(struct hp_operator *op, const char *reason,
                    const char *message)
{
        struct hp_op_ipr *ipr = &op->ipr;

        if (ipr->group != HP_IPR_GROUP_HEALTHY)
                return;
        ipr->verdict = true;
        verdict_on(op, reason, message);
        ipr->group = HP_IPR_GROUP_UNHEALTHY;
        hp_op__kick(op);
}

static void rule_verdict(struct hp_agent *a, const struct hp_verdict *v,
                         void *ctx)
{
        char msg[HP_OP_MESSAGE_MAX];
        char reason[HP_VERDICT_REASON_MAX];

        hp_op__verdict_message(a, v, reason, sizeof(reason), msg,
                               sizeof(msg));
        verdict(ctx, reason, msg);
}

static void node_fault(struct hp_agent *a, void *ctx)
{
        const struct hp_operator *op = ctx;
        char msg[HP_OP_MESSAGE_MAX];
        const char *line;
        const char *reason = hp_agent_node_fault(a, &line, NULL);

        if (reason == NULL)
                return;
        hp_op__node_fault_message(op, reason, line, msg, sizeof(msg));
        verdict(ctx, reason, msg);
}

static void preflight_passed(struct hp_agent *a, void *ctx)
{
        hp_op__kick(ctx);
}

static const struct hp_agent_events ipr_events = {
        .stage_ended = stage_ended,
        .rule_verdict = rule_verdict,
        .worker_failed = worker_failed,
        .node_fault = node_fault,
        .preflight_passed = preflight_passed,
};

static void ipc_changed(void *ctx)
{
        hp_op__kick(ctx);
}

static int ipr_open(struct hp_operator *op, char *errbuf, size_t len)
{
        struct hp_op_ipr *ipr = &op->ipr;
        int r;

        memset(ipr, 0, sizeof(*ipr));
        ipr->spare = true;
        op->plr.inprocess = true;
        r = hp_ipc_inprocess_enable(op->ipc, ipc_changed, op);
        if (r < 0) {
                snprintf(errbuf, len,
                         "in-process restart: the worker "
                         "socket's handlers: %s",
                         hp_strerror(r));
                return r;
        }
        uv_timer_init(hp_agent_loop(op->agent), &ipr->timer);
        ipr->timer_ready = true;
        hp_log_info("in-process restart (--inprocess-restart): the "
                    "processes start now and wait at the barrier; READY "
                    "once every local rank is there, then /start releases "
                    "them");
        hp_op__kick(op);
        return 0;
}

/* READY comes once the workers are at the barrier (ipr_kick). */
static void ipr_ready(struct hp_operator *op)
{
        (void)op;
}

static void ipr_close(struct hp_operator *op)
{
        if (!op->plr.inprocess)
                return; /* never opened */
        hp_ipc_inprocess_disable(op->ipc);
        if (op->ipr.timer_ready) {
                uv_close((uv_handle_t *)&op->ipr.timer, NULL);
                op->ipr.timer_ready = false;
        }
}

const struct hp_op_driver hp_op__driver_ipr = {
        .mode = "inprocess",
        .events = &ipr_events,
        .open = ipr_open,
        .ready = ipr_ready,
        .start = ipr_start,
        .update = ipr_update,
        .stop = ipr_stop,
        .status = ipr_status,
        .kick = ipr_kick,
        .close = ipr_close,
};
