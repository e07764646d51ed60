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
void hp_op__round_from_job(const struct hp_operator *op,
                           struct hp_rdzv_info *round);
/* The Prometheus text exposition of the agent (malloc'd), or NULL. */
char *hp_op__metrics_render(const struct hp_operator *op, size_t *len);

#endif
