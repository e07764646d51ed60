/* SPDX-License-Identifier: Apache-2.0 */
/* The request side of the HTTP server: http-parser's callbacks, which
 * keep the URL, the Content-Type and Authorization values and the body
 * within the limits (refusing with the status that says which), answer
 * "Expect: 100-continue", and hand the finished request over. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hyperpod/common.h"
#include "hyperpod/httpd.h"

#include "httpd-private.h"

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

void hp_httpd_limits_default(struct hp_httpd_limits *l)
{
        l->max_header_bytes = 16 * 1024;
        l->max_body_bytes = 1024 * 1024;
        l->max_connections = 64;
        l->idle_timeout_ms = 5000;
        l->request_timeout_ms = 10000;
        l->silent_ms = 1000;
}

int hp_httpd__growbuf_reserve(struct growbuf *b, size_t extra)
{
        size_t cap = b->cap ? b->cap : 256;
        char *data;

        if (b->len + extra <= b->cap)
                return 0;
        while (cap < b->len + extra)
                cap *= 2;
        data = realloc(b->data, cap);
        if (data == NULL)
                return -ENOMEM;
        b->data = data;
        b->cap = cap;
        return 0;
}

void hp_httpd__growbuf_trim(struct growbuf *b)
{
        if (b->cap <= HTTPD_KEEP_BUFFER)
                return;
        free(b->data);
        b->data = NULL;
        b->len = 0;
        b->cap = 0;
}

void hp_httpd__growbuf_free(struct growbuf *b)
{
        free(b->data);
        b->data = NULL;
}

static struct hp_httpd_conn *conn_of_parser(http_parser *p)
{
        return hp_container_of(p, struct hp_httpd_conn, parser);
}

static void continue_cb(uv_write_t *req, int status)
{
        struct hp_httpd_conn *c = hp_container_of(req, struct hp_httpd_conn,
                                                  continue_req);

        /* A failed write shows up again on the next read or write. */
        if (status < 0 && c->state != CONN_CLOSED)
                hp_log_debug("http: %s: writing 100 Continue failed: %s",
                             c->peer, uv_strerror(status));
}

/* ---- parser callbacks --------------------------------------------------- */

/* Records why the request is refused and stops the parser. */
__attribute__((format(printf, 3, 4))) static int
conn_refuse(struct hp_httpd_conn *c, int status, const char *fmt, ...)
{
        va_list ap;

        c->refuse_status = status;
        va_start(ap, fmt);
        vsnprintf(c->refuse_reason, sizeof(c->refuse_reason), fmt, ap);
        va_end(ap);
        return -1;
}

static int req_append(struct hp_httpd_conn *c, const char *data, size_t len)
{
        if (hp_httpd__growbuf_reserve(&c->req, len) < 0)
                return conn_refuse(c, 500, "no memory for the request");
        memcpy(c->req.data + c->req.len, data, len);
        c->req.len += len;
        return 0;
}

static int add_header_bytes(struct hp_httpd_conn *c, size_t n)
{
        size_t max = c->server->limits.max_header_bytes;

        c->header_bytes += n;
        if (c->header_bytes > max)
                return conn_refuse(c, 431, "headers over %zu bytes", max);
        return 0;
}

static int on_message_begin(http_parser *p)
{
        struct hp_httpd_conn *c = conn_of_parser(p);

        c->state = CONN_READING;
        c->since = uv_now(c->server->loop);
        c->req.len = 0;
        c->url_len = 0;
        c->url_done = false;
        c->header_bytes = 0;
        c->header_pos = HEADER_NONE;
        c->has_content_type = false;
        c->content_type_done = false;
        c->has_authorization = false;
        c->authorization_done = false;
        c->expect_len = 0;
        c->has_body = false;
        c->body_len = 0;
        /* conn_process() arms the request deadline. */
        c->began = true;
        return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
        struct hp_httpd_conn *c = conn_of_parser(p);
        size_t max = c->server->limits.max_header_bytes;

        c->url_len += len;
        if (c->url_len > max)
                return conn_refuse(c, 414, "URL over %zu bytes", max);
        if (add_header_bytes(c, len) < 0)
                return -1;
        return req_append(c, at, len);
}

/* The URL is complete once anything after it arrives. */
static int finish_url(struct hp_httpd_conn *c)
{
        if (c->url_done)
                return 0;
        c->url_done = true;
        return req_append(c, "", 1);
}

/* The end of a kept value: its NUL. */
static int finish_value(struct hp_httpd_conn *c)
{
        bool *done;

        if (c->header_pos != HEADER_VALUE)
                return 0;
        if (c->header_kind == HEADER_CONTENT_TYPE)
                done = &c->content_type_done;
        else if (c->header_kind == HEADER_AUTHORIZATION)
                done = &c->authorization_done;
        else
                return 0;
        if (*done)
                return 0;
        *done = true;
        return req_append(c, "", 1);
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
        struct hp_httpd_conn *c = conn_of_parser(p);

        if (finish_url(c) < 0)
                return -1;
        if (c->header_pos != HEADER_FIELD) {
                if (finish_value(c) < 0)
                        return -1;
                c->header_pos = HEADER_FIELD;
                c->field_len = 0;
                /* ": " and CRLF, so that many empty headers count too. */
                if (add_header_bytes(c, 4) < 0)
                        return -1;
        }
        if (add_header_bytes(c, len) < 0)
                return -1;
        /* Only short names are of interest; a longer one is kept as a
         * length that matches nothing. */
        if (c->field_len + len < sizeof(c->field))
                memcpy(c->field + c->field_len, at, len);
        c->field_len += len;
        return 0;
}

static enum header_kind classify_field(struct hp_httpd_conn *c)
{
        if (c->field_len >= sizeof(c->field))
                return HEADER_OTHER;
        c->field[c->field_len] = '\0';
        /* Only the first Content-Type counts. */
        if (strcasecmp(c->field, "content-type") == 0 && !c->has_content_type)
                return HEADER_CONTENT_TYPE;
        /* Only the first Authorization counts, too. */
        if (strcasecmp(c->field, "authorization") == 0 &&
            !c->has_authorization)
                return HEADER_AUTHORIZATION;
        if (strcasecmp(c->field, "expect") == 0)
                return HEADER_EXPECT;
        return HEADER_OTHER;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
        struct hp_httpd_conn *c = conn_of_parser(p);

        if (c->header_pos != HEADER_VALUE) {
                c->header_pos = HEADER_VALUE;
                c->header_kind = classify_field(c);
                if (c->header_kind == HEADER_CONTENT_TYPE) {
                        c->has_content_type = true;
                        c->content_type_off = c->req.len;
                } else if (c->header_kind == HEADER_AUTHORIZATION) {
                        c->has_authorization = true;
                        c->authorization_off = c->req.len;
                }
        }
        if (add_header_bytes(c, len) < 0)
                return -1;
        switch (c->header_kind) {
        case HEADER_CONTENT_TYPE:
        case HEADER_AUTHORIZATION:
                return req_append(c, at, len);
        case HEADER_EXPECT:
                /* An overlong value is kept as a length that matches
                 * nothing, like an overlong name. */
                if (c->expect_len + len < sizeof(c->expect))
                        memcpy(c->expect + c->expect_len, at, len);
                c->expect_len += len;
                return 0;
        default:
                return 0;
        }
}

static bool expects_continue(struct hp_httpd_conn *c)
{
        if (c->expect_len == 0 || c->expect_len >= sizeof(c->expect))
                return false;
        c->expect[c->expect_len] = '\0';
        return strcasecmp(c->expect, "100-continue") == 0;
}

static int on_headers_complete(http_parser *p)
{
        struct hp_httpd_conn *c = conn_of_parser(p);
        const struct hp_httpd_limits *l = &c->server->limits;
        bool chunked = (p->flags & F_CHUNKED) != 0;
        bool sized = (p->flags & F_CONTENTLENGTH) != 0;

        if (finish_url(c) < 0 || finish_value(c) < 0)
                return -1;
        if (p->http_major != 1)
                return conn_refuse(c, 505, "HTTP/%u.%u", p->http_major,
                                   p->http_minor);
        /* Refused before a byte of the body is read. */
        if (sized && p->content_length > l->max_body_bytes)
                return conn_refuse(c, 413,
                                   "Content-Length %" PRIu64
                                   " over the %zu-byte limit",
                                   p->content_length, l->max_body_bytes);
        c->has_body = chunked || sized;
        if (p->http_minor >= 1 && (chunked || p->content_length > 0) &&
            expects_continue(c)) {
                uv_buf_t buf = uv_buf_init((char *)continue_line,
                                           sizeof(continue_line) - 1);
                int r = uv_write(&c->continue_req, (uv_stream_t *)&c->tcp,
                                 &buf, 1, continue_cb);

                if (r < 0)
                        hp_log_debug("http: %s: cannot write 100 Continue: "
                                     "%s",
                                     c->peer, uv_strerror(r));
        }
        c->body_off = c->req.len;
        return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
        struct hp_httpd_conn *c = conn_of_parser(p);
        size_t max = c->server->limits.max_body_bytes;

        if (len > max - c->body_len)
                return conn_refuse(c, 413, "body over the %zu-byte limit",
                                   max);
        c->body_len += len;
        return req_append(c, at, len);
}

static int on_message_complete(http_parser *p)
{
        struct hp_httpd_conn *c = conn_of_parser(p);

        if (req_append(c, "", 1) < 0)
                return -1;
        /* One request at a time: the parser stops here and the rest of
         * the input waits until the response is written. */
        c->message_done = true;
        http_parser_pause(p, 1);
        return 0;
}

/* Splits the URL in place into NUL-terminated path and query. */
static void split_url(struct hp_httpd_conn *c, const char **path,
                      const char **query)
{
        char *url = c->req.data;
        struct http_parser_url u;

        *path = url;
        *query = "";
        /* http_parser_url holds 16-bit offsets. */
        if (c->url_len > UINT16_MAX)
                return;
        http_parser_url_init(&u);
        if (http_parser_parse_url(url, c->url_len,
                                  c->parser.method == HTTP_CONNECT, &u) != 0)
                return;
        if (u.field_set & (1 << UF_QUERY)) {
                *query = url + u.field_data[UF_QUERY].off;
                url[u.field_data[UF_QUERY].off + u.field_data[UF_QUERY].len] =
                        '\0';
        }
        if (u.field_set & (1 << UF_PATH)) {
                *path = url + u.field_data[UF_PATH].off;
                url[u.field_data[UF_PATH].off + u.field_data[UF_PATH].len] =
                        '\0';
        }
}

void hp_httpd__request_fill(struct hp_httpd_conn *c,
                            struct hp_httpd_request *req)
{
        split_url(c, &req->path, &req->query);
        req->method = (enum http_method)c->parser.method;
        req->method_name = http_method_str(req->method);
        req->content_type = c->has_content_type
                                    ? c->req.data + c->content_type_off
                                    : NULL;
        req->authorization = c->has_authorization
                                     ? c->req.data + c->authorization_off
                                     : NULL;
        req->body = c->req.data + c->body_off;
        req->body_len = c->body_len;
        req->has_body = c->has_body;
        req->peer = c->peer;
        req->http_major = c->parser.http_major;
        req->http_minor = c->parser.http_minor;
}

void hp_httpd__parser_settings(http_parser_settings *s)
{
        http_parser_settings_init(s);
        s->on_message_begin = on_message_begin;
        s->on_url = on_url;
        s->on_header_field = on_header_field;
        s->on_header_value = on_header_value;
        s->on_headers_complete = on_headers_complete;
        s->on_body = on_body;
        s->on_message_complete = on_message_complete;
}
