/* SPDX-License-Identifier: Apache-2.0 */
/* What the worker socket's files share and nothing outside src/ipc uses. */
#ifndef HYPERPOD_IPC_PRIVATE_H
#define HYPERPOD_IPC_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* A JSON number that is an integer a double holds exactly: a step or a
 * rank, where 1.5 or 1e300 are refused rather than cut. */
bool hp_ipc__json_int(const cJSON *v, int64_t *out);

struct hp_ipc_conn;

/* Logs a connection's first few problems, then mutes it. */
void hp_ipc__conn_warn(struct hp_ipc_conn *c, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
/* A value for a log line: its JSON text, cut short, or "missing". */
const char *hp_ipc__show(const cJSON *v, char *buf, size_t len);

/* listen.c: the directory Python's tempfile.gettempdir() would choose;
 * the removal of dead agents' sockets and private directories there; and
 * the listener bound on the reference's name or a private one. */
const char *hp_ipc__temp_dir(void);
void hp_ipc__remove_stale_sockets(const char *dir);
int hp_ipc__bind_listener(struct hp_ipc_server *s, const char *dir,
                          char *errbuf, size_t errlen);

#endif
