/* SPDX-License-Identifier: Apache-2.0 */
/* In-process restart's main loop as one pure decision
 * (docs/inprocess-restart-and-checkpoints.md, "States" and "Restart modes
 * and full stops"): the reference's per-tick (worker state, agent state)
 * handlers, plus the cases where it is stuck or crashes, each given an
 * outcome:
 *   - /stop while pre-train runs or after it ended: a full stop (the
 *     reference stays in STOPPING);
 *   - training that exits before /start released it: FAULTED (the
 *     reference waits for a barrier no process will reach);
 *   - an IP table with a null entry at /start: job_start waits for an
 *     /update that fills it (the reference's agent dies on an assert).
 * Pure: the caller passes the loop's time. */
#include <stdbool.h>

#include "hyperpod/operator.h"

static const char *const action_names[HP_IPR_ACTION_COUNT] = {
        [HP_IPR_NONE] = "none",
        [HP_IPR_FULL_STOP] = "full stop",
        [HP_IPR_START_FIRST] = "start the first stage",
        [HP_IPR_START_TRAINING] = "start training",
        [HP_IPR_READY] = "ready",
        [HP_IPR_SEND_START] = "job_start",
        [HP_IPR_HOLD] = "hold job_start",
        [HP_IPR_FAULT] = "fault",
        [HP_IPR_PAUSE] = "pause",
        [HP_IPR_POST_TRAIN] = "start post-train",
        [HP_IPR_COMPLETE] = "complete",
};

static const char *const group_names[HP_IPR_GROUP_COUNT] = {
        [HP_IPR_GROUP_INIT] = "INIT",
        [HP_IPR_GROUP_HEALTHY] = "HEALTHY",
        [HP_IPR_GROUP_UNHEALTHY] = "UNHEALTHY",
        [HP_IPR_GROUP_FAILED] = "FAILED",
        [HP_IPR_GROUP_SUCCEEDED] = "SUCCEEDED",
        [HP_IPR_GROUP_STOPPING] = "STOPPING",
};

const char *hp_ipr_action_name(enum hp_ipr_action action)
{
        return (unsigned)action < HP_IPR_ACTION_COUNT ? action_names[action]
                                                      : "?";
}

const char *hp_ipr_group_name(enum hp_ipr_group group)
{
        return (unsigned)group < HP_IPR_GROUP_COUNT ? group_names[group]
                                                    : "?";
}

static struct hp_ipr_decision act(enum hp_ipr_action action, const char *why)
{
        return (struct hp_ipr_decision){ .action = action, .why = why };
}

static bool past(const struct hp_ipr_view *v, uint64_t now)
{
        return v->wait_deadline != 0 && now >= v->wait_deadline;
}

/* A stage ended with every process at 0. */
static struct hp_ipr_decision succeeded(const struct hp_ipr_view *v)
{
        if (v->state == HP_OP_STOPPING)
                return act(HP_IPR_FULL_STOP,
                           v->stage == HP_STAGE_TRAIN
                                   ? "/stop after training ended: nothing "
                                     "to pause"
                                   : "/stop outside training: a pause "
                                     "needs the training processes");
        switch (v->stage) {
        case HP_STAGE_PRE_TRAIN:
                if (v->state == HP_OP_INIT)
                        return act(HP_IPR_START_TRAINING,
                                   "pre-train succeeded");
                return act(HP_IPR_NONE, "pre-train ended; waiting for /stop");
        case HP_STAGE_TRAIN:
                if (v->state == HP_OP_RUNNING)
                        return v->has_post_train ? act(HP_IPR_POST_TRAIN,
                                                       "training succeeded")
                                                 : act(HP_IPR_COMPLETE,
                                                       "training succeeded");
                if (v->state == HP_OP_INIT || v->state == HP_OP_READY)
                        return act(HP_IPR_FAULT,
                                   "the training processes exited before "
                                   "/start released them from the "
                                   "barrier");
                return act(HP_IPR_NONE, "training ended");
        default:
                if (v->state == HP_OP_RUNNING)
                        return act(HP_IPR_COMPLETE, "post-train succeeded");
                return act(HP_IPR_NONE, "post-train ended");
        }
}

/* A stage runs and nothing is wrong with its processes. */
static struct hp_ipr_decision healthy(const struct hp_ipr_view *v,
                                      uint64_t now)
{
        struct hp_ipr_decision d;

        switch (v->state) {
        case HP_OP_INIT:
                if (v->wait != HP_IPR_WAIT_INIT)
                        return act(HP_IPR_NONE, "pre-train runs");
                if (v->all_at_barrier)
                        return act(HP_IPR_READY,
                                   "every local rank is at the barrier");
                if (past(v, now))
                        return act(HP_IPR_FULL_STOP,
                                   "--inprocess-timeout passed before every "
                                   "local rank reached the barrier");
                return act(HP_IPR_NONE, "waiting for the barrier");
        case HP_OP_RUNNING:
                if (v->stage != HP_STAGE_TRAIN)
                        return act(HP_IPR_NONE, "post-train runs");
                if (v->all_at_barrier && v->can_start)
                        return v->ip_table_complete
                                       ? act(HP_IPR_SEND_START,
                                             "/start with every rank at the "
                                             "barrier")
                                       : act(HP_IPR_HOLD,
                                             "the IP table has a null "
                                             "entry; waiting for an /update "
                                             "that fills it");
                if (v->any_failed) {
                        d = act(HP_IPR_FAULT, "a rank reported job_fault");
                        d.arm_local_plr = v->local_plr_requested;
                        return d;
                }
                return act(HP_IPR_NONE, "training runs");
        case HP_OP_STOPPING:
                if (v->stage != HP_STAGE_TRAIN)
                        return act(HP_IPR_FULL_STOP,
                                   v->stage == HP_STAGE_PRE_TRAIN
                                           ? "/stop during pre-train"
                                           : "/stop during post-train");
                if (v->wait != HP_IPR_WAIT_PAUSE)
                        return act(HP_IPR_PAUSE, "/stop during training");
                if (v->clients_missing)
                        return act(HP_IPR_FULL_STOP,
                                   "a local rank dropped its connection "
                                   "during the pause");
                if (v->all_at_barrier)
                        return act(HP_IPR_READY,
                                   "every local rank is back at the "
                                   "barrier");
                if (past(v, now))
                        return act(HP_IPR_FULL_STOP,
                                   "--inprocess-timeout passed before every "
                                   "local rank was back at the barrier");
                return act(HP_IPR_NONE, "waiting for the barrier");
        default:
                return act(HP_IPR_NONE, "nothing to do in this state");
        }
}

struct hp_ipr_decision hp_ipr_decide(const struct hp_ipr_view *v,
                                     uint64_t now_ms)
{
        if (v->state == HP_OP_SHUTDOWN)
                return act(HP_IPR_NONE, "shutting down");
        if (v->group == HP_IPR_GROUP_STOPPING)
                return act(HP_IPR_NONE, "the full stop is under way");
        if (v->plr_armed)
                return act(HP_IPR_FULL_STOP,
                           "a local process-level restart is due");
        switch (v->group) {
        case HP_IPR_GROUP_INIT:
                return act(HP_IPR_START_FIRST, "nothing runs");
        case HP_IPR_GROUP_FAILED:
        case HP_IPR_GROUP_UNHEALTHY:
                if (v->state == HP_OP_RUNNING || v->state == HP_OP_INIT ||
                    v->state == HP_OP_READY)
                        return act(HP_IPR_FAULT,
                                   v->group == HP_IPR_GROUP_FAILED
                                           ? "a process failed"
                                           : "a log rule's verdict");
                if (v->state == HP_OP_STOPPING)
                        return act(HP_IPR_FULL_STOP,
                                   "/stop with a failed process or a "
                                   "verdict on this node");
                return act(HP_IPR_NONE, "waiting for /stop");
        case HP_IPR_GROUP_SUCCEEDED:
                return succeeded(v);
        case HP_IPR_GROUP_HEALTHY:
                return healthy(v, now_ms);
        default:
                return act(HP_IPR_NONE, "?");
        }
}
