/* SPDX-License-Identifier: Apache-2.0 */
/* The rounds' key-value ops over etcd's v2 keys API (--rdzv-backend
 * etcd-v2); etcd.c carries the HTTP exchanges.
 *
 * One request of the ops is one or more HTTP exchanges, one on the wire
 * at a time, in order:
 * - set: PUT /v2/keys/KEY value=V;
 * - get: GET (an absent key, etcd's errorCode 100, reads as empty);
 * - add: GET, then PUT ?prevIndex=I (or ?prevExist=false when absent),
 *   again from the GET when etcd answers 412 (another writer came first);
 * - compare_set: PUT ?prevExist=false (or ?prevValue=E); on 412 a GET
 *   says what the key holds;
 * - multi_get: a GET of the key, or a recursive GET of the keys' common
 *   directory, read for each key;
 * - wait: the keys' multi_get; until every one is set, a GET ?wait=true&
 *   waitIndex=X+1 on the key (or the common directory, recursive), X the
 *   X-Etcd-Index of that read, then the read again (index cleared: 401,
 *   the same);
 * - remove: DELETE ?recursive=true (absent: done);
 * - ping: GET /v2/keys/hyperpodrun (absent or not: a round trip).
 * A response body over ETCD_BODY_MAX ends the connection with HP_ETOOBIG
 * and says so. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>
#include <http_parser.h>
#include <uv.h>

#include "etcd-private.h"
#include "hyperpod/common.h"

/* ---- the exchanges of each request ---- */

char *hp_rdzv__etcd_common_dir(char *const *keys, size_t n)
{
        size_t len = strlen(keys[0]);

        for (size_t i = 1; i < n; i++) {
                size_t j = 0;

                while (j < len && keys[i][j] == keys[0][j])
                        j++;
                len = j;
        }
        while (len > 0 && (keys[0][len] != '/' || len == strlen(keys[0])))
                len--;
        return strndup(keys[0], len);
}

static int issue_read(struct etcd_kv *e, struct req *q, bool wait)
{
        char query[80];

        if (q->n == 1 && !wait)
                return hp_rdzv__etcd_build(e, "GET", q->keys[0], "", NULL, 0);
        if (q->n == 1)
                snprintf(query, sizeof(query), "wait=true&waitIndex=%" PRIu64,
                         q->index + 1);
        else if (!wait)
                snprintf(query, sizeof(query), "recursive=true");
        else
                snprintf(query, sizeof(query),
                         "wait=true&recursive=true&waitIndex=%" PRIu64,
                         q->index + 1);
        return hp_rdzv__etcd_build(e, "GET", q->n == 1 ? q->keys[0] : q->dir,
                                   query, NULL, 0);
}

static int issue(struct etcd_kv *e, struct req *q)
{
        char query[64];
        size_t used = 0;
        char *enc;
        int r;

        switch (q->kind) {
        case REQ_CONNECT:
        case REQ_PING:
                return hp_rdzv__etcd_build(e, "GET", "/hyperpodrun", "", NULL,
                                           0);
        case REQ_SET:
                return hp_rdzv__etcd_build(e, "PUT", q->keys[0], "", q->val,
                                           q->val_len);
        case REQ_GET:
                return hp_rdzv__etcd_build(e, "GET", q->keys[0], "", NULL, 0);
        case REQ_ADD:
                if (q->step == 0)
                        return hp_rdzv__etcd_build(e, "GET", q->keys[0], "",
                                                   NULL, 0);
                if (q->index == 0)
                        snprintf(query, sizeof(query), "prevExist=false");
                else
                        snprintf(query, sizeof(query), "prevIndex=%" PRIu64,
                                 q->index);
                return hp_rdzv__etcd_build(e, "PUT", q->keys[0], query,
                                           q->val, q->val_len);
        case REQ_CAS:
                if (q->step == 1)
                        return hp_rdzv__etcd_build(e, "GET", q->keys[0], "",
                                                   NULL, 0);
                if (q->expected_len == 0)
                        return hp_rdzv__etcd_build(e, "PUT", q->keys[0],
                                                   "prevExist=false", q->val,
                                                   q->val_len);
                enc = malloc(3 * q->expected_len + 16);
                if (enc == NULL)
                        return -ENOMEM;
                memcpy(enc, "prevValue=", 11);
                used = 10;
                hp_rdzv__etcd_pct(enc, &used, q->expected, q->expected_len,
                                  false);
                r = hp_rdzv__etcd_build(e, "PUT", q->keys[0], enc, q->val,
                                        q->val_len);
                free(enc);
                return r;
        case REQ_MULTI_GET:
                return issue_read(e, q, false);
        case REQ_WAIT:
                return issue_read(e, q, q->step == 1);
        case REQ_REMOVE:
                return hp_rdzv__etcd_build(e, "DELETE", q->keys[0],
                                           "recursive=true", NULL, 0);
        }
        return -EINVAL;
}

/* The node of key in a (recursive) answer's tree, or NULL. */
static const cJSON *find_node(const cJSON *node, const char *key)
{
        while (node != NULL) {
                const cJSON *k = cJSON_GetObjectItemCaseSensitive(node,
                                                                  "key");
                const cJSON *kids, *c, *next = NULL;

                if (cJSON_IsString(k) && strcmp(k->valuestring, key) == 0)
                        return node;
                kids = cJSON_GetObjectItemCaseSensitive(node, "nodes");
                cJSON_ArrayForEach (c, kids) {
                        const cJSON *ck = cJSON_GetObjectItemCaseSensitive(
                                c, "key");
                        size_t len;

                        if (!cJSON_IsString(ck))
                                continue;
                        len = strlen(ck->valuestring);
                        if (strncmp(ck->valuestring, key, len) == 0 &&
                            (key[len] == '/' || key[len] == '\0')) {
                                next = c;
                                break;
                        }
                }
                node = next;
        }
        return NULL;
}

static const char *node_value(const cJSON *node)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, "value");

        return cJSON_IsString(v) ? v->valuestring : "";
}

const char *hp_rdzv__etcd_value(const cJSON *root, const char *key)
{
        const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, "node");
        const cJSON *node = top ? find_node(top, key) : NULL;

        return node ? node_value(node) : NULL;
}

static int error_code(const cJSON *root)
{
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "errorCode");

        return cJSON_IsNumber(c) ? c->valueint : 0;
}

/* An answer that makes no sense for q: -EPROTO, with etcd's words. */
static void reply_bad(struct etcd_kv *e, struct req *q, const cJSON *root)
{
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "message");
        const char *what = q->n > 0 ? q->keys[0] : "/v2/keys/hyperpodrun";

        if (cJSON_IsString(m))
                snprintf(e->base.why, sizeof(e->base.why),
                         "etcd at %s answered HTTP %u for %s: %s", e->host,
                         e->parser.status_code, what, m->valuestring);
        else
                snprintf(e->base.why, sizeof(e->base.why),
                         "the server at %s answered HTTP %u to etcd's v2 "
                         "keys API for %s: is it etcd, started with "
                         "--enable-v2=true?",
                         e->host, e->parser.status_code, what);
        hp_rdzv__etcd_reply(q, -EPROTO, NULL, 0, 0);
}

/* multi_get's answer, or whether every one of wait's keys is set (1) or
 * not yet (0). */
static int read_keys(struct etcd_kv *e, struct req *q, const cJSON *root,
                     bool reply)
{
        struct hp_store_reply r = { .status = 0 };
        size_t cap = 0, used = 0;
        uint8_t *items = NULL;
        int all = 1;

        for (size_t i = 0; i < q->n; i++) {
                const char *v = hp_rdzv__etcd_value(root, q->keys[i]);
                uint64_t len = v ? strlen(v) : 0;

                all &= len > 0;
                cap += 8 + len;
        }
        if (!reply)
                return all;
        items = malloc(cap + 1);
        if (items == NULL) {
                hp_rdzv__etcd_reply(q, -ENOMEM, NULL, 0, 0);
                return 0;
        }
        for (size_t i = 0; i < q->n; i++) {
                const char *v = hp_rdzv__etcd_value(root, q->keys[i]);
                uint64_t len = v ? strlen(v) : 0;

                for (int b = 0; b < 8; b++)
                        items[used++] = (uint8_t)(len >> (8 * b));
                if (len > 0)
                        memcpy(items + used, v, len);
                used += len;
        }
        r.op = HP_STORE_OP_MULTI_GET;
        r.count = q->n;
        r.items = items;
        r.items_len = used;
        q->cb(q->ctx, &r);
        free(items);
        return 0;
}

/* add: the GET's answer gives the next PUT. */
static int add_step(struct etcd_kv *e, struct req *q, const cJSON *root,
                    unsigned status)
{
        const cJSON *node = cJSON_GetObjectItemCaseSensitive(root, "node");
        const cJSON *mod = cJSON_GetObjectItemCaseSensitive(node,
                                                            "modifiedIndex");
        int64_t now = 0;
        char text[32];

        if (q->step == 1) {
                if (status == 200 || status == 201) {
                        hp_rdzv__etcd_reply(q, 0, NULL, 0,
                                            strtoll(q->val, NULL, 10));
                        return 0;
                }
                if (status != 412 || ++q->tries > ETCD_ADD_TRIES) {
                        reply_bad(e, q, root);
                        return 0;
                }
                q->step = 0; /* another writer came first: again */
                q->once = false;
                return 1;
        }
        if (status == 200 && cJSON_IsNumber(mod)) {
                now = strtoll(node_value(node), NULL, 10);
                q->index = (uint64_t)mod->valuedouble;
        } else if (status == 404 && error_code(root) == 100) {
                q->index = 0;
        } else {
                reply_bad(e, q, root);
                return 0;
        }
        if (q->delta == 0) {
                hp_rdzv__etcd_reply(q, 0, NULL, 0, now);
                return 0;
        }
        free(q->val);
        snprintf(text, sizeof(text), "%" PRId64, now + q->delta);
        q->val = strdup(text);
        if (q->val == NULL) {
                hp_rdzv__etcd_reply(q, -ENOMEM, NULL, 0, 0);
                return 0;
        }
        q->val_len = strlen(text);
        q->step = 1;
        q->once = true; /* sent twice, the PUT could add twice */
        return 1;
}

static int answer(struct etcd_kv *e, struct req *q, const cJSON *root,
                  unsigned status)
{
        const cJSON *node = cJSON_GetObjectItemCaseSensitive(root, "node");
        bool absent = status == 404 && error_code(root) == 100;
        const char *v;

        switch (q->kind) {
        case REQ_CONNECT:
        case REQ_PING:
        case REQ_GET:
                if (status != 200 && !absent)
                        break;
                v = status == 200 && q->kind == REQ_GET ? node_value(node)
                                                        : "";
                hp_rdzv__etcd_reply(q, 0, v, strlen(v), 0);
                return 0;
        case REQ_REMOVE:
                if (status != 200 && !absent)
                        break;
                hp_rdzv__etcd_reply(q, 0, NULL, 0, 0);
                return 0;
        case REQ_SET:
                if (status != 200 && status != 201)
                        break;
                hp_rdzv__etcd_reply(q, 0, NULL, 0, 0);
                return 0;
        case REQ_ADD:
                return add_step(e, q, root, status);
        case REQ_CAS:
                if (q->step == 0 && (status == 200 || status == 201)) {
                        hp_rdzv__etcd_reply(q, 0, q->val, q->val_len, 0);
                        return 0;
                }
                if (q->step == 0 && (status == 412 || absent)) {
                        q->step = 1; /* not set: what is there */
                        return 1;
                }
                if (q->step == 1 && (status == 200 || absent)) {
                        v = absent ? "" : node_value(node);
                        hp_rdzv__etcd_reply(q, 0, v, strlen(v), 0);
                        return 0;
                }
                break;
        case REQ_MULTI_GET:
                if (status != 200 && !absent)
                        break;
                return read_keys(e, q, absent ? NULL : root, true);
        case REQ_WAIT:
                if (q->step == 1 &&
                    (status == 200 ||
                     (status == 400 && error_code(root) == 401))) {
                        q->step = 0; /* something changed: read again */
                        return 1;
                }
                if (q->step == 1 || (status != 200 && !absent))
                        break;
                if (read_keys(e, q, absent ? NULL : root, false)) {
                        hp_rdzv__etcd_reply(q, 0, NULL, 0, 0);
                        return 0;
                }
                q->index = e->etcd_index;
                q->step = 1;
                return 1;
        }
        reply_bad(e, q, root);
        return 0;
}

static int answer_response(struct etcd_kv *e, struct req *q)
{
        cJSON *root = NULL;
        int r;

        if (e->body_len > 0)
                root = cJSON_ParseWithLength(e->body, e->body_len);
        r = answer(e, q, root, e->parser.status_code);
        cJSON_Delete(root);
        return r;
}

/* A request of kind on n keys (copied), with a value (copied). */
static struct req *req_new(enum req_kind kind, const char *const *keys,
                           size_t n, const void *val, size_t val_len,
                           hp_store_reply_cb cb, void *ctx)
{
        struct req *q = calloc(1, sizeof(*q));
        bool ok = q != NULL;

        if (ok && n > 0) {
                q->keys = calloc(n, sizeof(*q->keys));
                ok = q->keys != NULL;
        }
        for (size_t i = 0; ok && i < n; i++) {
                q->keys[i] = strdup(keys[i]);
                ok = q->keys[i] != NULL;
                q->n = i + 1;
        }
        if (ok && n > 1) {
                q->dir = hp_rdzv__etcd_common_dir(q->keys, n);
                ok = q->dir != NULL;
        }
        if (ok && val != NULL) {
                q->val = malloc(val_len + 1);
                ok = q->val != NULL;
                if (ok) {
                        memcpy(q->val, val, val_len);
                        q->val[val_len] = '\0';
                        q->val_len = val_len;
                }
        }
        if (!ok) {
                if (q != NULL)
                        hp_rdzv__etcd_req_free(q);
                return NULL;
        }
        q->kind = kind;
        q->cb = cb;
        q->ctx = ctx;
        return q;
}

static int kv_set(struct hp_rdzv_kv *kv, const char *key, const void *val,
                  size_t len, hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_SET, &key, 1, val, len, cb, ctx);

        return q ? hp_rdzv__etcd_submit(kv, q) : -ENOMEM;
}

static int kv_get(struct hp_rdzv_kv *kv, const char *key,
                  hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_GET, &key, 1, NULL, 0, cb, ctx);

        return q ? hp_rdzv__etcd_submit(kv, q) : -ENOMEM;
}

static int kv_add(struct hp_rdzv_kv *kv, const char *key, int64_t delta,
                  hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_ADD, &key, 1, NULL, 0, cb, ctx);

        if (q == NULL)
                return -ENOMEM;
        q->delta = delta;
        return hp_rdzv__etcd_submit(kv, q);
}

static int kv_compare_set(struct hp_rdzv_kv *kv, const char *key,
                          const void *expected, size_t expected_len,
                          const void *desired, size_t desired_len,
                          hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_CAS, &key, 1, desired, desired_len, cb,
                                ctx);

        if (q == NULL)
                return -ENOMEM;
        if (expected_len > 0) {
                q->expected = malloc(expected_len);
                if (q->expected == NULL) {
                        hp_rdzv__etcd_req_free(q);
                        return -ENOMEM;
                }
                memcpy(q->expected, expected, expected_len);
                q->expected_len = expected_len;
        }
        return hp_rdzv__etcd_submit(kv, q);
}

static int kv_wait(struct hp_rdzv_kv *kv, const char *const *keys, size_t n,
                   hp_store_reply_cb cb, void *ctx)
{
        struct req *q;

        if (n == 0)
                return -EINVAL;
        q = req_new(REQ_WAIT, keys, n, NULL, 0, cb, ctx);
        return q ? hp_rdzv__etcd_submit(kv, q) : -ENOMEM;
}

static int kv_multi_get(struct hp_rdzv_kv *kv, const char *const *keys,
                        size_t n, hp_store_reply_cb cb, void *ctx)
{
        struct req *q;

        if (n == 0)
                return -EINVAL;
        q = req_new(REQ_MULTI_GET, keys, n, NULL, 0, cb, ctx);
        return q ? hp_rdzv__etcd_submit(kv, q) : -ENOMEM;
}

static int kv_remove(struct hp_rdzv_kv *kv, const char *key,
                     hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_REMOVE, &key, 1, NULL, 0, cb, ctx);

        return q ? hp_rdzv__etcd_submit(kv, q) : -ENOMEM;
}

static int kv_ping(struct hp_rdzv_kv *kv, hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_PING, NULL, 0, NULL, 0, cb, ctx);

        return q ? hp_rdzv__etcd_submit(kv, q) : -ENOMEM;
}

static int kv_connect(uv_loop_t *loop, const char *addr, int port,
                      hp_store_reply_cb cb, void *ctx,
                      struct hp_rdzv_kv **out)
{
        struct req *q = req_new(REQ_CONNECT, NULL, 0, NULL, 0, cb, ctx);

        if (q == NULL)
                return -ENOMEM;
        return hp_rdzv__etcd_open(loop, addr, port, &hp_rdzv__kv_etcd, q,
                                  issue, answer_response, out);
}

const struct hp_rdzv_kv_ops hp_rdzv__kv_etcd = {
        .what = "etcd",
        .beat_by_set = true,
        .leftover = ", or the keys a killed agent left at etcd removed "
                    "(curl -X DELETE "
                    "'http://HOST:PORT/v2/keys/hyperpodrun/rdzv/ID"
                    "?recursive=true')",
        .connect = kv_connect,
        .set = kv_set,
        .get = kv_get,
        .add = kv_add,
        .compare_set = kv_compare_set,
        .wait = kv_wait,
        .multi_get = kv_multi_get,
        .remove = kv_remove,
        .ping = kv_ping,
        .local_addr = hp_rdzv__etcd_local_addr,
        .close = hp_rdzv__etcd_close,
};
