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
#include "store-private.h"

/* Reads ask for at least this much room. */
#define READ_CHUNK ((size_t)64 * 1024)
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

/* ---- memory ---- */

static bool mem_take(struct hp_store_server *s, size_t n)
{
        if (s->stats.memory + n > s->l.memory_max)
                return false;
        s->stats.memory += n;
        return true;
}

static void mem_give(struct hp_store_server *s, size_t n)
{
        s->stats.memory -= n;
}

/* Grows *buf to hold want bytes, charged to the server. */
static bool buf_grow(struct hp_store_server *s, uint8_t **buf, size_t *cap,
                     size_t want)
{
        size_t ncap = *cap ? *cap : 256;
        uint8_t *nb;

        if (want <= *cap)
                return true;
        while (ncap < want)
                ncap *= 2;
        if (!mem_take(s, ncap - *cap))
                return false;
        nb = realloc(*buf, ncap);
        if (nb == NULL) {
                mem_give(s, ncap - *cap);
                return false;
        }
        *buf = nb;
        *cap = ncap;
        return true;
}

static void buf_free(struct hp_store_server *s, uint8_t **buf, size_t *cap)
{
        mem_give(s, *cap);
        free(*buf);
        *buf = NULL;
        *cap = 0;
}

/* ---- the table ---- */

static uint64_t hash_key(const uint8_t *k, size_t n)
{
        uint64_t h = 1469598103934665603ull;

        for (size_t i = 0; i < n; i++) {
                h ^= k[i];
                h *= 1099511628211ull;
        }
        return h;
}

static struct entry *entry_find(struct hp_store_server *s, const uint8_t *k,
                                size_t n)
{
        uint64_t h = hash_key(k, n);
        struct entry *e;

        if (s->nbuckets == 0)
                return NULL;
        for (e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->next)
                if (e->hash == h && e->key_len == n &&
                    memcmp(e->key, k, n) == 0)
                        return e;
        return NULL;
}

static bool table_grow(struct hp_store_server *s)
{
        size_t n = s->nbuckets ? s->nbuckets * 2 : 64;
        struct entry **nb;

        if (!mem_take(s, n * sizeof(*nb)))
                return false;
        nb = calloc(n, sizeof(*nb));
        if (nb == NULL) {
                mem_give(s, n * sizeof(*nb));
                return false;
        }
        for (size_t i = 0; i < s->nbuckets; i++) {
                struct entry *e = s->buckets[i], *next;

                for (; e; e = next) {
                        next = e->next;
                        e->next = nb[e->hash & (n - 1)];
                        nb[e->hash & (n - 1)] = e;
                }
        }
        mem_give(s, s->nbuckets * sizeof(*nb));
        free(s->buckets);
        s->buckets = nb;
        s->nbuckets = n;
        return true;
}

/* The entry of k, made when missing; NULL (with *why) over a limit. */
static struct entry *entry_get(struct hp_store_server *s, const uint8_t *k,
                               size_t n, const char **why)
{
        struct entry *e = entry_find(s, k, n);

        if (e != NULL)
                return e;
        if (s->nentries >= s->l.keys_max) {
                *why = "the store holds the most keys it may";
                return NULL;
        }
        if (s->nentries >= s->nbuckets && !table_grow(s)) {
                *why = "the store's memory is used up";
                return NULL;
        }
        if (!mem_take(s, sizeof(*e) + n)) {
                *why = "the store's memory is used up";
                return NULL;
        }
        e = calloc(1, sizeof(*e) + n);
        if (e == NULL) {
                mem_give(s, sizeof(*e) + n);
                *why = "out of memory";
                return NULL;
        }
        e->hash = hash_key(k, n);
        e->key_len = n;
        memcpy(e->key, k, n);
        e->next = s->buckets[e->hash & (s->nbuckets - 1)];
        s->buckets[e->hash & (s->nbuckets - 1)] = e;
        s->nentries++;
        s->stats.keys = s->nentries;
        return e;
}

/* Frees e when nothing holds it any more. */
static void entry_gc(struct hp_store_server *s, struct entry *e)
{
        struct entry **pp;

        if (e->present || e->qlen > 0 || e->waiters || e->watchers)
                return;
        for (pp = &s->buckets[e->hash & (s->nbuckets - 1)]; *pp != e;
             pp = &(*pp)->next)
                ;
        *pp = e->next;
        s->nentries--;
        s->stats.keys = s->nentries;
        mem_give(s, sizeof(*e) + e->key_len);
        free(e);
}

static bool entry_ready(const struct entry *e)
{
        return e != NULL && (e->present || e->qlen > 0);
}

/* ---- replies ---- */

static void conn_drop(struct conn *c, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static uint8_t *out_room(struct conn *c, size_t n)
{
        uint8_t *p;

        if (c->closing)
                return NULL;
        /* The write in flight counts too: both wait for the client. */
        if (c->out_len + c->wlen + n > c->s->l.out_max) {
                conn_drop(
                        c, HP_ETOOBIG,
                        "more than %zu bytes of replies wait for it to read",
                        c->s->l.out_max);
                return NULL;
        }
        if (!buf_grow(c->s, &c->out, &c->out_cap, c->out_len + n)) {
                conn_drop(c, HP_ETOOBIG, "the store's memory is used up");
                return NULL;
        }
        p = c->out + c->out_len;
        c->out_len += n;
        return p;
}

static void out_u8(struct conn *c, uint8_t v)
{
        uint8_t *p = out_room(c, 1);

        if (p)
                *p = v;
}

static void out_u32(struct conn *c, uint32_t v)
{
        uint8_t *p = out_room(c, 4);

        if (p)
                hp_store__put_u32(p, v);
}

static void out_i64(struct conn *c, int64_t v)
{
        uint8_t *p = out_room(c, 8);

        if (p)
                hp_store__put_u64(p, (uint64_t)v);
}

static void out_bytes(struct conn *c, const void *b, size_t n)
{
        uint8_t *p = out_room(c, 8 + n);

        if (p) {
                hp_store__put_u64(p, n);
                if (n)
                        memcpy(p + 8, b, n);
        }
}

static void write_cb(uv_write_t *req, int status);
static void reap(struct hp_store_server *s);

static void conn_flush(struct conn *c)
{
        uv_buf_t b;
        uint8_t *t;
        size_t tc;
        int r;

        if (c->closing || c->writing || c->out_len == 0)
                return;
        /* Most replies fit the socket's buffer: written at once, they cost
         * one system call and no change to the loop's watchers. */
        b = uv_buf_init((char *)c->out, (unsigned)c->out_len);
        r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (r < 0 && r != UV_EAGAIN) {
                conn_drop(c, r, "cannot write: %s", uv_strerror(r));
                return;
        }
        if (r > 0) {
                memmove(c->out, c->out + r, c->out_len - (size_t)r);
                c->out_len -= (size_t)r;
        }
        if (c->out_len == 0)
                return;
        /* The rest waits for the socket: the gathered replies become the
         * write in flight; the old write buffer gathers the next ones. */
        t = c->wbuf;
        tc = c->wcap;
        c->wbuf = c->out;
        c->wcap = c->out_cap;
        c->wlen = c->out_len;
        c->out = t;
        c->out_cap = tc;
        c->out_len = 0;
        b = uv_buf_init((char *)c->wbuf, (unsigned)c->wlen);
        r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
        if (r < 0) {
                conn_drop(c, r, "cannot write: %s", uv_strerror(r));
                return;
        }
        c->writing = true;
}

static void write_cb(uv_write_t *req, int status)
{
        struct conn *c = hp_container_of(req, struct conn, wreq);

        c->writing = false;
        c->wlen = 0;
        if (status < 0) {
                if (status != UV_ECANCELED)
                        conn_drop(c, status, "cannot write: %s",
                                  uv_strerror(status));
                reap(c->s);
                return;
        }
        /* A large reply's buffer is not kept for the next small ones. */
        if (c->wcap > IN_KEEP)
                buf_free(c->s, &c->wbuf, &c->wcap);
        conn_flush(c);
        reap(c->s);
}

/* ---- waits and watches ---- */

static void recs_free(struct conn *c)
{
        struct hp_store_server *s = c->s;

        for (size_t i = 0; i < c->nrecs; i++) {
                struct waitrec *r = &c->recs[i];
                struct entry *e = r->e;

                if (e == NULL)
                        continue;
                if (r->e_prev)
                        r->e_prev->e_next = r->e_next;
                else
                        e->waiters = r->e_next;
                if (r->e_next)
                        r->e_next->e_prev = r->e_prev;
                r->e = NULL;
                entry_gc(s, e);
        }
        mem_give(s, c->nrecs * sizeof(*c->recs));
        free(c->recs);
        c->recs = NULL;
        c->nrecs = 0;
        c->awaited = 0;
}

static void rec_unlink(struct waitrec *r)
{
        if (r->e_prev)
                r->e_prev->e_next = r->e_next;
        else
                r->e->waiters = r->e_next;
        if (r->e_next)
                r->e_next->e_prev = r->e_prev;
        r->e = NULL;
        r->e_prev = r->e_next = NULL;
}

static void rec_fire(struct waitrec *r)
{
        struct conn *c = r->conn;

        rec_unlink(r);
        if (--c->awaited == 0) {
                out_u8(c, HP_STORE_WAIT_STOP_WAITING);
                conn_flush(c);
        }
}

/* e's key arrived: every wait on it moves on. A record is never freed
 * here, only marked, so that the walk stays valid. */
static void wake_all(struct entry *e)
{
        while (e->waiters)
                rec_fire(e->waiters);
}

/* A queue got an item: the longest waiting (the last in the list, which
 * grows at its head) moves on, as torch wakes the first to have come. */
static void wake_one(struct entry *e)
{
        struct waitrec *r = e->waiters;

        if (r == NULL)
                return;
        while (r->e_next)
                r = r->e_next;
        rec_fire(r);
}

static void watches_free(struct conn *c)
{
        struct hp_store_server *s = c->s;
        struct watchrec *w, *next;

        for (w = c->watches; w; w = next) {
                next = w->c_next;
                if (w->e_prev)
                        w->e_prev->e_next = w->e_next;
                else
                        w->e->watchers = w->e_next;
                if (w->e_next)
                        w->e_next->e_prev = w->e_prev;
                entry_gc(s, w->e);
                mem_give(s, sizeof(*w));
                free(w);
        }
        c->watches = NULL;
        c->nwatches = 0;
}

static void notify(struct entry *e, uint8_t type, const uint8_t *old,
                   size_t old_len, const uint8_t *nv, size_t nv_len)
{
        struct watchrec *w, *next;

        for (w = e->watchers; w; w = next) {
                struct conn *c = w->conn;

                next = w->e_next;
                out_u8(c, type);
                out_bytes(c, e->key, e->key_len);
                out_bytes(c, old, old_len);
                out_bytes(c, nv, nv_len);
                conn_flush(c);
        }
}

/* ---- dropping ---- */

static void drop_log(struct hp_store_server *s, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static void drop_log(struct hp_store_server *s, const char *fmt, ...)
{
        uint64_t now = uv_now(s->loop);
        char msg[512];
        va_list ap;

        if (s->drop_log_ms != 0 && now - s->drop_log_ms < DROP_LOG_MS) {
                s->drops_unlogged++;
                return;
        }
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (s->drops_unlogged)
                hp_log_warn("store: %s (and %" PRIu64 " more dropped since "
                            "the last message)",
                            msg, s->drops_unlogged);
        else
                hp_log_warn("store: %s", msg);
        s->drop_log_ms = now ? now : 1;
        s->drops_unlogged = 0;
}

static void conn_close_cb(uv_handle_t *h);

/* A connection is marked here and its records are unlinked later, by
 * reap(), once no walk over an entry's waiters or watchers is under way. */
static void conn_close(struct conn *c)
{
        if (c->closing)
                return;
        c->closing = true;
        c->dead_next = c->s->dead;
        c->s->dead = c;
}

static void reap(struct hp_store_server *s)
{
        while (s->dead) {
                struct conn *c = s->dead;

                s->dead = c->dead_next;
                recs_free(c);
                watches_free(c);
                c->closed = true;
                uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
        }
}

static void conn_drop(struct conn *c, int err, const char *fmt, ...)
{
        char why[320];
        va_list ap;

        if (c->closing)
                return;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        /* Bytes that are no query, or a query no torch client sends (an
         * ADD to text), are the protocol's; the rest are the limits'. */
        if (err == -EPROTO || err == -EINVAL || err == -ERANGE ||
            err == -EPERM)
                c->s->stats.protocol_errors++;
        else
                c->s->stats.limit_errors++;
        drop_log(c->s, "dropped the client %s: %s%s", c->peer, why,
                 err == -EPROTO ? " (not PyTorch's TCPStore protocol)" : "");
        conn_close(c);
}

static void server_unref(struct hp_store_server *s);

static void conn_close_cb(uv_handle_t *h)
{
        struct conn *c = hp_container_of(h, struct conn, tcp);
        struct hp_store_server *s = c->s;

        if (c->prev)
                c->prev->next = c->next;
        else
                s->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        buf_free(s, &c->in, &c->in_cap);
        buf_free(s, &c->out, &c->out_cap);
        buf_free(s, &c->wbuf, &c->wcap);
        mem_give(s, sizeof(*c));
        free(c);
        s->stats.connections_current--;
        server_unref(s);
}

/* ---- the queries ---- */

static bool set_value(struct conn *c, struct entry *e, const uint8_t *v,
                      size_t n)
{
        struct hp_store_server *s = c->s;
        uint8_t *nv = NULL;
        bool created = !e->present;

        if (!mem_take(s, n)) {
                conn_drop(c, HP_ETOOBIG, "the store's memory is used up");
                entry_gc(s, e);
                return false;
        }
        if (n > 0) {
                nv = malloc(n);
                if (nv == NULL) {
                        mem_give(s, n);
                        conn_drop(c, -ENOMEM, "out of memory");
                        entry_gc(s, e);
                        return false;
                }
                memcpy(nv, v, n);
        }
        notify(e, created ? HP_STORE_WATCH_CREATED : HP_STORE_WATCH_UPDATED,
               e->val, e->val_len, nv, n);
        if (e->present) {
                mem_give(s, e->val_len);
                free(e->val);
        } else {
                s->npresent++;
        }
        e->val = nv;
        e->val_len = n;
        e->present = true;
        wake_all(e);
        return true;
}

static struct entry *conn_entry(struct conn *c, const uint8_t *k, size_t n)
{
        const char *why = NULL;
        struct entry *e = entry_get(c->s, k, n, &why);

        if (e == NULL)
                conn_drop(c, HP_ETOOBIG, "%s", why);
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
                conn_drop(c, -EINVAL,
                          "ADD to the key '%.*s', whose value "
                          "is not an integer",
                          (int)(q->key_len > 64 ? 64 : q->key_len),
                          (const char *)q->key);
                return;
        }
        if (__builtin_add_overflow(cur, q->delta, &sum)) {
                conn_drop(c, -ERANGE,
                          "ADD of %" PRId64 " to %" PRId64 " overflows",
                          q->delta, cur);
                return;
        }
        n = snprintf(text, sizeof(text), "%" PRId64, sum);
        if (!set_value(c, e, (const uint8_t *)text, (size_t)n))
                return;
        out_i64(c, sum);
}

static void do_compare_set(struct conn *c, const struct hp_store_query *q)
{
        struct entry *e = entry_find(c->s, q->key, q->key_len);

        if (e == NULL || !e->present) {
                /* torch answers the expected value when the key is missing
                 * and one was expected ("lying to the caller", its words). */
                if (q->val_len != 0) {
                        out_bytes(c, q->val, q->val_len);
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
        out_bytes(c, e->val, e->val_len);
}

static void do_wait(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct hp_store_item it;
        size_t off = 0, missing = 0, i = 0;

        recs_free(c);
        while (hp_store_items_next(q, &off, &it))
                if (!entry_ready(entry_find(s, it.key, it.key_len)))
                        missing++;
        if (missing == 0) {
                out_u8(c, HP_STORE_WAIT_STOP_WAITING);
                return;
        }
        if (!mem_take(s, missing * sizeof(*c->recs))) {
                conn_drop(c, HP_ETOOBIG, "the store's memory is used up");
                return;
        }
        c->recs = calloc(missing, sizeof(*c->recs));
        if (c->recs == NULL) {
                mem_give(s, missing * sizeof(*c->recs));
                conn_drop(c, -ENOMEM, "out of memory");
                return;
        }
        c->nrecs = missing;
        off = 0;
        while (hp_store_items_next(q, &off, &it)) {
                struct entry *e = entry_find(s, it.key, it.key_len);
                struct waitrec *r;

                if (entry_ready(e))
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
                conn_drop(c, HP_ETOOBIG, "more than %zu WATCH_KEY queries",
                          s->l.watches_max);
                return;
        }
        e = conn_entry(c, q->key, q->key_len);
        if (e == NULL)
                return;
        if (!mem_take(s, sizeof(*w)) || (w = calloc(1, sizeof(*w))) == NULL) {
                conn_drop(c, HP_ETOOBIG, "the store's memory is used up");
                entry_gc(s, e);
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
        out_u8(c, HP_STORE_WATCH_REGISTERED);
}

static void do_delete(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct entry *e = entry_find(s, q->key, q->key_len);

        if (e == NULL || !e->present) {
                out_i64(c, 0);
                return;
        }
        notify(e, HP_STORE_WATCH_DELETED, e->val, e->val_len, NULL, 0);
        mem_give(s, e->val_len);
        free(e->val);
        e->val = NULL;
        e->val_len = 0;
        e->present = false;
        s->npresent--;
        entry_gc(s, e);
        out_i64(c, 1);
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
                conn_drop(c, HP_ETOOBIG,
                          "APPEND makes a value of more than "
                          "%zu bytes",
                          s->l.value_max);
                return;
        }
        if (!mem_take(s, q->val_len)) {
                conn_drop(c, HP_ETOOBIG, "the store's memory is used up");
                return;
        }
        nv = realloc(e->val, e->val_len + q->val_len + 1);
        if (nv == NULL) {
                mem_give(s, q->val_len);
                conn_drop(c, -ENOMEM, "out of memory");
                return;
        }
        memcpy(nv + e->val_len, q->val, q->val_len);
        e->val = nv;
        e->val_len += q->val_len;
        /* torch 2.1's server sends the appended bytes as the new value. */
        notify(e, HP_STORE_WATCH_APPENDED, NULL, 0, q->val, q->val_len);
        wake_all(e);
}

static void do_queue_push(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct entry *e = conn_entry(c, q->key, q->key_len);
        struct qitem *it;

        if (e == NULL)
                return;
        if (!mem_take(s, sizeof(*it) + q->val_len) ||
            (it = malloc(sizeof(*it) + q->val_len)) == NULL) {
                conn_drop(c, HP_ETOOBIG, "the store's memory is used up");
                entry_gc(s, e);
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
        wake_one(e);
}

static void do_queue_pop(struct conn *c, const struct hp_store_query *q)
{
        struct hp_store_server *s = c->s;
        struct entry *e = entry_find(s, q->key, q->key_len);
        struct qitem *it;

        if (e == NULL || e->qlen == 0) {
                out_i64(c, 0);
                return;
        }
        out_i64(c, (int64_t)e->qlen);
        it = e->qhead;
        out_bytes(c, it->data, it->len);
        e->qhead = it->next;
        if (e->qhead == NULL)
                e->qtail = NULL;
        e->qlen--;
        mem_give(s, sizeof(*it) + it->len);
        free(it);
        entry_gc(s, e);
}

static void do_list(struct conn *c)
{
        struct hp_store_server *s = c->s;

        out_i64(c, (int64_t)s->npresent);
        for (size_t i = 0; i < s->nbuckets && !c->closing; i++)
                for (struct entry *e = s->buckets[i]; e; e = e->next)
                        if (e->present)
                                out_bytes(c, e->key, e->key_len);
}

static bool refused_key(const struct hp_store_server *s, const uint8_t *key,
                        size_t len)
{
        size_t n = strlen(s->refuse_prefix);

        return key != NULL && len >= n && memcmp(key, s->refuse_prefix, n) == 0;
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
                conn_drop(c, -EPERM, "key '%.*s': %s",
                          (int)(it.key_len > 128 ? 128 : it.key_len),
                          (const char *)it.key, s->refuse_why);
                return;
        }
        switch (q->op) {
        case HP_STORE_OP_VALIDATE:
                break;
        case HP_STORE_OP_PING:
                out_u32(c, q->u32);
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
                e = entry_find(s, q->key, q->key_len);
                if (e && e->present)
                        out_bytes(c, e->val, e->val_len);
                else
                        out_bytes(c, NULL, 0);
                break;
        case HP_STORE_OP_ADD:
                do_add(c, q);
                break;
        case HP_STORE_OP_CHECK:
                while (ready && hp_store_items_next(q, &off, &it))
                        ready = entry_ready(
                                entry_find(s, it.key, it.key_len));
                out_u8(c, ready ? HP_STORE_CHECK_READY
                                : HP_STORE_CHECK_NOT_READY);
                break;
        case HP_STORE_OP_WAIT:
                do_wait(c, q);
                break;
        case HP_STORE_OP_GETNUMKEYS:
                out_i64(c, (int64_t)s->npresent);
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
                        e = entry_find(s, it.key, it.key_len);
                        if (e && e->present)
                                out_bytes(c, e->val, e->val_len);
                        else
                                out_bytes(c, NULL, 0);
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
                recs_free(c);
                out_u8(c, HP_STORE_WAIT_CANCELED);
                break;
        case HP_STORE_OP_QUEUE_PUSH:
                do_queue_push(c, q);
                break;
        case HP_STORE_OP_QUEUE_POP:
                do_queue_pop(c, q);
                break;
        case HP_STORE_OP_QUEUE_LEN:
                e = entry_find(s, q->key, q->key_len);
                out_i64(c, e ? (int64_t)e->qlen : 0);
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
        if (want <= c->in_len || !buf_grow(c->s, &c->in, &c->in_cap, want)) {
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
                        conn_drop(c, r, "%s, %zu bytes into its stream", err,
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
                buf_free(c->s, &c->in, &c->in_cap);
        conn_flush(c);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
        struct conn *c = hp_container_of(st, struct conn, tcp);

        if (nread > 0) {
                c->in_len += (size_t)nread;
                consume(c);
        } else if (nread == UV_ENOBUFS) {
                conn_drop(c, HP_ETOOBIG, "the store's memory is used up");
        } else if (nread < 0) {
                conn_close(c); /* EOF or reset: the client went away */
        }
        reap(c->s);
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

        mem_give(s, sizeof(*c));
        free(c);
        server_unref(s);
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
        if (!mem_take(s, sizeof(*c)))
                return; /* the connection waits in the backlog */
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
                mem_give(s, sizeof(*c));
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
                conn_close(c);
        reap(s);
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

static void server_free(struct hp_store_server *s)
{
        void (*cb)(void *) = s->close_cb;
        void *ctx = s->close_ctx;

        for (size_t i = 0; i < s->nbuckets; i++) {
                struct entry *e = s->buckets[i], *next;

                for (; e; e = next) {
                        struct qitem *it, *inext;

                        next = e->next;
                        for (it = e->qhead; it; it = inext) {
                                inext = it->next;
                                free(it);
                        }
                        free(e->val);
                        free(e);
                }
        }
        free(s->buckets);
        free(s);
        if (cb)
                cb(ctx);
}

static void server_unref(struct hp_store_server *s)
{
        if (--s->handles == 0 && s->closing)
                server_free(s);
}

static void listener_close_cb(uv_handle_t *h)
{
        struct hp_store_server *s = hp_container_of(h, struct hp_store_server,
                                                    listener);

        server_unref(s);
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
                conn_close(c);
        reap(s);
        uv_close((uv_handle_t *)&s->listener, listener_close_cb);
}
