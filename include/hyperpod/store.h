/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: a key-value store on the libuv loop that speaks PyTorch's
 * TCPStore protocol, server and client, so that torch.distributed's own
 * TCPStore clients (and init_process_group's env:// rendezvous) can use it.
 *
 * Two dialects share the port, told apart by a connection's first bytes:
 * - legacy (torch 1.x to 2.1): no handshake; SET = 0 ... WATCH_KEY = 7,
 *   DELETE_KEY = 8, then APPEND, MULTI_GET, MULTI_SET, CANCEL_WAIT;
 * - validated (current torch): the first query is VALIDATE (0) with the
 *   magic 0x3C85F7CE; SET = 1 ... CANCEL_WAIT = 12, PING, QUEUE_PUSH,
 *   QUEUE_POP, QUEUE_LEN, LIST.
 * Integers are little-endian (torch sends them in host order, and every
 * host it runs on is little-endian); a string or value is a u64 length and
 * its bytes. */
#ifndef HYPERPOD_STORE_H
#define HYPERPOD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define HP_STORE_MAGIC 0x3C85F7CEu

/* What a query asks, whatever its dialect's number for it. */
#define HP_STORE_OP_MAP(XX)                                                  \
        XX(VALIDATE, "VALIDATE")                                             \
        XX(SET, "SET")                                                       \
        XX(COMPARE_SET, "COMPARE_SET")                                       \
        XX(GET, "GET")                                                       \
        XX(ADD, "ADD")                                                       \
        XX(CHECK, "CHECK")                                                   \
        XX(WAIT, "WAIT")                                                     \
        XX(GETNUMKEYS, "GETNUMKEYS")                                         \
        XX(WATCH_KEY, "WATCH_KEY")                                           \
        XX(DELETE_KEY, "DELETE_KEY")                                         \
        XX(APPEND, "APPEND")                                                 \
        XX(MULTI_GET, "MULTI_GET")                                           \
        XX(MULTI_SET, "MULTI_SET")                                           \
        XX(CANCEL_WAIT, "CANCEL_WAIT")                                       \
        XX(PING, "PING")                                                     \
        XX(QUEUE_PUSH, "QUEUE_PUSH")                                         \
        XX(QUEUE_POP, "QUEUE_POP")                                           \
        XX(QUEUE_LEN, "QUEUE_LEN")                                           \
        XX(LIST, "LIST")

enum hp_store_op {
#define XX(name, text) HP_STORE_OP_##name,
        HP_STORE_OP_MAP(XX)
#undef XX
                HP_STORE_OP_COUNT
};

const char *hp_store_op_name(enum hp_store_op op);

enum hp_store_dialect {
        HP_STORE_DIALECT_UNKNOWN = 0, /* no query seen yet */
        HP_STORE_DIALECT_LEGACY,
        HP_STORE_DIALECT_VALIDATED,
};

/* The wire number of op in dialect d, or -1 when d has no such query. */
int hp_store_op_code(enum hp_store_dialect d, enum hp_store_op op);

/* Replies: CHECK's READY/NOT_READY, WAIT's STOP_WAITING/WAIT_CANCELED, and
 * the legacy key-update callbacks a WATCH_KEY connection receives. */
enum {
        HP_STORE_CHECK_READY = 0,
        HP_STORE_CHECK_NOT_READY = 1,
        HP_STORE_WAIT_STOP_WAITING = 0,
        HP_STORE_WAIT_CANCELED = 1,
        HP_STORE_WATCH_UPDATED = 0,
        HP_STORE_WATCH_CREATED = 1,
        HP_STORE_WATCH_DELETED = 2,
        HP_STORE_WATCH_REGISTERED = 3,
        HP_STORE_WATCH_APPENDED = 4,
};

/* The ceilings. Every length is checked as soon as it is read, so that a
 * query is never buffered past query_max bytes. */
struct hp_store_limits {
        size_t key_max;          /* bytes of one key: 8 KiB (torch's) */
        size_t value_max;        /* bytes of one value: 8 MiB (torch's) */
        uint64_t keys_per_query; /* CHECK/WAIT/MULTI_*: 128 Ki (torch's) */
        size_t query_max;    /* one whole query: 17 MiB (COMPARE_SET of two
                                  * values fits) */
        size_t keys_max;     /* keys and queues held: 1 Mi */
        size_t memory_max;   /* everything the server holds (keys,
                                  * values, queues, waits, buffers): 1 GiB */
        size_t out_max;      /* replies and callbacks queued for one
                                  * client that does not read: 32 MiB */
        int connections_max; /* open connections: 64 Ki, so that a
                              * 1,024-node job of 8 torch 1.x workers per
                              * node (two connections each) and its
                              * agents (two each) fit; memory_max bounds
                              * what they hold */
        size_t watches_max;  /* WATCH_KEY per connection: 4096 */
};

void hp_store_limits_default(struct hp_store_limits *l);

/* One parsed query; every pointer points into the parsed buffer. */
struct hp_store_query {
        enum hp_store_op op;
        const uint8_t *key; /* the key (or queue name) of one-key queries */
        size_t key_len;
        const uint8_t *val; /* SET, APPEND, QUEUE_PUSH; COMPARE_SET's
                               * expected value */
        size_t val_len;
        const uint8_t *val2; /* COMPARE_SET's desired value */
        size_t val2_len;
        int64_t delta;        /* ADD */
        uint32_t u32;         /* VALIDATE's magic, PING's nonce */
        uint64_t count;       /* CHECK, WAIT, MULTI_GET: keys; MULTI_SET:
                               * pairs */
        const uint8_t *items; /* their encoding, walked by
                               * hp_store_items_next() */
        size_t items_len;
};

/*
 * Parses the query at the start of buf (len bytes, borrowed). *dialect is
 * the connection's: UNKNOWN before its first query, set here from it.
 * Returns 1 with *q filled and *used its length; 0 when buf holds only a
 * beginning (nothing is written but *dialect may still be UNKNOWN);
 * -EPROTO when the bytes are no query of the dialect (an unknown number,
 * a bad magic, a second VALIDATE), HP_ETOOBIG when a length or a count is
 * over a limit. On error, err (may be NULL) says what and where, e.g.
 * "unknown query type 0x47 at the first byte". Pure: no allocation.
 */
int hp_store_parse(enum hp_store_dialect *dialect,
                   const struct hp_store_limits *l, const uint8_t *buf,
                   size_t len, struct hp_store_query *q, size_t *used,
                   char *err, size_t errlen);

/* One key, or key and value for MULTI_SET. */
struct hp_store_item {
        const uint8_t *key;
        size_t key_len;
        const uint8_t *val;
        size_t val_len;
};

/* The next item of a parsed CHECK/WAIT/MULTI_GET/MULTI_SET, from *off (0
 * at first). Returns true with *it filled, false after the last. */
bool hp_store_items_next(const struct hp_store_query *q, size_t *off,
                         struct hp_store_item *it);

/* ---- server ---- */

struct hp_store_stats {
        uint64_t connections_total; /* accepted and served */
        uint64_t connections_current;
        uint64_t rejected_connections; /* over connections_max: closed */
        uint64_t protocol_errors;      /* dropped: not this protocol */
        uint64_t limit_errors;         /* dropped: over a limit */
        uint64_t queries_total;
        uint64_t keys;   /* keys and queues held */
        uint64_t memory; /* bytes held, buffers included */
};

struct hp_store_server;

/*
 * A server on loop (borrowed; it must outlive the server). limits: copied,
 * NULL for the defaults. Returns 0 or a negative errno.
 */
int hp_store_server_new(uv_loop_t *loop, const struct hp_store_limits *limits,
                        struct hp_store_server **out);

/*
 * Binds host:port (port 0: a free one; host "0.0.0.0", "::", a literal)
 * and listens. Returns 0, or a negative errno with "cannot listen on
 * HOST:PORT: reason" in err. The socket is close-on-exec.
 */
int hp_store_server_listen(struct hp_store_server *s, const char *host,
                           int port, char *err, size_t errlen);

/* Drops, as a protocol error with why in the log, every client that sends
 * a query on a key starting with prefix (at most 63 bytes): a client of
 * another protocol on top of this one (torchrun's c10d rendezvous keeps
 * its state at "/torch.rendezvous.<id>", as its client sends it). Call
 * before the server runs. */
void hp_store_server_refuse_prefix(struct hp_store_server *s,
                                   const char *prefix, const char *why);

/* The bound port, 0 before a listen succeeded. */
int hp_store_server_port(const struct hp_store_server *s);

const struct hp_store_stats *
hp_store_server_stats(const struct hp_store_server *s);

/*
 * Closes the listener and every connection; frees s once all handles are
 * closed, then calls close_cb(ctx) (may be NULL).
 */
void hp_store_server_close(struct hp_store_server *s,
                           void (*close_cb)(void *ctx), void *ctx);

/* ---- client ---- */

struct hp_store_client;

/*
 * The result of one request. status: 0, or a negative errno (the
 * connection failed or closed: -ECONNRESET, -ETIMEDOUT for a WAIT that
 * timed out and was cancelled, -EPROTO for a reply that makes no sense).
 * Pointers are borrowed for the callback's duration.
 */
struct hp_store_reply {
        int status;
        enum hp_store_op op;
        const uint8_t *val; /* GET, COMPARE_SET, QUEUE_POP */
        size_t val_len;
        int64_t num;          /* ADD, GETNUMKEYS, DELETE_KEY (1 or 0),
                             * QUEUE_LEN, QUEUE_POP (the length before the
                             * pop; 0: the queue was empty), PING's nonce */
        bool ready;           /* CHECK */
        uint64_t count;       /* MULTI_GET: values in items */
        const uint8_t *items; /* MULTI_GET: count u64-length values */
        size_t items_len;
};

typedef void (*hp_store_reply_cb)(void *ctx, const struct hp_store_reply *r);

/* The next value of a MULTI_GET reply, from *off (start at 0); an absent
 * key's value is empty. Returns true and advances *off, or false after
 * the last. */
bool hp_store_reply_item(const struct hp_store_reply *r, size_t *off,
                         const uint8_t **val, size_t *val_len);

/*
 * Connects to host:port (a numeric address) on loop; the connection
 * speaks the validated dialect and sends VALIDATE and a PING first; cb
 * gets the PING's reply (op PING) or the failure. Requests made before
 * that are queued. Returns 0 or a negative errno.
 */
int hp_store_client_connect(uv_loop_t *loop, const char *host, int port,
                            hp_store_reply_cb cb, void *ctx,
                            struct hp_store_client **out);

/*
 * A request. Keys and values are copied. Replies arrive in order, one
 * request on the wire at a time. The ops without a reply (SET, APPEND,
 * MULTI_SET, QUEUE_PUSH) call cb once written. timeout_ms (WAIT only; 0:
 * none) sends CANCEL_WAIT when it passes and then replies -ETIMEDOUT.
 * Returns 0 or a negative errno (-ENOTCONN once closed).
 */
int hp_store_client_set(struct hp_store_client *c, const void *key,
                        size_t key_len, const void *val, size_t val_len,
                        hp_store_reply_cb cb, void *ctx);
int hp_store_client_get(struct hp_store_client *c, const void *key,
                        size_t key_len, hp_store_reply_cb cb, void *ctx);
int hp_store_client_add(struct hp_store_client *c, const void *key,
                        size_t key_len, int64_t delta, hp_store_reply_cb cb,
                        void *ctx);
int hp_store_client_compare_set(struct hp_store_client *c, const void *key,
                                size_t key_len, const void *expected,
                                size_t expected_len, const void *desired,
                                size_t desired_len, hp_store_reply_cb cb,
                                void *ctx);
int hp_store_client_delete(struct hp_store_client *c, const void *key,
                           size_t key_len, hp_store_reply_cb cb, void *ctx);
int hp_store_client_num_keys(struct hp_store_client *c, hp_store_reply_cb cb,
                             void *ctx);
/* CHECK or WAIT on n NUL-terminated keys (borrowed, copied). */
int hp_store_client_check(struct hp_store_client *c, const char *const *keys,
                          size_t n, hp_store_reply_cb cb, void *ctx);
int hp_store_client_wait(struct hp_store_client *c, const char *const *keys,
                         size_t n, uint64_t timeout_ms, hp_store_reply_cb cb,
                         void *ctx);
int hp_store_client_append(struct hp_store_client *c, const void *key,
                           size_t key_len, const void *val, size_t val_len,
                           hp_store_reply_cb cb, void *ctx);
int hp_store_client_multi_get(struct hp_store_client *c,
                              const char *const *keys, size_t n,
                              hp_store_reply_cb cb, void *ctx);
int hp_store_client_multi_set(struct hp_store_client *c,
                              const char *const *keys,
                              const char *const *vals, size_t n,
                              hp_store_reply_cb cb, void *ctx);
int hp_store_client_queue_push(struct hp_store_client *c, const void *key,
                               size_t key_len, const void *val,
                               size_t val_len, hp_store_reply_cb cb,
                               void *ctx);
int hp_store_client_queue_pop(struct hp_store_client *c, const void *key,
                              size_t key_len, hp_store_reply_cb cb,
                              void *ctx);
int hp_store_client_queue_len(struct hp_store_client *c, const void *key,
                              size_t key_len, hp_store_reply_cb cb,
                              void *ctx);
int hp_store_client_ping(struct hp_store_client *c, uint32_t nonce,
                         hp_store_reply_cb cb, void *ctx);

/* This end's address of the connection, numeric ("10.0.0.5", "::1"):
 * the address by which the server's network reaches this machine.
 * Returns 0, or a negative errno (-ENOTCONN before the connection is up). */
int hp_store_client_local_addr(const struct hp_store_client *c, char *addr,
                               size_t len);

/*
 * Closes the connection: every request not yet answered gets -ECANCELED;
 * c is freed once its handles are closed, then close_cb(ctx) runs (may be
 * NULL).
 */
void hp_store_client_close(struct hp_store_client *c,
                           void (*close_cb)(void *ctx), void *ctx);

#endif
