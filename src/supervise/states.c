/* SPDX-License-Identifier: Apache-2.0 */
/* The worker's states and the group's stop phases: their names and the
 * transitions a stop may take, as pure tables that group.c drives and the
 * unit tests read. */
#include <stdbool.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

const char *hp_worker__state_name(enum hp_worker_state state)
{
        static const char *const names[] = {
                [HP_WORKER_RUNNING] = "RUNNING",
                [HP_WORKER_STOPPING] = "STOPPING",
                [HP_WORKER_KILLING] = "KILLING",
                [HP_WORKER_EXITED] = "EXITED",
                [HP_WORKER_DONE] = "DONE",
        };
        return names[state];
}

const char *hp_group__phase_name(enum hp_kill_phase phase)
{
        static const char *const names[] = {
                [HP_KILL_NONE] = "NONE",
                [HP_KILL_SIGNALLED] = "SIGNALLED",
                [HP_KILL_KILLED] = "KILLED",
                [HP_KILL_FORCED] = "FORCED",
                [HP_KILL_GAVE_UP] = "GAVE_UP",
        };
        return phase <= HP_KILL_GAVE_UP ? names[phase] : "?";
}

enum hp_kill_phase hp_group__phase_after_timeout(enum hp_kill_phase phase)
{
        switch (phase) {
        case HP_KILL_SIGNALLED:
                return HP_KILL_KILLED;
        case HP_KILL_KILLED:
                return HP_KILL_FORCED;
        case HP_KILL_FORCED:
                return HP_KILL_GAVE_UP;
        default:
                return phase;
        }
}

bool hp_group__phase_allowed(enum hp_kill_phase from, enum hp_kill_phase to)
{
        /* A new group starts over from any phase; a stop only goes
         * forward, one step at a time. */
        if (to == HP_KILL_NONE)
                return from <= HP_KILL_GAVE_UP;
        if (from == HP_KILL_NONE)
                return to == HP_KILL_SIGNALLED;
        return from != to && hp_group__phase_after_timeout(from) == to;
}
