/* SPDX-License-Identifier: Apache-2.0 */
/* The round coordinator's watch: every agent of a coordinated job (c10d,
 * or --rdzv-conf coordinate) keeps a WAIT on the current round's end key
 * on its own loop, and learns at once when another node ends the round
 * (restart, join) or leaves the job (exit), or when the store goes away.
 * The rounds themselves are c10d.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "hyperpod/common.h"
#include "hyperpod/store.h"
#include "rendezvous-private.h"

struct hp_rdzv_watch {
        struct hp_store_client *client;
        hp_rdzv_round_end_cb cb;
        void *ctx;
        char key[300];
        bool fired;
};

static void watch_fire(struct hp_rdzv_watch *w, enum hp_rdzv_end end,
                       const char *why)
{
        if (w->fired)
                return;
        w->fired = true;
        w->cb(w->ctx, end, why);
}

static void watch_value_cb(void *ctx, const struct hp_store_reply *r)
{
        struct hp_rdzv_watch *w = ctx;
        bool restart = r->status == 0 && r->val_len == 7 &&
                       memcmp(r->val, "restart", 7) == 0;
        bool join = r->status == 0 && r->val_len == 4 &&
                    memcmp(r->val, "join", 4) == 0;

        if (r->status == -ECANCELED)
                return;
        if (r->status < 0)
                watch_fire(w, HP_RDZV_END_EXIT,
                           "the rendezvous store went away");
        else if (restart)
                watch_fire(w, HP_RDZV_END_RESTART,
                           "another node ended the round");
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
            hp_store_client_get(w->client, w->key, strlen(w->key),
                                watch_value_cb, w) < 0)
                watch_fire(w, HP_RDZV_END_EXIT,
                           "the rendezvous store went away");
}

static void watch_connected_cb(void *ctx, const struct hp_store_reply *r)
{
        struct hp_rdzv_watch *w = ctx;

        if (r->status < 0 && r->status != -ECANCELED)
                watch_fire(w, HP_RDZV_END_EXIT,
                           "the rendezvous store went away");
}

static void watch_gone_cb(void *ctx)
{
        free(ctx);
}

bool hp_rdzv_coordinated(const struct hp_rdzv *rdzv)
{
        return rdzv->cfg != NULL &&
               (rdzv->cfg->rdzv_backend == HP_RDZV_C10D ||
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
        w->cb = cb;
        w->ctx = ctx;
        hp_rdzv__round_key(rdzv, rdzv->gen, "end", w->key, sizeof(w->key));
        r = hp_store_client_connect(loop, rdzv->store_addr, rdzv->store_port,
                                    watch_connected_cb, w, &w->client);
        if (r < 0) {
                free(w);
                return r;
        }
        keys[0] = w->key;
        r = hp_store_client_wait(w->client, keys, 1, 0, watch_woken_cb, w);
        rdzv->watch = w;
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
        hp_store_client_close(w->client, watch_gone_cb, w);
}

void hp_rdzv__round_key(const struct hp_rdzv *rdzv, int gen, const char *what,
                        char *key, size_t len)
{
        snprintf(key, len, "/hyperpodrun/rdzv/%s/%d/%s", rdzv->run_id, gen,
                 what);
}
