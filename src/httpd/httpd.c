/* SPDX-License-Identifier: Apache-2.0 */
/* The operator API's HTTP/1.1 server: libuv for the sockets, http-parser
 * for the protocol, one request in flight per connection. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/httpd.h"

#include "httpd-private.h"

/* ---- connection lifetime ---------------------------------------------- */

static void server_maybe_closed(struct hp_httpd *h)
{
        void (*cb)(struct hp_httpd * h) = h->close_cb;

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
        hp_httpd__growbuf_free(&c->req);
        hp_httpd__growbuf_free(&c->out);
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
        struct hp_httpd_conn *c = hp_container_of(handle,
                                                  struct hp_httpd_conn, tcp);

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
        struct hp_httpd_conn *c = hp_container_of(req, struct hp_httpd_conn,
                                                  shutdown_req);

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
        struct hp_httpd_conn *c = hp_container_of(req, struct hp_httpd_conn,
                                                  write_req);
        struct hp_httpd *h = c->server;

        if (c->state == CONN_CLOSED)
                return;
        if (status < 0) {
                hp_log_debug("http: %s: writing the response failed: %s",
                             c->peer, uv_strerror(status));
                conn_close(c);
                return;
        }
        hp_httpd__growbuf_trim(&c->out);
        hp_httpd__growbuf_trim(&c->req);
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

/* Formats and queues one response. The body is copied, so the caller's
 * buffer is free again on return. */
static void conn_respond(struct hp_httpd_conn *c, int status,
                         const char *content_type, const char *headers,
                         const char *body, size_t body_len, bool send_body)
{
        struct growbuf *o = &c->out;
        uv_buf_t buf;
        int r;

        if (hp_httpd__format_response(&c->out, status, content_type, headers,
                                      body, body_len, send_body,
                                      c->keep_alive,
                                      c->parser.http_minor) < 0) {
                hp_log_error("http: %s: no memory for a %zu-byte response",
                             c->peer, body_len);
                conn_close(c);
                return;
        }
        hp_httpd__count_status(&c->server->stats, status);
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

/* ---- dispatch ----------------------------------------------------------- */

static void conn_dispatch(struct hp_httpd_conn *c)
{
        struct hp_httpd *h = c->server;
        struct hp_httpd_request req = { 0 };
        struct hp_httpd_response res = { .status = 500 };

        c->message_done = false;
        hp_httpd__request_fill(c, &req);

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
        if (c->began) {
                /* Slowloris: the deadline runs from the first byte of a
                 * request (this loop time) and is not pushed back by
                 * later bytes. */
                c->began = false;
                conn_arm(c, c->server->limits.request_timeout_ms);
        }
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
        struct hp_httpd_conn *c = hp_container_of(stream,
                                                  struct hp_httpd_conn, tcp);

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
        struct hp_httpd_conn *c = hp_container_of(timer, struct hp_httpd_conn,
                                                  timer);
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
                                  "request not complete after %" PRIu64 " ms",
                                  l->request_timeout_ms);
                conn_respond_error(c, 408, reason);
                break;
        case CONN_WRITING:
                hp_log_warn("http: %s: response not taken within %" PRIu64
                            " ms, closing",
                            c->peer, l->request_timeout_ms);
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
                            "logged once per burst)",
                            peer, h->limits.max_connections, victim->peer);
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
                                    "once (logged once per burst)",
                                    c->peer, h->limits.max_connections);
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
        hp_httpd__parser_settings(&h->settings);
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
        if (v6 && host_len > 2 && host[0] == '[' &&
            host[host_len - 1] == ']' && host_len - 2 < sizeof(literal)) {
                memcpy(literal, host + 1, host_len - 2);
                literal[host_len - 2] = '\0';
                host = literal;
        }
        (void)hp_snprintf(where, sizeof(where), v6 ? "[%s]:%d" : "%s:%d",
                          host, port);
        if (h->listening || h->closing)
                return listen_fail(-EBUSY, where,
                                   "the server is already "
                                   "listening or closed",
                                   err, errlen);
        if (port < 0 || port > 65535)
                return listen_fail(-EINVAL, where, "port out of range", err,
                                   errlen);
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
