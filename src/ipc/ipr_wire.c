/* SPDX-License-Identifier: Apache-2.0 */
/* In-process restart's messages from the workers
 * (docs/inprocess-restart-and-checkpoints.md, "One cycle"): each updates
 * the per-rank table (ranks.c) and tells the operator, which decides. Bad
 * fields are named in a warning; the reference's IPC thread died on a
 * job_fault without a rank, here a fault always counts for the local
 * rank that sent it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"

#include "ipc-private.h"

static void changed(struct hp_ipc_server *s)
{
        if (s->on_change != NULL)
                s->on_change(s->change_ctx);
}

/* The global rank a message names, or -1 with a warning. */
static int64_t message_rank(struct hp_ipc_client *cl, const cJSON *msg,
                            const char *type)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, "rank");
        char shown[80];
        int64_t rank;

        if (hp_ipc__json_int(v, &rank) && rank >= 0)
                return rank;
        hp_ipc__conn_warn(cl->conn,
                          "%s from local rank %d: \"rank\" is %s, "
                          "not a global rank; kept as unknown (-1 "
                          "in /status)",
                          type, cl->local_rank,
                          hp_ipc__show(v, shown, sizeof(shown)));
        return -1;
}

/* A string field, NULL when absent or null; a warning for other types. */
static const char *message_text(struct hp_ipc_client *cl, const cJSON *msg,
                                const char *type, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);
        char shown[80];

        if (cJSON_IsString(v))
                return v->valuestring;
        if (v != NULL && !cJSON_IsNull(v))
                hp_ipc__conn_warn(cl->conn,
                                  "%s from local rank %d: \"%s\" "
                                  "is %s, not a string; left out",
                                  type, cl->local_rank, key,
                                  hp_ipc__show(v, shown, sizeof(shown)));
        return NULL;
}

static void at_barrier_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                          const cJSON *msg, void *ctx)
{
        hp_log_debug("worker socket: local rank %d is at the barrier%s",
                     cl->local_rank,
                     s->ranks.waiting ? "" : " (counted at the next wait)");
        hp_ipc_ranks_at_barrier(&s->ranks, cl->local_rank);
        changed(s);
}

static void past_barrier_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                            const cJSON *msg, void *ctx)
{
        /* Only a job_start lets a rank past: a stray message (a second
         * client, a call twice) would leave /start waiting for a barrier
         * the rank is no longer counted at. */
        if (hp_ipc_ranks_past_barrier(&s->ranks, cl->local_rank) < 0) {
                s->stats.ignored++;
                hp_ipc__conn_warn(cl->conn,
                                  "past_rcb_barrier from local "
                                  "rank %d, which no job_start "
                                  "released; ignored",
                                  cl->local_rank);
                return;
        }
        hp_log_info("worker socket: local rank %d passed the barrier",
                    cl->local_rank);
        changed(s);
}

static void job_data_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                        const cJSON *msg, void *ctx)
{
        int64_t rank = message_rank(cl, msg, "job_data");

        if (hp_ipc_ranks_set_data(&s->ranks, cl->local_rank, rank,
                                  cJSON_GetObjectItemCaseSensitive(msg,
                                                                   "data")) <
            0)
                hp_ipc__conn_warn(cl->conn,
                                  "job_data from local rank %d: "
                                  "out of memory; data dropped",
                                  cl->local_rank);
        changed(s);
}

static void job_fault_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                         const cJSON *msg, void *ctx)
{
        int64_t rank = message_rank(cl, msg, "job_fault");
        enum hp_restart_mode mode = HP_RESTART_IN_PROCESS;
        const char *name = message_text(cl, msg, "job_fault", "restart_mode");
        const char *reason = message_text(cl, msg, "job_fault", "reason");
        const char *message = message_text(cl, msg, "job_fault", "message");
        char global[32] = "";

        if (name != NULL && hp_restart_mode_parse(name, &mode) < 0)
                hp_ipc__conn_warn(cl->conn,
                                  "job_fault from local rank %d: "
                                  "restart_mode \"%.64s\" is none "
                                  "of in_process_restart, "
                                  "process_level_restart, "
                                  "job_level_restart, "
                                  "local_process_level_restart; "
                                  "in_process_restart assumed",
                                  cl->local_rank, name);
        /* A rank the message did not give is left out, not printed -1. */
        if (rank >= 0)
                snprintf(global, sizeof(global), " (rank %" PRId64 ")", rank);
        hp_log_warn("worker socket: local rank %d%s reported a fault (%s): "
                    "%s%s%s",
                    cl->local_rank, global, hp_restart_mode_name(mode),
                    reason ? reason : "no reason", message ? ": " : "",
                    message ? message : "");
        if (hp_ipc_ranks_fail(&s->ranks, cl->local_rank, rank, mode, reason,
                              message) < 0)
                hp_log_error("worker socket: out of memory for the fault's "
                             "reason of local rank %d; it counts without",
                             cl->local_rank);
        changed(s);
}

static void labels_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                      const cJSON *msg, void *ctx)
{
        const cJSON *labels = cJSON_GetObjectItemCaseSensitive(msg, "labels");
        char shown[80];

        if (!cJSON_IsObject(labels)) {
                s->stats.ignored++;
                hp_ipc__conn_warn(cl->conn,
                                  "rank_labels from local rank %d: "
                                  "\"labels\" is %s, not an "
                                  "object; ignored",
                                  cl->local_rank,
                                  hp_ipc__show(labels, shown, sizeof(shown)));
                return;
        }
        if (hp_ipc_ranks_set_labels(&s->ranks, labels) < 0) {
                hp_ipc__conn_warn(cl->conn, "rank_labels: out of memory");
                return;
        }
        changed(s);
}

int hp_ipc_inprocess_enable(struct hp_ipc_server *s,
                            void (*on_change)(void *ctx), void *ctx)
{
        static const struct {
                const char *type;
                hp_ipc_handler_fn fn;
        } handlers[] = {
                { "at_rcb_barrier", at_barrier_cb },
                { "past_rcb_barrier", past_barrier_cb },
                { "job_data", job_data_cb },
                { "job_fault", job_fault_cb },
                { "rank_labels", labels_cb },
        };

        for (size_t i = 0; i < HP_ARRAY_SIZE(handlers); i++) {
                int r = hp_ipc_server_on(s, handlers[i].type, handlers[i].fn,
                                         NULL);
                if (r < 0)
                        return r;
        }
        s->on_change = on_change;
        s->change_ctx = ctx;
        return 0;
}

void hp_ipc_inprocess_disable(struct hp_ipc_server *s)
{
        s->on_change = NULL;
        s->change_ctx = NULL;
}
