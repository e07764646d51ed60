/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside src/operator only. */
#ifndef HP_OPERATOR_PRIVATE_H
#define HP_OPERATOR_PRIVATE_H

#include "hyperpod/operator.h"

/* Moves the state machine and logs it; false (logged) when the table
 * refuses the transition. */
bool hp_op__set_state(struct hp_operator *op, enum hp_op_state to,
                      const char *reason, const char *message);
/* Acts on the current state from the loop, after the response. */
void hp_op__kick(struct hp_operator *op);
/* The FAULTED message for a node fault, whichever driver reports it,
 * naming its source: the NCCL pre-flight check and its figures, or the
 * kernel log's path and the line that matched. */
void hp_op__node_fault_message(const struct hp_operator *op,
                               const char *reason, const char *line,
                               char *msg, size_t len);
/* The FAULTED reason and message for a rule's verdict, and the message
 * for a worker's failure, whichever driver reports them: both end with
 * who went silent, so the operator's /status names the first silent
 * rank as the agent's log does. */
void hp_op__verdict_message(struct hp_agent *a, const struct hp_verdict *v,
                            char *reason, size_t reason_len, char *msg,
                            size_t len);
void hp_op__failure_message(struct hp_agent *a, const struct hp_group *g,
                            char *msg, size_t len);
void hp_op__round_from_job(const struct hp_operator *op,
                           struct hp_rdzv_info *round);
/* The Prometheus text exposition of the agent (malloc'd), or NULL. */
char *hp_op__metrics_render(const struct hp_operator *op, size_t *len);
/* --metrics-port's handler: GET /metrics, nothing else. */
void hp_op__metrics_handle(void *ctx, const struct hp_httpd_request *req,
                           struct hp_httpd_response *res);

/* In-process restart (inprocess.c). */
int hp_op__ipr_init(struct hp_operator *op, char *errbuf, size_t len);
void hp_op__ipr_close(struct hp_operator *op);
/* Acts on the state after a request or an event (from the kick timer). */
void hp_op__ipr_kick(struct hp_operator *op);
/* /start and /update: the spare flag and priority
 * (docs/inprocess-restart-and-checkpoints.md, "Restart modes and full
 * stops"; /status's priority in docs/operator-api.md). */
void hp_op__ipr_spare(struct hp_operator *op, bool spare, int fault_count);
/* /stop's restart_mode: process_level_restart arms a full stop. */
void hp_op__ipr_stop_mode(struct hp_operator *op, const char *mode);
/* /update: job_rank_info to every rank; 0, or -1 (logged). */
int hp_op__ipr_update(struct hp_operator *op);
/* The IPR keys of /status; *owned is for the caller to cJSON_Delete. */
void hp_op__ipr_status(const struct hp_operator *op, struct hp_op_status *st,
                       cJSON **owned);

#endif
