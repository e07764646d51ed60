/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's lifecycle (see enum hp_agent_state): one table of the
 * transitions it allows, and the one function that changes the state. */
#include <stdbool.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

void hp_agent_finish(struct hp_agent *a, int exit_code)
{
        hp_agent__set_state(a, HP_AGENT_FINISHED, "finish");
        a->exit_code = exit_code;
        uv_stop(a->loop);
}

const char *hp_agent_state_name(enum hp_agent_state state)
{
        static const char *const names[] = {
                [HP_AGENT_IDLE] = "IDLE",
                [HP_AGENT_PREFLIGHT] = "PREFLIGHT",
                [HP_AGENT_RUNNING] = "RUNNING",
                [HP_AGENT_STOPPING] = "STOPPING",
                [HP_AGENT_FINISHED] = "FINISHED",
        };
        return state < HP_AGENT_STATE_COUNT ? names[state] : "?";
}

bool hp_agent__state_allowed(enum hp_agent_state from, enum hp_agent_state to)
{
        enum {
                I = 1 << HP_AGENT_IDLE,
                P = 1 << HP_AGENT_PREFLIGHT,
                R = 1 << HP_AGENT_RUNNING,
                S = 1 << HP_AGENT_STOPPING,
                F = 1 << HP_AGENT_FINISHED
        };
        /* Where each state may go. Finishing is allowed from anywhere:
         * a node fault, a failed rendezvous or the operator's /shutdown
         * may end the agent in any state. */
        static const unsigned next[HP_AGENT_STATE_COUNT] = {
                [HP_AGENT_IDLE] = P | R | F,    [HP_AGENT_PREFLIGHT] = I | F,
                [HP_AGENT_RUNNING] = I | S | F, [HP_AGENT_STOPPING] = F,
                [HP_AGENT_FINISHED] = F,
        };

        if (from >= HP_AGENT_STATE_COUNT || to >= HP_AGENT_STATE_COUNT)
                return false;
        return (next[from] & (1u << to)) != 0;
}

void hp_agent__set_state(struct hp_agent *a, enum hp_agent_state to,
                         const char *why)
{
        /* The loop is ending: what still happens on the way out (a group
         * that ends while the handles close) leaves the agent finished. */
        if (a->state == HP_AGENT_FINISHED && to != HP_AGENT_FINISHED) {
                hp_log_debug("agent: FINISHED: %s, stays FINISHED", why);
                return;
        }
        if (!hp_agent__state_allowed(a->state, to))
                hp_log_error("bug: agent: %s → %s → %s is not a transition",
                             hp_agent_state_name(a->state), why,
                             hp_agent_state_name(to));
        else if (a->state != to)
                hp_log_debug("agent: %s → %s → %s",
                             hp_agent_state_name(a->state), why,
                             hp_agent_state_name(to));
        a->state = to;
}
