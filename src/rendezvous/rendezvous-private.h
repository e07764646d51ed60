/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside the rendezvous module only. */
#ifndef HP_RENDEZVOUS_PRIVATE_H
#define HP_RENDEZVOUS_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hyperpod/rendezvous.h"

/* The error exit of a function that releases what it holds at its label
 * out: the reason into errbuf, HP_ECONFIG into r. */
#define FAIL_OUT(...)                                                        \
        do {                                                                 \
                snprintf(errbuf, errlen, __VA_ARGS__);                       \
                r = HP_ECONFIG;                                              \
                goto out;                                                    \
        } while (0)

/* Parses the --rdzv-conf keys of the slurm and resource-config backends
 * into rdzv->opt; an unknown key or a bad value is HP_ECONFIG. */
int hp_rdzv__options_parse(struct hp_rdzv *rdzv, char *errbuf, size_t errlen);

/* The backends' rounds: fill nnodes, node_rank, master_addr and
 * master_port of out. */
int hp_rdzv__slurm_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out,
                        char *errbuf, size_t errlen);
int hp_rdzv__resource_config_next(struct hp_rdzv *rdzv,
                                  struct hp_rdzv_info *out, char *errbuf,
                                  size_t errlen);

/* The c10d round (c10d.c): hosts the store when this agent should, joins
 * the round at the endpoint and waits until --nnodes agents have. */
int hp_rdzv__c10d_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out,
                       char *errbuf, size_t errlen);
void hp_rdzv__c10d_close(struct hp_rdzv *rdzv, bool succeeded);

/* The store key of round gen's part: /hyperpodrun/rdzv/<id>/<gen>/<what>
 * (c10d.c; coord.c watches the "end" key). */
void hp_rdzv__round_key(const struct hp_rdzv *rdzv, int gen, const char *what,
                        char *key, size_t len);

/* The keep-alive's judge (coord.c): the beat counts of a round's nodes
 * as this agent last read them, and since when (its own clock, ms). */
/* The count of a node whose job succeeded: it beats no more, and is not
 * lost. */
#define HP_RDZV_BEAT_DONE INT64_MAX
struct hp_rdzv_beats {
        int nodes;
        int self;
        uint64_t window_ms; /* keep_alive_interval × keep_alive_max_attempt */
        int64_t *seen;      /* -1: no beat read yet */
        uint64_t *since;
};
int hp_rdzv__beats_init(struct hp_rdzv_beats *b, int nodes, int self,
                        uint64_t window_ms, uint64_t now);
/* Takes the counts read at now; returns the first node whose count stood
 * still for window_ms, or -1. */
int hp_rdzv__beats_update(struct hp_rdzv_beats *b, const int64_t *counts,
                          uint64_t now);
void hp_rdzv__beats_free(struct hp_rdzv_beats *b);

/* --rdzv-conf coordinate with static, slurm or resource-config: a round
 * at a store that node 0's agent hosts on the master's address (port
 * coordinate=PORT, or the master port + 1), with the backend's node
 * ranks, so that restarts move every node together as with c10d. */
int hp_rdzv__coord_round(struct hp_rdzv *rdzv, const struct hp_rdzv_info *out,
                         char *errbuf, size_t errlen);

/* Checks what a self-driven backend found against the flags the user gave
 * anyway (--nnodes, --node-rank) and applies --master-addr, which wins
 * over the derived master. source names the backend's inputs. */
int hp_rdzv__check_flags(const struct hp_config *cfg, const char *source,
                         struct hp_rdzv_info *out, char *errbuf,
                         size_t errlen);

/* Whether a list's host name is this machine's name me: the same, or me
 * with a domain after the name ("ip-10-1-2-3.ec2.internal"). */
bool hp_rdzv__same_host(const char *name, const char *me);

/* host.c: the store on its own thread (started, then stopped and freed
 * at the end), and an endpoint's host as a numeric address. */
int hp_rdzv__host_start(struct hp_rdzv *rdzv, const char *bind_host, int port,
                        char *err, size_t errlen);
void hp_rdzv__host_stop(struct hp_rdzv *rdzv);
int hp_rdzv__resolve_what(const char *what, const char *host, char *addr,
                          size_t len, char *err, size_t errlen);
int hp_rdzv__resolve(const char *host, char *addr, size_t len, char *err,
                     size_t errlen);

#endif
