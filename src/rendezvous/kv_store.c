/* SPDX-License-Identifier: Apache-2.0 */
/* The rounds' key-value ops over the TCPStore client (src/store): c10d's
 * store and the --rdzv-conf coordinate store. Each op is the client's own
 * request; only close needs a step of its own, to free the wrapper. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "rendezvous-private.h"

struct kv_store {
        struct hp_rdzv_kv base;
        struct hp_store_client *client;
        void (*close_cb)(void *ctx);
        void *close_ctx;
};

static struct hp_store_client *client_of(struct hp_rdzv_kv *kv)
{
        return hp_container_of(kv, struct kv_store, base)->client;
}

static int kv_connect(uv_loop_t *loop, const char *addr, int port,
                      hp_store_reply_cb cb, void *ctx,
                      struct hp_rdzv_kv **out)
{
        struct kv_store *ks = calloc(1, sizeof(*ks));
        int r;

        if (ks == NULL)
                return -ENOMEM;
        ks->base.ops = &hp_rdzv__kv_store;
        r = hp_store_client_connect(loop, addr, port, cb, ctx, &ks->client);
        if (r < 0) {
                free(ks);
                return r;
        }
        *out = &ks->base;
        return 0;
}

static int kv_set(struct hp_rdzv_kv *kv, const char *key, const void *val,
                  size_t len, hp_store_reply_cb cb, void *ctx)
{
        return hp_store_client_set(client_of(kv), key, strlen(key), val, len,
                                   cb, ctx);
}

static int kv_get(struct hp_rdzv_kv *kv, const char *key,
                  hp_store_reply_cb cb, void *ctx)
{
        return hp_store_client_get(client_of(kv), key, strlen(key), cb, ctx);
}

static int kv_add(struct hp_rdzv_kv *kv, const char *key, int64_t delta,
                  hp_store_reply_cb cb, void *ctx)
{
        return hp_store_client_add(client_of(kv), key, strlen(key), delta, cb,
                                   ctx);
}

static int kv_compare_set(struct hp_rdzv_kv *kv, const char *key,
                          const void *expected, size_t expected_len,
                          const void *desired, size_t desired_len,
                          hp_store_reply_cb cb, void *ctx)
{
        return hp_store_client_compare_set(client_of(kv), key, strlen(key),
                                           expected, expected_len, desired,
                                           desired_len, cb, ctx);
}

static int kv_wait(struct hp_rdzv_kv *kv, const char *const *keys, size_t n,
                   hp_store_reply_cb cb, void *ctx)
{
        return hp_store_client_wait(client_of(kv), keys, n, 0, cb, ctx);
}

static int kv_multi_get(struct hp_rdzv_kv *kv, const char *const *keys,
                        size_t n, hp_store_reply_cb cb, void *ctx)
{
        return hp_store_client_multi_get(client_of(kv), keys, n, cb, ctx);
}

static int kv_ping(struct hp_rdzv_kv *kv, hp_store_reply_cb cb, void *ctx)
{
        return hp_store_client_ping(client_of(kv), 0, cb, ctx);
}

static int kv_local_addr(const struct hp_rdzv_kv *kv, char *addr, size_t len)
{
        const struct kv_store *ks = hp_container_of(kv, struct kv_store,
                                                    base);

        return hp_store_client_local_addr(ks->client, addr, len);
}

static void closed_cb(void *ctx)
{
        struct kv_store *ks = ctx;
        void (*cb)(void *) = ks->close_cb;
        void *cb_ctx = ks->close_ctx;

        free(ks);
        if (cb != NULL)
                cb(cb_ctx);
}

static void kv_close(struct hp_rdzv_kv *kv, void (*close_cb)(void *ctx),
                     void *ctx)
{
        struct kv_store *ks = hp_container_of(kv, struct kv_store, base);

        ks->close_cb = close_cb;
        ks->close_ctx = ctx;
        hp_store_client_close(ks->client, closed_cb, ks);
}

const struct hp_rdzv_kv_ops hp_rdzv__kv_store = {
        .what = "store",
        .leftover = "",
        .connect = kv_connect,
        .set = kv_set,
        .get = kv_get,
        .add = kv_add,
        .compare_set = kv_compare_set,
        .wait = kv_wait,
        .multi_get = kv_multi_get,
        .ping = kv_ping,
        .local_addr = kv_local_addr,
        .close = kv_close,
};

const struct hp_rdzv_kv_ops *hp_rdzv__kv_ops(const struct hp_rdzv *rdzv)
{
        if (rdzv->cfg != NULL && rdzv->cfg->rdzv_backend == HP_RDZV_ETCD_V2)
                return &hp_rdzv__kv_etcd;
        return &hp_rdzv__kv_store;
}
