/* SPDX-License-Identifier: Apache-2.0 */
/* Where the agent meets its driver: the driver main attached
 * (hp_agent_set_events: self-driven mode's or the operator's), or none.
 * The agent's files report to the driver through these functions only;
 * nothing here calls back into them. */
#include <stdbool.h>
#include <stddef.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

static void detached_stage_ended(struct hp_agent *a, enum hp_stage stage,
                                 enum hp_group_result result,
                                 const struct hp_group *g, void *ctx)
{
        (void)a;
        (void)stage;
        (void)result;
        (void)g;
        (void)ctx;
}

static void detached_rule_verdict(struct hp_agent *a,
                                  const struct hp_verdict *v, void *ctx)
{
        (void)a;
        (void)v;
        (void)ctx;
}

/* Before a driver is attached (hp_agent_run, the operator) and after it
 * let go: nothing follows the agent, and it decides nothing itself. */
static const struct hp_agent_events detached = {
        .stage_ended = detached_stage_ended,
        .rule_verdict = detached_rule_verdict,
};

void hp_agent_set_events(struct hp_agent *a,
                         const struct hp_agent_events *events, void *ctx)
{
        a->events = events != NULL ? events : &detached;
        a->events_ctx = events != NULL ? ctx : NULL;
}

void hp_agent__preflight_passed(struct hp_agent *a)
{
        if (a->events->preflight_passed != NULL)
                a->events->preflight_passed(a, a->events_ctx);
}

void hp_agent__node_fault(struct hp_agent *a)
{
        if (a->events->node_fault != NULL)
                a->events->node_fault(a, a->events_ctx);
}

bool hp_agent__preflight_unavailable(struct hp_agent *a, const char *reason)
{
        return a->events->preflight_unavailable != NULL &&
               a->events->preflight_unavailable(a, reason, a->events_ctx);
}
