/* SPDX-License-Identifier: Apache-2.0 */
/* A store connection's side of the server: its replies gathered and
 * written, the WAIT and WATCH records that tie it to keys, and its drop
 * and close, down to freeing the server when the last handle is gone.
 * Below the queries (server.c), which call it; it calls only the table. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"

#include "server-private.h"

/* ---- replies ---- */

uint8_t *store__out_room(struct conn *c, size_t n)
{
        uint8_t *p;

        if (c->closing)
                return NULL;
        /* The write in flight counts too: both wait for the client. */
        if (c->out_len + c->wlen + n > c->s->l.out_max) {
                store__conn_drop(
                        c, HP_ETOOBIG,
                        "more than %zu bytes of replies wait for it to read",
                        c->s->l.out_max);
                return NULL;
        }
        if (!store__buf_grow(c->s, &c->out, &c->out_cap, c->out_len + n)) {
                store__conn_drop(c, HP_ETOOBIG,
                                 "the store's memory is used up");
                return NULL;
        }
        p = c->out + c->out_len;
        c->out_len += n;
        return p;
}

void store__out_u8(struct conn *c, uint8_t v)
{
        uint8_t *p = store__out_room(c, 1);

        if (p)
                *p = v;
}

void store__out_u32(struct conn *c, uint32_t v)
{
        uint8_t *p = store__out_room(c, 4);

        if (p)
                hp_store__put_u32(p, v);
}

void store__out_i64(struct conn *c, int64_t v)
{
        uint8_t *p = store__out_room(c, 8);

        if (p)
                hp_store__put_u64(p, (uint64_t)v);
}

void store__out_bytes(struct conn *c, const void *b, size_t n)
{
        uint8_t *p = store__out_room(c, 8 + n);

        if (p) {
                hp_store__put_u64(p, n);
                if (n)
                        memcpy(p + 8, b, n);
        }
}

static void write_cb(uv_write_t *req, int status);

void store__conn_flush(struct conn *c)
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
                store__conn_drop(c, r, "cannot write: %s", uv_strerror(r));
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
                store__conn_drop(c, r, "cannot write: %s", uv_strerror(r));
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
                        store__conn_drop(c, status, "cannot write: %s",
                                         uv_strerror(status));
                store__reap(c->s);
                return;
        }
        /* A large reply's buffer is not kept for the next small ones. */
        if (c->wcap > IN_KEEP)
                store__buf_free(c->s, &c->wbuf, &c->wcap);
        store__conn_flush(c);
        store__reap(c->s);
}

/* ---- waits and watches ---- */

void store__recs_free(struct conn *c)
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
                store__entry_gc(s, e);
        }
        store__mem_give(s, c->nrecs * sizeof(*c->recs));
        free(c->recs);
        c->recs = NULL;
        c->nrecs = 0;
        c->awaited = 0;
}

void store__rec_unlink(struct waitrec *r)
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

void store__rec_fire(struct waitrec *r)
{
        struct conn *c = r->conn;

        store__rec_unlink(r);
        if (--c->awaited == 0) {
                store__out_u8(c, HP_STORE_WAIT_STOP_WAITING);
                store__conn_flush(c);
        }
}

/* e's key arrived: every wait on it moves on. A record is never freed
 * here, only marked, so that the walk stays valid. */
void store__wake_all(struct entry *e)
{
        while (e->waiters)
                store__rec_fire(e->waiters);
}

/* A queue got an item: the longest waiting (the last in the list, which
 * grows at its head) moves on, as torch wakes the first to have come. */
void store__wake_one(struct entry *e)
{
        struct waitrec *r = e->waiters;

        if (r == NULL)
                return;
        while (r->e_next)
                r = r->e_next;
        store__rec_fire(r);
}

void store__watches_free(struct conn *c)
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
                store__entry_gc(s, w->e);
                store__mem_give(s, sizeof(*w));
                free(w);
        }
        c->watches = NULL;
        c->nwatches = 0;
}

void store__notify(struct entry *e, uint8_t type, const uint8_t *old,
                   size_t old_len, const uint8_t *nv, size_t nv_len)
{
        struct watchrec *w, *next;

        for (w = e->watchers; w; w = next) {
                struct conn *c = w->conn;

                next = w->e_next;
                store__out_u8(c, type);
                store__out_bytes(c, e->key, e->key_len);
                store__out_bytes(c, old, old_len);
                store__out_bytes(c, nv, nv_len);
                store__conn_flush(c);
        }
}

/* ---- dropping ---- */

void store__drop_log(struct hp_store_server *s, const char *fmt, ...)
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
 * store__reap(), once no walk over an entry's waiters or watchers is
 * under way. */
void store__conn_close(struct conn *c)
{
        if (c->closing)
                return;
        c->closing = true;
        c->dead_next = c->s->dead;
        c->s->dead = c;
}

void store__reap(struct hp_store_server *s)
{
        while (s->dead) {
                struct conn *c = s->dead;

                s->dead = c->dead_next;
                store__recs_free(c);
                store__watches_free(c);
                c->closed = true;
                uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
        }
}

void store__conn_drop(struct conn *c, int err, const char *fmt, ...)
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
        store__drop_log(c->s, "dropped the client %s: %s%s", c->peer, why,
                        err == -EPROTO ? " (not PyTorch's TCPStore protocol)"
                                       : "");
        store__conn_close(c);
}

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
        store__buf_free(s, &c->in, &c->in_cap);
        store__buf_free(s, &c->out, &c->out_cap);
        store__buf_free(s, &c->wbuf, &c->wcap);
        store__mem_give(s, sizeof(*c));
        free(c);
        s->stats.connections_current--;
        store__server_unref(s);
}

void store__server_free(struct hp_store_server *s)
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

void store__server_unref(struct hp_store_server *s)
{
        if (--s->handles == 0 && s->closing)
                store__server_free(s);
}
