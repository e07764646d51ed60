/* SPDX-License-Identifier: Apache-2.0 */
/* The worker socket (docs/inprocess-restart-and-checkpoints.md): a Unix
 * stream server on the loop that workers and hooks reach through
 * HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH. Each frame is one JSON message;
 * the message type picks a handler from a table, so other message families
 * add handlers without touching the transport. Nothing here blocks: reads
 * are dispatched as they come, replies are queued with a cap, and bad input
 * closes or is ignored per connection. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"

#include "ipc-private.h"

/* Client objects one connection may register (the reference's clients
 * use one or two per process). */
#define CLIENTS_PER_CONN_MAX 64

struct hp_ipc_conn {
        uv_pipe_t pipe;
        struct hp_ipc_server *server;
        struct hp_ipc_conn *prev, *next;
        struct hp_ipc_framer framer;
        struct hp_ipc_client *clients;
        int nclients;
        size_t queued;      /* reply bytes libuv has not written yet */
        size_t held;        /* the framer's bytes, in s->partial_bytes */
        uint64_t active_ms; /* when it connected or last sent a byte */
        unsigned warnings;
        bool closing;
};

struct write_req {
        uv_write_t req;
        struct hp_ipc_conn *conn;
        size_t len;
        char data[];
};

static bool utf8_valid(const unsigned char *s, size_t len)
{
        size_t i = 0;

        while (i < len) {
                unsigned char c = s[i];
                size_t n;
                uint32_t cp;

                if (c < 0x80) {
                        i++;
                        continue;
                }
                if (c >= 0xc2 && c <= 0xdf)
                        n = 1, cp = c & 0x1f;
                else if (c >= 0xe0 && c <= 0xef)
                        n = 2, cp = c & 0x0f;
                else if (c >= 0xf0 && c <= 0xf4)
                        n = 3, cp = c & 0x07;
                else
                        return false;
                for (size_t k = 1; k <= n; k++) {
                        if (i + k >= len || (s[i + k] & 0xc0) != 0x80)
                                return false;
                        cp = cp << 6 | (s[i + k] & 0x3f);
                }
                /* Overlong forms, surrogates, beyond U+10FFFF. */
                if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
                    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                        return false;
                i += n + 1;
        }
        return true;
}

/* Logs a connection's first few problems, then mutes it. */
void hp_ipc__conn_warn(struct hp_ipc_conn *c, const char *fmt, ...)
{
        char text[1024];
        va_list ap;

        if (c->warnings > HP_IPC_WARN_MAX)
                return;
        if (c->warnings++ == HP_IPC_WARN_MAX) {
                hp_log_warn("worker socket: further problems on this "
                            "connection are not logged");
                return;
        }
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        hp_log_warn("worker socket: %s", text);
}

/* Keeps the server's count of the bytes held for unfinished frames: the
 * framer holds a buffer only while a frame is incomplete. */
static void conn_account(struct hp_ipc_conn *c)
{
        struct hp_ipc_server *s = c->server;

        s->partial_bytes -= c->held;
        c->held = c->closing ? 0 : c->framer.alloc;
        s->partial_bytes += c->held;
        if (s->partial_bytes <= HP_IPC_PARTIAL_MAX / 2)
                s->shedding = false;
}

static void conn_closed_cb(uv_handle_t *h)
{
        struct hp_ipc_conn *c = hp_container_of(h, struct hp_ipc_conn, pipe);

        hp_ipc_framer_free(&c->framer);
        free(c);
}

/* Unregisters the connection's clients and closes it. */
static void conn_close(struct hp_ipc_conn *c)
{
        struct hp_ipc_server *s = c->server;

        bool had_clients = c->clients != NULL;

        if (c->closing)
                return;
        c->closing = true;
        conn_account(c);
        while (c->clients != NULL) {
                struct hp_ipc_client *next = c->clients->next;
                if (s->on_gone != NULL)
                        s->on_gone(s->gone_ctx, c->clients);
                free(c->clients);
                c->clients = next;
                s->nclients--;
        }
        if (c->prev != NULL)
                c->prev->next = c->next;
        else
                s->conns = c->next;
        if (c->next != NULL)
                c->next->prev = c->prev;
        s->nconns--;
        uv_close((uv_handle_t *)&c->pipe, conn_closed_cb);
        if (had_clients && s->on_change != NULL)
                s->on_change(s->change_ctx);
}

static void write_cb(uv_write_t *req, int status)
{
        struct write_req *w = hp_container_of(req, struct write_req, req);

        w->conn->queued -= w->len;
        if (status < 0 && status != UV_ECANCELED && !w->conn->closing) {
                hp_ipc__conn_warn(w->conn, "cannot write to a client: %s",
                                  uv_strerror(status));
                conn_close(w->conn);
        }
        free(w);
}

int hp_ipc_send(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                const char *type, const cJSON *payload)
{
        struct hp_ipc_conn *c = cl->conn;
        struct write_req *w;
        cJSON *msg;
        char *text;
        size_t len;
        uv_buf_t buf;
        int r;

        if (c->closing)
                return -EPIPE;
        msg = payload != NULL ? cJSON_Duplicate(payload, true)
                              : cJSON_CreateObject();
        if (msg == NULL)
                return -ENOMEM;
        cJSON_DeleteItemFromObjectCaseSensitive(msg, "type");
        cJSON_DeleteItemFromObjectCaseSensitive(msg, "client_id");
        if (cJSON_AddStringToObject(msg, "type", type) == NULL ||
            cJSON_AddStringToObject(msg, "client_id", cl->id) == NULL) {
                cJSON_Delete(msg);
                return -ENOMEM;
        }
        text = cJSON_PrintUnformatted(msg);
        cJSON_Delete(msg);
        if (text == NULL)
                return -ENOMEM;
        len = strlen(text);
        if (c->queued + len + 4 > HP_IPC_QUEUE_MAX) {
                free(text);
                s->stats.closed_slow++;
                hp_ipc__conn_warn(
                        c,
                        "a client of local rank %d does not read its "
                        "replies (%zu bytes queued); closing its "
                        "connection",
                        cl->local_rank, c->queued);
                conn_close(c);
                return -ENOBUFS;
        }
        w = malloc(sizeof(*w) + len + 4);
        if (w == NULL) {
                free(text);
                return -ENOMEM;
        }
        w->conn = c;
        w->len = len + 4;
        hp_ipc_frame_head((uint8_t *)w->data, (uint32_t)len);
        memcpy(w->data + 4, text, len);
        free(text);
        buf = uv_buf_init(w->data, (unsigned)w->len);
        r = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, write_cb);
        if (r < 0) {
                free(w);
                hp_ipc__conn_warn(c, "cannot write to a client: %s",
                                  uv_strerror(r));
                conn_close(c);
                return r;
        }
        c->queued += w->len;
        return 0;
}

int hp_ipc_send_to_rank(struct hp_ipc_server *s, int local_rank,
                        const char *type, const cJSON *payload)
{
        struct hp_ipc_conn *c, *next;
        int sent = 0;

        for (c = s->conns; c != NULL; c = next) {
                next = c->next; /* a failed send closes c */
                for (struct hp_ipc_client *cl = c->clients; cl != NULL;
                     cl = cl->next) {
                        int r;
                        if (cl->local_rank != local_rank)
                                continue;
                        r = hp_ipc_send(s, cl, type, payload);
                        if (r < 0)
                                return r;
                        sent++;
                }
        }
        return sent > 0 ? sent : -ENOENT;
}

int hp_ipc_broadcast(struct hp_ipc_server *s, const char *type,
                     const cJSON *payload)
{
        struct hp_ipc_conn *c, *next;
        int sent = 0, first = 0;

        for (c = s->conns; c != NULL; c = next) {
                next = c->next; /* a failed send closes c */
                for (struct hp_ipc_client *cl = c->clients; cl != NULL;
                     cl = cl->next) {
                        int r = hp_ipc_send(s, cl, type, payload);
                        if (r < 0) {
                                if (first == 0)
                                        first = r;
                                break; /* c is closed with its clients */
                        }
                        sent++;
                }
        }
        return first < 0 ? first : sent;
}

int hp_ipc_rank_clients(const struct hp_ipc_server *s, int local_rank)
{
        int n = 0;

        for (const struct hp_ipc_conn *c = s->conns; c != NULL; c = c->next)
                for (const struct hp_ipc_client *cl = c->clients; cl != NULL;
                     cl = cl->next)
                        if (cl->local_rank == local_rank)
                                n++;
        return n;
}

void hp_ipc_drop_clients(struct hp_ipc_server *s)
{
        while (s->conns != NULL)
                conn_close(s->conns);
}

void hp_ipc_server_on_gone(struct hp_ipc_server *s,
                           void (*gone)(void *ctx,
                                        const struct hp_ipc_client *c),
                           void *ctx)
{
        s->on_gone = gone;
        s->gone_ctx = ctx;
}

int hp_ipc_server_on(struct hp_ipc_server *s, const char *type,
                     hp_ipc_handler_fn fn, void *ctx)
{
        for (size_t i = 0; i < s->nhandlers; i++)
                if (strcmp(s->handlers[i].type, type) == 0)
                        return -EEXIST;
        if (s->nhandlers == HP_IPC_HANDLERS_MAX)
                return -ENOSPC;
        s->handlers[s->nhandlers++] = (struct hp_ipc_handler){ .type = type,
                                                               .fn = fn,
                                                               .ctx = ctx };
        return 0;
}

const char *hp_ipc__show(const cJSON *v, char *buf, size_t len)
{
        char *text;

        if (v == NULL)
                return "missing";
        text = cJSON_PrintUnformatted(v);
        if (text == NULL)
                return "?";
        if (strlen(text) >= len && len > 4)
                snprintf(buf, len, "%.*s...", (int)(len - 4), text);
        else
                snprintf(buf, len, "%s", text);
        free(text);
        return buf;
}

static struct hp_ipc_client *find_client(struct hp_ipc_conn *c,
                                         const char *id)
{
        for (struct hp_ipc_client *cl = c->clients; cl != NULL; cl = cl->next)
                if (strcmp(cl->id, id) == 0)
                        return cl;
        return NULL;
}

static void handle_init(struct hp_ipc_conn *c, const char *id, int rank)
{
        struct hp_ipc_client *cl = find_client(c, id);
        size_t len = strlen(id);

        if (cl != NULL) {
                cl->local_rank = rank;
                return;
        }
        if (c->nclients == CLIENTS_PER_CONN_MAX) {
                c->server->stats.ignored++;
                hp_ipc__conn_warn(
                        c,
                        "init: a connection may register at most %d "
                        "clients; client_id %.64s ignored",
                        CLIENTS_PER_CONN_MAX, id);
                return;
        }
        cl = malloc(sizeof(*cl) + len + 1);
        if (cl == NULL) {
                hp_ipc__conn_warn(c, "init: out of memory");
                return;
        }
        memcpy(cl->id, id, len + 1);
        cl->local_rank = rank;
        cl->conn = c;
        cl->next = c->clients;
        c->clients = cl;
        c->nclients++;
        c->server->nclients++;
        hp_log_debug("worker socket: client %s of local rank %d registered",
                     id, rank);
}

/* One frame: envelope checks, then the handler for its type. Returns
 * non-zero when the connection was closed meanwhile. */
static int on_frame(void *ctx, const char *body, size_t len)
{
        struct hp_ipc_conn *c = ctx;
        struct hp_ipc_server *s = c->server;
        const cJSON *type, *id, *rank_item;
        struct hp_ipc_client *cl;
        int64_t rank;
        size_t bad_at = 0;
        cJSON *msg;
        size_t i;

        if (!utf8_valid((const unsigned char *)body, len) ||
            (msg = cJSON_ParseWithLength(body, len)) == NULL) {
                s->stats.ignored++;
                hp_ipc__conn_warn(
                        c,
                        "a %zu-byte message is not valid UTF-8 JSON; "
                        "ignored",
                        len);
                return 0;
        }
        /* job_data's "data" is passed on to the operator as sent, its
         * numbers as written. */
        switch (hp_json_exact_numbers(
                msg,
                cJSON_IsObject(msg)
                        ? cJSON_GetObjectItemCaseSensitive(msg, "data")
                        : NULL,
                body, len, &bad_at)) {
        case 0:
                break;
        case -ENOMEM:
                s->stats.ignored++;
                hp_ipc__conn_warn(c,
                                  "a %zu-byte message: out of memory; "
                                  "ignored",
                                  len);
                goto out;
        default:
                s->stats.ignored++;
                hp_ipc__conn_warn(c,
                                  "a %zu-byte message holds a number JSON "
                                  "does not allow at byte %zu; ignored",
                                  len, bad_at);
                goto out;
        }
        type = cJSON_GetObjectItemCaseSensitive(msg, "type");
        id = cJSON_GetObjectItemCaseSensitive(msg, "client_id");
        rank_item = cJSON_GetObjectItemCaseSensitive(msg, "local_rank");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(type) ||
            type->valuestring[0] == '\0' || !cJSON_IsString(id) ||
            id->valuestring[0] == '\0' ||
            !hp_ipc__json_int(rank_item, &rank)) {
                char shown[80];
                const char *field = !cJSON_IsObject(msg) ? "the message"
                                    : !cJSON_IsString(type) ||
                                                    type->valuestring[0] ==
                                                            '\0'
                                            ? "\"type\""
                                    : !cJSON_IsString(id) ||
                                                    id->valuestring[0] == '\0'
                                            ? "\"client_id\""
                                            : "\"local_rank\"";
                const cJSON *bad = !cJSON_IsObject(msg) ? msg
                                   : field[1] == 't'    ? type
                                   : field[1] == 'c'    ? id
                                                        : rank_item;
                s->stats.ignored++;
                hp_ipc__conn_warn(c,
                                  "a message needs an object with a string "
                                  "\"type\", a string \"client_id\" and an "
                                  "integer \"local_rank\"; %s is %s; ignored",
                                  field,
                                  hp_ipc__show(bad, shown, sizeof(shown)));
                goto out;
        }
        if (rank < 0 || rank >= s->nranks) {
                s->stats.ignored++;
                hp_ipc__conn_warn(c,
                                  "%.64s: local_rank %" PRId64
                                  " is not on this "
                                  "node (0 to %d); ignored",
                                  type->valuestring, rank, s->nranks - 1);
                goto out;
        }
        if (strcmp(type->valuestring, "init") == 0) {
                s->stats.messages++;
                handle_init(c, id->valuestring, (int)rank);
                goto out;
        }
        cl = find_client(c, id->valuestring);
        if (cl == NULL || cl->local_rank != rank) {
                s->stats.ignored++;
                hp_ipc__conn_warn(
                        c,
                        "%.64s from client_id %.64s (local rank %" PRId64
                        ") before its init on this connection; ignored",
                        type->valuestring, id->valuestring, rank);
                goto out;
        }
        for (i = 0; i < s->nhandlers; i++)
                if (strcmp(s->handlers[i].type, type->valuestring) == 0)
                        break;
        if (i == s->nhandlers) {
                s->stats.ignored++;
                hp_ipc__conn_warn(
                        c,
                        "unknown message type \"%.64s\" from local rank "
                        "%d; ignored",
                        type->valuestring, cl->local_rank);
                goto out;
        }
        s->stats.messages++;
        s->handlers[i].fn(s, cl, msg, s->handlers[i].ctx);
out:
        cJSON_Delete(msg);
        return c->closing ? 1 : 0;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
        struct hp_ipc_conn *c = hp_container_of(h, struct hp_ipc_conn, pipe);

        /* Reads are handled before the next one starts: one buffer serves
         * every connection. */
        *buf = uv_buf_init(c->server->read_buf,
                           (unsigned)sizeof(c->server->read_buf));
}

/* What a connection is, for a log line: whose, or nobody's yet. */
static const char *conn_owner(const struct hp_ipc_conn *c, char *buf,
                              size_t len)
{
        if (c->clients == NULL)
                return "no client registered";
        snprintf(buf, len, "local rank %d", c->clients->local_rank);
        return buf;
}

/* Closes the connections holding unfinished frames, those with no client
 * first and the biggest first, until the bytes held for them are under
 * the cap again. */
static void shed_partial(struct hp_ipc_server *s)
{
        while (s->partial_bytes > HP_IPC_PARTIAL_MAX) {
                struct hp_ipc_conn *victim = NULL;
                char owner[32];

                for (struct hp_ipc_conn *c = s->conns; c != NULL;
                     c = c->next) {
                        bool anon = c->clients == NULL;

                        if (c->held == 0)
                                continue;
                        if (victim == NULL ||
                            anon > (victim->clients == NULL) ||
                            (anon == (victim->clients == NULL) &&
                             c->held > victim->held))
                                victim = c;
                }
                if (victim == NULL)
                        return;
                if (!s->shedding)
                        hp_log_warn("worker socket: unfinished frames hold "
                                    "%zu bytes, over the %u-byte limit; "
                                    "closing the connections that hold the "
                                    "most (%zu bytes of a %" PRIu32 "-byte "
                                    "frame, %s, first; logged once per "
                                    "burst)",
                                    s->partial_bytes, HP_IPC_PARTIAL_MAX,
                                    victim->framer.have, victim->framer.need,
                                    conn_owner(victim, owner, sizeof(owner)));
                else
                        hp_log_debug("worker socket: closing a connection "
                                     "with %zu bytes of a %" PRIu32 "-byte "
                                     "frame (%s)",
                                     victim->framer.have, victim->framer.need,
                                     conn_owner(victim, owner,
                                                sizeof(owner)));
                s->shedding = true;
                s->stats.closed_partial++;
                conn_close(victim);
        }
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
        struct hp_ipc_conn *c = hp_container_of(st, struct hp_ipc_conn, pipe);
        struct hp_ipc_server *s = c->server;
        uint32_t too_big = 0;
        int r;

        if (nread == 0 || c->closing)
                return;
        if (nread < 0) {
                if (nread != UV_EOF)
                        hp_ipc__conn_warn(c, "read: %s",
                                          uv_strerror((int)nread));
                conn_close(c);
                return;
        }
        c->active_ms = uv_now(s->loop);
        r = hp_ipc_framer_feed(&c->framer, buf->base, (size_t)nread, on_frame,
                               c, &too_big);
        conn_account(c);
        if (s->partial_bytes > HP_IPC_PARTIAL_MAX)
                shed_partial(s);
        if (c->closing)
                return;
        if (r == HP_ETOOBIG) {
                c->server->stats.rejected_frames++;
                /* Always logged: it ends the connection. */
                hp_log_warn("worker socket: a frame of %" PRIu32 " bytes is "
                            "over the %u-byte limit; closing that connection",
                            too_big, HP_IPC_FRAME_MAX);
                conn_close(c);
        } else if (r < 0) {
                hp_ipc__conn_warn(c, "%s; closing the connection",
                                  hp_strerror(r));
                conn_close(c);
        }
}

/* Makes room for one more connection: under the cap, or by closing the
 * one idle the longest among those that registered no client (a rank's
 * connection is never closed for another). False when every connection
 * has a client. */
static bool make_room(struct hp_ipc_server *s)
{
        struct hp_ipc_conn *victim = NULL;
        uint64_t now = uv_now(s->loop);

        if (s->nconns < s->conn_max) {
                if (s->nconns + 1 < s->conn_max)
                        s->evicting = false;
                return true;
        }
        /* Newest first in the list: ties go to the older one. */
        for (struct hp_ipc_conn *c = s->conns; c != NULL; c = c->next)
                if (c->clients == NULL &&
                    (victim == NULL || c->active_ms <= victim->active_ms))
                        victim = c;
        if (victim == NULL) {
                s->stats.refused++;
                if (!s->evicting)
                        hp_log_warn("worker socket: %zu connections, each "
                                    "with a registered client: closing new "
                                    "ones at once (logged once per burst)",
                                    s->nconns);
                s->evicting = true;
                return false;
        }
        if (!s->evicting)
                hp_log_warn("worker socket: over %zu connections: closing "
                            "the ones idle the longest that registered no "
                            "client (idle %" PRIu64 " ms first; logged once "
                            "per burst)",
                            s->conn_max, now - victim->active_ms);
        s->evicting = true;
        s->stats.evicted++;
        conn_close(victim);
        return true;
}

static void connection_cb(uv_stream_t *listener, int status)
{
        struct hp_ipc_server *s = hp_container_of(listener,
                                                  struct hp_ipc_server,
                                                  listener);
        struct hp_ipc_conn *c;
        int r;

        if (status < 0) {
                hp_log_warn("worker socket: accept: %s", uv_strerror(status));
                return;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
                hp_log_warn("worker socket: out of memory for a connection");
                return;
        }
        c->server = s;
        hp_ipc_framer_init(&c->framer, HP_IPC_FRAME_MAX);
        uv_pipe_init(s->loop, &c->pipe, 0);
        r = uv_accept(listener, (uv_stream_t *)&c->pipe);
        if (r == 0 && !make_room(s))
                r = -EMFILE;
        if (r == 0)
                r = uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb);
        if (r < 0) {
                if (r != -EMFILE)
                        hp_log_warn("worker socket: accept: %s",
                                    uv_strerror(r));
                uv_close((uv_handle_t *)&c->pipe, conn_closed_cb);
                return;
        }
        c->next = s->conns;
        if (s->conns != NULL)
                s->conns->prev = c;
        s->conns = c;
        s->nconns++;
        s->stats.connections++;
        c->active_ms = uv_now(s->loop);
}

/* ---- Checkpoint discovery's messages ---- */

static void ckpt_init_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                         const cJSON *msg, void *ctx)
{
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(msg, "prefix");
        const cJSON *types = cJSON_GetObjectItemCaseSensitive(
                msg, "checkpoint_types");
        struct hp_ckpt_type_count counts[HP_CKPT_TYPES_MAX];
        const cJSON *v;
        char err[256];
        int n = 0, r;

        if (!cJSON_IsString(prefix) || !cJSON_IsObject(types)) {
                char shown[80];
                s->stats.ignored++;
                hp_ipc__conn_warn(
                        cl->conn,
                        "ckpt_init from local rank %d: needs a "
                        "string \"prefix\" and an object "
                        "\"checkpoint_types\"; %s is %s; "
                        "ignored",
                        cl->local_rank,
                        !cJSON_IsString(prefix) ? "\"prefix\""
                                                : "\"checkpoint_types\"",
                        hp_ipc__show(!cJSON_IsString(prefix) ? prefix : types,
                                     shown, sizeof(shown)));
                return;
        }
        cJSON_ArrayForEach (v, types) {
                int64_t count = -1;
                if (n == HP_CKPT_TYPES_MAX) {
                        snprintf(err, sizeof(err),
                                 "more than %d checkpoint types",
                                 HP_CKPT_TYPES_MAX);
                        goto bad;
                }
                if (!cJSON_IsNull(v) && (!hp_ipc__json_int(v, &count) ||
                                         count < 0 || count > INT32_MAX)) {
                        snprintf(err, sizeof(err),
                                 "checkpoint_types[\"%.64s\"] is not a "
                                 "count or null",
                                 v->string);
                        goto bad;
                }
                counts[n].name = v->string;
                counts[n].expected = (int)count;
                n++;
        }
        r = hp_ckpt_begin(&s->ckpt, prefix->valuestring, counts, n,
                          uv_now(s->loop), err, sizeof(err));
        if (r == -ENOMEM)
                snprintf(err, sizeof(err), "out of memory");
        if (r < 0)
                goto bad;
        hp_log_debug("worker socket: ckpt_init from local rank %d, prefix %s",
                     cl->local_rank, prefix->valuestring);
        return;
bad:
        s->stats.ignored++;
        hp_ipc__conn_warn(cl->conn,
                          "ckpt_init from local rank %d: %s; ignored",
                          cl->local_rank, err);
}

static void ckpt_update_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                           const cJSON *msg, void *ctx)
{
        const cJSON *step_item = cJSON_GetObjectItemCaseSensitive(msg,
                                                                  "step");
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(msg, "path");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(
                msg, "checkpoint_type");
        char err[512], shown[80];
        int64_t step;
        int r;

        if (!hp_ipc__json_int(step_item, &step)) {
                snprintf(err, sizeof(err), "\"step\" is not an integer: %s",
                         hp_ipc__show(step_item, shown, sizeof(shown)));
                goto bad;
        }
        if (path != NULL && !cJSON_IsNull(path) && !cJSON_IsString(path)) {
                snprintf(err, sizeof(err),
                         "\"path\" is neither a string nor null: %s",
                         hp_ipc__show(path, shown, sizeof(shown)));
                goto bad;
        }
        if (!cJSON_IsString(type)) {
                snprintf(err, sizeof(err),
                         "\"checkpoint_type\" is not a string: %s",
                         hp_ipc__show(type, shown, sizeof(shown)));
                goto bad;
        }
        r = hp_ckpt_update(&s->ckpt, cl->local_rank, step,
                           cJSON_IsString(path) ? path->valuestring : NULL,
                           type->valuestring, uv_now(s->loop), err,
                           sizeof(err));
        if (r == -ENOMEM)
                snprintf(err, sizeof(err), "out of memory");
        if (r < 0)
                goto bad;
        if (r == 1)
                hp_log_info("checkpoint step %" PRId64 " is complete on "
                            "every local rank: %s",
                            step,
                            s->ckpt.max_path ? s->ckpt.max_path
                                             : "(no path)");
        return;
bad:
        s->stats.ignored++;
        hp_ipc__conn_warn(cl->conn,
                          "ckpt_info_update from local rank %d: %s; "
                          "ignored",
                          cl->local_rank, err);
}

static void ckpt_get_cb(struct hp_ipc_server *s, struct hp_ipc_client *cl,
                        const cJSON *msg, void *ctx)
{
        const char *path = hp_ckpt_latest(&s->ckpt);
        cJSON *reply = cJSON_CreateObject();

        if (reply == NULL ||
            (path != NULL ? cJSON_AddStringToObject(reply, "path", path)
                          : cJSON_AddNullToObject(reply, "path")) == NULL) {
                cJSON_Delete(reply);
                hp_ipc__conn_warn(cl->conn, "ckpt_info_get: out of memory");
                return;
        }
        (void)hp_ipc_send(s, cl, "ckpt_info_get", reply);
        cJSON_Delete(reply);
}

/* ---- Lifecycle ---- */

size_t hp_ipc_conn_limit(uint64_t soft, int nranks)
{
        uint64_t need = HP_IPC_FD_RESERVE +
                        (uint64_t)(nranks > 0 ? nranks : 0) *
                                HP_IPC_FD_PER_RANK;
        uint64_t left = soft > need ? soft - need : 0;
        size_t floor = HP_IPC_CONN_FLOOR(nranks > 0 ? nranks : 0);

        if (left > HP_IPC_CONN_MAX)
                left = HP_IPC_CONN_MAX;
        return left < floor ? floor : (size_t)left;
}

/* Sizes the connection cap from the open-files limit in force. */
static void set_conn_max(struct hp_ipc_server *s)
{
        struct rlimit lim;
        uint64_t soft = RLIM_INFINITY;

        if (getrlimit(RLIMIT_NOFILE, &lim) == 0)
                soft = lim.rlim_cur;
        s->conn_max = hp_ipc_conn_limit(soft, s->nranks);
        if (soft < HP_IPC_FD_RESERVE +
                           (uint64_t)s->nranks * HP_IPC_FD_PER_RANK +
                           HP_IPC_CONN_FLOOR(s->nranks))
                hp_log_warn("open files: the limit of %llu (hard %llu) is "
                            "low for %d local ranks: spawns may fail; "
                            "raise the hard limit (ulimit -Hn, "
                            "LimitNOFILE=, docker --ulimit nofile=)",
                            (unsigned long long)soft,
                            (unsigned long long)lim.rlim_max, s->nranks);
        hp_log_debug("worker socket: at most %zu connections (open files "
                     "limit %llu)",
                     s->conn_max, (unsigned long long)soft);
}

int hp_ipc_server_start(struct hp_ipc_server *s, uv_loop_t *loop, int nranks,
                        char *errbuf, size_t errlen)
{
        const char *dir = hp_ipc__temp_dir();
        int r;

        memset(s, 0, sizeof(*s));
        s->loop = loop;
        s->nranks = nranks;
        r = hp_snprintf(s->path, sizeof(s->path),
                        "%s/hyperpod_elastic_agent_%d.sock", dir,
                        (int)getpid());
        if (r < 0) {
                /* Workers find the socket through the environment, so a
                 * shorter directory serves them just as well. */
                hp_log_warn("worker socket: a path under %s would be longer "
                            "than a Unix socket allows (%zu bytes); using "
                            "/tmp",
                            dir, sizeof(s->path) - 1);
                dir = "/tmp";
                r = hp_snprintf(s->path, sizeof(s->path),
                                "/tmp/hyperpod_elastic_agent_%d.sock",
                                (int)getpid());
                if (r < 0)
                        return r;
        }
        r = hp_ckpt_init(&s->ckpt, nranks);
        if (r == 0) {
                r = hp_ipc_ranks_init(&s->ranks, nranks);
                if (r < 0)
                        hp_ckpt_free(&s->ckpt);
        }
        if (r < 0) {
                snprintf(errbuf, errlen, "worker socket: %d local ranks",
                         nranks);
                return r;
        }
        hp_ipc__remove_stale_sockets(hp_ipc__temp_dir());
        set_conn_max(s);
        r = uv_pipe_init(loop, &s->listener, 0);
        if (r < 0)
                goto fail_ckpt;
        r = hp_ipc__bind_listener(s, dir, errbuf, errlen);
        if (r < 0) {
                uv_close((uv_handle_t *)&s->listener, NULL);
                hp_ckpt_free(&s->ckpt);
                hp_ipc_ranks_free(&s->ranks);
                return r;
        }
        r = uv_listen((uv_stream_t *)&s->listener, 1024, connection_cb);
        if (r < 0)
                goto fail_pipe;
        r = hp_ipc_server_on(s, "ckpt_init", ckpt_init_cb, NULL);
        if (r == 0)
                r = hp_ipc_server_on(s, "ckpt_info_update", ckpt_update_cb,
                                     NULL);
        if (r == 0)
                r = hp_ipc_server_on(s, "ckpt_info_get", ckpt_get_cb, NULL);
        if (r < 0)
                goto fail_pipe;
        s->started = true;
        hp_log_debug("worker socket listening on %s", s->path);
        return 0;

fail_pipe:
        uv_close((uv_handle_t *)&s->listener, NULL);
        unlink(s->path);
        if (s->dir[0] != '\0')
                (void)rmdir(s->dir);
fail_ckpt:
        hp_ckpt_free(&s->ckpt);
        hp_ipc_ranks_free(&s->ranks);
        snprintf(errbuf, errlen, "worker socket %s: %s", s->path,
                 hp_strerror(r));
        return r;
}

void hp_ipc_server_close(struct hp_ipc_server *s)
{
        if (!s->started)
                return;
        s->started = false;
        s->on_change = NULL;
        s->on_gone = NULL;
        while (s->conns != NULL)
                conn_close(s->conns);
        uv_close((uv_handle_t *)&s->listener, NULL);
        if (unlink(s->path) < 0 && errno != ENOENT)
                hp_log_warn("cannot remove the worker socket %s: %s", s->path,
                            strerror(errno));
        if (s->dir[0] != '\0' && rmdir(s->dir) < 0 && errno != ENOENT)
                hp_log_warn("cannot remove the worker socket's directory "
                            "%s: %s",
                            s->dir, strerror(errno));
        hp_ckpt_free(&s->ckpt);
        hp_ipc_ranks_free(&s->ranks);
}
