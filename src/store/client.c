/* SPDX-License-Identifier: Apache-2.0 */
/* A TCPStore client on the loop: requests queue in order and go out one
 * at a time, as torch's own client sends them, so that every reply is
 * the answer to the request at the head of the queue. It speaks the
 * validated dialect (VALIDATE, then a PING, as current torch does). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "store-private.h"

/* A reply is never longer than the server could send for one query. */
#define CLIENT_IN_MAX (2 * HP_STORE_OUT_MAX)

struct req {
        struct req *next;
        enum hp_store_op op;
        uint64_t count;      /* MULTI_GET: values expected */
        uint64_t timeout_ms; /* WAIT */
        hp_store_reply_cb cb;
        void *ctx;
        size_t len;
        uint8_t data[];
};

struct hp_store_client {
        uv_loop_t *loop;
        uv_tcp_t tcp;
        uv_timer_t timer;
        uv_connect_t creq;
        uv_write_t wreq;
        uv_write_t cancel_wreq;
        uint8_t cancel_byte;
        int handles;
        bool connected;
        bool failed;
        bool closing;
        bool sending;  /* the head is being written */
        bool inflight; /* the head is written and waits for its reply */
        bool cancel_sent;
        bool stop_seen; /* STOP_WAITING came before WAIT_CANCELED */
        struct req *head, *tail;
        uint8_t *in;
        size_t in_len, in_cap;
        void (*close_cb)(void *ctx);
        void *close_ctx;
};

static void put_bytes(uint8_t **p, const void *b, size_t n)
{
        hp_store__put_u64(*p, n);
        if (n)
                memcpy(*p + 8, b, n);
        *p += 8 + n;
}

static struct req *req_new(enum hp_store_op op, size_t len,
                           hp_store_reply_cb cb, void *ctx)
{
        struct req *r = calloc(1, sizeof(*r) + 1 + len);

        if (r == NULL)
                return NULL;
        r->op = op;
        r->cb = cb;
        r->ctx = ctx;
        r->len = 1 + len;
        r->data[0] = (uint8_t)hp_store_op_code(HP_STORE_DIALECT_VALIDATED,
                                               op);
        return r;
}

static bool no_reply(enum hp_store_op op)
{
        return op == HP_STORE_OP_SET || op == HP_STORE_OP_APPEND ||
               op == HP_STORE_OP_MULTI_SET || op == HP_STORE_OP_QUEUE_PUSH ||
               op == HP_STORE_OP_VALIDATE;
}

static void complete(struct hp_store_client *c, struct hp_store_reply *rep)
{
        struct req *r = c->head;

        c->head = r->next;
        if (c->head == NULL)
                c->tail = NULL;
        c->inflight = false;
        c->cancel_sent = false;
        c->stop_seen = false;
        uv_timer_stop(&c->timer);
        rep->op = r->op;
        if (r->cb)
                r->cb(r->ctx, rep);
        free(r);
}

static void fail_all(struct hp_store_client *c, int status)
{
        while (c->head) {
                struct hp_store_reply rep = { .status = status };

                complete(c, &rep);
        }
}

static void close_cb(uv_handle_t *h)
{
        struct hp_store_client *c = h->data;

        if (--c->handles == 0) {
                void (*cb)(void *) = c->close_cb;
                void *ctx = c->close_ctx;

                free(c->in);
                free(c);
                if (cb)
                        cb(ctx);
        }
}

/* The connection is over: every request left fails with status. */
static void fail(struct hp_store_client *c, int status)
{
        if (c->failed)
                return;
        c->failed = true;
        c->connected = false;
        fail_all(c, status);
}

static void pump(struct hp_store_client *c);

static void write_cb(uv_write_t *w, int status)
{
        struct hp_store_client *c = w->data;
        struct hp_store_reply rep = { 0 };

        c->sending = false;
        if (status < 0) {
                fail(c, status == UV_ECANCELED ? -ECANCELED : status);
                return;
        }
        if (c->head == NULL || c->failed)
                return;
        if (no_reply(c->head->op)) {
                complete(c, &rep);
        } else {
                c->inflight = true;
        }
        pump(c);
}

static void cancel_write_cb(uv_write_t *w, int status)
{
        struct hp_store_client *c = w->data;

        if (status < 0)
                fail(c, status == UV_ECANCELED ? -ECANCELED : status);
}

static void timer_cb(uv_timer_t *t)
{
        struct hp_store_client *c = t->data;
        uv_buf_t b;

        if (!c->inflight || c->head == NULL || c->cancel_sent)
                return;
        c->cancel_byte = (uint8_t)hp_store_op_code(HP_STORE_DIALECT_VALIDATED,
                                                   HP_STORE_OP_CANCEL_WAIT);
        b = uv_buf_init((char *)&c->cancel_byte, 1);
        c->cancel_wreq.data = c;
        if (uv_write(&c->cancel_wreq, (uv_stream_t *)&c->tcp, &b, 1,
                     cancel_write_cb) < 0) {
                fail(c, -ECONNRESET);
                return;
        }
        c->cancel_sent = true;
}

static void pump(struct hp_store_client *c)
{
        uv_buf_t b;
        int r;

        if (!c->connected || c->failed || c->closing || c->sending ||
            c->inflight || c->head == NULL)
                return;
        b = uv_buf_init((char *)c->head->data, (unsigned)c->head->len);
        c->wreq.data = c;
        r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
        if (r < 0) {
                fail(c, r);
                return;
        }
        c->sending = true;
        if (c->head->op == HP_STORE_OP_WAIT && c->head->timeout_ms) {
                uv_timer_stop(&c->timer);
                uv_timer_start(&c->timer, timer_cb, c->head->timeout_ms, 0);
        }
}

/* The reply to r at the start of buf: 1 with *rep and *used, 0 when only
 * its beginning is there, -EPROTO when it makes no sense. */
static int parse_reply(struct hp_store_client *c, const struct req *r,
                       const uint8_t *buf, size_t len,
                       struct hp_store_reply *rep, size_t *used)
{
        uint64_t n;
        size_t off = 0;

        switch (r->op) {
        case HP_STORE_OP_GET:
        case HP_STORE_OP_COMPARE_SET:
                if (len < 8)
                        return 0;
                n = hp_store__get_u64(buf);
                if (n > CLIENT_IN_MAX)
                        return -EPROTO;
                if (len - 8 < n)
                        return 0;
                rep->val = buf + 8;
                rep->val_len = (size_t)n;
                *used = 8 + (size_t)n;
                return 1;
        case HP_STORE_OP_ADD:
        case HP_STORE_OP_GETNUMKEYS:
        case HP_STORE_OP_DELETE_KEY:
        case HP_STORE_OP_QUEUE_LEN:
                if (len < 8)
                        return 0;
                rep->num = (int64_t)hp_store__get_u64(buf);
                *used = 8;
                return 1;
        case HP_STORE_OP_PING:
                if (len < 4)
                        return 0;
                rep->num = hp_store__get_u32(buf);
                *used = 4;
                return 1;
        case HP_STORE_OP_CHECK:
                if (len < 1)
                        return 0;
                if (buf[0] > HP_STORE_CHECK_NOT_READY)
                        return -EPROTO;
                rep->ready = buf[0] == HP_STORE_CHECK_READY;
                *used = 1;
                return 1;
        case HP_STORE_OP_WAIT:
                while (off < len) {
                        uint8_t b = buf[off++];

                        if (!c->cancel_sent) {
                                if (b != HP_STORE_WAIT_STOP_WAITING)
                                        return -EPROTO;
                                *used = off;
                                return 1;
                        }
                        /* After a CANCEL_WAIT: STOP_WAITING may still come
                         * first, then WAIT_CANCELED. */
                        if (b == HP_STORE_WAIT_CANCELED) {
                                rep->status = -ETIMEDOUT;
                                *used = off;
                                return 1;
                        }
                        if (b != HP_STORE_WAIT_STOP_WAITING || c->stop_seen)
                                return -EPROTO;
                        c->stop_seen = true;
                }
                return 0;
        case HP_STORE_OP_QUEUE_POP:
                if (len < 8)
                        return 0;
                rep->num = (int64_t)hp_store__get_u64(buf);
                if (rep->num <= 0) {
                        *used = 8;
                        return 1;
                }
                if (len < 16)
                        return 0;
                n = hp_store__get_u64(buf + 8);
                if (n > CLIENT_IN_MAX)
                        return -EPROTO;
                if (len - 16 < n)
                        return 0;
                rep->val = buf + 16;
                rep->val_len = (size_t)n;
                *used = 16 + (size_t)n;
                return 1;
        case HP_STORE_OP_MULTI_GET:
                for (uint64_t i = 0; i < r->count; i++) {
                        if (len - off < 8)
                                return 0;
                        n = hp_store__get_u64(buf + off);
                        if (n > CLIENT_IN_MAX)
                                return -EPROTO;
                        if (len - off - 8 < n)
                                return 0;
                        off += 8 + (size_t)n;
                }
                rep->count = r->count;
                rep->items = buf;
                rep->items_len = off;
                *used = off;
                return 1;
        default:
                return -EPROTO;
        }
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
        struct hp_store_client *c = h->data;
        size_t want = c->in_len + 64 * 1024;
        uint8_t *nb;

        if (want > CLIENT_IN_MAX) {
                *buf = uv_buf_init(NULL, 0);
                return;
        }
        if (want > c->in_cap) {
                nb = realloc(c->in, want);
                if (nb == NULL) {
                        *buf = uv_buf_init(NULL, 0);
                        return;
                }
                c->in = nb;
                c->in_cap = want;
        }
        *buf = uv_buf_init((char *)c->in + c->in_len,
                           (unsigned)(c->in_cap - c->in_len));
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
        struct hp_store_client *c = st->data;
        size_t off = 0;

        if (nread < 0) {
                fail(c, nread == UV_EOF ? -ECONNRESET : (int)nread);
                return;
        }
        c->in_len += (size_t)nread;
        while (!c->failed && off < c->in_len) {
                struct hp_store_reply rep = { 0 };
                size_t used = 0;
                int r;

                if (!c->inflight || c->head == NULL) {
                        fail(c, -EPROTO); /* bytes nobody asked for */
                        return;
                }
                r = parse_reply(c, c->head, c->in + off, c->in_len - off,
                                &rep, &used);
                if (r < 0) {
                        fail(c, -EPROTO);
                        return;
                }
                if (r == 0) {
                        /* A WAIT's STOP_WAITING before WAIT_CANCELED was
                         * taken already. */
                        if (c->head->op == HP_STORE_OP_WAIT)
                                off = c->in_len;
                        break;
                }
                off += used;
                complete(c, &rep);
        }
        if (c->failed)
                return;
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
        pump(c);
}

static void connect_cb(uv_connect_t *req, int status)
{
        struct hp_store_client *c = req->data;

        if (c->closing)
                return;
        if (status < 0) {
                fail(c, status);
                return;
        }
        c->connected = true;
        uv_tcp_nodelay(&c->tcp, 1);
        if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) < 0) {
                fail(c, -ECONNRESET);
                return;
        }
        pump(c);
}

static int enqueue(struct hp_store_client *c, struct req *r)
{
        if (r == NULL)
                return -ENOMEM;
        if (c->failed || c->closing) {
                free(r);
                return -ENOTCONN;
        }
        if (c->tail)
                c->tail->next = r;
        else
                c->head = r;
        c->tail = r;
        pump(c);
        return 0;
}

int hp_store_client_connect(uv_loop_t *loop, const char *host, int port,
                            hp_store_reply_cb cb, void *ctx,
                            struct hp_store_client **out)
{
        struct hp_store_client *c = calloc(1, sizeof(*c));
        struct sockaddr_storage ss;
        struct req *v, *p;
        int r;

        if (c == NULL)
                return -ENOMEM;
        r = strchr(host, ':')
                    ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss)
                    : uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
        if (r < 0) {
                free(c);
                return r;
        }
        c->loop = loop;
        uv_tcp_init(loop, &c->tcp);
        uv_timer_init(loop, &c->timer);
        c->tcp.data = c;
        c->timer.data = c;
        c->handles = 2;
        c->creq.data = c;
        v = req_new(HP_STORE_OP_VALIDATE, 4, NULL, NULL);
        p = req_new(HP_STORE_OP_PING, 4, cb, ctx);
        if (v == NULL || p == NULL) {
                free(v);
                free(p);
                r = -ENOMEM;
                goto fail;
        }
        hp_store__put_u32(v->data + 1, HP_STORE_MAGIC);
        hp_store__put_u32(p->data + 1, (uint32_t)uv_os_getpid());
        v->next = p;
        c->head = v;
        c->tail = p;
        r = uv_tcp_connect(&c->creq, &c->tcp, (struct sockaddr *)&ss,
                           connect_cb);
        if (r < 0)
                goto fail;
        *out = c;
        return 0;
fail:
        /* Nothing was called back yet: the requests go without a word. */
        while (c->head) {
                struct req *n = c->head->next;

                free(c->head);
                c->head = n;
        }
        c->tail = NULL;
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, close_cb);
        uv_close((uv_handle_t *)&c->timer, close_cb);
        return r;
}

void hp_store_client_close(struct hp_store_client *c, void (*cb)(void *ctx),
                           void *ctx)
{
        if (c->closing)
                return;
        c->closing = true;
        c->close_cb = cb;
        c->close_ctx = ctx;
        fail(c, -ECANCELED);
        uv_close((uv_handle_t *)&c->tcp, close_cb);
        uv_close((uv_handle_t *)&c->timer, close_cb);
}

int hp_store_client_local_addr(const struct hp_store_client *c, char *addr,
                               size_t len)
{
        struct sockaddr_storage ss;
        int n = sizeof(ss);
        int r;

        if (!c->connected)
                return -ENOTCONN;
        r = uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &n);
        if (r < 0)
                return r;
        if (ss.ss_family == AF_INET6)
                return uv_ip6_name((const struct sockaddr_in6 *)&ss, addr,
                                   len);
        return uv_ip4_name((const struct sockaddr_in *)&ss, addr, len);
}

/* ---- requests ---- */

static int one_key(struct hp_store_client *c, enum hp_store_op op,
                   const void *key, size_t key_len, hp_store_reply_cb cb,
                   void *ctx)
{
        struct req *r = req_new(op, 8 + key_len, cb, ctx);
        uint8_t *p;

        if (r) {
                p = r->data + 1;
                put_bytes(&p, key, key_len);
        }
        return enqueue(c, r);
}

static int key_value(struct hp_store_client *c, enum hp_store_op op,
                     const void *key, size_t key_len, const void *val,
                     size_t val_len, hp_store_reply_cb cb, void *ctx)
{
        struct req *r = req_new(op, 16 + key_len + val_len, cb, ctx);
        uint8_t *p;

        if (r) {
                p = r->data + 1;
                put_bytes(&p, key, key_len);
                put_bytes(&p, val, val_len);
        }
        return enqueue(c, r);
}

static struct req *key_list(enum hp_store_op op, const char *const *keys,
                            const char *const *vals, size_t n,
                            hp_store_reply_cb cb, void *ctx)
{
        size_t len = 8;
        struct req *r;
        uint8_t *p;

        for (size_t i = 0; i < n; i++)
                len += 8 + strlen(keys[i]) + (vals ? 8 + strlen(vals[i]) : 0);
        r = req_new(op, len, cb, ctx);
        if (r == NULL)
                return NULL;
        p = r->data + 1;
        hp_store__put_u64(p, n);
        p += 8;
        for (size_t i = 0; i < n; i++) {
                put_bytes(&p, keys[i], strlen(keys[i]));
                if (vals)
                        put_bytes(&p, vals[i], strlen(vals[i]));
        }
        r->count = n;
        return r;
}

int hp_store_client_set(struct hp_store_client *c, const void *key,
                        size_t key_len, const void *val, size_t val_len,
                        hp_store_reply_cb cb, void *ctx)
{
        return key_value(c, HP_STORE_OP_SET, key, key_len, val, val_len, cb,
                         ctx);
}

int hp_store_client_get(struct hp_store_client *c, const void *key,
                        size_t key_len, hp_store_reply_cb cb, void *ctx)
{
        return one_key(c, HP_STORE_OP_GET, key, key_len, cb, ctx);
}

int hp_store_client_add(struct hp_store_client *c, const void *key,
                        size_t key_len, int64_t delta, hp_store_reply_cb cb,
                        void *ctx)
{
        struct req *r = req_new(HP_STORE_OP_ADD, 16 + key_len, cb, ctx);
        uint8_t *p;

        if (r) {
                p = r->data + 1;
                put_bytes(&p, key, key_len);
                hp_store__put_u64(p, (uint64_t)delta);
        }
        return enqueue(c, r);
}

int hp_store_client_compare_set(struct hp_store_client *c, const void *key,
                                size_t key_len, const void *expected,
                                size_t expected_len, const void *desired,
                                size_t desired_len, hp_store_reply_cb cb,
                                void *ctx)
{
        struct req *r = req_new(HP_STORE_OP_COMPARE_SET,
                                24 + key_len + expected_len + desired_len, cb,
                                ctx);
        uint8_t *p;

        if (r) {
                p = r->data + 1;
                put_bytes(&p, key, key_len);
                put_bytes(&p, expected, expected_len);
                put_bytes(&p, desired, desired_len);
        }
        return enqueue(c, r);
}

int hp_store_client_delete(struct hp_store_client *c, const void *key,
                           size_t key_len, hp_store_reply_cb cb, void *ctx)
{
        return one_key(c, HP_STORE_OP_DELETE_KEY, key, key_len, cb, ctx);
}

int hp_store_client_num_keys(struct hp_store_client *c, hp_store_reply_cb cb,
                             void *ctx)
{
        return enqueue(c, req_new(HP_STORE_OP_GETNUMKEYS, 0, cb, ctx));
}

int hp_store_client_check(struct hp_store_client *c, const char *const *keys,
                          size_t n, hp_store_reply_cb cb, void *ctx)
{
        return enqueue(c,
                       key_list(HP_STORE_OP_CHECK, keys, NULL, n, cb, ctx));
}

int hp_store_client_wait(struct hp_store_client *c, const char *const *keys,
                         size_t n, uint64_t timeout_ms, hp_store_reply_cb cb,
                         void *ctx)
{
        struct req *r = key_list(HP_STORE_OP_WAIT, keys, NULL, n, cb, ctx);

        if (r)
                r->timeout_ms = timeout_ms;
        return enqueue(c, r);
}

int hp_store_client_append(struct hp_store_client *c, const void *key,
                           size_t key_len, const void *val, size_t val_len,
                           hp_store_reply_cb cb, void *ctx)
{
        return key_value(c, HP_STORE_OP_APPEND, key, key_len, val, val_len,
                         cb, ctx);
}

bool hp_store_reply_item(const struct hp_store_reply *r, size_t *off,
                         const uint8_t **val, size_t *val_len)
{
        uint64_t n;

        /* parse_reply checked every length against items_len. */
        if (r->items == NULL || *off + 8 > r->items_len)
                return false;
        n = hp_store__get_u64(r->items + *off);
        if (n > r->items_len - *off - 8)
                return false;
        *val = r->items + *off + 8;
        *val_len = (size_t)n;
        *off += 8 + (size_t)n;
        return true;
}

int hp_store_client_multi_get(struct hp_store_client *c,
                              const char *const *keys, size_t n,
                              hp_store_reply_cb cb, void *ctx)
{
        return enqueue(c, key_list(HP_STORE_OP_MULTI_GET, keys, NULL, n, cb,
                                   ctx));
}

int hp_store_client_multi_set(struct hp_store_client *c,
                              const char *const *keys,
                              const char *const *vals, size_t n,
                              hp_store_reply_cb cb, void *ctx)
{
        return enqueue(c, key_list(HP_STORE_OP_MULTI_SET, keys, vals, n, cb,
                                   ctx));
}

int hp_store_client_queue_push(struct hp_store_client *c, const void *key,
                               size_t key_len, const void *val,
                               size_t val_len, hp_store_reply_cb cb,
                               void *ctx)
{
        return key_value(c, HP_STORE_OP_QUEUE_PUSH, key, key_len, val,
                         val_len, cb, ctx);
}

int hp_store_client_queue_pop(struct hp_store_client *c, const void *key,
                              size_t key_len, hp_store_reply_cb cb, void *ctx)
{
        return one_key(c, HP_STORE_OP_QUEUE_POP, key, key_len, cb, ctx);
}

int hp_store_client_queue_len(struct hp_store_client *c, const void *key,
                              size_t key_len, hp_store_reply_cb cb, void *ctx)
{
        return one_key(c, HP_STORE_OP_QUEUE_LEN, key, key_len, cb, ctx);
}

int hp_store_client_ping(struct hp_store_client *c, uint32_t nonce,
                         hp_store_reply_cb cb, void *ctx)
{
        struct req *r = req_new(HP_STORE_OP_PING, 4, cb, ctx);

        if (r)
                hp_store__put_u32(r->data + 1, nonce);
        return enqueue(c, r);
}
