/* SPDX-License-Identifier: Apache-2.0 */
/* The round coordinator's watch: every agent of a coordinated job (c10d,
 * or --rdzv-conf coordinate) keeps a WAIT on the current round's end key
 * on its own loop, and learns at once when another node ends the round
 * (restart, join) or leaves the job (exit), or when the store goes away.
 *
 * Beside it runs the keep-alive, on a second connection (the first
 * carries the WAIT): every keep_alive_interval the agent adds 1 to its
 * beat key of the round and reads every node's. A node whose count stood
 * still for keep_alive_max_attempt intervals of this agent's own clock
 * is gone (stopped, cut off, its machine dead), and so is a store that
 * answered none of that many beats. Counts, not timestamps: no two
 * machines' clocks are compared, and an agent whose own loop was late
 * sees the counts moved and judges nobody.
 *
 * The rounds themselves are c10d.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "hyperpod/common.h"
#include "rendezvous-private.h"

struct hp_rdzv_watch {
        const struct hp_rdzv_kv_ops *kv; /* the store's ops */
        struct hp_rdzv_kv *client;
        struct hp_rdzv *rdzv;
        hp_rdzv_round_end_cb cb;
        void *ctx;
        char key[300];
        bool fired;
        /* The keep-alive: its connection, its timer, the round's beat
         * keys (one string each, in keys_buf) and what was seen of them. */
        struct hp_rdzv_kv *beat;
        uv_timer_t timer;
        int closing; /* handles not yet closed */
        struct hp_rdzv_beats beats;
        const char **keys;
        char *keys_buf;
        int64_t *counts;     /* the last read, one per node */
        bool in_flight;      /* a beat's write or read not answered yet */
        uint64_t beat_count; /* this agent's, with beat_by_set */
        int unanswered;      /* ticks that found it so */
        uint64_t interval_ms;
        int max_attempt;
        char store[80]; /* ADDR:PORT, for the messages */
};

/* ---- who stood still: a pure function of the counts and now ---- */

int hp_rdzv__beats_init(struct hp_rdzv_beats *b, int nodes, int self,
                        uint64_t window_ms, uint64_t now)
{
        memset(b, 0, sizeof(*b));
        if (nodes < 1 || self < 0 || self >= nodes)
                return -EINVAL;
        b->seen = calloc((size_t)nodes, sizeof(*b->seen));
        b->since = calloc((size_t)nodes, sizeof(*b->since));
        if (b->seen == NULL || b->since == NULL) {
                hp_rdzv__beats_free(b);
                return -ENOMEM;
        }
        b->nodes = nodes;
        b->self = self;
        b->window_ms = window_ms;
        for (int i = 0; i < nodes; i++) {
                b->seen[i] = -1;
                b->since[i] = now;
        }
        return 0;
}

int hp_rdzv__beats_update(struct hp_rdzv_beats *b, const int64_t *counts,
                          uint64_t now)
{
        int gone = -1;

        for (int i = 0; i < b->nodes; i++) {
                if (i == b->self)
                        continue;
                if (counts[i] == HP_RDZV_BEAT_DONE)
                        continue;
                if (counts[i] != b->seen[i]) {
                        b->seen[i] = counts[i];
                        b->since[i] = now;
                } else if (gone < 0 && now - b->since[i] >= b->window_ms) {
                        gone = i;
                }
        }
        return gone;
}

void hp_rdzv__beats_free(struct hp_rdzv_beats *b)
{
        free(b->seen);
        free(b->since);
        b->seen = NULL;
        b->since = NULL;
        b->nodes = 0;
}

static void watch_fire(struct hp_rdzv_watch *w, enum hp_rdzv_end end,
                       const char *why)
{
        if (w->fired)
                return;
        w->fired = true;
        w->cb(w->ctx, end, why);
}

/* The store went away or stopped answering: nothing more is said to it,
 * not even at the exit barrier. */
static void store_gone(struct hp_rdzv_watch *w, const char *why)
{
        if (w->fired)
                return;
        w->rdzv->store_lost = true;
        watch_fire(w, HP_RDZV_END_EXIT, why);
}

static void watch_value_cb(void *ctx, const struct hp_store_reply *r)
{
        struct hp_rdzv_watch *w = ctx;
        bool restart = r->status == 0 && r->val_len == 7 &&
                       memcmp(r->val, "restart", 7) == 0;
        bool join = r->status == 0 && r->val_len == 4 &&
                    memcmp(r->val, "join", 4) == 0;
        bool lost = r->status == 0 && r->val_len == 4 &&
                    memcmp(r->val, "lost", 4) == 0;

        if (r->status == -ECANCELED)
                return;
        if (r->status < 0)
                store_gone(w, "the rendezvous store went away");
        else if (restart)
                watch_fire(w, HP_RDZV_END_RESTART,
                           "another node ended the round");
        else if (lost)
                watch_fire(w, HP_RDZV_END_LOST,
                           "another node found a node gone silent (no "
                           "keep-alive)");
        else if (join)
                watch_fire(w, HP_RDZV_END_JOIN,
                           "a node joined the job (--nnodes MIN:MAX)");
        else
                watch_fire(w, HP_RDZV_END_EXIT, "another node left the job");
}

static void watch_woken_cb(void *ctx, const struct hp_store_reply *r)
{
        struct hp_rdzv_watch *w = ctx;

        if (r->status == -ECANCELED)
                return;
        if (r->status < 0 ||
            w->kv->get(w->client, w->key, watch_value_cb, w) < 0)
                store_gone(w, "the rendezvous store went away");
}

static void watch_connected_cb(void *ctx, const struct hp_store_reply *r)
{
        struct hp_rdzv_watch *w = ctx;

        if (r->status < 0 && r->status != -ECANCELED)
                store_gone(w, "the rendezvous store went away");
}

static void watch_free(struct hp_rdzv_watch *w)
{
        hp_rdzv__beats_free(&w->beats);
        free(w->keys);
        free(w->keys_buf);
        free(w->counts);
        free(w);
}

static void watch_gone_cb(void *ctx)
{
        struct hp_rdzv_watch *w = ctx;

        if (--w->closing == 0)
                watch_free(w);
}

static void timer_closed_cb(uv_handle_t *h)
{
        watch_gone_cb(hp_container_of((uv_timer_t *)h, struct hp_rdzv_watch,
                                      timer));
}

/* ---- the keep-alive ---- */

static void beats_read_cb(void *ctx, const struct hp_store_reply *r)
{
        struct hp_rdzv_watch *w = ctx;
        int64_t *counts = w->counts;
        const uint8_t *val;
        size_t off = 0, len;
        char text[32], why[300];
        int gone;

        if (r->status == -ECANCELED)
                return;
        if (r->status < 0 || r->count != (uint64_t)w->beats.nodes) {
                store_gone(w, "the rendezvous store went away");
                return;
        }
        w->in_flight = false;
        w->unanswered = 0;
        for (int i = 0; i < w->beats.nodes; i++) {
                counts[i] = -1;
                if (!hp_store_reply_item(r, &off, &val, &len))
                        break;
                if (len == 4 && memcmp(val, "done", 4) == 0)
                        counts[i] = HP_RDZV_BEAT_DONE;
                else if (len > 0 && len < sizeof(text)) {
                        memcpy(text, val, len);
                        text[len] = '\0';
                        counts[i] = strtoll(text, NULL, 10);
                }
        }
        gone = hp_rdzv__beats_update(&w->beats, counts,
                                     uv_now(uv_handle_get_loop(
                                             (uv_handle_t *)&w->timer)));
        if (gone < 0)
                return;
        snprintf(why, sizeof(why),
                 "node %d sent no keep-alive for %g s (keep_alive_interval "
                 "%g s × keep_alive_max_attempt %d)",
                 gone, (double)w->beats.window_ms / 1000.0,
                 (double)w->interval_ms / 1000.0, w->max_attempt);
        w->rdzv->lost_node = true;
        watch_fire(w, HP_RDZV_END_LOST, why);
}

static void beat_added_cb(void *ctx, const struct hp_store_reply *r)
{
        struct hp_rdzv_watch *w = ctx;

        if (r->status == -ECANCELED)
                return;
        if (r->status < 0 ||
            w->kv->multi_get(w->beat, w->keys, (size_t)w->beats.nodes,
                             beats_read_cb, w) < 0)
                store_gone(w, "the rendezvous store went away");
}

static void beat_cb(uv_timer_t *t)
{
        struct hp_rdzv_watch *w = hp_container_of(t, struct hp_rdzv_watch,
                                                  timer);
        const char *mine = w->keys[w->beats.self];
        char why[300], text[32];
        int len, q;

        /* One beat on the wire at a time: one that is still there is a
         * tick the store did not answer. */
        if (w->in_flight) {
                if (++w->unanswered < w->max_attempt)
                        return;
                snprintf(why, sizeof(why),
                         "the rendezvous store at %s answered no keep-alive "
                         "for %g s (keep_alive_interval %g s × "
                         "keep_alive_max_attempt %d)",
                         w->store, (double)w->beats.window_ms / 1000.0,
                         (double)w->interval_ms / 1000.0, w->max_attempt);
                store_gone(w, why);
                return;
        }
        w->in_flight = true;
        if (w->kv->beat_by_set) {
                len = snprintf(text, sizeof(text), "%" PRIu64,
                               ++w->beat_count);
                q = w->kv->set(w->beat, mine, text, (size_t)len,
                               beat_added_cb, w);
        } else {
                q = w->kv->add(w->beat, mine, 1, beat_added_cb, w);
        }
        if (q < 0)
                store_gone(w, "the rendezvous store went away");
}

/* The round's beat keys, one per node, and the clock that reads them. */
static int keep_alive_start(struct hp_rdzv *rdzv, struct hp_rdzv_watch *w,
                            uv_loop_t *loop)
{
        int nodes = rdzv->round.nnodes, self = rdzv->round.node_rank;
        size_t one = 320;
        int r;

        /* The loop's clock stood still while the round ran on its own. */
        uv_update_time(loop);
        w->interval_ms = rdzv->opt.keep_alive_interval_ms;
        w->max_attempt = rdzv->opt.keep_alive_max_attempt;
        r = hp_rdzv__beats_init(&w->beats, nodes, self,
                                w->interval_ms * (uint64_t)w->max_attempt,
                                uv_now(loop));
        if (r < 0)
                return r;
        w->keys = calloc((size_t)nodes, sizeof(*w->keys));
        w->keys_buf = malloc((size_t)nodes * one);
        w->counts = calloc((size_t)nodes, sizeof(*w->counts));
        if (w->keys == NULL || w->keys_buf == NULL || w->counts == NULL)
                return -ENOMEM;
        for (int i = 0; i < nodes; i++) {
                char what[32];

                snprintf(what, sizeof(what), "beat/%d", i);
                hp_rdzv__round_key(rdzv, rdzv->gen, what,
                                   w->keys_buf + (size_t)i * one, one);
                w->keys[i] = w->keys_buf + (size_t)i * one;
        }
        snprintf(w->store, sizeof(w->store),
                 strchr(rdzv->store_addr, ':') ? "[%s]:%d" : "%s:%d",
                 rdzv->store_addr, rdzv->store_port);
        r = w->kv->connect(loop, rdzv->store_addr, rdzv->store_port,
                           watch_connected_cb, w, &w->beat);
        if (r < 0) {
                w->beat = NULL;
                return r;
        }
        w->closing++;
        uv_timer_start(&w->timer, beat_cb, 0, w->interval_ms);
        return 0;
}

bool hp_rdzv_coordinated(const struct hp_rdzv *rdzv)
{
        return rdzv->cfg != NULL &&
               (rdzv->cfg->rdzv_backend == HP_RDZV_C10D ||
                rdzv->cfg->rdzv_backend == HP_RDZV_ETCD_V2 ||
                rdzv->opt.coordinate_port != 0);
}

int hp_rdzv_watch(struct hp_rdzv *rdzv, uv_loop_t *loop,
                  hp_rdzv_round_end_cb cb, void *ctx)
{
        struct hp_rdzv_watch *w;
        const char *keys[1];
        int r;

        if (!hp_rdzv_coordinated(rdzv) || !rdzv->have_round)
                return 0;
        hp_rdzv_unwatch(rdzv);
        w = calloc(1, sizeof(*w));
        if (w == NULL)
                return -ENOMEM;
        w->rdzv = rdzv;
        w->kv = hp_rdzv__kv_ops(rdzv);
        w->cb = cb;
        w->ctx = ctx;
        uv_timer_init(loop, &w->timer);
        w->closing = 1;
        hp_rdzv__round_key(rdzv, rdzv->gen, "end", w->key, sizeof(w->key));
        rdzv->watch = w;
        r = w->kv->connect(loop, rdzv->store_addr, rdzv->store_port,
                           watch_connected_cb, w, &w->client);
        if (r < 0) {
                w->client = NULL;
                hp_rdzv_unwatch(rdzv);
                return r;
        }
        w->closing++;
        keys[0] = w->key;
        r = w->kv->wait(w->client, keys, 1, watch_woken_cb, w);
        if (r == 0)
                r = keep_alive_start(rdzv, w, loop);
        if (r < 0) {
                hp_rdzv_unwatch(rdzv);
                return r;
        }
        return 0;
}

void hp_rdzv_unwatch(struct hp_rdzv *rdzv)
{
        struct hp_rdzv_watch *w = rdzv->watch;

        if (w == NULL)
                return;
        rdzv->watch = NULL;
        w->fired = true;
        if (w->client != NULL)
                w->client->ops->close(w->client, watch_gone_cb, w);
        if (w->beat != NULL)
                w->beat->ops->close(w->beat, watch_gone_cb, w);
        uv_close((uv_handle_t *)&w->timer, timer_closed_cb);
}

void hp_rdzv__round_key(const struct hp_rdzv *rdzv, int gen, const char *what,
                        char *key, size_t len)
{
        snprintf(key, len, "/hyperpodrun/rdzv/%s/%d/%s", rdzv->run_id, gen,
                 what);
}
