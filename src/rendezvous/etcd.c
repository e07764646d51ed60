/* SPDX-License-Identifier: Apache-2.0 */
/* etcd-v2's connection (--rdzv-backend etcd-v2): HTTP/1.1 on one
 * kept-alive libuv TCP connection per client, one request on the wire at
 * a time, responses read by libhttp-parser into a body capped at
 * ETCD_BODY_MAX (over it, the connection ends with HP_ETOOBIG and says
 * so). What each request of the ops asks is etcd_ops.c's. */
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

static void send_head(struct etcd_kv *e);

void hp_rdzv__etcd_req_free(struct req *q)
{
        for (size_t i = 0; i < q->n; i++)
                free(q->keys[i]);
        free(q->keys);
        free(q->dir);
        free(q->val);
        free(q->expected);
        free(q);
}

void hp_rdzv__etcd_reply(struct req *q, int status, const char *val,
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
                hp_rdzv__etcd_reply(q, status, NULL, 0, 0);
                hp_rdzv__etcd_req_free(q);
        }
        e->tail = NULL;
}

/* Frees e once both its handles are closed. */
static void handles_gone(struct etcd_kv *e)
{
        void (*cb)(void *) = e->close_cb;
        void *ctx = e->close_ctx;

        if (e->tcp_state != CONN_CLOSED || !e->retry_closed)
                return;
        fail_all(e, -ECANCELED);
        free(e->out);
        free(e->body);
        free(e);
        if (cb != NULL)
                cb(ctx);
}

static void retry_cb(uv_timer_t *t);

static void tcp_closed_cb(uv_handle_t *h)
{
        struct etcd_kv *e = hp_container_of((uv_tcp_t *)h, struct etcd_kv,
                                            tcp);

        e->tcp_state = CONN_CLOSED;
        if (!e->dead) {
                /* Closed to connect again. */
                uv_timer_start(&e->retry, retry_cb, ETCD_RETRY_MS, 0);
                return;
        }
        handles_gone(e);
}

static void retry_closed_cb(uv_handle_t *h)
{
        struct etcd_kv *e = hp_container_of((uv_timer_t *)h, struct etcd_kv,
                                            retry);

        e->retry_closed = true;
        handles_gone(e);
}

/* The connection cannot go on: every request fails with status. */
static void conn_fail(struct etcd_kv *e, int status)
{
        if (e->tcp_state == CONN_OPEN)
                uv_read_stop((uv_stream_t *)&e->tcp);
        fail_all(e, status);
}

/* The connection broke: made again, when it had been up and the request
 * on the wire may be sent again, until ETCD_RECONNECT_MS have passed;
 * else every request fails with status. */
static void conn_lost(struct etcd_kv *e, int status)
{
        uint64_t now = uv_now(uv_handle_get_loop((uv_handle_t *)&e->retry));

        if (e->dead)
                return;
        if (!e->was_up || (e->head != NULL && e->head->once) ||
            (e->lost_at != 0 && now - e->lost_at >= ETCD_RECONNECT_MS)) {
                conn_fail(e, status);
                return;
        }
        if (e->lost_at == 0) {
                e->lost_at = now;
                hp_log_warn("etcd at %s: the connection broke (%s); "
                            "connecting again for up to %d s",
                            e->host, hp_strerror(status),
                            ETCD_RECONNECT_MS / 1000);
        }
        e->up = false;
        if (e->tcp_state == CONN_OPEN) {
                uv_read_stop((uv_stream_t *)&e->tcp);
                e->tcp_state = CONN_CLOSING;
                uv_close((uv_handle_t *)&e->tcp, tcp_closed_cb);
        }
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
void hp_rdzv__etcd_pct(char *buf, size_t *used, const char *s, size_t len,
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
int hp_rdzv__etcd_build(struct etcd_kv *e, const char *method,
                        const char *key, const char *query, const char *val,
                        size_t val_len)
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
        hp_rdzv__etcd_pct(path, &used, key ? key : "", klen, true);
        if (query[0] != '\0')
                used += (size_t)snprintf(path + used, cap - used, "?%s",
                                         query);
        memcpy(body, "value=", 7);
        body_len = 6;
        hp_rdzv__etcd_pct(body, &body_len, val ? val : "", val_len, false);
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

static int on_message_complete(http_parser *p)
{
        struct etcd_kv *e = p->data;
        struct req *q = e->head;
        int r;

        if (q == NULL)
                return 0; /* nothing asked: ignored */
        r = e->answer(e, q);
        e->lost_at = 0;
        if (r == 0) {
                /* Answered: next. */
                e->head = q->next;
                if (e->head == NULL)
                        e->tail = NULL;
                hp_rdzv__etcd_req_free(q);
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
                conn_lost(e, n == UV_EOF ? -ECONNRESET : (int)n);
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
                conn_lost(e, status);
}

static void send_head(struct etcd_kv *e)
{
        uv_buf_t b;
        int r;

        r = e->issue(e, e->head);
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
                conn_lost(e, status);
                return;
        }
        if (e->was_up)
                hp_log_info("etcd at %s: connected again", e->host);
        e->up = true;
        e->was_up = true;
        uv_read_start((uv_stream_t *)&e->tcp, alloc_cb, read_cb);
        if (e->head != NULL) {
                e->head->step = 0; /* again from its first exchange */
                send_head(e);
        }
}

int hp_rdzv__etcd_submit(struct hp_rdzv_kv *kv, struct req *q)
{
        struct etcd_kv *e = hp_container_of(kv, struct etcd_kv, base);

        if (e->dead) {
                hp_rdzv__etcd_req_free(q);
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

/* A new connection on e's handle (initialized here) to e->sa. */
static int open_tcp(struct etcd_kv *e)
{
        uv_loop_t *loop = uv_handle_get_loop((uv_handle_t *)&e->retry);

        http_parser_init(&e->parser, HTTP_RESPONSE);
        e->parser.data = e;
        uv_tcp_init(loop, &e->tcp);
        e->tcp_state = CONN_OPEN;
        return uv_tcp_connect(&e->conn, &e->tcp, (struct sockaddr *)&e->sa,
                              connect_cb);
}

static void retry_cb(uv_timer_t *t)
{
        struct etcd_kv *e = hp_container_of(t, struct etcd_kv, retry);
        int r;

        if (e->dead)
                return;
        r = open_tcp(e);
        if (r < 0)
                conn_lost(e, r);
}

int hp_rdzv__etcd_open(uv_loop_t *loop, const char *addr, int port,
                       const struct hp_rdzv_kv_ops *ops, struct req *first,
                       int (*issue)(struct etcd_kv *e, struct req *q),
                       int (*answer)(struct etcd_kv *e, struct req *q),
                       struct hp_rdzv_kv **out)
{
        struct etcd_kv *e = calloc(1, sizeof(*e));
        int r;

        if (e == NULL) {
                hp_rdzv__etcd_req_free(first);
                return -ENOMEM;
        }
        e->base.ops = ops;
        e->issue = issue;
        e->answer = answer;
        snprintf(e->host, sizeof(e->host),
                 strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
        r = strchr(addr, ':')
                    ? uv_ip6_addr(addr, port, (struct sockaddr_in6 *)&e->sa)
                    : uv_ip4_addr(addr, port, (struct sockaddr_in *)&e->sa);
        if (r < 0) {
                hp_rdzv__etcd_req_free(first);
                free(e);
                return r;
        }
        e->settings.on_message_begin = on_message_begin;
        e->settings.on_header_field = on_header_field;
        e->settings.on_header_value = on_header_value;
        e->settings.on_body = on_body;
        e->settings.on_message_complete = on_message_complete;
        uv_timer_init(loop, &e->retry);
        e->head = e->tail = first;
        r = open_tcp(e);
        if (r < 0) {
                /* No callback: the caller hears it from the return. */
                e->head = e->tail = NULL;
                hp_rdzv__etcd_req_free(first);
                hp_rdzv__etcd_close(&e->base, NULL, NULL);
                return r;
        }
        *out = &e->base;
        return 0;
}

int hp_rdzv__etcd_local_addr(const struct hp_rdzv_kv *kv, char *addr,
                             size_t len)
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

void hp_rdzv__etcd_close(struct hp_rdzv_kv *kv, void (*close_cb)(void *ctx),
                         void *ctx)
{
        struct etcd_kv *e = hp_container_of(kv, struct etcd_kv, base);

        e->dead = true;
        e->close_cb = close_cb;
        e->close_ctx = ctx;
        if (e->tcp_state == CONN_OPEN) {
                e->tcp_state = CONN_CLOSING;
                uv_close((uv_handle_t *)&e->tcp, tcp_closed_cb);
        }
        uv_close((uv_handle_t *)&e->retry, retry_closed_cb);
}
