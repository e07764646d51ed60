/* SPDX-License-Identifier: Apache-2.0 */
/* In-process restart's per-rank worker table
 * (docs/inprocess-restart-and-checkpoints.md). Pure: the socket's handlers
 * feed it, the operator reads it; no clock, no I/O. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"

static const char *const mode_names[HP_RESTART_MODE_COUNT] = {
        [HP_RESTART_IN_PROCESS] = "in_process_restart",
        [HP_RESTART_PROCESS_LEVEL] = "process_level_restart",
        [HP_RESTART_JOB_LEVEL] = "job_level_restart",
        [HP_RESTART_LOCAL_PROCESS_LEVEL] = "local_process_level_restart",
};

const char *hp_restart_mode_name(enum hp_restart_mode mode)
{
        return (unsigned)mode < HP_RESTART_MODE_COUNT ? mode_names[mode]
                                                      : "?";
}

int hp_restart_mode_parse(const char *name, enum hp_restart_mode *out)
{
        for (int i = 0; i < HP_RESTART_MODE_COUNT; i++) {
                if (strcmp(name, mode_names[i]) == 0) {
                        *out = (enum hp_restart_mode)i;
                        return 0;
                }
        }
        return -EINVAL;
}

const char *hp_ipc_rank_state_name(enum hp_ipc_rank_state state)
{
        switch (state) {
        case HP_IPC_RANK_HEALTHY:
                return "HEALTHY";
        case HP_IPC_RANK_AT_BARRIER:
                return "AT_BARRIER";
        case HP_IPC_RANK_PAST_BARRIER:
                return "PAST_BARRIER";
        case HP_IPC_RANK_FAILED:
                return "FAILED";
        }
        return "?";
}

int hp_ipc_ranks_init(struct hp_ipc_ranks *t, int nranks)
{
        memset(t, 0, sizeof(*t));
        if (nranks < 1)
                return -EINVAL;
        t->ranks = calloc((size_t)nranks, sizeof(*t->ranks));
        t->labels = cJSON_CreateObject();
        if (t->ranks == NULL || t->labels == NULL) {
                free(t->ranks);
                cJSON_Delete(t->labels);
                memset(t, 0, sizeof(*t));
                return -ENOMEM;
        }
        t->nranks = nranks;
        for (int i = 0; i < nranks; i++)
                t->ranks[i].rank = t->ranks[i].group_rank = -1;
        return 0;
}

static void clear_fault(struct hp_ipc_rank *r)
{
        free(r->reason);
        free(r->message);
        r->reason = r->message = NULL;
        r->failed = false;
        r->mode = HP_RESTART_IN_PROCESS;
}

void hp_ipc_ranks_free(struct hp_ipc_ranks *t)
{
        for (int i = 0; i < t->nranks; i++) {
                clear_fault(&t->ranks[i]);
                cJSON_Delete(t->ranks[i].data);
        }
        free(t->ranks);
        cJSON_Delete(t->labels);
        memset(t, 0, sizeof(*t));
}

void hp_ipc_ranks_at_barrier(struct hp_ipc_ranks *t, int lr)
{
        struct hp_ipc_rank *r = &t->ranks[lr];

        r->held = true;
        r->released = false;
        if (t->waiting)
                r->state = HP_IPC_RANK_AT_BARRIER;
        else
                r->queued = true;
}

int hp_ipc_ranks_wait_begin(struct hp_ipc_ranks *t)
{
        int n = 0;

        t->waiting = true;
        for (int i = 0; i < t->nranks; i++) {
                struct hp_ipc_rank *r = &t->ranks[i];
                /* A rank held since an earlier wait never answers the
                 * pause's job_fault: it is at the barrier already. */
                if (r->queued || r->held)
                        r->state = HP_IPC_RANK_AT_BARRIER;
                r->queued = false;
                if (r->state == HP_IPC_RANK_AT_BARRIER)
                        n++;
        }
        return n;
}

void hp_ipc_ranks_wait_end(struct hp_ipc_ranks *t)
{
        t->waiting = false;
}

void hp_ipc_ranks_release(struct hp_ipc_ranks *t, int lr)
{
        t->ranks[lr].held = false;
        t->ranks[lr].released = true;
}

int hp_ipc_ranks_past_barrier(struct hp_ipc_ranks *t, int lr)
{
        struct hp_ipc_rank *r = &t->ranks[lr];

        if (!r->released)
                return -EPROTO;
        cJSON_Delete(r->data);
        r->data = NULL;
        r->state = HP_IPC_RANK_PAST_BARRIER;
        r->failed = false;
        r->mode = HP_RESTART_IN_PROCESS;
        return 0;
}

int hp_ipc_ranks_list(const struct hp_ipc_ranks *t,
                      enum hp_ipc_rank_state state, bool is, char *buf,
                      size_t len)
{
        size_t used = 0;
        int n = 0;

        if (len > 0)
                buf[0] = '\0';
        for (int i = 0; i < t->nranks; i++) {
                if ((t->ranks[i].state == state) != is)
                        continue;
                if (used < len)
                        used += (size_t)snprintf(buf + used, len - used,
                                                 "%s%d", n ? ", " : "", i);
                n++;
        }
        return n;
}

/* Python's floor division, which the reference's rank // nproc is. */
static int64_t group_of(int64_t rank, int nproc)
{
        int64_t q = rank / nproc;

        if (rank % nproc != 0 && rank < 0)
                q--;
        return q;
}

int hp_ipc_ranks_fail(struct hp_ipc_ranks *t, int lr, int64_t rank,
                      enum hp_restart_mode mode, const char *reason,
                      const char *message)
{
        struct hp_ipc_rank *r = &t->ranks[lr];

        clear_fault(r);
        r->rank = rank;
        r->group_rank = rank < 0 ? -1 : group_of(rank, t->nranks);
        r->mode = mode;
        r->state = HP_IPC_RANK_FAILED;
        r->failed = true;
        if (reason != NULL && (r->reason = strdup(reason)) == NULL)
                return -ENOMEM;
        if (message != NULL && (r->message = strdup(message)) == NULL)
                return -ENOMEM;
        return 0;
}

int hp_ipc_ranks_set_data(struct hp_ipc_ranks *t, int lr, int64_t rank,
                          const cJSON *data)
{
        struct hp_ipc_rank *r = &t->ranks[lr];

        r->rank = rank;
        r->group_rank = rank < 0 ? -1 : group_of(rank, t->nranks);
        cJSON_Delete(r->data);
        r->data = NULL;
        if (data == NULL || cJSON_IsNull(data))
                return 0;
        r->data = cJSON_Duplicate(data, true);
        return r->data != NULL ? 0 : -ENOMEM;
}

void hp_ipc_ranks_set_rank_info(struct hp_ipc_ranks *t, int lr, int64_t rank,
                                int64_t group_rank)
{
        t->ranks[lr].rank = rank;
        t->ranks[lr].group_rank = group_rank;
}

int hp_ipc_ranks_set_labels(struct hp_ipc_ranks *t, const cJSON *labels)
{
        cJSON *copy = cJSON_Duplicate(labels, true);

        if (copy == NULL)
                return -ENOMEM;
        cJSON_Delete(t->labels);
        t->labels = copy;
        return 0;
}

void hp_ipc_ranks_reset(struct hp_ipc_ranks *t, bool clear_data)
{
        for (int i = 0; i < t->nranks; i++) {
                struct hp_ipc_rank *r = &t->ranks[i];
                clear_fault(r);
                r->state = HP_IPC_RANK_HEALTHY;
                r->queued = r->held = r->released = false;
                r->rank = r->group_rank = -1;
                if (clear_data) {
                        cJSON_Delete(r->data);
                        r->data = NULL;
                }
        }
}

bool hp_ipc_ranks_all_at_barrier(const struct hp_ipc_ranks *t)
{
        for (int i = 0; i < t->nranks; i++)
                if (t->ranks[i].state != HP_IPC_RANK_AT_BARRIER)
                        return false;
        return t->nranks > 0;
}

bool hp_ipc_ranks_any_failed(const struct hp_ipc_ranks *t)
{
        for (int i = 0; i < t->nranks; i++)
                if (t->ranks[i].state == HP_IPC_RANK_FAILED)
                        return true;
        return false;
}

bool hp_ipc_ranks_local_plr(const struct hp_ipc_ranks *t)
{
        for (int i = 0; i < t->nranks; i++)
                if (t->ranks[i].mode == HP_RESTART_LOCAL_PROCESS_LEVEL)
                        return true;
        return false;
}

int hp_ipc_ranks_operator_mode(const struct hp_ipc_ranks *t)
{
        bool plr = false;

        for (int i = 0; i < t->nranks; i++) {
                if (t->ranks[i].mode == HP_RESTART_JOB_LEVEL)
                        return HP_RESTART_JOB_LEVEL;
                if (t->ranks[i].mode == HP_RESTART_PROCESS_LEVEL)
                        plr = true;
        }
        return plr ? HP_RESTART_PROCESS_LEVEL : -1;
}

cJSON *hp_ipc_ranks_worker_data(const struct hp_ipc_ranks *t)
{
        cJSON *list = NULL;

        for (int i = 0; i < t->nranks; i++) {
                const struct hp_ipc_rank *r = &t->ranks[i];
                cJSON *item;

                if (r->data == NULL)
                        continue;
                if (list == NULL && (list = cJSON_CreateArray()) == NULL)
                        goto oom;
                item = cJSON_CreateObject();
                if (item == NULL || !cJSON_AddItemToArray(list, item))
                        goto oom_item;
                if (cJSON_AddNumberToObject(item, "rank", (double)r->rank) ==
                            NULL ||
                    cJSON_AddNumberToObject(item, "group_rank",
                                            (double)r->group_rank) == NULL ||
                    cJSON_AddNumberToObject(item, "local_rank", i) == NULL ||
                    cJSON_AddBoolToObject(item, "failed", r->failed) ==
                            NULL ||
                    !cJSON_AddItemToObject(item, "data",
                                           cJSON_Duplicate(r->data, true)))
                        goto oom;
                continue;
oom_item:
                cJSON_Delete(item);
                goto oom;
        }
        return list;
oom:
        cJSON_Delete(list);
        errno = ENOMEM;
        return NULL;
}

int hp_ipc_ranks_fault(const struct hp_ipc_ranks *t, char *reason,
                       size_t reason_len, char *message, size_t message_len)
{
        size_t used = 0;
        bool any = false;

        for (int i = 0; i < t->nranks; i++) {
                const struct hp_ipc_rank *r = &t->ranks[i];
                if (r->state != HP_IPC_RANK_FAILED)
                        continue;
                any = true;
                if (r->reason != NULL && r->reason[0] != '\0') {
                        snprintf(reason, reason_len, "%s", r->reason);
                        snprintf(message, message_len, "%s",
                                 r->message ? r->message : "");
                        return 0;
                }
        }
        if (!any)
                return -ENOENT;
        snprintf(reason, reason_len, "WorkerReportedFault");
        used = (size_t)snprintf(message, message_len,
                                "The processes reported a failure on ranks ");
        for (int i = 0, n = 0; i < t->nranks && used < message_len; i++) {
                if (t->ranks[i].state != HP_IPC_RANK_FAILED)
                        continue;
                /* A rank the fault did not name: its local rank. */
                if (t->ranks[i].rank < 0)
                        used += (size_t)snprintf(message + used,
                                                 message_len - used,
                                                 "%s(local rank %d)",
                                                 n++ ? ", " : "", i);
                else
                        used += (size_t)snprintf(message + used,
                                                 message_len - used, "%s%lld",
                                                 n++ ? ", " : "",
                                                 (long long)t->ranks[i].rank);
        }
        return 0;
}
