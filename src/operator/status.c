/* SPDX-License-Identifier: Apache-2.0 */
/* The /status body, byte for byte as the reference's agents build it
 * (docs/operator-api.md, GET /status in the table of routes): compact
 * separators, UTF-8 kept, keys in this order and each present only under
 * the reference's condition. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

/* Adds a string that may hold bytes from a worker's line or a request:
 * invalid UTF-8 becomes U+FFFD, so that strict JSON decoders (Python's)
 * read the body. */
static bool add_text(cJSON *doc, const char *key, const char *value)
{
        size_t len = strlen(value) * 3 + 1;
        char *clean = malloc(len);
        bool ok;

        if (clean == NULL)
                return false;
        hp_utf8_repair(value, clean, len);
        ok = cJSON_AddStringToObject(doc, key, clean) != NULL;
        free(clean);
        return ok;
}

char *hp_op_status_render(const struct hp_op_status *st)
{
        const struct hp_plr *plr = st->plr;
        cJSON *doc = cJSON_CreateObject();
        cJSON *transitions;
        char *out = NULL;
        char when[64];

        if (doc == NULL)
                return NULL;
        if (cJSON_AddStringToObject(doc, "status",
                                    hp_op_state_lower(plr->state)) == NULL)
                goto done;
        transitions = cJSON_AddObjectToObject(doc, "transitions");
        if (transitions == NULL)
                goto done;
        for (size_t i = 0; i < plr->first_count; i++) {
                enum hp_op_state s = (enum hp_op_state)plr->first_order[i];
                if (hp_isoformat_utc(plr->entered_us[s], when, sizeof(when)) <
                    0)
                        goto done;
                if (cJSON_AddStringToObject(transitions, hp_op_state_name(s),
                                            when) == NULL)
                        goto done;
        }
        if (plr->reason[0] != '\0' && !add_text(doc, "reason", plr->reason))
                goto done;
        if (plr->message[0] != '\0' &&
            !add_text(doc, "message", plr->message))
                goto done;
        if (cJSON_AddStringToObject(doc, "restartMode",
                                    !st->inprocess ? "process_level_restart"
                                    : st->restart_mode != NULL
                                            ? st->restart_mode
                                            : "in_process_restart") == NULL)
                goto done;
        if (st->inprocess && st->worker_data != NULL &&
            !cJSON_AddItemToObject(doc, "worker_data",
                                   cJSON_Duplicate(st->worker_data, true)))
                goto done;
        if (st->inprocess &&
            !cJSON_AddItemToObject(doc, "rank_labels",
                                   st->rank_labels != NULL
                                           ? cJSON_Duplicate(st->rank_labels,
                                                             true)
                                           : cJSON_CreateObject()))
                goto done;
        if (st->ip_version != NULL &&
            !add_text(doc, "ipversion", st->ip_version))
                goto done;
        if (st->progress != NULL &&
            !cJSON_AddItemToObject(doc, "progress",
                                   cJSON_Duplicate(st->progress, true)))
                goto done;
        if (st->agent_version != NULL && st->agent_version[0] != '\0' &&
            cJSON_AddStringToObject(doc, "agent_version",
                                    st->agent_version) == NULL)
                goto done;
        if (st->assigned_rank >= 0) {
                char rank[16];
                snprintf(rank, sizeof(rank), "%d", st->assigned_rank);
                if (cJSON_AddStringToObject(doc, "assigned_rank", rank) ==
                    NULL)
                        goto done;
        }
        if (cJSON_AddStringToObject(doc, "spare",
                                    st->spare ? "True" : "False") == NULL)
                goto done;
        if (st->inprocess && st->priority &&
            cJSON_AddStringToObject(doc, "priority", "True") == NULL)
                goto done;
        out = cJSON_PrintUnformatted(doc);
done:
        cJSON_Delete(doc);
        if (out == NULL)
                errno = ENOMEM;
        return out;
}
