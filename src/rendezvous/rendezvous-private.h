/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside the rendezvous module only. */
#ifndef HP_RENDEZVOUS_PRIVATE_H
#define HP_RENDEZVOUS_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "hyperpod/rendezvous.h"
#include "hyperpod/store.h"

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

/* ---- The key-value store the rounds and the watch talk to ----
 *
 * c10d.c and coord.c reach their store only through these ops: the
 * TCPStore client (kv_store.c) for c10d and --rdzv-conf coordinate, etcd's
 * v2 keys API (etcd.c) for etcd-v2. Every request answers once through
 * cb with a struct hp_store_reply (status 0 or a negative errno; val for
 * get and compare_set, num for add, count and items for multi_get, read
 * with hp_store_reply_item; an absent key reads as empty). Requests on
 * one connection are answered in order, one at a time; a wait holds its
 * connection until a key is set. Keys are NUL-terminated, values copied.
 * close answers every request not yet answered with -ECANCELED, then
 * calls close_cb(ctx) once its handles are closed. */
struct hp_rdzv_kv;
struct hp_rdzv_kv_ops {
        const char *what; /* "store", "etcd": for the messages */
        /* Said when a round is already full: how to clear what a killed
         * job left at a store that outlives it ("" for none). */
        const char *leftover;
        /* The keep-alive writes its own count with set instead of add:
         * a store whose client sends a set again after a lost connection
         * (etcd's) but not an add, which could count twice. */
        bool beat_by_set;
        int (*connect)(uv_loop_t *loop, const char *addr, int port,
                       hp_store_reply_cb cb, void *ctx,
                       struct hp_rdzv_kv **out);
        int (*set)(struct hp_rdzv_kv *kv, const char *key, const void *val,
                   size_t len, hp_store_reply_cb cb, void *ctx);
        int (*get)(struct hp_rdzv_kv *kv, const char *key,
                   hp_store_reply_cb cb, void *ctx);
        int (*add)(struct hp_rdzv_kv *kv, const char *key, int64_t delta,
                   hp_store_reply_cb cb, void *ctx);
        /* Sets key to desired when it holds expected (empty: absent);
         * val is then desired, or else what the key holds. */
        int (*compare_set)(struct hp_rdzv_kv *kv, const char *key,
                           const void *expected, size_t expected_len,
                           const void *desired, size_t desired_len,
                           hp_store_reply_cb cb, void *ctx);
        /* Answers once every one of the n keys is set (TCPStore's
         * WAIT). */
        int (*wait)(struct hp_rdzv_kv *kv, const char *const *keys, size_t n,
                    hp_store_reply_cb cb, void *ctx);
        int (*multi_get)(struct hp_rdzv_kv *kv, const char *const *keys,
                         size_t n, hp_store_reply_cb cb, void *ctx);
        /* Removes key and every key under it (NULL: a store that ends
         * with the job keeps no keys past it). */
        int (*remove)(struct hp_rdzv_kv *kv, const char *key,
                      hp_store_reply_cb cb, void *ctx);
        /* A round trip that changes nothing. */
        int (*ping)(struct hp_rdzv_kv *kv, hp_store_reply_cb cb, void *ctx);
        /* This end's numeric address of the connection. */
        int (*local_addr)(const struct hp_rdzv_kv *kv, char *addr,
                          size_t len);
        void (*close)(struct hp_rdzv_kv *kv, void (*close_cb)(void *ctx),
                      void *ctx);
};
struct hp_rdzv_kv {
        const struct hp_rdzv_kv_ops *ops;
        /* Why the last request failed, in the server's words ("" when
         * the errno says it all). */
        char why[256];
};
extern const struct hp_rdzv_kv_ops hp_rdzv__kv_store;
extern const struct hp_rdzv_kv_ops hp_rdzv__kv_etcd;

/* The ops of rdzv's backend: etcd's for etcd-v2, the TCPStore's else. */
const struct hp_rdzv_kv_ops *hp_rdzv__kv_ops(const struct hp_rdzv *rdzv);

#endif
