/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the HTTP server (src/httpd/httpd.c).
 *
 * Each test runs a server on 127.0.0.1, port 0, with a loop of its own on a
 * second thread, and drives it with real TCP clients: blocking sockets on
 * the test thread. Nothing sleeps: every wait is a recv() for an event the
 * server must produce, with SO_RCVTIMEO only as a safety bound so that a
 * broken server fails the test instead of hanging it. Responses are read
 * with http-parser. The server's counters are read after its thread ends.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/httpd.h"

/* The longest any single wait may take before the test gives up. */
#define SAFETY_TIMEOUT_S 20
#define BIG_BODY (16u << 20)

/* ---- the server under test, on its own thread ---- */

struct server {
        uv_loop_t loop;
        struct hp_httpd httpd;
        uv_async_t stop;
        uv_thread_t thread;
        int port;
        bool closed;
        int handled;
        int unterminated_bodies;
        char reply[4096];
        char *big;
};

static void server_closed_cb(struct hp_httpd *h)
{
        struct server *s = hp_container_of(h, struct server, httpd);

        s->closed = true;
        uv_close((uv_handle_t *)&s->stop, NULL);
}

static void stop_cb(uv_async_t *async)
{
        struct server *s = hp_container_of(async, struct server, stop);

        hp_httpd_close(&s->httpd, server_closed_cb);
}

/* Echoes what the server made of the request, so tests can check it. */
static void echo_handler(void *ctx, const struct hp_httpd_request *req,
                         struct hp_httpd_response *res)
{
        struct server *s = ctx;
        size_t shown = req->body_len < 1000 ? req->body_len : 1000;
        int n;

        s->handled++;
        /* No cmocka assertion on this thread: it cannot unwind the test. */
        if (req->body[req->body_len] != '\0')
                s->unterminated_bodies++;
        if (strcmp(req->path, "/big") == 0) {
                res->status = 200;
                res->body = s->big;
                res->body_len = BIG_BODY;
                return;
        }
        if (strcmp(req->path, "/close-server") == 0)
                hp_httpd_close(&s->httpd, server_closed_cb);
        if (strcmp(req->path, "/peer") == 0) {
                res->status = 200;
                res->body = req->peer;
                res->body_len = strlen(req->peer);
                return;
        }
        if (strcmp(req->path, "/empty") == 0) {
                res->status = 204;
                return;
        }
        n = snprintf(s->reply, sizeof(s->reply),
                     "%s %s q=%s ct=%s has_body=%d len=%zu body=%.*s",
                     req->method_name, req->path, req->query,
                     req->content_type ? req->content_type : "(none)",
                     req->has_body, req->body_len, (int)shown, req->body);
        res->status = strcmp(req->path, "/missing") == 0 ? 404 : 200;
        /* Like the reference's /status: a body and no Content-Type. */
        res->content_type = strcmp(req->path, "/status") == 0 ? NULL
                                                              : "text/plain";
        res->body = s->reply;
        res->body_len = (size_t)n;
}

static void server_thread(void *arg)
{
        struct server *s = arg;

        uv_run(&s->loop, UV_RUN_DEFAULT);
}

/* Starts a server on host; returns hp_httpd_listen()'s result, and on
 * failure leaves nothing running or allocated. */
static int server_start_on(struct server *s, const struct hp_httpd_limits *l,
                           const char *host)
{
        char err[256];
        int r;

        memset(s, 0, sizeof(*s));
        s->big = calloc(1, BIG_BODY);
        assert_non_null(s->big);
        assert_int_equal(uv_loop_init(&s->loop), 0);
        assert_int_equal(hp_httpd_init(&s->httpd, &s->loop, l, echo_handler,
                                       s),
                         0);
        r = hp_httpd_listen(&s->httpd, host, 0, err, sizeof(err));
        if (r < 0) {
                hp_httpd_close(&s->httpd, NULL);
                assert_int_equal(uv_run(&s->loop, UV_RUN_DEFAULT), 0);
                assert_int_equal(uv_loop_close(&s->loop), 0);
                free(s->big);
                return r;
        }
        s->port = hp_httpd_port(&s->httpd);
        assert_true(s->port > 0 && s->port < 65536);
        assert_int_equal(uv_async_init(&s->loop, &s->stop, stop_cb), 0);
        assert_int_equal(uv_thread_create(&s->thread, server_thread, s), 0);
        return 0;
}

static void server_start(struct server *s, const struct hp_httpd_limits *l)
{
        assert_int_equal(server_start_on(s, l, "127.0.0.1"), 0);
}

/* Waits for the server thread to end: every handle closed, nothing
 * leaked on the loop. */
static void server_join(struct server *s)
{
        assert_int_equal(uv_thread_join(&s->thread), 0);
        assert_true(s->closed);
        assert_int_equal(uv_loop_close(&s->loop), 0);
        free(s->big);
}

static void server_stop(struct server *s)
{
        assert_int_equal(uv_async_send(&s->stop), 0);
        server_join(s);
}

/* ---- clients ---- */

struct client {
        int fd;
        http_parser parser;
        http_parser_settings settings;
        bool head;    /* the response answers a HEAD: no body follows */
        bool discard; /* the body is counted, not kept */
        char in[16384];
        size_t in_off;
        size_t in_len;

        /* The last response. */
        bool done;
        char field[32];
        size_t field_len;
        bool in_value;
        char *value; /* where the current header's value goes, or NULL */
        char connection[32];
        char content_type[64];
        bool has_content_type;
        char body[8192];
        size_t body_len;
};

static struct client *client_of(http_parser *p)
{
        return hp_container_of(p, struct client, parser);
}

static int client_begin_cb(http_parser *p)
{
        struct client *c = client_of(p);

        c->done = false;
        c->field_len = 0;
        c->in_value = false;
        c->value = NULL;
        c->connection[0] = '\0';
        c->content_type[0] = '\0';
        c->has_content_type = false;
        c->body_len = 0;
        return 0;
}

static int client_field_cb(http_parser *p, const char *at, size_t len)
{
        struct client *c = client_of(p);

        if (c->in_value)
                c->field_len = 0;
        c->in_value = false;
        assert_true(c->field_len + len < sizeof(c->field));
        memcpy(c->field + c->field_len, at, len);
        c->field_len += len;
        c->field[c->field_len] = '\0';
        return 0;
}

static int client_value_cb(http_parser *p, const char *at, size_t len)
{
        struct client *c = client_of(p);

        if (!c->in_value) {
                c->in_value = true;
                c->value = NULL;
                if (strcasecmp(c->field, "connection") == 0)
                        c->value = c->connection;
                if (strcasecmp(c->field, "content-type") == 0) {
                        c->value = c->content_type;
                        c->has_content_type = true;
                }
        }
        if (c->value != NULL) {
                size_t have = strlen(c->value);

                assert_true(have + len < 32);
                memcpy(c->value + have, at, len);
                c->value[have + len] = '\0';
        }
        return 0;
}

static int client_headers_cb(http_parser *p)
{
        /* 1: a response to HEAD has no body, whatever it announces. */
        return client_of(p)->head ? 1 : 0;
}

static int client_body_cb(http_parser *p, const char *at, size_t len)
{
        struct client *c = client_of(p);

        if (c->discard) {
                c->body_len += len;
                return 0;
        }
        assert_true(c->body_len + len < sizeof(c->body));
        memcpy(c->body + c->body_len, at, len);
        c->body_len += len;
        c->body[c->body_len] = '\0';
        return 0;
}

static int client_complete_cb(http_parser *p)
{
        client_of(p)->done = true;
        http_parser_pause(p, 1);
        return 0;
}

static struct client *client_connect_to(int family, int port)
{
        struct client *c = calloc(1, sizeof(*c));
        struct timeval tv = { .tv_sec = SAFETY_TIMEOUT_S };
        struct sockaddr_in in4 = { .sin_family = AF_INET };
        struct sockaddr_in6 in6 = { .sin6_family = AF_INET6 };
        int r;

        assert_non_null(c);
        c->fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(c->fd >= 0);
        assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
                                    sizeof(tv)),
                         0);
        assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv,
                                    sizeof(tv)),
                         0);
        if (family == AF_INET6) {
                in6.sin6_port = htons((uint16_t)port);
                in6.sin6_addr = in6addr_loopback;
                r = connect(c->fd, (struct sockaddr *)&in6, sizeof(in6));
        } else {
                in4.sin_port = htons((uint16_t)port);
                in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                r = connect(c->fd, (struct sockaddr *)&in4, sizeof(in4));
        }
        assert_int_equal(r, 0);
        http_parser_init(&c->parser, HTTP_RESPONSE);
        http_parser_settings_init(&c->settings);
        c->settings.on_message_begin = client_begin_cb;
        c->settings.on_header_field = client_field_cb;
        c->settings.on_header_value = client_value_cb;
        c->settings.on_headers_complete = client_headers_cb;
        c->settings.on_body = client_body_cb;
        c->settings.on_message_complete = client_complete_cb;
        return c;
}

static struct client *client_connect(const struct server *s)
{
        return client_connect_to(AF_INET, s->port);
}

static void client_free(struct client *c)
{
        close(c->fd);
        free(c);
}

/* Sends all of data, or as much as the peer takes before it closes. */
static int client_send_n(struct client *c, const char *data, size_t len)
{
        while (len > 0) {
                ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                data += n;
                len -= (size_t)n;
        }
        return 0;
}

static void client_send(struct client *c, const char *text)
{
        assert_int_equal(client_send_n(c, text, strlen(text)), 0);
}

/* Reads one response; returns its status, -ENODATA at EOF before one,
 * -EPROTO when it does not parse, or -errno. */
static int client_response(struct client *c)
{
        for (;;) {
                if (c->in_off < c->in_len) {
                        size_t n;

                        http_parser_pause(&c->parser, 0);
                        n = http_parser_execute(&c->parser, &c->settings,
                                                c->in + c->in_off,
                                                c->in_len - c->in_off);
                        c->in_off += n;
                        if (c->done) {
                                c->done = false;
                                return (int)c->parser.status_code;
                        }
                        if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK)
                                return -EPROTO;
                }
                ssize_t n = recv(c->fd, c->in, sizeof(c->in), 0);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -ENODATA;
                c->in_off = 0;
                c->in_len = (size_t)n;
        }
}

/* True when the server has closed the connection and sent nothing more:
 * a FIN, or a reset where it closed with our bytes unread. */
static bool client_eof(struct client *c)
{
        char byte;
        ssize_t n;

        if (c->in_off < c->in_len)
                return false;
        do
                n = recv(c->fd, &byte, 1, 0);
        while (n < 0 && errno == EINTR);
        return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* One request on c, answered 200 with the echo text expected. */
static void client_expect_echo(struct client *c, const char *request,
                               const char *echo)
{
        client_send(c, request);
        assert_int_equal(client_response(c), 200);
        assert_string_equal(c->body, echo);
}

static struct hp_httpd_limits default_limits(void)
{
        struct hp_httpd_limits l;

        hp_httpd_limits_default(&l);
        return l;
}

/* ---- requests and responses ---- */

static void test_limits_default(void **state)
{
        struct hp_httpd_limits l = default_limits();

        assert_int_equal(l.max_header_bytes, 16 * 1024);
        assert_int_equal(l.max_body_bytes, 1024 * 1024);
        assert_int_equal(l.max_connections, 64);
        assert_int_equal(l.idle_timeout_ms, 5000);
        assert_int_equal(l.request_timeout_ms, 10000);
        assert_int_equal(l.silent_ms, 1000);
}

struct echo_case {
        const char *request; /* may hold NUL bytes */
        size_t request_len;
        int status;
        const char *echo;
        const char *content_type; /* NULL: the header must be absent */
};

/* A literal and its length, NUL bytes included. */
#define BYTES(s) s, sizeof(s) - 1

static const struct echo_case echo_cases[] = {
        { BYTES("GET /status HTTP/1.1\r\nHost: x\r\n\r\n"), 200,
          "GET /status q= ct=(none) has_body=0 len=0 body=", NULL },
        { BYTES("GET /healthz?a=1&b=%20 HTTP/1.1\r\nHost: x\r\n\r\n"), 200,
          "GET /healthz q=a=1&b=%20 ct=(none) has_body=0 len=0 body=",
          "text/plain" },
        { BYTES("GET /missing#frag HTTP/1.1\r\n\r\n"), 404,
          "GET /missing q= ct=(none) has_body=0 len=0 body=", "text/plain" },
        { BYTES("GET http://agent:8080/x?y HTTP/1.1\r\n\r\n"), 200,
          "GET /x q=y ct=(none) has_body=0 len=0 body=", "text/plain" },
        { BYTES("POST /start HTTP/1.1\r\nContent-Type: application/json\r\n"
                "Content-Length: 10\r\n\r\n{\"rank\":0}"),
          200,
          "POST /start q= ct=application/json has_body=1 len=10 "
          "body={\"rank\":0}",
          "text/plain" },
        { BYTES("POST /stop HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 200,
          "POST /stop q= ct=(none) has_body=1 len=0 body=", "text/plain" },
        { BYTES("POST /shutdown HTTP/1.1\r\n\r\n"), 200,
          "POST /shutdown q= ct=(none) has_body=0 len=0 body=",
          "text/plain" },
        /* Only the first Content-Type counts; header names are case-blind,
         * and an empty header value is fine. */
        { BYTES("PUT /u HTTP/1.1\r\nX-Empty:\r\ncOnTeNt-TyPe: a/b\r\n"
                "Content-Type: c/d\r\nContent-Length: 2\r\n\r\nhi"),
          200, "PUT /u q= ct=a/b has_body=1 len=2 body=hi", "text/plain" },
        { BYTES("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
          200, "POST /c q= ct=(none) has_body=1 len=11 body=hello world",
          "text/plain" },
        { BYTES("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "0\r\n\r\n"),
          200, "POST /c q= ct=(none) has_body=1 len=0 body=", "text/plain" },
        /* A body with a NUL byte keeps its length. */
        { BYTES("POST /nul HTTP/1.1\r\nContent-Length: 3\r\n\r\na\0b"), 200,
          "POST /nul q= ct=(none) has_body=1 len=3 body=a", "text/plain" },
};

static void test_requests_echoed(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;

        server_start(&s, &l);
        for (size_t i = 0; i < HP_ARRAY_SIZE(echo_cases); i++) {
                const struct echo_case *e = &echo_cases[i];
                struct client *c = client_connect(&s);
                assert_int_equal(client_send_n(c, e->request, e->request_len),
                                 0);
                assert_int_equal(client_response(c), e->status);
                assert_string_equal(c->body, e->echo);
                assert_int_equal(c->has_content_type,
                                 e->content_type != NULL);
                if (e->content_type != NULL)
                        assert_string_equal(c->content_type, e->content_type);
                /* The server keeps HTTP/1.1 connections open. */
                assert_string_equal(c->connection, "");
                client_free(c);
        }
        server_stop(&s);
        assert_int_equal(s.unterminated_bodies, 0);
        assert_int_equal(s.handled, HP_ARRAY_SIZE(echo_cases));
        assert_int_equal(s.httpd.stats.requests_total,
                         HP_ARRAY_SIZE(echo_cases));
        assert_int_equal(s.httpd.stats.responses_4xx, 1);
        assert_int_equal(s.httpd.stats.responses_2xx,
                         HP_ARRAY_SIZE(echo_cases) - 1);
}

static void test_keep_alive_three_requests(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;

        server_start(&s, &l);
        c = client_connect(&s);
        for (int i = 0; i < 3; i++)
                client_expect_echo(c, "GET /k HTTP/1.1\r\n\r\n",
                                   "GET /k q= ct=(none) has_body=0 len=0 "
                                   "body=");
        client_send(c, "GET /peer HTTP/1.1\r\n\r\n");
        assert_int_equal(client_response(c), 200);
        assert_memory_equal(c->body, "127.0.0.1:", 10);
        client_free(c);
        server_stop(&s);
        assert_int_equal(s.httpd.stats.connections_total, 1);
        assert_int_equal(s.httpd.stats.requests_total, 4);
        assert_int_equal(s.httpd.stats.current_connections, 0);
}

static void test_pipelined_requests_answered_in_order(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;

        server_start(&s, &l);
        c = client_connect(&s);
        client_send(c, "GET /one HTTP/1.1\r\n\r\n"
                       "POST /two HTTP/1.1\r\nContent-Length: 2\r\n\r\nok"
                       "GET /three HTTP/1.1\r\n\r\n");
        assert_int_equal(client_response(c), 200);
        assert_string_equal(c->body,
                            "GET /one q= ct=(none) has_body=0 len=0 body=");
        assert_int_equal(client_response(c), 200);
        assert_string_equal(
                c->body, "POST /two q= ct=(none) has_body=1 len=2 body=ok");
        assert_int_equal(client_response(c), 200);
        assert_string_equal(c->body,
                            "GET /three q= ct=(none) has_body=0 len=0 body=");
        /* And the connection is still good for more. */
        client_expect_echo(c, "GET /four HTTP/1.1\r\n\r\n",
                           "GET /four q= ct=(none) has_body=0 len=0 body=");
        client_free(c);
        server_stop(&s);
        assert_int_equal(s.httpd.stats.connections_total, 1);
}

static void test_connection_close_honoured(void **state)
{
        static const char *const requests[] = {
                "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n",
                "GET /a HTTP/1.0\r\n\r\n",
                /* The second pipelined request is never answered. */
                "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n"
                "GET /b HTTP/1.1\r\n\r\n",
                /* Upgrade is not spoken: answered, then closed. */
                "GET /a HTTP/1.1\r\nConnection: upgrade\r\n"
                "Upgrade: websocket\r\n\r\n",
        };
        struct hp_httpd_limits l = default_limits();
        struct server s;

        server_start(&s, &l);
        for (size_t i = 0; i < HP_ARRAY_SIZE(requests); i++) {
                struct client *c = client_connect(&s);

                client_send(c, requests[i]);
                assert_int_equal(client_response(c), 200);
                assert_string_equal(c->body, "GET /a q= ct=(none) "
                                             "has_body=0 len=0 body=");
                assert_string_equal(c->connection, "close");
                assert_true(client_eof(c));
                client_free(c);
        }
        server_stop(&s);
        assert_int_equal(s.handled, HP_ARRAY_SIZE(requests));
}

static void test_http10_keep_alive(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;

        server_start(&s, &l);
        c = client_connect(&s);
        for (int i = 0; i < 2; i++) {
                client_expect_echo(c,
                                   "GET /ten HTTP/1.0\r\n"
                                   "Connection: keep-alive\r\n\r\n",
                                   "GET /ten q= ct=(none) has_body=0 len=0 "
                                   "body=");
                assert_string_equal(c->connection, "keep-alive");
        }
        client_free(c);
        server_stop(&s);
        assert_int_equal(s.httpd.stats.connections_total, 1);
}

static void test_expect_100_continue(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;

        server_start(&s, &l);
        c = client_connect(&s);
        /* The server must ask for the body before it is sent. */
        client_send(c, "POST /start HTTP/1.1\r\nExpect: 100-continue\r\n"
                       "Content-Length: 5\r\n\r\n");
        assert_int_equal(client_response(c), 100);
        client_expect_echo(c, "hello",
                           "POST /start q= ct=(none) has_body=1 len=5 "
                           "body=hello");
        /* Not for a body that is refused anyway. */
        client_send(c, "POST /start HTTP/1.1\r\nExpect: 100-continue\r\n"
                       "Content-Length: 2000000\r\n\r\n");
        assert_int_equal(client_response(c), 413);
        assert_true(client_eof(c));
        client_free(c);
        server_stop(&s);
        /* "100 Continue" is not a response in the counts. */
        assert_int_equal(s.httpd.stats.requests_total, 2);
        assert_int_equal(s.httpd.stats.responses_1xx, 0);
}

static void test_head_and_no_content(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;

        server_start(&s, &l);
        c = client_connect(&s);
        c->head = true;
        client_send(c, "HEAD /h HTTP/1.1\r\n\r\n");
        assert_int_equal(client_response(c), 200);
        assert_int_equal(c->body_len, 0);
        c->head = false;
        /* Had the server sent the HEAD body, this would not parse. */
        client_expect_echo(c, "GET /h HTTP/1.1\r\n\r\n",
                           "GET /h q= ct=(none) has_body=0 len=0 body=");
        client_send(c, "GET /empty HTTP/1.1\r\n\r\n");
        assert_int_equal(client_response(c), 204);
        client_expect_echo(c, "GET /h HTTP/1.1\r\n\r\n",
                           "GET /h q= ct=(none) has_body=0 len=0 body=");
        client_free(c);
        server_stop(&s);
}

/* ---- what the server refuses by itself ---- */

struct refuse_case {
        const char *name;
        const char *request; /* NULL: built by the test */
        int status;
};

static const struct refuse_case refuse_cases[] = {
        { "binary garbage", "\x01\x02\x03\xff\r\n\r\n", 400 },
        { "unknown method", "FETCH / HTTP/1.1\r\n\r\n", 400 },
        { "header without a colon", "GET / HTTP/1.1\r\nHost x\r\n\r\n", 400 },
        { "bad Content-Length",
          "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400 },
        { "two Content-Lengths",
          "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
          400 },
        { "Content-Length with chunked",
          "POST / HTTP/1.1\r\nContent-Length: 3\r\n"
          "Transfer-Encoding: chunked\r\n\r\n",
          400 },
        { "bad chunk size",
          "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
          400 },
        { "HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", 505 },
        { "HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", 505 },
        { "body over the limit by Content-Length",
          "POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", 413 },
        { "chunked body over the limit", NULL, 413 },
        /* Sent whole before reading the answer, as python-requests does:
         * far more than the socket buffers hold, so the server must drain
         * it after answering for the send to finish. */
        { "body over the limit sent anyway", NULL, 413 },
        { "URL over the limit", NULL, 414 },
        { "headers over the limit", NULL, 431 },
        { "many small headers over the limit", NULL, 431 },
};

/* The built requests: each is far larger than the limits below. */
static char *build_request(const char *name)
{
        size_t cap = 64 * 1024 + BIG_BODY;
        char *r = malloc(cap);
        size_t n = 0;

        assert_non_null(r);
        if (strcmp(name, "body over the limit sent anyway") == 0) {
                n += (size_t)sprintf(r,
                                     "POST / HTTP/1.1\r\n"
                                     "Content-Length: %u\r\n\r\n",
                                     BIG_BODY);
                memset(r + n, 'b', BIG_BODY);
                n += BIG_BODY;
        } else if (strcmp(name, "chunked body over the limit") == 0) {
                n += (size_t)sprintf(r, "POST / HTTP/1.1\r\n"
                                        "Transfer-Encoding: chunked\r\n\r\n");
                for (int i = 0; i < 12; i++)
                        n += (size_t)sprintf(r + n, "64\r\n%0100d\r\n", i);
                n += (size_t)sprintf(r + n, "0\r\n\r\n");
        } else if (strcmp(name, "URL over the limit") == 0) {
                n += (size_t)sprintf(r, "GET /");
                memset(r + n, 'u', 5000);
                n += 5000;
                n += (size_t)sprintf(r + n, " HTTP/1.1\r\n\r\n");
        } else if (strcmp(name, "headers over the limit") == 0) {
                n += (size_t)sprintf(r, "GET / HTTP/1.1\r\nX-Big: ");
                memset(r + n, 'h', 5000);
                n += 5000;
                n += (size_t)sprintf(r + n, "\r\n\r\n");
        } else {
                n += (size_t)sprintf(r, "GET / HTTP/1.1\r\n");
                for (int i = 0; i < 2000; i++)
                        n += (size_t)sprintf(r + n, "A:\r\n");
                n += (size_t)sprintf(r + n, "\r\n");
        }
        assert_true(n < cap);
        r[n] = '\0';
        return r;
}

static void test_refused_requests(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;

        l.max_header_bytes = 4096;
        l.max_body_bytes = 1024;
        server_start(&s, &l);
        for (size_t i = 0; i < HP_ARRAY_SIZE(refuse_cases); i++) {
                const struct refuse_case *rc = &refuse_cases[i];
                char *built = rc->request ? NULL : build_request(rc->name);
                struct client *c = client_connect(&s);
                char detail[128];

                print_message("%s\n", rc->name);
                client_send(c, built ? built : rc->request);
                assert_int_equal(client_response(c), rc->status);
                snprintf(detail, sizeof(detail), "{\"detail\":\"%s\"}",
                         http_status_str((enum http_status)rc->status));
                assert_string_equal(c->body, detail);
                assert_string_equal(c->content_type, "application/json");
                assert_string_equal(c->connection, "close");
                assert_true(client_eof(c));
                client_free(c);
                free(built);
        }
        server_stop(&s);
        assert_int_equal(s.handled, 0);
        assert_int_equal(s.httpd.stats.rejected_requests,
                         HP_ARRAY_SIZE(refuse_cases));
        assert_int_equal(s.httpd.stats.requests_total,
                         HP_ARRAY_SIZE(refuse_cases));
        assert_int_equal(s.httpd.stats.responses_4xx +
                                 s.httpd.stats.responses_5xx,
                         HP_ARRAY_SIZE(refuse_cases));
}

static void test_limits_are_inclusive(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;
        char request[256];

        l.max_body_bytes = 16;
        server_start(&s, &l);
        c = client_connect(&s);
        snprintf(request, sizeof(request),
                 "POST /b HTTP/1.1\r\nContent-Length: 16\r\n\r\n%s",
                 "0123456789abcdef");
        client_expect_echo(c, request,
                           "POST /b q= ct=(none) has_body=1 len=16 "
                           "body=0123456789abcdef");
        client_expect_echo(c,
                           "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked"
                           "\r\n\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n",
                           "POST /b q= ct=(none) has_body=1 len=16 "
                           "body=0123456789abcdef");
        client_free(c);
        server_stop(&s);
}

/* ---- timeouts ---- */

static void test_idle_connections_closed(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *silent;
        struct client *done;

        /* Long enough that a request sent right after connecting is read
         * before it, even on a loaded machine under valgrind. */
        l.idle_timeout_ms = 300;
        server_start(&s, &l);
        silent = client_connect(&s);
        done = client_connect(&s);
        client_expect_echo(done, "GET /i HTTP/1.1\r\n\r\n",
                           "GET /i q= ct=(none) has_body=0 len=0 body=");
        assert_true(client_eof(silent));
        assert_true(client_eof(done));
        client_free(silent);
        client_free(done);
        server_stop(&s);
        assert_int_equal(s.httpd.stats.connections_total, 2);
}

static void test_slow_request_gets_408(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *slow;
        struct client *fast;

        l.request_timeout_ms = 300;
        server_start(&s, &l);
        slow = client_connect(&s);
        client_send(slow, "POST /start HTTP/1.1\r\nContent-Length: 10\r\n"
                          "\r\n{\"ra");
        /* Another connection is served meanwhile. */
        fast = client_connect(&s);
        client_expect_echo(fast, "GET /f HTTP/1.1\r\n\r\n",
                           "GET /f q= ct=(none) has_body=0 len=0 body=");
        client_send(slow, "n");
        assert_int_equal(client_response(slow), 408);
        assert_string_equal(slow->body, "{\"detail\":\"Request Timeout\"}");
        assert_string_equal(slow->connection, "close");
        assert_true(client_eof(slow));
        client_free(slow);
        client_free(fast);
        server_stop(&s);
        assert_int_equal(s.handled, 1);
        assert_int_equal(s.httpd.stats.rejected_requests, 1);
}

/* ---- connections ---- */

/* The eviction order, by phase and time; the boundaries inclusive. */
static void test_evict_rank(void **state)
{
        static const struct {
                enum hp_httpd_phase phase;
                uint64_t since;
                uint64_t now;
                int rank;
        } cases[] = {
                { HP_HTTPD_SILENT, 1000, 2000, 0 }, /* silent for 1 s */
                { HP_HTTPD_SILENT, 1000, 99999, 0 },
                { HP_HTTPD_READING, 1000, 1000, 1 },
                { HP_HTTPD_READING, 0, 99999, 1 },
                { HP_HTTPD_KEEPALIVE, 1000, 1001, 2 },
                { HP_HTTPD_SILENT, 1000, 1999, 3 }, /* about to send */
                { HP_HTTPD_SILENT, 1000, 1000, 3 },
                /* A clock behind since is not a long silence. */
                { HP_HTTPD_SILENT, 5000, 1000, 3 },
                { HP_HTTPD_DRAINING, 0, 99999, 4 },
                { HP_HTTPD_ANSWERING, 0, 99999, -1 },
        };

        for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                int rank = hp_httpd_evict_rank(cases[i].phase, cases[i].since,
                                               cases[i].now, 1000);

                if (rank != cases[i].rank)
                        fail_msg("case %zu: rank %d, expected %d", i, rank,
                                 cases[i].rank);
        }
}

/* Two round trips on c: once they are answered, every connection made
 * and every byte sent before them has been read by the server (the
 * loop's poll is level-triggered and takes all that is ready). */
static void server_sync(struct client *c)
{
        for (int i = 0; i < 2; i++)
                client_expect_echo(c, "GET /sync HTTP/1.1\r\n\r\n",
                                   "GET /sync q= ct=(none) has_body=0 "
                                   "len=0 body=");
}

/* A response far larger than the socket buffers, left unread: the
 * connection stays in the middle of being answered. */
static struct client *client_stuck_writing(const struct server *s)
{
        struct client *c = client_connect(s);
        char byte;

        client_send(c, "GET /big HTTP/1.1\r\n\r\n");
        assert_int_equal(recv(c->fd, &byte, 1, MSG_PEEK), 1);
        return c;
}

/* When all connections are taken, a new one closes another: by the kind
 * of connection, and never one being answered. */
struct evict_case {
        const char *what;
        uint64_t silent_ms;
        /* Which of "silent", "trickling" and "answered" each of two new
         * connections closes; the third is served on. */
        const char *order[2];
        const char *survivor;
};

static const struct evict_case evict_cases[] = {
        { "silent for long, then trickling, before idle keep-alive",
          0,
          { "silent", "trickling" },
          "answered" },
        /* A connection silent for less may be a client about to send. */
        { "trickling, then idle keep-alive, before silent for less",
          60000,
          { "trickling", "answered" },
          "silent" },
};

static void test_max_connections_evicts(void **state)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(evict_cases); i++) {
                const struct evict_case *e = &evict_cases[i];
                struct hp_httpd_limits l = default_limits();
                struct server s;
                struct client *busy;
                struct client *survivor = NULL;
                struct client *fresh[2];
                struct {
                        const char *name;
                        struct client *c;
                } old[3];

                l.max_connections = 4;
                l.silent_ms = e->silent_ms;
                server_start(&s, &l);
                old[0].name = "answered";
                old[0].c = client_connect(&s);
                busy = client_stuck_writing(&s);
                old[1].name = "trickling";
                old[1].c = client_connect(&s);
                client_send(old[1].c, "POST /start HTTP/1.1\r\nContent-Le");
                old[2].name = "silent";
                old[2].c = client_connect(&s);
                server_sync(old[0].c);
                for (size_t n = 0; n < HP_ARRAY_SIZE(fresh); n++) {
                        struct client *victim = NULL;

                        fresh[n] = client_connect(&s);
                        client_expect_echo(fresh[n],
                                           "GET /new HTTP/1.1\r\n"
                                           "\r\n",
                                           "GET /new q= ct=(none) "
                                           "has_body=0 len=0 body=");
                        for (size_t k = 0; k < HP_ARRAY_SIZE(old); k++)
                                if (strcmp(old[k].name, e->order[n]) == 0)
                                        victim = old[k].c;
                        assert_non_null(victim);
                        if (!client_eof(victim))
                                fail_msg("%s: new connection %zu: the %s "
                                         "one is still open",
                                         e->what, n, e->order[n]);
                }
                for (size_t k = 0; k < HP_ARRAY_SIZE(old); k++)
                        if (strcmp(old[k].name, e->survivor) == 0)
                                survivor = old[k].c;
                client_expect_echo(survivor, "GET /still HTTP/1.1\r\n\r\n",
                                   "GET /still q= ct=(none) has_body=0 "
                                   "len=0 body=");
                /* The newest are served on; the busy one was answered in
                 * full. */
                client_expect_echo(fresh[0], "GET /again HTTP/1.1\r\n\r\n",
                                   "GET /again q= ct=(none) has_body=0 "
                                   "len=0 body=");
                busy->discard = true;
                assert_int_equal(client_response(busy), 200);
                assert_int_equal(busy->body_len, BIG_BODY);
                for (size_t k = 0; k < HP_ARRAY_SIZE(old); k++)
                        client_free(old[k].c);
                for (size_t k = 0; k < HP_ARRAY_SIZE(fresh); k++)
                        client_free(fresh[k]);
                client_free(busy);
                server_stop(&s);
                assert_int_equal(s.httpd.stats.evicted_connections, 2);
                assert_int_equal(s.httpd.stats.rejected_connections, 0);
                assert_int_equal(s.httpd.stats.connections_total, 6);
        }
}

/* Only when every connection is being answered is a new one closed at
 * once; the busy ones go on. */
static void test_max_connections_all_busy(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *busy[2];
        struct client *over;

        l.max_connections = 2;
        server_start(&s, &l);
        for (size_t i = 0; i < HP_ARRAY_SIZE(busy); i++)
                busy[i] = client_stuck_writing(&s);
        for (int i = 0; i < 2; i++) {
                over = client_connect(&s);
                assert_true(client_eof(over));
                client_free(over);
        }
        /* Reading the whole response frees the slot again. */
        busy[0]->discard = true;
        assert_int_equal(client_response(busy[0]), 200);
        /* Answered again, so the server has seen the write complete. */
        busy[0]->discard = false;
        busy[0]->body_len = 0;
        client_expect_echo(busy[0], "GET /done HTTP/1.1\r\n\r\n",
                           "GET /done q= ct=(none) has_body=0 len=0 body=");
        over = client_connect(&s);
        client_expect_echo(over, "GET /in HTTP/1.1\r\n\r\n",
                           "GET /in q= ct=(none) has_body=0 len=0 body=");
        client_free(over);
        for (size_t i = 0; i < HP_ARRAY_SIZE(busy); i++)
                client_free(busy[i]);
        server_stop(&s);
        assert_int_equal(s.httpd.stats.rejected_connections, 2);
        assert_int_equal(s.httpd.stats.evicted_connections, 1);
}

static void test_clients_that_vanish(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;

        server_start(&s, &l);
        /* Mid-headers, mid-body, and before reading a response far larger
         * than the socket buffers. */
        c = client_connect(&s);
        client_send(c, "POST /start HTTP/1.1\r\nContent-Le");
        client_free(c);
        c = client_connect(&s);
        client_send(c, "POST /start HTTP/1.1\r\nContent-Length: 100\r\n\r\n"
                       "0123456789");
        client_free(c);
        c = client_connect(&s);
        client_send(c, "GET /big HTTP/1.1\r\n\r\n");
        client_free(c);
        /* A half-close after a complete request still gets the answer. */
        c = client_connect(&s);
        client_send(c, "GET /half HTTP/1.1\r\n\r\n");
        assert_int_equal(shutdown(c->fd, SHUT_WR), 0);
        assert_int_equal(client_response(c), 200);
        assert_true(client_eof(c));
        client_free(c);
        /* Nobody else noticed. */
        c = client_connect(&s);
        client_expect_echo(c, "GET /ok HTTP/1.1\r\n\r\n",
                           "GET /ok q= ct=(none) has_body=0 len=0 body=");
        client_free(c);
        server_stop(&s);
        assert_int_equal(s.httpd.stats.rejected_requests, 0);
}

static void test_close_with_open_connections(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *idle;
        struct client *partial;

        server_start(&s, &l);
        idle = client_connect(&s);
        client_expect_echo(idle, "GET /i HTTP/1.1\r\n\r\n",
                           "GET /i q= ct=(none) has_body=0 len=0 body=");
        partial = client_connect(&s);
        client_send(partial, "POST /start HTTP/1.1\r\nContent-Length: 9\r\n");
        server_stop(&s);
        assert_true(client_eof(idle));
        assert_true(client_eof(partial));
        client_free(idle);
        client_free(partial);
        assert_int_equal(s.httpd.stats.current_connections, 0);
}

static void test_handler_closes_the_server(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;

        server_start(&s, &l);
        c = client_connect(&s);
        /* The response the handler gave on its way out is still sent. */
        client_send(c, "POST /close-server HTTP/1.1\r\n\r\n");
        assert_int_equal(client_response(c), 200);
        assert_string_equal(c->body, "POST /close-server q= ct=(none) "
                                     "has_body=0 len=0 body=");
        assert_string_equal(c->connection, "close");
        assert_true(client_eof(c));
        client_free(c);
        server_join(&s);
}

/* ---- listening ---- */

static void test_listen_errors(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct hp_httpd other;
        uv_loop_t loop;
        char err[256];
        char want[128];

        server_start(&s, &l);
        assert_int_equal(uv_loop_init(&loop), 0);
        assert_int_equal(hp_httpd_init(&other, &loop, NULL, echo_handler,
                                       NULL),
                         0);
        assert_int_equal(hp_httpd_listen(&other, "127.0.0.1", s.port, err,
                                         sizeof(err)),
                         -EADDRINUSE);
        snprintf(want, sizeof(want),
                 "cannot listen on 127.0.0.1:%d: ", s.port);
        assert_memory_equal(err, want, strlen(want));
        assert_int_equal(hp_httpd_port(&other), 0);
        assert_int_equal(hp_httpd_listen(&other, "agent", 8080, err,
                                         sizeof(err)),
                         -EINVAL);
        assert_string_equal(err, "cannot listen on agent:8080: not an IP "
                                 "address");
        assert_int_equal(hp_httpd_listen(&other, "0.0.0.0", 65536, err,
                                         sizeof(err)),
                         -EINVAL);
        assert_string_equal(err, "cannot listen on 0.0.0.0:65536: port out "
                                 "of range");
        /* A failed attempt leaves the server free for the next one. */
        assert_int_equal(hp_httpd_listen(&other, "127.0.0.1", 0, err,
                                         sizeof(err)),
                         0);
        assert_true(hp_httpd_port(&other) > 0);
        assert_int_not_equal(hp_httpd_port(&other), s.port);
        assert_int_equal(hp_httpd_listen(&other, "127.0.0.1", 0, err,
                                         sizeof(err)),
                         -EBUSY);
        hp_httpd_close(&other, NULL);
        assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
        assert_int_equal(uv_loop_close(&loop), 0);
        server_stop(&s);
}

static void test_ipv6_loopback(void **state)
{
        struct hp_httpd_limits l = default_limits();
        struct server s;
        struct client *c;
        int r;

        /* Bracketed as in a URL. */
        r = server_start_on(&s, &l, "[::1]");
        if (r == -EADDRNOTAVAIL || r == -EAFNOSUPPORT) {
                print_message("no IPv6 loopback here: %s\n", hp_strerror(r));
                skip();
        }
        assert_int_equal(r, 0);
        c = client_connect_to(AF_INET6, s.port);
        client_expect_echo(c, "GET /v6 HTTP/1.1\r\n\r\n",
                           "GET /v6 q= ct=(none) has_body=0 len=0 body=");
        client_send(c, "GET /peer HTTP/1.1\r\n\r\n");
        assert_int_equal(client_response(c), 200);
        assert_memory_equal(c->body, "[::1]:", 6);
        client_free(c);
        server_stop(&s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_limits_default),
                cmocka_unit_test(test_requests_echoed),
                cmocka_unit_test(test_keep_alive_three_requests),
                cmocka_unit_test(test_pipelined_requests_answered_in_order),
                cmocka_unit_test(test_connection_close_honoured),
                cmocka_unit_test(test_http10_keep_alive),
                cmocka_unit_test(test_expect_100_continue),
                cmocka_unit_test(test_head_and_no_content),
                cmocka_unit_test(test_refused_requests),
                cmocka_unit_test(test_limits_are_inclusive),
                cmocka_unit_test(test_idle_connections_closed),
                cmocka_unit_test(test_slow_request_gets_408),
                cmocka_unit_test(test_evict_rank),
                cmocka_unit_test(test_max_connections_evicts),
                cmocka_unit_test(test_max_connections_all_busy),
                cmocka_unit_test(test_clients_that_vanish),
                cmocka_unit_test(test_close_with_open_connections),
                cmocka_unit_test(test_handler_closes_the_server),
                cmocka_unit_test(test_listen_errors),
                cmocka_unit_test(test_ipv6_loopback),
        };

        /* The server writes to peers that may be gone, as the agent does
         * (it ignores SIGPIPE the same way). */
        signal(SIGPIPE, SIG_IGN);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
