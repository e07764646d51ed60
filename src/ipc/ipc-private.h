/* What the worker socket's files share and nothing outside src/ipc uses. */
#ifndef HYPERPOD_IPC_PRIVATE_H
#define HYPERPOD_IPC_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* A JSON number that is an integer a double holds exactly: a step or a
 * rank, where 1.5 or 1e300 are refused rather than cut. */
bool hp_ipc__json_int(const cJSON *v, int64_t *out);

#endif
