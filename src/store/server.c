/* SPDX-License-Identifier: Apache-2.0 */
/* The TCPStore server: the keys, values and queues in one hash table, the
 * connections on the loop, and every byte it holds counted against one
 * memory ceiling. A client that speaks something else, or asks for more
 * than the limits, is dropped with one logged line and counted. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "server-private.h"

/* Reads ask for at least this much room. */
#define READ_CHUNK ((size_t)64 * 1024)

/* ---- the queries ---- */

static bool set_value(struct conn *c, struct entry *e, const uint8_t *v,
                      size_t n)
{
        struct hp_store_server *s = c->s;
        uint8_t *nv = NULL;
        bool created = !e->present;

        if (!store__mem_take(s, n)) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "the store's memory is used up");
                store__entry_gc(s, e);
                return false;
        }
        if (n > 0) {
                nv = malloc(n);
                if (nv == NULL) {
                        store__mem_give(s, n);
                        store__conn_drop(c, -ENOMEM, "out of memory");
                        store__entry_gc(s, e);
                        return false;
                }
                memcpy(nv, v, n);
        }
        store__notify(e,
                      created ? HP_STORE_WATCH_CREATED
                              : HP_STORE_WATCH_UPDATED,
                      e->val, e->val_len, nv, n);
        if (e->present) {
                store__mem_give(s, e->val_len);
                free(e->val);
        } else {
                s->npresent++;
        }
        e->val = nv;
        e->val_len = n;
        e->present = true;
        store__wake_all(e);
        return true;
}

static struct entry *conn_entry(struct conn *c, const uint8_t *k, size_t n)
{
        const char *why = NULL;
        struct entry *e = store__entry_get(c->s, k, n, &why);

        if (e == NULL)
                store__conn_drop(c, HP_ETOOBIG, "%s", why);
        return e;
}

/* torch stores ADD's sum as decimal text and reads it back with stoll. */
static bool parse_i64(const uint8_t *p, size_t n, int64_t *out)
{
        char buf[32];
        char *end;

        if (n == 0 || n >= sizeof(buf))
                return false;
        memcpy(buf, p, n);
        buf[n] = '\0';
        errno = 0;
        *out = strtoll(buf, &end, 10);
        return errno == 0 && *end == '\0' && end != buf;
}

static void do_add(struct conn *c, const struct hp_store_query *q)
{
        struct entry *e = conn_entry(c, q->key, q->key_len);
        int64_t cur = 0, sum;
        char text[32];
        int n;

        if (e == NULL)
                return;
        if (e->present && !parse_i64(e->val, e->val_len, &cur)) {
                store__conn_drop(c, -EINVAL,
                                 "ADD to the key '%.*s', whose value "
                                 "is not an integer",
                                 (int)(q->key_len > 64 ? 64 : q->key_len),
                                 (const char *)q->key);
                return;
        }
        if (__builtin_add_overflow(cur, q->delta, &sum)) {
                store__conn_drop(c, -ERANGE,
                                 "ADD of %" PRId64 " to %" PRId64
                                 " overflows",
                                 q->delta, cur);
                return;
        }
        n = snprintf(text, sizeof(text), "%" PRId64, sum);
        if (!set_value(c, e, (const uint8_t *)text, (size_t)n))
                return;
        store__out_i64(c, sum);
}

static void do_compare_set(struct conn *c, const struct hp_store_query *q)
{
        struct entry *e = store__entry_find(c->s, q->key, q->key_len);

        if (e == NULL || !e->present) {
                /* torch answers the expected value when the key is missing
                 * and one was expected ("lying to the caller", its words). */
                if (q->val_len != 0) {
                        store__out_bytes(c, q->val, q->val_len);
                        return;
                }
                e = conn_entry(c, q->key, q->key_len);
                if (e == NULL || !set_value(c, e, q->val2, q->val2_len))
                        return;
        } else if (e->val_len == q->val_len &&
                   (q->val_len == 0 ||
                    memcmp(e->val, q->val, q->val_len) == 0)) {
                if (!set_value(c, e, q->val2, q->val2_len))
                        return;
        }
        store__out_bytes(c, e->val, e->val_len);
}

static void do_wait(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct hp_store_item it;
        size_t off = 0, missing = 0, i = 0;

        store__recs_free(c);
        while (hp_store_items_next(q, &off, &it))
                if (!store__entry_ready(
                            store__entry_find(s, it.key, it.key_len)))
                        missing++;
        if (missing == 0) {
                store__out_u8(c, HP_STORE_WAIT_STOP_WAITING);
                return;
        }
        if (!store__mem_take(s, missing * sizeof(*c->recs))) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "the store's memory is used up");
                return;
        }
        c->recs = calloc(missing, sizeof(*c->recs));
        if (c->recs == NULL) {
                store__mem_give(s, missing * sizeof(*c->recs));
                store__conn_drop(c, -ENOMEM, "out of memory");
                return;
        }
        c->nrecs = missing;
        off = 0;
        while (hp_store_items_next(q, &off, &it)) {
                struct entry *e = store__entry_find(s, it.key, it.key_len);
                struct waitrec *r;

                if (store__entry_ready(e))
                        continue;
                if (e == NULL)
                        e = conn_entry(c, it.key, it.key_len);
                if (e == NULL)
                        return;
                r = &c->recs[i++];
                r->conn = c;
                r->e = e;
                r->e_next = e->waiters;
                if (e->waiters)
                        e->waiters->e_prev = r;
                e->waiters = r;
                c->awaited++;
        }
}

static void do_watch(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct watchrec *w;
        struct entry *e;

        if (c->nwatches >= s->l.watches_max) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "more than %zu WATCH_KEY queries",
                                 s->l.watches_max);
                return;
        }
        e = conn_entry(c, q->key, q->key_len);
        if (e == NULL)
                return;
        if (!store__mem_take(s, sizeof(*w)) ||
            (w = calloc(1, sizeof(*w))) == NULL) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "the store's memory is used up");
                store__entry_gc(s, e);
                return;
        }
        w->conn = c;
        w->e = e;
        w->e_next = e->watchers;
        if (e->watchers)
                e->watchers->e_prev = w;
        e->watchers = w;
        w->c_next = c->watches;
        c->watches = w;
        c->nwatches++;
        store__out_u8(c, HP_STORE_WATCH_REGISTERED);
}

static void do_delete(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct entry *e = store__entry_find(s, q->key, q->key_len);

        if (e == NULL || !e->present) {
                store__out_i64(c, 0);
                return;
        }
        store__notify(e, HP_STORE_WATCH_DELETED, e->val, e->val_len, NULL, 0);
        store__mem_give(s, e->val_len);
        free(e->val);
        e->val = NULL;
        e->val_len = 0;
        e->present = false;
        s->npresent--;
        store__entry_gc(s, e);
        store__out_i64(c, 1);
}

static void do_append(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct entry *e = conn_entry(c, q->key, q->key_len);
        uint8_t *nv;

        if (e == NULL)
                return;
        if (!e->present) {
                set_value(c, e, q->val, q->val_len);
                return;
        }
        if (e->val_len + q->val_len > s->l.value_max) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "APPEND makes a value of more than "
                                 "%zu bytes",
                                 s->l.value_max);
                return;
        }
        if (!store__mem_take(s, q->val_len)) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "the store's memory is used up");
                return;
        }
        nv = realloc(e->val, e->val_len + q->val_len + 1);
        if (nv == NULL) {
                store__mem_give(s, q->val_len);
                store__conn_drop(c, -ENOMEM, "out of memory");
                return;
        }
        memcpy(nv + e->val_len, q->val, q->val_len);
        e->val = nv;
        e->val_len += q->val_len;
        /* torch 2.1's server sends the appended bytes as the new value. */
        store__notify(e, HP_STORE_WATCH_APPENDED, NULL, 0, q->val,
                      q->val_len);
        store__wake_all(e);
}

static void do_queue_push(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct entry *e = conn_entry(c, q->key, q->key_len);
        struct qitem *it;

        if (e == NULL)
                return;
        if (!store__mem_take(s, sizeof(*it) + q->val_len) ||
            (it = malloc(sizeof(*it) + q->val_len)) == NULL) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "the store's memory is used up");
                store__entry_gc(s, e);
                return;
        }
        it->next = NULL;
        it->len = q->val_len;
        memcpy(it->data, q->val, q->val_len);
        if (e->qtail)
                e->qtail->next = it;
        else
                e->qhead = it;
        e->qtail = it;
        e->qlen++;
        store__wake_one(e);
}

static void do_queue_pop(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct entry *e = store__entry_find(s, q->key, q->key_len);
        struct qitem *it;

        if (e == NULL || e->qlen == 0) {
                store__out_i64(c, 0);
                return;
        }
        store__out_i64(c, (int64_t)e->qlen);
        it = e->qhead;
        store__out_bytes(c, it->data, it->len);
        e->qhead = it->next;
        if (e->qhead == NULL)
                e->qtail = NULL;
        e->qlen--;
        store__mem_give(s, sizeof(*it) + it->len);
        free(it);
        store__entry_gc(s, e);
}

static void do_list(struct conn *c)
{
        struct hp_store_server *s = c->s;

        store__out_i64(c, (int64_t)s->npresent);
        for (size_t i = 0; i < s->nbuckets && !c->closing; i++)
                for (struct entry *e = s->buckets[i]; e; e = e->next)
                        if (e->present)
                                store__out_bytes(c, e->key, e->key_len);
}

static bool refused_key(const struct hp_store_server *s, const uint8_t *key,
                        size_t len)
{
        size_t n = strlen(s->refuse_prefix);

        return key != NULL && len >= n &&
               memcmp(key, s->refuse_prefix, n) == 0;
}

/* Whether q names a key under the refused prefix; *it is that key. */
static bool refused(const struct hp_store_server *s,
                    const struct hp_store_query *q, struct hp_store_item *it)
{
        size_t off = 0;

        it->key = q->key;
        it->key_len = q->key_len;
        if (refused_key(s, q->key, q->key_len))
                return true;
        if (q->items == NULL)
                return false;
        while (hp_store_items_next(q, &off, it))
                if (refused_key(s, it->key, it->key_len))
                        return true;
        return false;
}

static void execute(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct hp_store_item it;
        struct entry *e;
        size_t off = 0;
        bool ready = true;

        s->stats.queries_total++;
        if (s->refuse_prefix[0] != '\0' && refused(s, q, &it)) {
                store__conn_drop(c, -EPERM, "key '%.*s': %s",
                                 (int)(it.key_len > 128 ? 128 : it.key_len),
                                 (const char *)it.key, s->refuse_why);
                return;
        }
        switch (q->op) {
        case HP_STORE_OP_VALIDATE:
                break;
        case HP_STORE_OP_PING:
                store__out_u32(c, q->u32);
                break;
        case HP_STORE_OP_SET:
                e = conn_entry(c, q->key, q->key_len);
                if (e)
                        set_value(c, e, q->val, q->val_len);
                break;
        case HP_STORE_OP_COMPARE_SET:
                do_compare_set(c, q);
                break;
        case HP_STORE_OP_GET:
                e = store__entry_find(s, q->key, q->key_len);
                if (e && e->present)
                        store__out_bytes(c, e->val, e->val_len);
                else
                        store__out_bytes(c, NULL, 0);
                break;
        case HP_STORE_OP_ADD:
                do_add(c, q);
                break;
        case HP_STORE_OP_CHECK:
                while (ready && hp_store_items_next(q, &off, &it))
                        ready = store__entry_ready(
                                store__entry_find(s, it.key, it.key_len));
                store__out_u8(c, ready ? HP_STORE_CHECK_READY
                                       : HP_STORE_CHECK_NOT_READY);
                break;
        case HP_STORE_OP_WAIT:
                do_wait(c, q);
                break;
        case HP_STORE_OP_GETNUMKEYS:
                store__out_i64(c, (int64_t)s->npresent);
                break;
        case HP_STORE_OP_WATCH_KEY:
                do_watch(c, q);
                break;
        case HP_STORE_OP_DELETE_KEY:
                do_delete(c, q);
                break;
        case HP_STORE_OP_APPEND:
                do_append(c, q);
                break;
        case HP_STORE_OP_MULTI_GET:
                while (!c->closing && hp_store_items_next(q, &off, &it)) {
                        e = store__entry_find(s, it.key, it.key_len);
                        if (e && e->present)
                                store__out_bytes(c, e->val, e->val_len);
                        else
                                store__out_bytes(c, NULL, 0);
                }
                break;
        case HP_STORE_OP_MULTI_SET:
                while (!c->closing && hp_store_items_next(q, &off, &it)) {
                        e = conn_entry(c, it.key, it.key_len);
                        if (e)
                                set_value(c, e, it.val, it.val_len);
                }
                break;
        case HP_STORE_OP_CANCEL_WAIT:
                store__recs_free(c);
                store__out_u8(c, HP_STORE_WAIT_CANCELED);
                break;
        case HP_STORE_OP_QUEUE_PUSH:
                do_queue_push(c, q);
                break;
        case HP_STORE_OP_QUEUE_POP:
                do_queue_pop(c, q);
                break;
        case HP_STORE_OP_QUEUE_LEN:
                e = store__entry_find(s, q->key, q->key_len);
                store__out_i64(c, e ? (int64_t)e->qlen : 0);
                break;
        case HP_STORE_OP_LIST:
                do_list(c);
                break;
        case HP_STORE_OP_COUNT:
                break;
        }
}

/* ---- reading ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
        struct conn *c = hp_container_of(h, struct conn, tcp);
        /* A query is never longer than query_max, so the buffer never needs
         * more than that and a read's worth. */
        size_t cap_max = c->s->l.query_max + READ_CHUNK;
        size_t want = c->in_len + READ_CHUNK;

        if (want > cap_max)
                want = cap_max;
        if (want <= c->in_len ||
            !store__buf_grow(c->s, &c->in, &c->in_cap, want)) {
                *buf = uv_buf_init(NULL, 0);
                return;
        }
        *buf = uv_buf_init((char *)c->in + c->in_len,
                           (unsigned)(c->in_cap - c->in_len));
}

static void consume(struct conn *c)
{
        struct hp_store_query q;
        size_t off = 0, used = 0;
        char err[256] = "";
        int r;

        while (!c->closing && off < c->in_len) {
                r = hp_store_parse(&c->dialect, &c->s->l, c->in + off,
                                   c->in_len - off, &q, &used, err,
                                   sizeof(err));
                if (r < 0) {
                        store__conn_drop(c, r,
                                         "%s, %zu bytes into its stream", err,
                                         off);
                        return;
                }
                if (r == 0)
                        break;
                execute(c, &q);
                off += used;
        }
        if (c->closing)
                return;
        if (off > 0) {
                memmove(c->in, c->in + off, c->in_len - off);
                c->in_len -= off;
        }
        if (c->in_len == 0 && c->in_cap > IN_KEEP)
                store__buf_free(c->s, &c->in, &c->in_cap);
        store__conn_flush(c);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
        struct conn *c = hp_container_of(st, struct conn, tcp);

        if (nread > 0) {
                c->in_len += (size_t)nread;
                consume(c);
        } else if (nread == UV_ENOBUFS) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "the store's memory is used up");
        } else if (nread < 0) {
                store__conn_close(c); /* EOF or reset: the client went away */
        }
        store__reap(c->s);
}

/* ---- accepting ---- */

static void format_peer(uv_tcp_t *t, char *out, size_t len)
{
        struct sockaddr_storage ss;
        int n = sizeof(ss);
        char host[INET6_ADDRSTRLEN] = "?";
        int port = 0;

        if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &n) == 0) {
                if (ss.ss_family == AF_INET6) {
                        const struct sockaddr_in6 *a = (void *)&ss;

                        uv_ip6_name(a, host, sizeof(host));
                        port = ntohs(a->sin6_port);
                        snprintf(out, len, "[%s]:%d", host, port);
                        return;
                }
                uv_ip4_name((const struct sockaddr_in *)&ss, host,
                            sizeof(host));
                port = ntohs(((const struct sockaddr_in *)&ss)->sin_port);
        }
        snprintf(out, len, "%s:%d", host, port);
}

static void reject_close_cb(uv_handle_t *h)
{
        struct conn *c = hp_container_of(h, struct conn, tcp);
        struct hp_store_server *s = c->s;

        store__mem_give(s, sizeof(*c));
        free(c);
        store__server_unref(s);
}

static void connection_cb(uv_stream_t *l, int status)
{
        struct hp_store_server *s = hp_container_of(l, struct hp_store_server,
                                                    listener);
        struct conn *c;

        if (status < 0) {
                hp_log_warn("store: accept failed: %s", uv_strerror(status));
                return;
        }
        if (!store__mem_take(s, sizeof(*c)))
                return; /* the connection waits in the backlog */
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
                store__mem_give(s, sizeof(*c));
                return;
        }
        c->s = s;
        uv_tcp_init(s->loop, &c->tcp);
        s->handles++;
        if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
                uv_close((uv_handle_t *)&c->tcp, reject_close_cb);
                return;
        }
        if (s->stats.connections_current >= (uint64_t)s->l.connections_max) {
                s->stats.rejected_connections++;
                if (!s->rejecting)
                        hp_log_warn("store: %d connections are open, the "
                                    "most allowed: closing new ones",
                                    s->l.connections_max);
                s->rejecting = true;
                uv_close((uv_handle_t *)&c->tcp, reject_close_cb);
                return;
        }
        s->rejecting = false;
        format_peer(&c->tcp, c->peer, sizeof(c->peer));
        uv_tcp_nodelay(&c->tcp, 1);
        c->next = s->conns;
        if (s->conns)
                s->conns->prev = c;
        s->conns = c;
        s->stats.connections_total++;
        s->stats.connections_current++;
        if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) < 0)
                store__conn_close(c);
        store__reap(s);
}

/* ---- the server ---- */

int hp_store_server_new(uv_loop_t *loop, const struct hp_store_limits *limits,
                        struct hp_store_server **out)
{
        struct hp_store_server *s = calloc(1, sizeof(*s));
        int r;

        if (s == NULL)
                return -ENOMEM;
        s->loop = loop;
        if (limits)
                s->l = *limits;
        else
                hp_store_limits_default(&s->l);
        r = uv_tcp_init(loop, &s->listener);
        if (r < 0) {
                free(s);
                return r;
        }
        s->listener_open = true;
        s->handles = 1;
        *out = s;
        return 0;
}

int hp_store_server_listen(struct hp_store_server *s, const char *host,
                           int port, char *err, size_t errlen)
{
        struct sockaddr_storage ss;
        int n = sizeof(ss);
        char h[INET6_ADDRSTRLEN + 2];
        size_t hl = strlen(host);
        bool v6;
        int r;

        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' &&
            hl - 2 < sizeof(h)) {
                memcpy(h, host + 1, hl - 2);
                h[hl - 2] = '\0';
        } else {
                snprintf(h, sizeof(h), "%s", host);
        }
        v6 = strchr(h, ':') != NULL;
        r = v6 ? uv_ip6_addr(h, port, (struct sockaddr_in6 *)&ss)
               : uv_ip4_addr(h, port, (struct sockaddr_in *)&ss);
        if (r == 0)
                r = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
        if (r == 0)
                r = uv_listen((uv_stream_t *)&s->listener, 1024,
                              connection_cb);
        if (r < 0) {
                snprintf(err, errlen, "cannot listen on %s%s%s:%d: %s",
                         v6 ? "[" : "", h, v6 ? "]" : "", port,
                         uv_strerror(r));
                return r;
        }
        s->listening = true;
        if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &n) == 0)
                s->port = ntohs(
                        ss.ss_family == AF_INET6
                                ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                : ((struct sockaddr_in *)&ss)->sin_port);
        return 0;
}

void hp_store_server_refuse_prefix(struct hp_store_server *s,
                                   const char *prefix, const char *why)
{
        snprintf(s->refuse_prefix, sizeof(s->refuse_prefix), "%s", prefix);
        snprintf(s->refuse_why, sizeof(s->refuse_why), "%s", why);
}

int hp_store_server_port(const struct hp_store_server *s)
{
        return s->listening ? s->port : 0;
}

const struct hp_store_stats *
hp_store_server_stats(const struct hp_store_server *s)
{
        return &s->stats;
}

static void listener_close_cb(uv_handle_t *h)
{
        struct hp_store_server *s = hp_container_of(h, struct hp_store_server,
                                                    listener);

        store__server_unref(s);
}

void hp_store_server_close(struct hp_store_server *s,
                           void (*close_cb)(void *ctx), void *ctx)
{
        if (s->closing)
                return;
        s->closing = true;
        s->close_cb = close_cb;
        s->close_ctx = ctx;
        for (struct conn *c = s->conns; c; c = c->next)
                store__conn_close(c);
        store__reap(s);
        uv_close((uv_handle_t *)&s->listener, listener_close_cb);
}
