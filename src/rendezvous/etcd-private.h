/* SPDX-License-Identifier: Apache-2.0 */
/* etcd-v2's client, shared by etcd.c (the connection: HTTP/1.1 on libuv,
 * responses read by libhttp-parser) and etcd_ops.c (the exchanges each
 * request of the ops makes, and the ops). */
#ifndef HP_RDZV_ETCD_PRIVATE_H
#define HP_RDZV_ETCD_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>
#include <uv.h>

#include "rendezvous-private.h"

#define ETCD_BODY_MAX (1u << 20)
/* add's compare-and-swap against other writers: past this many 412s in
 * a row something else is wrong. */
#define ETCD_ADD_TRIES 1000
/* A connection that broke after it had been up (etcd restarted, a proxy
 * dropped it) is made again every ETCD_RETRY_MS for ETCD_RECONNECT_MS,
 * and the request on the wire sent again from its first exchange, unless
 * it may not be repeated. The waits above it bound it sooner: the
 * keep-alive's window, join_timeout, close_timeout. */
#define ETCD_RETRY_MS 200
#define ETCD_RECONNECT_MS 60000

enum req_kind {
        REQ_CONNECT,
        REQ_PING,
        REQ_SET,
        REQ_GET,
        REQ_ADD,
        REQ_CAS,
        REQ_MULTI_GET,
        REQ_WAIT,
        REQ_REMOVE,
};

struct req {
        struct req *next;
        enum req_kind kind;
        hp_store_reply_cb cb;
        void *ctx;
        int step;
        bool once; /* the exchange on the wire may not be repeated */
        int tries;
        char **keys; /* n copies */
        size_t n;
        char *dir; /* the keys' common directory, n > 1 */
        char *val; /* set, compare_set's desired */
        size_t val_len;
        char *expected;
        size_t expected_len;
        int64_t delta;
        uint64_t index; /* add's prevIndex, wait's X-Etcd-Index */
};

enum conn_state { CONN_OPEN, CONN_CLOSING, CONN_CLOSED };

struct etcd_kv {
        struct hp_rdzv_kv base;
        /* etcd_ops.c's: q's next request into out; q's answer from the
         * response read (0: answered, 1: another exchange follows). */
        int (*issue)(struct etcd_kv *e, struct req *q);
        int (*answer)(struct etcd_kv *e, struct req *q);
        uv_tcp_t tcp;
        enum conn_state tcp_state;
        uv_timer_t retry; /* the next connection after a loss */
        bool retry_closed;
        uv_connect_t conn;
        uv_write_t wr;
        struct sockaddr_storage sa;
        char host[80];           /* ADDR:PORT, the Host header */
        bool up;                 /* connected */
        bool was_up;             /* connected once: a loss is retried */
        uint64_t lost_at;        /* when it broke (loop ms), 0: it did not */
        bool dead;               /* failed or closing: no more requests */
        struct req *head, *tail; /* head: on the wire once up */
        char *out;               /* the request being written */
        http_parser parser;
        http_parser_settings settings;
        bool in_index;  /* the header being read is X-Etcd-Index */
        bool in_value;  /* the last header callback was a value */
        char field[32]; /* the header name so far */
        size_t field_len;
        uint64_t etcd_index;
        char *body;
        size_t body_len, body_cap;
        bool too_big;
        char rbuf[65536];
        void (*close_cb)(void *ctx);
        void *close_ctx;
};

/* etcd.c */
void hp_rdzv__etcd_req_free(struct req *q);
void hp_rdzv__etcd_reply(struct req *q, int status, const char *val,
                         size_t len, int64_t num);
/* Appends s (len bytes) percent-encoded to buf at *used; buf has room
 * for 3 × len more bytes and a NUL. slash: '/' stays. */
void hp_rdzv__etcd_pct(char *buf, size_t *used, const char *s, size_t len,
                       bool slash);
/* Makes e->out "METHOD /v2/keys<key>[?query] HTTP/1.1" with its headers,
 * and for PUT the form body value=<val>. */
int hp_rdzv__etcd_build(struct etcd_kv *e, const char *method,
                        const char *key, const char *query, const char *val,
                        size_t val_len);
/* Queues q (ownership is taken, even on failure). */
int hp_rdzv__etcd_submit(struct hp_rdzv_kv *kv, struct req *q);
/* Connects to addr:port (numeric) with first as the first request
 * (ownership is taken, even on failure; no callback on failure). */
int hp_rdzv__etcd_open(uv_loop_t *loop, const char *addr, int port,
                       const struct hp_rdzv_kv_ops *ops, struct req *first,
                       int (*issue)(struct etcd_kv *e, struct req *q),
                       int (*answer)(struct etcd_kv *e, struct req *q),
                       struct hp_rdzv_kv **out);
int hp_rdzv__etcd_local_addr(const struct hp_rdzv_kv *kv, char *addr,
                             size_t len);
void hp_rdzv__etcd_close(struct hp_rdzv_kv *kv, void (*close_cb)(void *ctx),
                         void *ctx);

/* etcd_ops.c's pure parts, exposed for tests. The keys' common
 * directory: the longest prefix of all that ends before a '/' ("" for
 * none; NULL without memory). The value of key in an answer's (parsed,
 * perhaps recursive) tree: "" for a directory, NULL when absent. */
char *hp_rdzv__etcd_common_dir(char *const *keys, size_t n);
struct cJSON;
const char *hp_rdzv__etcd_value(const struct cJSON *root, const char *key);

#endif
