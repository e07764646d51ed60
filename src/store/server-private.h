/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the server's files: its connections and its table of keys
 * (server.c), and the table with its memory accounting (table.c). */
#ifndef HP_STORE_SERVER_PRIVATE_H
#define HP_STORE_SERVER_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store-private.h"

/* An input buffer larger than this is given back once drained. */
#define IN_KEEP ((size_t)256 * 1024)
/* Dropped connections are logged at most once per this many ms; the
 * others are counted and the count said with the next line. */
#define DROP_LOG_MS 1000

struct conn;

/* One key of a pending WAIT, linked into its entry's waiters. */
struct waitrec {
        struct conn *conn;
        struct entry *e; /* NULL once the key arrived */
        struct waitrec *e_prev, *e_next;
};

/* One WATCH_KEY (legacy clients' callbacks). */
struct watchrec {
        struct conn *conn;
        struct entry *e;
        struct watchrec *e_prev, *e_next;
        struct watchrec *c_next;
};

struct qitem {
        struct qitem *next;
        size_t len;
        uint8_t data[];
};

/* A name: a value, a queue, or only what waits for or watches it. */
struct entry {
        struct entry *next; /* hash chain */
        uint64_t hash;
        bool present;
        uint8_t *val;
        size_t val_len;
        struct qitem *qhead, *qtail;
        size_t qlen;
        struct waitrec *waiters;
        struct watchrec *watchers;
        size_t key_len;
        uint8_t key[];
};

struct conn {
        uv_tcp_t tcp;
        struct hp_store_server *s;
        struct conn *prev, *next;
        enum hp_store_dialect dialect;
        uint8_t *in;
        size_t in_len, in_cap;
        uint8_t *out; /* replies gathered while a write is in flight */
        size_t out_len, out_cap;
        uint8_t *wbuf; /* the write in flight */
        size_t wlen, wcap;
        uv_write_t wreq;
        bool writing;
        bool closing; /* dropped or gone: no more replies */
        bool closed;  /* uv_close() called */
        struct conn *dead_next;
        struct waitrec *recs; /* the last WAIT's keys, fired or not */
        size_t nrecs;
        size_t awaited; /* keys of it still missing */
        struct watchrec *watches;
        size_t nwatches;
        char peer[64];
};

struct hp_store_server {
        uv_loop_t *loop;
        uv_tcp_t listener;
        bool listener_open;
        bool listening;
        bool closing;
        int handles; /* the listener and the connections not yet closed */
        int port;
        struct hp_store_limits l;
        struct hp_store_stats stats;
        struct entry **buckets;
        size_t nbuckets;
        size_t nentries;
        size_t npresent;
        struct conn *conns;
        struct conn *dead; /* closing, records still to unlink */
        bool rejecting;
        uint64_t drop_log_ms;
        uint64_t drops_unlogged;
        void (*close_cb)(void *ctx);
        void *close_ctx;
        char refuse_prefix[64]; /* "": none */
        char refuse_why[256];
};

/* table.c: every byte the server holds is taken from, and given back to,
 * one memory ceiling; the keys live in one hash table of entries. */
bool store__mem_take(struct hp_store_server *s, size_t n);
void store__mem_give(struct hp_store_server *s, size_t n);
bool store__buf_grow(struct hp_store_server *s, uint8_t **buf, size_t *cap,
                     size_t want);
void store__buf_free(struct hp_store_server *s, uint8_t **buf, size_t *cap);
struct entry *store__entry_find(struct hp_store_server *s, const uint8_t *k,
                                size_t n);
struct entry *store__entry_get(struct hp_store_server *s, const uint8_t *k,
                               size_t n, const char **why);
void store__entry_gc(struct hp_store_server *s, struct entry *e);
bool store__entry_ready(const struct entry *e);

/* conn.c: a connection's replies, its waits and watches, its drop and
 * close, and the server's free once nothing is open. */
uint8_t *store__out_room(struct conn *c, size_t n);
void store__out_u8(struct conn *c, uint8_t v);
void store__out_u32(struct conn *c, uint32_t v);
void store__out_i64(struct conn *c, int64_t v);
void store__out_bytes(struct conn *c, const void *b, size_t n);
void store__conn_flush(struct conn *c);
void store__recs_free(struct conn *c);
void store__rec_unlink(struct waitrec *r);
void store__rec_fire(struct waitrec *r);
void store__wake_all(struct entry *e);
void store__wake_one(struct entry *e);
void store__watches_free(struct conn *c);
void store__notify(struct entry *e, uint8_t type, const uint8_t *old,
                   size_t old_len, const uint8_t *nv, size_t nv_len);
void store__drop_log(struct hp_store_server *s, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
void store__conn_close(struct conn *c);
void store__reap(struct hp_store_server *s);
void store__conn_drop(struct conn *c, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void store__server_free(struct hp_store_server *s);
void store__server_unref(struct hp_store_server *s);

#endif
