/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: a small HTTP/1.1 server on the libuv loop, for the operator
 * control API. Parsing is libhttp-parser's; routing is the handler's. */
#ifndef HYPERPOD_HTTPD_H
#define HYPERPOD_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>
#include <uv.h>

/*
 * One complete request, borrowed: every pointer is valid only during the
 * handler call.
 */
struct hp_httpd_request {
        enum http_method method; /* from http_parser.h */
        const char *method_name; /* "GET", ... */
        /* NUL-terminated, without the query string; not percent-decoded */
        const char *path;
        const char *query; /* NUL-terminated, "" when none */
        /* NUL-terminated header value, NULL when absent */
        const char *content_type;
        /* The first Authorization value, NUL-terminated, NULL when absent */
        const char *authorization;
        const char *body; /* NUL-terminated for convenience; body_len bytes */
        size_t body_len;
        /* A Content-Length or chunked body came, even an empty one */
        bool has_body;
        const char *peer;    /* "127.0.0.1:51234" for logs */
        unsigned http_major; /* 1 */
        unsigned http_minor; /* 0 or 1 */
};

struct hp_httpd_response {
        int status; /* 200, 404, 422, ... */
        /* NULL: no Content-Type header (the reference sends none for
         * /status) */
        const char *content_type;
        /* Further header lines, each "name: value\r\n" (at most
         * HP_HTTPD_HEADERS_MAX bytes in all, or the response is a 500), or
         * NULL; borrowed like body. */
        const char *headers;
        const char *body; /* may be NULL when body_len is 0 */
        size_t body_len;
};

/*
 * Called on the loop thread once per complete request; must fill res. res
 * arrives zeroed except for status, which is 500: a handler that forgets to
 * answer gives a server error, not garbage. res->body must stay valid until
 * the handler is called again or the server is closed (the server copies it
 * before reading further). The handler may call hp_httpd_close(); the
 * response it returns is still sent, with "connection: close".
 */
#define HP_HTTPD_HEADERS_MAX 512

typedef void (*hp_httpd_handler)(void *ctx,
                                 const struct hp_httpd_request *req,
                                 struct hp_httpd_response *res);

struct hp_httpd_limits {
        /* Request line + headers, counted as the bytes of the URL, header
         * names and values plus 4 per header line; over → 431 (414 if the
         * URL alone is over). http-parser also refuses more than 80 KiB of
         * header on its own, which gives 431 as well. */
        size_t max_header_bytes;
        /* Over → 413, before reading it all (Content-Length when present,
         * else as chunks arrive). */
        size_t max_body_bytes;
        /* Open connections. A new one over it closes another, so that
         * idle or trickling clients cannot lock others out: one silent
         * for silent_ms or more, else a request still arriving, else an
         * idle keep-alive, else one silent for less, else one draining
         * after its last response; in each, the one longest in that
         * state (hp_httpd_evict_rank). Only when all are being answered
         * is the new one closed at once. Logged once per burst. */
        int max_connections;
        /* Keep-alive idle close (also before the first request); 5000 like
         * uvicorn. 0: no idle limit. */
        uint64_t idle_timeout_ms;
        /* From the first byte of a request to the end of its response
         * (slowloris, and a peer that never reads) → 408 and close. Also
         * the most time spent draining a peer after a "connection: close"
         * response (it is closed after 1 s of silence). 0: no limit. */
        uint64_t request_timeout_ms;
        /* A connection that has sent no byte for this long is the first
         * to give way to a new one (see max_connections). */
        uint64_t silent_ms;
};

/* 16 KiB, 1 MiB, 64, 5000, 10000, 1000 */
void hp_httpd_limits_default(struct hp_httpd_limits *l);

/* Where a connection is, as the connection budget sees it. */
enum hp_httpd_phase {
        HP_HTTPD_SILENT,    /* connected, no byte of a request yet */
        HP_HTTPD_READING,   /* a request partly read */
        HP_HTTPD_KEEPALIVE, /* answered, waiting for the next request */
        HP_HTTPD_ANSWERING, /* in the handler, or its response being written */
        HP_HTTPD_DRAINING,  /* last response written, reading until the FIN */
};

/*
 * The order in which open connections give way to a new one when
 * max_connections are open: the lowest rank first, and among equals the
 * one longest in its phase; -1 for one that never does. since: the loop
 * time (ms) its phase began; now: the loop time. Pure.
 */
int hp_httpd_evict_rank(enum hp_httpd_phase phase, uint64_t since,
                        uint64_t now, uint64_t silent_ms);

/* Counters for /metrics. Plain fields, read on the loop thread. */
struct hp_httpd_stats {
        /* Every response sent, the server's own errors included, by
         * class. "100 Continue" is not a response here. */
        uint64_t requests_total;
        uint64_t responses_1xx;
        uint64_t responses_2xx;
        uint64_t responses_3xx;
        uint64_t responses_4xx;
        uint64_t responses_5xx;
        /* Answered by the server itself: 400, 408, 413, 414, 431, 505. */
        uint64_t rejected_requests;
        uint64_t connections_total;    /* accepted and served */
        uint64_t rejected_connections; /* closed at once: over the cap */
        uint64_t evicted_connections;  /* closed to make room for one */
        uint64_t current_connections;  /* served connections open now */
};

struct hp_httpd_conn; /* private to src/httpd */

struct hp_httpd {
        uv_tcp_t listener; /* embedded; initialized by hp_httpd_init */
        uv_loop_t *loop;
        hp_httpd_handler handler;
        void *ctx;
        struct hp_httpd_limits limits;
        http_parser_settings settings;
        struct hp_httpd_conn *conns; /* open connections, rejected too */
        int nconns;                  /* length of conns */
        int port;                    /* bound port, or 0 */
        bool listening;
        bool closing;
        bool listener_closed;
        bool rejecting; /* in a burst of rejections: log once */
        void (*close_cb)(struct hp_httpd *h);
        struct hp_httpd_stats stats;
};

/*
 * Initializes h and its listener handle (limits copied; NULL means the
 * defaults; loop and ctx borrowed, and must outlive the server). h must
 * stay where it is until close_cb has run. From here on hp_httpd_close()
 * must be called, listening or not. Returns 0 or a negative errno.
 */
int hp_httpd_init(struct hp_httpd *h, uv_loop_t *loop,
                  const struct hp_httpd_limits *limits,
                  hp_httpd_handler handler, void *ctx);

/*
 * One attempt to bind and listen; host may be "0.0.0.0", "::", "127.0.0.1",
 * a v6 literal, bare or in brackets; port 0 binds a free port. "::" takes
 * IPv4 too where the system allows (Linux's default). On error returns
 * -errno (e.g. -EADDRINUSE) and writes "cannot listen on HOST:PORT: reason"
 * into err (v6 hosts in brackets); host is borrowed. A failed attempt
 * leaves h as it was, so the caller may retry. The socket is close-on-exec:
 * workers do not inherit it.
 */
int hp_httpd_listen(struct hp_httpd *h, const char *host, int port, char *err,
                    size_t errlen);

/* The bound port (useful with port 0); 0 before hp_httpd_listen()
 * succeeds. */
int hp_httpd_port(const struct hp_httpd *h);

/*
 * Stops listening and closes every connection; close_cb(h) runs once every
 * handle is closed (close_cb may be NULL). A response already handed to the
 * server is still written before its connection closes (bounded by the
 * request timeout); idle connections and requests still being read are
 * closed at once. Calling it again does nothing.
 */
void hp_httpd_close(struct hp_httpd *h, void (*close_cb)(struct hp_httpd *h));

#endif
