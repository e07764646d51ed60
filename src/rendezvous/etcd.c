/* SPDX-License-Identifier: Apache-2.0 */
/* The rounds' key-value ops over etcd's v2 keys API (--rdzv-backend
 * etcd-v2): HTTP/1.1 on one kept-alive libuv TCP connection per client,
 * responses read by libhttp-parser, bodies (JSON) by cJSON.
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

#include "hyperpod/common.h"
#include "rendezvous-private.h"

#define ETCD_BODY_MAX (1u << 20)
/* add's compare-and-swap against other writers: past this many 412s in
 * a row something else is wrong. */
#define ETCD_ADD_TRIES 1000

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

struct etcd_kv {
        struct hp_rdzv_kv base;
        uv_tcp_t tcp;
        uv_connect_t conn;
        uv_write_t wr;
        char host[80];           /* ADDR:PORT, the Host header */
        bool up;                 /* connected */
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

static void send_head(struct etcd_kv *e);

static void req_free(struct req *q)
{
        for (size_t i = 0; i < q->n; i++)
                free(q->keys[i]);
        free(q->keys);
        free(q->dir);
        free(q->val);
        free(q->expected);
        free(q);
}

static void reply_simple(struct req *q, int status, const char *val,
                         size_t len, int64_t num)
{
        struct hp_store_reply r = { .status = status };

        r.val = (const uint8_t *)val;
        r.val_len = len;
        r.num = num;
        q->cb(q->ctx, &r);
}

/* Answers the head with status (< 0) and every queued request too. */
static void fail_all(struct etcd_kv *e, int status)
{
        struct req *q;

        e->dead = true;
        while ((q = e->head) != NULL) {
                e->head = q->next;
                reply_simple(q, status, NULL, 0, 0);
                req_free(q);
        }
        e->tail = NULL;
}

static void tcp_closed_cb(uv_handle_t *h)
{
        struct etcd_kv *e = hp_container_of((uv_tcp_t *)h, struct etcd_kv,
                                            tcp);
        void (*cb)(void *) = e->close_cb;
        void *ctx = e->close_ctx;

        fail_all(e, -ECANCELED);
        free(e->out);
        free(e->body);
        free(e);
        if (cb != NULL)
                cb(ctx);
}

/* The connection cannot go on: every request fails with status. */
static void conn_fail(struct etcd_kv *e, int status)
{
        uv_read_stop((uv_stream_t *)&e->tcp);
        fail_all(e, status);
}

/* ---- encoding ---- */

static bool unreserved(unsigned char c, bool slash)
{
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
               (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
               c == '~' || (slash && c == '/');
}

/* Appends s (len bytes) percent-encoded to *buf at *used (capacity cap;
 * the caller sized it 3 × len + room). */
static void pct(char *buf, size_t *used, const char *s, size_t len,
                bool slash)
{
        static const char hex[] = "0123456789ABCDEF";

        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];

                if (unreserved(c, slash)) {
                        buf[(*used)++] = (char)c;
                        continue;
                }
                buf[(*used)++] = '%';
                buf[(*used)++] = hex[c >> 4];
                buf[(*used)++] = hex[c & 15];
        }
        buf[*used] = '\0';
}

/* Builds "METHOD /v2/keys<key>?<query> HTTP/1.1" with its headers and,
 * for PUT, the form body value=<val>. key NULL: path is the whole path. */
static int build(struct etcd_kv *e, const char *method, const char *key,
                 const char *query, const char *val, size_t val_len)
{
        size_t klen = key ? strlen(key) : 0, cap, used = 0, body_len;
        char *body, *path;
        int n;

        cap = 3 * klen + strlen(query) + 32;
        body = malloc(3 * val_len + 8);
        path = malloc(cap);
        if (body == NULL || path == NULL) {
                free(body);
                free(path);
                return -ENOMEM;
        }
        memcpy(path, "/v2/keys", 9);
        used = 8;
        pct(path, &used, key ? key : "", klen, true);
        if (query[0] != '\0')
                used += (size_t)snprintf(path + used, cap - used, "?%s",
                                         query);
        memcpy(body, "value=", 7);
        body_len = 6;
        pct(body, &body_len, val ? val : "", val_len, false);
        free(e->out);
        cap = used + body_len + strlen(e->host) + 200;
        e->out = malloc(cap);
        if (e->out == NULL) {
                free(body);
                free(path);
                return -ENOMEM;
        }
        if (strcmp(method, "PUT") == 0)
                n = snprintf(e->out, cap,
                             "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                             "application/x-www-form-urlencoded\r\n"
                             "Content-Length: %zu\r\n\r\n%s",
                             path, e->host, body_len, body);
        else
                n = snprintf(e->out, cap,
                             "%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method,
                             path, e->host);
        free(body);
        free(path);
        return n < 0 ? -EINVAL : 0;
}

/* ---- reading a response ---- */

static int on_message_begin(http_parser *p)
{
        struct etcd_kv *e = p->data;

        e->body_len = 0;
        e->too_big = false;
        e->etcd_index = 0;
        e->field_len = 0;
        e->in_value = false;
        e->in_index = false;
        return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
        struct etcd_kv *e = p->data;

        if (e->in_value) {
                e->field_len = 0;
                e->in_value = false;
        }
        if (e->field_len + len < sizeof(e->field)) {
                memcpy(e->field + e->field_len, at, len);
                e->field_len += len;
        } else
                e->field_len = sizeof(e->field); /* no name we read */
        return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
        struct etcd_kv *e = p->data;

        if (!e->in_value) {
                e->in_value = true;
                e->in_index = e->field_len == 12 &&
                              strncasecmp(e->field, "X-Etcd-Index", 12) == 0;
        }
        for (size_t i = 0; e->in_index && i < len; i++)
                if (at[i] >= '0' && at[i] <= '9')
                        e->etcd_index = e->etcd_index * 10 +
                                        (uint64_t)(at[i] - '0');
        return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
        struct etcd_kv *e = p->data;
        size_t cap;
        char *b;

        if (e->body_len + len > ETCD_BODY_MAX) {
                e->too_big = true;
                return 1; /* stops the parser */
        }
        if (e->body_len + len + 1 > e->body_cap) {
                cap = e->body_cap ? e->body_cap : 4096;
                while (cap < e->body_len + len + 1)
                        cap *= 2;
                b = realloc(e->body, cap);
                if (b == NULL)
                        return 1;
                e->body = b;
                e->body_cap = cap;
        }
        memcpy(e->body + e->body_len, at, len);
        e->body_len += len;
        e->body[e->body_len] = '\0';
        return 0;
}

static int handle_response(struct etcd_kv *e, struct req *q);

static int on_message_complete(http_parser *p)
{
        struct etcd_kv *e = p->data;
        struct req *q = e->head;
        int r;

        if (q == NULL)
                return 0; /* nothing asked: ignored */
        r = handle_response(e, q);
        if (r == 0) {
                /* Answered: next. */
                e->head = q->next;
                if (e->head == NULL)
                        e->tail = NULL;
                req_free(q);
        }
        if (e->head != NULL && !e->dead)
                send_head(e);
        return 0;
}

static void alloc_cb(uv_handle_t *h, size_t size, uv_buf_t *buf)
{
        struct etcd_kv *e = hp_container_of((uv_tcp_t *)h, struct etcd_kv,
                                            tcp);

        (void)size;
        *buf = uv_buf_init(e->rbuf, sizeof(e->rbuf));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
        struct etcd_kv *e = hp_container_of((uv_tcp_t *)s, struct etcd_kv,
                                            tcp);
        size_t used;

        (void)buf;
        if (n == 0 || e->dead)
                return;
        if (n < 0) {
                snprintf(e->base.why, sizeof(e->base.why),
                         "etcd at %s closed the connection", e->host);
                conn_fail(e, n == UV_EOF ? -ECONNRESET : (int)n);
                return;
        }
        used = http_parser_execute(&e->parser, &e->settings, e->rbuf,
                                   (size_t)n);
        if (e->too_big) {
                snprintf(e->base.why, sizeof(e->base.why),
                         "etcd at %s answered more than %u bytes", e->host,
                         ETCD_BODY_MAX);
                conn_fail(e, HP_ETOOBIG);
        } else if (used != (size_t)n &&
                   HTTP_PARSER_ERRNO(&e->parser) != HPE_OK) {
                snprintf(e->base.why, sizeof(e->base.why),
                         "etcd at %s sent no HTTP: %s", e->host,
                         http_errno_description(
                                 HTTP_PARSER_ERRNO(&e->parser)));
                conn_fail(e, -EPROTO);
        }
}

static void write_cb(uv_write_t *w, int status)
{
        struct etcd_kv *e = hp_container_of(w, struct etcd_kv, wr);

        if (status < 0 && !e->dead && status != UV_ECANCELED)
                conn_fail(e, status);
}

static int issue(struct etcd_kv *e, struct req *q);

static void send_head(struct etcd_kv *e)
{
        uv_buf_t b;
        int r;

        r = issue(e, e->head);
        if (r == 0) {
                b = uv_buf_init(e->out, (unsigned)strlen(e->out));
                r = uv_write(&e->wr, (uv_stream_t *)&e->tcp, &b, 1, write_cb);
        }
        if (r < 0)
                conn_fail(e, r);
}

static void connect_cb(uv_connect_t *c, int status)
{
        struct etcd_kv *e = hp_container_of(c, struct etcd_kv, conn);

        if (status == UV_ECANCELED || e->dead)
                return;
        if (status < 0) {
                fail_all(e, status);
                return;
        }
        e->up = true;
        uv_read_start((uv_stream_t *)&e->tcp, alloc_cb, read_cb);
        if (e->head != NULL)
                send_head(e);
}

/* ---- the exchanges of each request ---- */

/* The keys' common directory: the longest prefix of every key that ends
 * before a '/'. */
static char *common_dir(char *const *keys, size_t n)
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
                return build(e, "GET", q->keys[0], "", NULL, 0);
        if (q->n == 1)
                snprintf(query, sizeof(query), "wait=true&waitIndex=%" PRIu64,
                         q->index + 1);
        else if (!wait)
                snprintf(query, sizeof(query), "recursive=true");
        else
                snprintf(query, sizeof(query),
                         "wait=true&recursive=true&waitIndex=%" PRIu64,
                         q->index + 1);
        return build(e, "GET", q->n == 1 ? q->keys[0] : q->dir, query, NULL,
                     0);
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
                return build(e, "GET", "/hyperpodrun", "", NULL, 0);
        case REQ_SET:
                return build(e, "PUT", q->keys[0], "", q->val, q->val_len);
        case REQ_GET:
                return build(e, "GET", q->keys[0], "", NULL, 0);
        case REQ_ADD:
                if (q->step == 0)
                        return build(e, "GET", q->keys[0], "", NULL, 0);
                if (q->index == 0)
                        snprintf(query, sizeof(query), "prevExist=false");
                else
                        snprintf(query, sizeof(query), "prevIndex=%" PRIu64,
                                 q->index);
                return build(e, "PUT", q->keys[0], query, q->val, q->val_len);
        case REQ_CAS:
                if (q->step == 1)
                        return build(e, "GET", q->keys[0], "", NULL, 0);
                if (q->expected_len == 0)
                        return build(e, "PUT", q->keys[0], "prevExist=false",
                                     q->val, q->val_len);
                enc = malloc(3 * q->expected_len + 16);
                if (enc == NULL)
                        return -ENOMEM;
                memcpy(enc, "prevValue=", 11);
                used = 10;
                pct(enc, &used, q->expected, q->expected_len, false);
                r = build(e, "PUT", q->keys[0], enc, q->val, q->val_len);
                free(enc);
                return r;
        case REQ_MULTI_GET:
                return issue_read(e, q, false);
        case REQ_WAIT:
                return issue_read(e, q, q->step == 1);
        case REQ_REMOVE:
                return build(e, "DELETE", q->keys[0], "recursive=true", NULL,
                             0);
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
        reply_simple(q, -EPROTO, NULL, 0, 0);
}

/* multi_get's answer, or whether every one of wait's keys is set (1) or
 * not yet (0). */
static int read_keys(struct etcd_kv *e, struct req *q, const cJSON *root,
                     bool reply)
{
        struct hp_store_reply r = { .status = 0 };
        const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, "node");
        size_t cap = 0, used = 0;
        uint8_t *items = NULL;
        int all = 1;

        for (size_t i = 0; i < q->n; i++) {
                const cJSON *node = top ? find_node(top, q->keys[i]) : NULL;
                const char *v = node ? node_value(node) : "";
                uint64_t len = strlen(v);

                all &= len > 0;
                cap += 8 + len;
        }
        if (!reply)
                return all;
        items = malloc(cap + 1);
        if (items == NULL) {
                reply_simple(q, -ENOMEM, NULL, 0, 0);
                return 0;
        }
        for (size_t i = 0; i < q->n; i++) {
                const cJSON *node = top ? find_node(top, q->keys[i]) : NULL;
                const char *v = node ? node_value(node) : "";
                uint64_t len = strlen(v);

                for (int b = 0; b < 8; b++)
                        items[used++] = (uint8_t)(len >> (8 * b));
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
                        reply_simple(q, 0, NULL, 0,
                                     strtoll(q->val, NULL, 10));
                        return 0;
                }
                if (status != 412 || ++q->tries > ETCD_ADD_TRIES) {
                        reply_bad(e, q, root);
                        return 0;
                }
                q->step = 0; /* another writer came first: again */
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
                reply_simple(q, 0, NULL, 0, now);
                return 0;
        }
        free(q->val);
        snprintf(text, sizeof(text), "%" PRId64, now + q->delta);
        q->val = strdup(text);
        if (q->val == NULL) {
                reply_simple(q, -ENOMEM, NULL, 0, 0);
                return 0;
        }
        q->val_len = strlen(text);
        q->step = 1;
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
                reply_simple(q, 0, v, strlen(v), 0);
                return 0;
        case REQ_REMOVE:
                if (status != 200 && !absent)
                        break;
                reply_simple(q, 0, NULL, 0, 0);
                return 0;
        case REQ_SET:
                if (status != 200 && status != 201)
                        break;
                reply_simple(q, 0, NULL, 0, 0);
                return 0;
        case REQ_ADD:
                return add_step(e, q, root, status);
        case REQ_CAS:
                if (q->step == 0 && (status == 200 || status == 201)) {
                        reply_simple(q, 0, q->val, q->val_len, 0);
                        return 0;
                }
                if (q->step == 0 && (status == 412 || absent)) {
                        q->step = 1; /* not set: what is there */
                        return 1;
                }
                if (q->step == 1 && (status == 200 || absent)) {
                        v = absent ? "" : node_value(node);
                        reply_simple(q, 0, v, strlen(v), 0);
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
                        reply_simple(q, 0, NULL, 0, 0);
                        return 0;
                }
                q->index = e->etcd_index;
                q->step = 1;
                return 1;
        }
        reply_bad(e, q, root);
        return 0;
}

static int handle_response(struct etcd_kv *e, struct req *q)
{
        cJSON *root = NULL;
        int r;

        if (e->body_len > 0)
                root = cJSON_ParseWithLength(e->body, e->body_len);
        r = answer(e, q, root, e->parser.status_code);
        cJSON_Delete(root);
        return r;
}

/* ---- the ops ---- */

static int submit(struct hp_rdzv_kv *kv, struct req *q)
{
        struct etcd_kv *e = hp_container_of(kv, struct etcd_kv, base);

        if (e->dead) {
                req_free(q);
                return -ENOTCONN;
        }
        if (e->tail != NULL)
                e->tail->next = q;
        else
                e->head = q;
        e->tail = q;
        if (e->head == q && e->up)
                send_head(e);
        return 0;
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
                q->dir = common_dir(q->keys, n);
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
                        req_free(q);
                return NULL;
        }
        q->kind = kind;
        q->cb = cb;
        q->ctx = ctx;
        return q;
}

static int kv_connect(uv_loop_t *loop, const char *addr, int port,
                      hp_store_reply_cb cb, void *ctx,
                      struct hp_rdzv_kv **out)
{
        struct etcd_kv *e = calloc(1, sizeof(*e));
        struct sockaddr_storage sa;
        struct req *q;
        int r;

        if (e == NULL)
                return -ENOMEM;
        e->base.ops = &hp_rdzv__kv_etcd;
        snprintf(e->host, sizeof(e->host),
                 strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
        r = strchr(addr, ':')
                    ? uv_ip6_addr(addr, port, (struct sockaddr_in6 *)&sa)
                    : uv_ip4_addr(addr, port, (struct sockaddr_in *)&sa);
        q = req_new(REQ_CONNECT, NULL, 0, NULL, 0, cb, ctx);
        if (r < 0 || q == NULL) {
                free(q);
                free(e);
                return r < 0 ? r : -ENOMEM;
        }
        http_parser_init(&e->parser, HTTP_RESPONSE);
        e->parser.data = e;
        e->settings.on_message_begin = on_message_begin;
        e->settings.on_header_field = on_header_field;
        e->settings.on_header_value = on_header_value;
        e->settings.on_body = on_body;
        e->settings.on_message_complete = on_message_complete;
        uv_tcp_init(loop, &e->tcp);
        e->head = e->tail = q;
        r = uv_tcp_connect(&e->conn, &e->tcp, (struct sockaddr *)&sa,
                           connect_cb);
        if (r < 0) {
                e->head = e->tail = NULL;
                req_free(q);
                uv_close((uv_handle_t *)&e->tcp, tcp_closed_cb);
                return r;
        }
        *out = &e->base;
        return 0;
}

static int kv_set(struct hp_rdzv_kv *kv, const char *key, const void *val,
                  size_t len, hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_SET, &key, 1, val, len, cb, ctx);

        return q ? submit(kv, q) : -ENOMEM;
}

static int kv_get(struct hp_rdzv_kv *kv, const char *key,
                  hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_GET, &key, 1, NULL, 0, cb, ctx);

        return q ? submit(kv, q) : -ENOMEM;
}

static int kv_add(struct hp_rdzv_kv *kv, const char *key, int64_t delta,
                  hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_ADD, &key, 1, NULL, 0, cb, ctx);

        if (q == NULL)
                return -ENOMEM;
        q->delta = delta;
        return submit(kv, q);
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
                        req_free(q);
                        return -ENOMEM;
                }
                memcpy(q->expected, expected, expected_len);
                q->expected_len = expected_len;
        }
        return submit(kv, q);
}

static int kv_wait(struct hp_rdzv_kv *kv, const char *const *keys, size_t n,
                   hp_store_reply_cb cb, void *ctx)
{
        struct req *q;

        if (n == 0)
                return -EINVAL;
        q = req_new(REQ_WAIT, keys, n, NULL, 0, cb, ctx);
        return q ? submit(kv, q) : -ENOMEM;
}

static int kv_multi_get(struct hp_rdzv_kv *kv, const char *const *keys,
                        size_t n, hp_store_reply_cb cb, void *ctx)
{
        struct req *q;

        if (n == 0)
                return -EINVAL;
        q = req_new(REQ_MULTI_GET, keys, n, NULL, 0, cb, ctx);
        return q ? submit(kv, q) : -ENOMEM;
}

static int kv_remove(struct hp_rdzv_kv *kv, const char *key,
                     hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_REMOVE, &key, 1, NULL, 0, cb, ctx);

        return q ? submit(kv, q) : -ENOMEM;
}

static int kv_ping(struct hp_rdzv_kv *kv, hp_store_reply_cb cb, void *ctx)
{
        struct req *q = req_new(REQ_PING, NULL, 0, NULL, 0, cb, ctx);

        return q ? submit(kv, q) : -ENOMEM;
}

static int kv_local_addr(const struct hp_rdzv_kv *kv, char *addr, size_t len)
{
        const struct etcd_kv *e = hp_container_of(kv, struct etcd_kv, base);
        struct sockaddr_storage sa;
        int salen = sizeof(sa), r;

        if (!e->up)
                return -ENOTCONN;
        r = uv_tcp_getsockname(&e->tcp, (struct sockaddr *)&sa, &salen);
        if (r == 0)
                r = uv_ip_name((struct sockaddr *)&sa, addr, len);
        return r;
}

static void kv_close(struct hp_rdzv_kv *kv, void (*close_cb)(void *ctx),
                     void *ctx)
{
        struct etcd_kv *e = hp_container_of(kv, struct etcd_kv, base);

        e->dead = true;
        e->close_cb = close_cb;
        e->close_ctx = ctx;
        uv_close((uv_handle_t *)&e->tcp, tcp_closed_cb);
}

const struct hp_rdzv_kv_ops hp_rdzv__kv_etcd = {
        .what = "etcd",
        .connect = kv_connect,
        .set = kv_set,
        .get = kv_get,
        .add = kv_add,
        .compare_set = kv_compare_set,
        .wait = kv_wait,
        .multi_get = kv_multi_get,
        .remove = kv_remove,
        .ping = kv_ping,
        .local_addr = kv_local_addr,
        .close = kv_close,
};
