/* SPDX-License-Identifier: Apache-2.0 */
/* The operator API's HTTP/1.1 server: libuv for the sockets, http-parser
 * for the protocol, one request in flight per connection. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/httpd.h"

/* Bytes read from the socket at a time. Requests larger than this arrive
 * over several reads; the limits, not this, bound what a request may be. */
#define HTTPD_READ_CHUNK 8192
/* A request or response buffer grown above this for one large message is
 * given back afterwards, so idle keep-alive connections stay small. */
#define HTTPD_KEEP_BUFFER 65536
/* After a "connection: close" response, the longest silence from the peer
 * before closing anyway, and the longest lingering in all when the request
 * timeout is off. */
#define HTTPD_LINGER_QUIET_MS 1000
#define HTTPD_LINGER_TOTAL_MS 10000
/* Room for the status line and our own headers around a response body. */
#define HTTPD_HEAD_ROOM 160

enum conn_state {
        CONN_IDLE,    /* waiting for the first byte of a request */
        CONN_READING, /* a request is partly read; the request timer runs */
        CONN_WRITING, /* in the handler or writing its response; not reading */
        CONN_LINGER,  /* last response written and FIN sent; draining input
                       * until the peer's FIN so that our close cannot turn
                       * into a reset that destroys the response */
        CONN_CLOSED,  /* uv_close called; waiting for the close callbacks */
};

/* Where http-parser is inside the header block. */
enum header_pos { HEADER_NONE, HEADER_FIELD, HEADER_VALUE };

/* The headers the server looks at; all others are skipped. */
enum header_kind {
        HEADER_OTHER,
        HEADER_CONTENT_TYPE,
        HEADER_AUTHORIZATION,
        HEADER_EXPECT,
};

struct growbuf {
        char *data;
        size_t len;
        size_t cap;
};

struct hp_httpd_conn {
        uv_tcp_t tcp;
        uv_timer_t timer; /* idle, request, write or linger deadline */
        uv_write_t write_req;
        uv_write_t continue_req;
        uv_shutdown_t shutdown_req;
        struct hp_httpd *server;
        struct hp_httpd_conn *prev;
        struct hp_httpd_conn *next;
        int handles; /* close callbacks still to come */
        enum conn_state state;
        bool served; /* counted in current_connections */
        bool answered; /* has had a response */
        uint64_t since; /* loop time the current state began */
        bool reading;
        bool keep_alive; /* after the response being written */
        bool message_done; /* the parser paused at the end of a request */
        uint64_t linger_end; /* loop time when lingering stops */
        http_parser parser;

        /* The request being read: the URL, the Content-Type value and the
         * body, each NUL-terminated, one after the other in req. */
        struct growbuf req;
        size_t url_len;
        bool url_done;
        size_t header_bytes;
        enum header_pos header_pos;
        enum header_kind header_kind;
        char field[16]; /* the current header name, if it fits */
        size_t field_len;
        bool has_content_type;
        bool content_type_done;
        size_t content_type_off;
        bool has_authorization;
        bool authorization_done;
        size_t authorization_off;
        char expect[16];
        size_t expect_len;
        bool has_body;
        size_t body_off;
        size_t body_len;

        /* Set by a parser callback that refuses the request. */
        int refuse_status;
        char refuse_reason[128];

        struct growbuf out; /* the response being written */
        size_t in_off;
        size_t in_len;
        char peer[64];
        char in[HTTPD_READ_CHUNK];
};

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

static int growbuf_reserve(struct growbuf *b, size_t extra)
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

static void growbuf_trim(struct growbuf *b)
{
        if (b->cap <= HTTPD_KEEP_BUFFER)
                return;
        free(b->data);
        b->data = NULL;
        b->len = 0;
        b->cap = 0;
}

static void growbuf_free(struct growbuf *b)
{
        free(b->data);
        b->data = NULL;
}

static struct hp_httpd_conn *conn_of_parser(http_parser *p)
{
        return hp_container_of(p, struct hp_httpd_conn, parser);
}

/* ---- connection lifetime ---------------------------------------------- */

static void server_maybe_closed(struct hp_httpd *h)
{
        void (*cb)(struct hp_httpd *h) = h->close_cb;

        if (!h->closing || !h->listener_closed || h->conns != NULL)
                return;
        /* The callback may free h: nothing touches h after it. */
        h->close_cb = NULL;
        if (cb != NULL)
                cb(h);
}

static void conn_release(struct hp_httpd_conn *c)
{
        struct hp_httpd *h = c->server;

        if (--c->handles > 0)
                return;
        if (c->prev != NULL)
                c->prev->next = c->next;
        else
                h->conns = c->next;
        if (c->next != NULL)
                c->next->prev = c->prev;
        h->nconns--;
        if (c->served)
                h->stats.current_connections--;
        growbuf_free(&c->req);
        growbuf_free(&c->out);
        free(c);
        server_maybe_closed(h);
}

static void tcp_close_cb(uv_handle_t *handle)
{
        conn_release(hp_container_of(handle, struct hp_httpd_conn, tcp));
}

static void timer_close_cb(uv_handle_t *handle)
{
        conn_release(hp_container_of(handle, struct hp_httpd_conn, timer));
}

/* Closing cancels pending writes and the shutdown: their callbacks run
 * (with UV_ECANCELED) before the close callbacks, and see CONN_CLOSED. */
static void conn_close(struct hp_httpd_conn *c)
{
        if (c->state == CONN_CLOSED)
                return;
        c->state = CONN_CLOSED;
        uv_close((uv_handle_t *)&c->tcp, tcp_close_cb);
        uv_close((uv_handle_t *)&c->timer, timer_close_cb);
}

static void timer_cb(uv_timer_t *timer);

/* A zero timeout means no deadline. */
static void conn_arm(struct hp_httpd_conn *c, uint64_t ms)
{
        if (ms == 0)
                uv_timer_stop(&c->timer);
        else
                uv_timer_start(&c->timer, timer_cb, ms, 0);
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
        struct hp_httpd_conn *c =
                hp_container_of(handle, struct hp_httpd_conn, tcp);

        /* Reading only runs once everything read before has been parsed
         * (in_len is 0), so the one buffer per connection is enough. */
        buf->base = c->in;
        buf->len = sizeof(c->in);
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void conn_read_start(struct hp_httpd_conn *c)
{
        int r;

        if (c->reading)
                return;
        r = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
        if (r < 0) {
                hp_log_warn("http: %s: cannot read: %s", c->peer,
                            uv_strerror(r));
                conn_close(c);
                return;
        }
        c->reading = true;
}

static void conn_read_stop(struct hp_httpd_conn *c)
{
        if (!c->reading)
                return;
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
        struct hp_httpd_conn *c =
                hp_container_of(req, struct hp_httpd_conn, shutdown_req);

        if (status < 0 && c->state != CONN_CLOSED)
                conn_close(c);
}

/* Lingering waits for the peer's next bytes or FIN, up to a second of
 * silence, and stops at linger_end whatever the peer does. */
static void conn_linger_arm(struct hp_httpd_conn *c)
{
        uint64_t now = uv_now(c->server->loop);
        uint64_t ms = HTTPD_LINGER_QUIET_MS;

        if (now >= c->linger_end) {
                conn_close(c);
                return;
        }
        if (ms > c->linger_end - now)
                ms = c->linger_end - now;
        conn_arm(c, ms);
}

/* After the last response: send our FIN, then read and drop whatever the
 * peer still sends until its FIN. A client that sent a whole body we
 * refused (413) before reading the answer thus gets the answer: closing
 * with its bytes unread would send a reset instead, which fails its send
 * and may destroy the response in flight. */
static void conn_linger(struct hp_httpd_conn *c)
{
        struct hp_httpd *h = c->server;
        uint64_t total = h->limits.request_timeout_ms;
        int r;

        if (h->closing) {
                conn_close(c);
                return;
        }
        c->state = CONN_LINGER;
        c->since = uv_now(h->loop);
        r = uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp,
                        shutdown_cb);
        if (r < 0) {
                conn_close(c);
                return;
        }
        if (total == 0)
                total = HTTPD_LINGER_TOTAL_MS;
        c->linger_end = uv_now(h->loop) + total;
        conn_linger_arm(c);
        c->in_off = 0;
        c->in_len = 0;
        conn_read_start(c);
}

/* ---- responses ---------------------------------------------------------- */

static void conn_process(struct hp_httpd_conn *c);

static void write_cb(uv_write_t *req, int status)
{
        struct hp_httpd_conn *c =
                hp_container_of(req, struct hp_httpd_conn, write_req);
        struct hp_httpd *h = c->server;

        if (c->state == CONN_CLOSED)
                return;
        if (status < 0) {
                hp_log_debug("http: %s: writing the response failed: %s",
                             c->peer, uv_strerror(status));
                conn_close(c);
                return;
        }
        growbuf_trim(&c->out);
        growbuf_trim(&c->req);
        if (!c->keep_alive) {
                conn_linger(c);
                return;
        }
        c->state = CONN_IDLE;
        c->since = uv_now(h->loop);
        conn_arm(c, h->limits.idle_timeout_ms);
        /* A pipelined request may already be waiting in the read buffer. */
        http_parser_pause(&c->parser, 0);
        conn_process(c);
}

static void count_status(struct hp_httpd_stats *s, int status)
{
        s->requests_total++;
        switch (status / 100) {
        case 1: s->responses_1xx++; break;
        case 2: s->responses_2xx++; break;
        case 3: s->responses_3xx++; break;
        case 4: s->responses_4xx++; break;
        default: s->responses_5xx++; break;
        }
}

/* Formats and queues one response. The body is copied, so the caller's
 * buffer is free again on return. */
static void conn_respond(struct hp_httpd_conn *c, int status,
                         const char *content_type, const char *headers,
                         const char *body, size_t body_len, bool send_body)
{
        struct growbuf *o = &c->out;
        /* RFC 9110: no Content-Length and no body with 1xx, 204 and 304. */
        bool bodyless = status < 200 || status == 204 || status == 304;
        size_t ct_len = content_type ? strlen(content_type) : 0;
        size_t h_len = headers ? strlen(headers) : 0;
        uv_buf_t buf;
        int n;
        int r;

        if (bodyless)
                body_len = 0;
        o->len = 0;
        if (growbuf_reserve(o, HTTPD_HEAD_ROOM + ct_len + h_len + body_len) <
            0) {
                hp_log_error("http: %s: no memory for a %zu-byte response",
                             c->peer, body_len);
                conn_close(c);
                return;
        }
        n = snprintf(o->data, o->cap, "HTTP/1.1 %d %s\r\n", status,
                     http_status_str((enum http_status)status));
        if (!bodyless)
                n += snprintf(o->data + n, o->cap - (size_t)n,
                              "content-length: %zu\r\n", body_len);
        if (content_type != NULL)
                n += snprintf(o->data + n, o->cap - (size_t)n,
                              "content-type: %s\r\n", content_type);
        if (headers != NULL)
                n += snprintf(o->data + n, o->cap - (size_t)n, "%s", headers);
        if (!c->keep_alive)
                n += snprintf(o->data + n, o->cap - (size_t)n,
                              "connection: close\r\n");
        else if (c->parser.http_minor == 0)
                /* An HTTP/1.0 client that asked to keep the connection
                 * only keeps it when told so. */
                n += snprintf(o->data + n, o->cap - (size_t)n,
                              "connection: keep-alive\r\n");
        n += snprintf(o->data + n, o->cap - (size_t)n, "\r\n");
        o->len = (size_t)n;
        if (send_body && body_len > 0) {
                memcpy(o->data + o->len, body, body_len);
                o->len += body_len;
        }
        count_status(&c->server->stats, status);
        c->answered = true;
        c->state = CONN_WRITING;
        conn_read_stop(c);
        buf = uv_buf_init(o->data, (unsigned)o->len);
        r = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &buf, 1,
                     write_cb);
        if (r < 0) {
                hp_log_debug("http: %s: cannot write: %s", c->peer,
                             uv_strerror(r));
                conn_close(c);
        }
}

/* An answer of the server's own, FastAPI style, after which the connection
 * closes: the rest of the input cannot be trusted to frame a request. */
static void conn_respond_error(struct hp_httpd_conn *c, int status,
                               const char *reason)
{
        const char *detail = http_status_str((enum http_status)status);
        char body[128];
        int n;

        hp_log_warn("http: %s: %d %s: %s", c->peer, status, detail, reason);
        c->server->stats.rejected_requests++;
        n = snprintf(body, sizeof(body), "{\"detail\":\"%s\"}", detail);
        c->keep_alive = false;
        c->message_done = false;
        /* The write gets a deadline of its own, whatever the request
         * timer had left. */
        conn_arm(c, c->server->limits.request_timeout_ms);
        conn_respond(c, status, "application/json", NULL, body, (size_t)n,
                     true);
}

static void continue_cb(uv_write_t *req, int status)
{
        struct hp_httpd_conn *c =
                hp_container_of(req, struct hp_httpd_conn, continue_req);

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
        if (growbuf_reserve(&c->req, len) < 0)
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
        /* Slowloris: the deadline runs from the first byte and is not
         * pushed back by later bytes. */
        conn_arm(c, c->server->limits.request_timeout_ms);
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
                                     "%s", c->peer, uv_strerror(r));
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

/* ---- dispatch ----------------------------------------------------------- */

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

static void conn_dispatch(struct hp_httpd_conn *c)
{
        struct hp_httpd *h = c->server;
        struct hp_httpd_request req = { 0 };
        struct hp_httpd_response res = { .status = 500 };

        c->message_done = false;
        split_url(c, &req.path, &req.query);
        req.method = (enum http_method)c->parser.method;
        req.method_name = http_method_str(req.method);
        req.content_type = c->has_content_type
                                   ? c->req.data + c->content_type_off
                                   : NULL;
        req.authorization = c->has_authorization
                                    ? c->req.data + c->authorization_off
                                    : NULL;
        req.body = c->req.data + c->body_off;
        req.body_len = c->body_len;
        req.has_body = c->has_body;
        req.peer = c->peer;
        req.http_major = c->parser.http_major;
        req.http_minor = c->parser.http_minor;

        /* WRITING from here on, so that hp_httpd_close() called by the
         * handler lets this response out before closing. */
        c->state = CONN_WRITING;
        h->handler(h->ctx, &req, &res);
        if (res.status < 100 || res.status > 999 ||
            (res.body == NULL && res.body_len > 0) ||
            (res.headers != NULL &&
             strlen(res.headers) > HP_HTTPD_HEADERS_MAX)) {
                hp_log_error("http: %s: the handler for %s %s gave status %d "
                             "with %zu body bytes; answering 500",
                             c->peer, req.method_name, req.path, res.status,
                             res.body_len);
                res = (struct hp_httpd_response){ .status = 500 };
        }
        c->keep_alive = http_should_keep_alive(&c->parser) &&
                        !c->parser.upgrade && !h->closing;
        hp_log_debug("http: %s \"%s %s%s%s\" %d", c->peer, req.method_name,
                     req.path, req.query[0] ? "?" : "", req.query,
                     res.status);
        conn_respond(c, res.status, res.content_type, res.headers, res.body,
                     res.body_len, req.method != HTTP_HEAD);
}

/* Parses what is buffered, answering at most one request, then reads on
 * or waits for the response to be written. */
static void conn_process(struct hp_httpd_conn *c)
{
        enum http_errno err;
        size_t n;

        n = http_parser_execute(&c->parser, &c->server->settings,
                                c->in + c->in_off, c->in_len - c->in_off);
        c->in_off += n;
        err = HTTP_PARSER_ERRNO(&c->parser);
        if (c->state == CONN_CLOSED)
                return;
        if (c->refuse_status != 0) {
                int status = c->refuse_status;

                c->refuse_status = 0;
                if (status == 500) {
                        hp_log_error("http: %s: %s", c->peer,
                                     c->refuse_reason);
                        conn_close(c);
                        return;
                }
                conn_respond_error(c, status, c->refuse_reason);
        } else if (err == HPE_PAUSED && c->message_done) {
                conn_dispatch(c);
        } else if (err == HPE_HEADER_OVERFLOW) {
                conn_respond_error(c, 431, http_errno_description(err));
        } else if (err != HPE_OK) {
                conn_respond_error(c, 400, http_errno_description(err));
        }
        switch (c->state) {
        case CONN_IDLE:
        case CONN_READING:
                /* Everything buffered was parsed. */
                c->in_off = 0;
                c->in_len = 0;
                conn_read_start(c);
                break;
        default:
                /* WRITING keeps the unparsed rest for after the response;
                 * LINGER and CLOSED manage reading themselves. */
                break;
        }
}

static void conn_read_end(struct hp_httpd_conn *c, ssize_t nread)
{
        const char *why = nread == UV_EOF ? "closed the connection"
                                          : uv_strerror((int)nread);

        switch (c->state) {
        case CONN_READING:
                hp_log_warn("http: %s: %s in the middle of a request",
                            c->peer, why);
                break;
        case CONN_LINGER:
                break;
        default:
                hp_log_debug("http: %s: %s", c->peer, why);
                break;
        }
        conn_close(c);
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
        struct hp_httpd_conn *c =
                hp_container_of(stream, struct hp_httpd_conn, tcp);

        if (nread == 0)
                return;
        if (nread < 0) {
                conn_read_end(c, nread);
                return;
        }
        /* Lingering drops what arrives. */
        if (c->state == CONN_LINGER) {
                conn_linger_arm(c);
                return;
        }
        c->in_off = 0;
        c->in_len = (size_t)nread;
        conn_process(c);
}

static void timer_cb(uv_timer_t *timer)
{
        struct hp_httpd_conn *c =
                hp_container_of(timer, struct hp_httpd_conn, timer);
        const struct hp_httpd_limits *l = &c->server->limits;
        char reason[64];

        switch (c->state) {
        case CONN_IDLE:
                hp_log_debug("http: %s: idle for %" PRIu64 " ms, closing",
                             c->peer, l->idle_timeout_ms);
                conn_close(c);
                break;
        case CONN_READING:
                (void)hp_snprintf(reason, sizeof(reason),
                                  "request not complete after %" PRIu64
                                  " ms", l->request_timeout_ms);
                conn_respond_error(c, 408, reason);
                break;
        case CONN_WRITING:
                hp_log_warn("http: %s: response not taken within %" PRIu64
                            " ms, closing", c->peer, l->request_timeout_ms);
                conn_close(c);
                break;
        default:
                conn_close(c);
                break;
        }
}

/* ---- the server --------------------------------------------------------- */

/* Reads what a new connection has already sent, as read_cb would on the
 * next poll, then reads on. A client's request usually arrives with its
 * connection, and is answered before the next connection of a burst is
 * accepted: a burst over max_connections closes the connections that are
 * still silent, which a request not yet read would otherwise be. */
static void conn_read_first(struct hp_httpd_conn *c)
{
        uv_os_fd_t fd;
        ssize_t n;

        if (uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0) {
                conn_read_start(c);
                return;
        }
        do
                n = recv(fd, c->in, sizeof(c->in), MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n > 0) {
                c->in_off = 0;
                c->in_len = (size_t)n;
                conn_process(c);
        } else if (n == 0) {
                conn_read_end(c, UV_EOF);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
                conn_read_start(c);
        } else {
                conn_read_end(c, -errno);
        }
}

static void peer_name(uv_tcp_t *tcp, char *out, size_t len)
{
        struct sockaddr_storage ss;
        int sslen = sizeof(ss);
        char ip[INET6_ADDRSTRLEN] = "?";

        if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sslen) < 0) {
                (void)hp_snprintf(out, len, "unknown peer");
                return;
        }
        if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

                uv_ip6_name(in6, ip, sizeof(ip));
                (void)hp_snprintf(out, len, "[%s]:%u", ip,
                                  ntohs(in6->sin6_port));
        } else {
                struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;

                uv_ip4_name(in4, ip, sizeof(ip));
                (void)hp_snprintf(out, len, "%s:%u", ip,
                                  ntohs(in4->sin_port));
        }
}

int hp_httpd_evict_rank(enum hp_httpd_phase phase, uint64_t since,
                        uint64_t now, uint64_t silent_ms)
{
        switch (phase) {
        case HP_HTTPD_SILENT:
                /* Silent for long: a scanner or a stuck client. Silent
                 * for less: most likely a client about to send, which a
                 * burst of newer connections must not push out. */
                return now >= since && now - since >= silent_ms ? 0 : 3;
        case HP_HTTPD_READING:
                return 1;
        case HP_HTTPD_KEEPALIVE:
                return 2;
        case HP_HTTPD_DRAINING:
                /* Written, but closing it may still reset the response
                 * before the peer reads it. */
                return 4;
        default:
                /* A response being written is never cut off. */
                return -1;
        }
}

static int evict_rank(const struct hp_httpd_conn *c, uint64_t now,
                      uint64_t silent_ms)
{
        enum hp_httpd_phase phase;

        if (!c->served)
                return -1;
        switch (c->state) {
        case CONN_IDLE:
                phase = c->answered ? HP_HTTPD_KEEPALIVE : HP_HTTPD_SILENT;
                break;
        case CONN_READING:
                phase = HP_HTTPD_READING;
                break;
        case CONN_LINGER:
                phase = HP_HTTPD_DRAINING;
                break;
        default:
                phase = HP_HTTPD_ANSWERING;
                break;
        }
        return hp_httpd_evict_rank(phase, c->since, now, silent_ms);
}

/* The connection to close for a new one: the lowest rank, and in it the
 * one longest in its state. An idle or trickling client can then hold
 * slots only until newer connections need them, and the operator, whose
 * requests arrive whole, is answered before it is the oldest. */
static struct hp_httpd_conn *evict_pick(struct hp_httpd *h)
{
        struct hp_httpd_conn *best = NULL;
        uint64_t now = uv_now(h->loop);
        int best_rank = -1;

        /* Newest first in the list: ties go to the older one. */
        for (struct hp_httpd_conn *c = h->conns; c != NULL; c = c->next) {
                int rank = evict_rank(c, now, h->limits.silent_ms);

                if (rank < 0)
                        continue;
                if (best == NULL || rank < best_rank ||
                    (rank == best_rank && c->since <= best->since)) {
                        best = c;
                        best_rank = rank;
                }
        }
        return best;
}

/* Makes room for one more connection, closing another if it must.
 * Returns false when every connection is being answered. */
static bool make_room(struct hp_httpd *h, const char *peer)
{
        struct hp_httpd_conn *victim;

        if (h->stats.current_connections <
            (uint64_t)h->limits.max_connections)
                return true;
        victim = evict_pick(h);
        if (victim == NULL)
                return false;
        if (!h->rejecting)
                hp_log_warn("http: %s: over %d connections, closing the "
                            "ones idle or unfinished the longest (%s first; "
                            "logged once per burst)", peer,
                            h->limits.max_connections, victim->peer);
        h->rejecting = true;
        h->stats.evicted_connections++;
        /* Counted out now: its close callbacks come later. */
        victim->served = false;
        h->stats.current_connections--;
        conn_close(victim);
        return true;
}

static void connection_cb(uv_stream_t *listener, int status)
{
        struct hp_httpd *h = hp_container_of(listener, struct hp_httpd,
                                             listener);
        struct hp_httpd_conn *c;

        if (status < 0) {
                /* Out of descriptors, typically, and then again on every
                 * attempt: once per burst, as for too many connections. */
                if (!h->rejecting)
                        hp_log_warn("http: accepting a connection failed: "
                                    "%s (logged once per burst)",
                                    uv_strerror(status));
                h->rejecting = true;
                return;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
                hp_log_error("http: no memory for a new connection");
                return;
        }
        c->server = h;
        if (uv_tcp_init(h->loop, &c->tcp) < 0) {
                free(c);
                return;
        }
        uv_timer_init(h->loop, &c->timer);
        c->handles = 2;
        c->next = h->conns;
        if (h->conns != NULL)
                h->conns->prev = c;
        h->conns = c;
        h->nconns++;
        if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
                conn_close(c);
                return;
        }
        peer_name(&c->tcp, c->peer, sizeof(c->peer));
        if (!make_room(h, c->peer)) {
                h->stats.rejected_connections++;
                if (!h->rejecting)
                        hp_log_warn("http: %s: over %d connections, all "
                                    "being answered: closing new ones at "
                                    "once (logged once per burst)", c->peer,
                                    h->limits.max_connections);
                h->rejecting = true;
                conn_close(c);
                return;
        }
        if (h->stats.current_connections + 1 <
            (uint64_t)h->limits.max_connections)
                h->rejecting = false;
        c->served = true;
        h->stats.connections_total++;
        h->stats.current_connections++;
        /* Small responses go out at once, not after a delayed ACK. */
        uv_tcp_nodelay(&c->tcp, 1);
        http_parser_init(&c->parser, HTTP_REQUEST);
        c->state = CONN_IDLE;
        c->since = uv_now(h->loop);
        conn_arm(c, h->limits.idle_timeout_ms);
        hp_log_debug("http: %s: connected", c->peer);
        conn_read_first(c);
}

int hp_httpd_init(struct hp_httpd *h, uv_loop_t *loop,
                  const struct hp_httpd_limits *limits,
                  hp_httpd_handler handler, void *ctx)
{
        memset(h, 0, sizeof(*h));
        h->loop = loop;
        h->handler = handler;
        h->ctx = ctx;
        if (limits != NULL)
                h->limits = *limits;
        else
                hp_httpd_limits_default(&h->limits);
        http_parser_settings_init(&h->settings);
        h->settings.on_message_begin = on_message_begin;
        h->settings.on_url = on_url;
        h->settings.on_header_field = on_header_field;
        h->settings.on_header_value = on_header_value;
        h->settings.on_headers_complete = on_headers_complete;
        h->settings.on_body = on_body;
        h->settings.on_message_complete = on_message_complete;
        return uv_tcp_init(loop, &h->listener);
}

static int listen_fail(int r, const char *where, const char *reason,
                       char *err, size_t errlen)
{
        if (err != NULL && errlen > 0)
                (void)hp_snprintf(err, errlen, "cannot listen on %s: %s",
                                  where, reason ? reason : hp_strerror(r));
        return r;
}

int hp_httpd_listen(struct hp_httpd *h, const char *host, int port, char *err,
                    size_t errlen)
{
        union {
                struct sockaddr sa;
                struct sockaddr_in in4;
                struct sockaddr_in6 in6;
        } addr;
        socklen_t addrlen;
        bool v6 = strchr(host, ':') != NULL;
        size_t host_len = strlen(host);
        char literal[INET6_ADDRSTRLEN];
        char where[256];
        int on = 1;
        int fd;
        int r;

        /* "[::1]" as in a URL is the same address as "::1". */
        if (v6 && host_len > 2 && host[0] == '[' && host[host_len - 1] == ']' &&
            host_len - 2 < sizeof(literal)) {
                memcpy(literal, host + 1, host_len - 2);
                literal[host_len - 2] = '\0';
                host = literal;
        }
        (void)hp_snprintf(where, sizeof(where), v6 ? "[%s]:%d" : "%s:%d",
                          host, port);
        if (h->listening || h->closing)
                return listen_fail(-EBUSY, where, "the server is already "
                                   "listening or closed", err, errlen);
        if (port < 0 || port > 65535)
                return listen_fail(-EINVAL, where, "port out of range",
                                   err, errlen);
        /* Literal addresses only: the operator API binds an interface,
         * it does not look names up. */
        if (v6)
                r = uv_ip6_addr(host, port, &addr.in6);
        else
                r = uv_ip4_addr(host, port, &addr.in4);
        if (r < 0)
                return listen_fail(-EINVAL, where, "not an IP address", err,
                                   errlen);
        addrlen = v6 ? sizeof(addr.in6) : sizeof(addr.in4);

        /* The socket is made here, not by uv_tcp_bind(), so that every
         * failure happens before the handle owns it: a failed attempt
         * closes its socket and leaves the handle free for a retry. */
        fd = socket(addr.sa.sa_family,
                    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return listen_fail(-errno, where, NULL, err, errlen);
        /* As libuv and uvicorn do: a restarted agent can bind while old
         * connections sit in TIME_WAIT. A live listener still conflicts. */
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0 ||
            bind(fd, &addr.sa, addrlen) < 0 || listen(fd, SOMAXCONN) < 0 ||
            getsockname(fd, &addr.sa, &addrlen) < 0) {
                r = -errno;
                goto close_fd;
        }
        r = uv_tcp_open(&h->listener, fd);
        if (r < 0)
                goto close_fd;
        r = uv_listen((uv_stream_t *)&h->listener, SOMAXCONN, connection_cb);
        if (r < 0)
                return listen_fail(r, where, NULL, err, errlen);
        h->port = ntohs(v6 ? addr.in6.sin6_port : addr.in4.sin_port);
        h->listening = true;
        return 0;

close_fd:
        close(fd);
        return listen_fail(r, where, NULL, err, errlen);
}

int hp_httpd_port(const struct hp_httpd *h)
{
        return h->port;
}

static void listener_close_cb(uv_handle_t *handle)
{
        struct hp_httpd *h = hp_container_of(handle, struct hp_httpd,
                                             listener);

        h->listener_closed = true;
        server_maybe_closed(h);
}

void hp_httpd_close(struct hp_httpd *h, void (*close_cb)(struct hp_httpd *h))
{
        struct hp_httpd_conn *c;

        if (h->closing)
                return;
        h->closing = true;
        h->listening = false;
        h->close_cb = close_cb;
        uv_close((uv_handle_t *)&h->listener, listener_close_cb);
        /* conn_close() frees nothing before the close callbacks, so the
         * list stays walkable. */
        for (c = h->conns; c != NULL; c = c->next) {
                if (c->state == CONN_WRITING)
                        c->keep_alive = false;
                else
                        conn_close(c);
        }
}
