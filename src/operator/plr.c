/* SPDX-License-Identifier: Apache-2.0 */
/* The agent state machine of the reference's agents: one table for the
 * process-level-restart agent, one for the in-process-restart agent.
 * Pure: the caller passes the wall clock. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

static const char *const upper_names[HP_OP_STATE_COUNT] = {
        [HP_OP_INIT] = "INIT",         [HP_OP_READY] = "READY",
        [HP_OP_RUNNING] = "RUNNING",   [HP_OP_COMPLETED] = "COMPLETED",
        [HP_OP_FAULTED] = "FAULTED",   [HP_OP_STOPPING] = "STOPPING",
        [HP_OP_SHUTDOWN] = "SHUTDOWN",
};

static const char *const lower_names[HP_OP_STATE_COUNT] = {
        [HP_OP_INIT] = "init",         [HP_OP_READY] = "ready",
        [HP_OP_RUNNING] = "running",   [HP_OP_COMPLETED] = "completed",
        [HP_OP_FAULTED] = "faulted",   [HP_OP_STOPPING] = "stopping",
        [HP_OP_SHUTDOWN] = "shutdown",
};

#define BIT(s) (1u << (s))

/* PLR_VALID_TRANSITIONS (docs/operator-api.md, "States"). */
static const unsigned allowed[HP_OP_STATE_COUNT] = {
        [HP_OP_INIT] = BIT(HP_OP_READY) | BIT(HP_OP_SHUTDOWN),
        [HP_OP_READY] = BIT(HP_OP_RUNNING) | BIT(HP_OP_SHUTDOWN),
        [HP_OP_RUNNING] = BIT(HP_OP_COMPLETED) | BIT(HP_OP_FAULTED) |
                          BIT(HP_OP_STOPPING) | BIT(HP_OP_SHUTDOWN),
        [HP_OP_FAULTED] = BIT(HP_OP_STOPPING) | BIT(HP_OP_SHUTDOWN),
        [HP_OP_STOPPING] = BIT(HP_OP_READY),
        [HP_OP_COMPLETED] = BIT(HP_OP_SHUTDOWN) | BIT(HP_OP_STOPPING),
        [HP_OP_SHUTDOWN] = 0,
};

/* IPR_VALID_TRANSITIONS (docs/inprocess-restart-and-checkpoints.md,
 * "States"): a full stop goes back to INIT from anywhere but COMPLETED, and
 * a fault may come before any /start.
 * Beyond the reference, /shutdown ends STOPPING too: a pause without
 * --inprocess-timeout waits for ranks that may never come back to the
 * barrier, and the operator must be able to end that. */
static const unsigned allowed_ipr[HP_OP_STATE_COUNT] = {
        [HP_OP_INIT] = BIT(HP_OP_READY) | BIT(HP_OP_SHUTDOWN) |
                       BIT(HP_OP_FAULTED),
        [HP_OP_READY] = BIT(HP_OP_INIT) | BIT(HP_OP_RUNNING) |
                        BIT(HP_OP_SHUTDOWN) | BIT(HP_OP_FAULTED),
        [HP_OP_RUNNING] = BIT(HP_OP_INIT) | BIT(HP_OP_COMPLETED) |
                          BIT(HP_OP_FAULTED) | BIT(HP_OP_STOPPING) |
                          BIT(HP_OP_SHUTDOWN),
        [HP_OP_FAULTED] = BIT(HP_OP_INIT) | BIT(HP_OP_STOPPING) |
                          BIT(HP_OP_SHUTDOWN),
        [HP_OP_STOPPING] = BIT(HP_OP_READY) | BIT(HP_OP_INIT) |
                           BIT(HP_OP_SHUTDOWN),
        [HP_OP_COMPLETED] = BIT(HP_OP_SHUTDOWN) | BIT(HP_OP_STOPPING),
        [HP_OP_SHUTDOWN] = 0,
};

const char *hp_op_state_name(enum hp_op_state state)
{
        return (unsigned)state < HP_OP_STATE_COUNT ? upper_names[state] : "?";
}

const char *hp_op_state_lower(enum hp_op_state state)
{
        return (unsigned)state < HP_OP_STATE_COUNT ? lower_names[state] : "?";
}

bool hp_plr_allowed(enum hp_op_state from, enum hp_op_state to)
{
        if ((unsigned)from >= HP_OP_STATE_COUNT ||
            (unsigned)to >= HP_OP_STATE_COUNT)
                return false;
        return (allowed[from] & BIT(to)) != 0;
}

bool hp_ipr_allowed(enum hp_op_state from, enum hp_op_state to)
{
        if ((unsigned)from >= HP_OP_STATE_COUNT ||
            (unsigned)to >= HP_OP_STATE_COUNT)
                return false;
        return (allowed_ipr[from] & BIT(to)) != 0;
}

static void enter(struct hp_plr *plr, enum hp_op_state to, int64_t now_us)
{
        if (plr->entered_us[to] < 0)
                plr->first_order[plr->first_count++] = (uint8_t)to;
        plr->entered_us[to] = now_us;
        plr->entries[to]++;
        plr->state = to;
}

void hp_plr_init(struct hp_plr *plr, int64_t now_us)
{
        memset(plr, 0, sizeof(*plr));
        for (int s = 0; s < HP_OP_STATE_COUNT; s++)
                plr->entered_us[s] = -1;
        enter(plr, HP_OP_INIT, now_us);
}

int hp_plr_transition(struct hp_plr *plr, enum hp_op_state to, int64_t now_us,
                      const char *reason, const char *message)
{
        if (!(plr->inprocess ? hp_ipr_allowed(plr->state, to)
                             : hp_plr_allowed(plr->state, to)))
                return -EPERM;
        enter(plr, to, now_us);
        snprintf(plr->reason, sizeof(plr->reason), "%s",
                 reason ? reason : "");
        snprintf(plr->message, sizeof(plr->message), "%s",
                 message ? message : "");
        return 0;
}

int hp_isoformat_utc(int64_t us, char *buf, size_t len)
{
        time_t secs = (time_t)(us / 1000000);
        long micros = (long)(us % 1000000);
        struct tm tm;
        char date[32];

        if (micros < 0) {
                micros += 1000000;
                secs--;
        }
        if (gmtime_r(&secs, &tm) == NULL)
                return -EOVERFLOW;
        strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
        if (micros == 0)
                return hp_snprintf(buf, len, "%s+00:00", date);
        return hp_snprintf(buf, len, "%s.%06ld+00:00", date, micros);
}
