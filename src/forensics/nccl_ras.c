/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL's RAS in a hang report (--hang-dump full): the text report of the
 * RAS thread of this node's NCCL, asked over TCP on the loop the way the
 * ncclras client asks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "hyperpod/forensics.h"

#include "forensics-private.h"

/* NCCL's RAS client protocol (src/ras/client.cc): "CLIENT PROTOCOL 2",
 * answered by "SERVER PROTOCOL n"; then "STATUS", answered by the text
 * report and the end of the connection. */
#define RAS_DEFAULT_ADDR "127.0.0.1:28028"
#define RAS_HELLO "CLIENT PROTOCOL 2\n"
#define RAS_HELLO_ANSWER "SERVER PROTOCOL "
#define RAS_STATUS "STATUS\n"
#define RAS_MAX_REPORT (1024 * 1024)

struct hp_nccl_ras {
        bool ended; /* the report is written: callbacks only clean up */
        uv_tcp_t tcp;
        uv_connect_t connect;
        uv_write_t write;
        char address[300];
        char *text;
        size_t len;
        bool greeted; /* the server's protocol line came */
        bool done;
        const char *status;
        char detail[256];
};

static void ras_finish(struct hp_nccl_ras *q, const char *status, int err)
{
        if (q->done)
                return;
        q->done = true;
        q->status = status;
        if (err < 0)
                snprintf(q->detail, sizeof(q->detail), "%s",
                         uv_strerror(err));
        uv_read_stop((uv_stream_t *)&q->tcp);
}

static void ras_free(uv_handle_t *h)
{
        struct hp_nccl_ras *q = h->data;

        free(q->text);
        free(q);
}

static void ras_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
        struct hp_nccl_ras *q = h->data;
        /* One byte is kept for the NUL. */
        size_t room = RAS_MAX_REPORT - q->len;

        (void)suggested;
        buf->base = q->text + q->len;
        buf->len = room > 65536 ? 65536 : room;
}

static void ras_written(uv_write_t *req, int status)
{
        struct hp_nccl_ras *q = req->data;

        if (status < 0 && !q->ended)
                ras_finish(q, "error", status);
}

static void ras_send(struct hp_nccl_ras *q, const char *text)
{
        uv_buf_t buf = uv_buf_init((char *)text, (unsigned)strlen(text));
        int r;

        q->write.data = q;
        r = uv_write(&q->write, (uv_stream_t *)&q->tcp, &buf, 1, ras_written);
        if (r < 0)
                ras_finish(q, "error", r);
}

static void ras_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
        struct hp_nccl_ras *q = s->data;
        char *nl;

        (void)buf;
        if (q->ended || q->done)
                return;
        if (n == UV_EOF) {
                ras_finish(q, q->greeted ? "complete" : "closed", 0);
                return;
        }
        if (n < 0) {
                ras_finish(q, "error", (int)n);
                return;
        }
        q->len += (size_t)n;
        q->text[q->len] = '\0';
        if (!q->greeted && (nl = memchr(q->text, '\n', q->len)) != NULL) {
                size_t rest = q->len - (size_t)(nl + 1 - q->text);

                if (strncmp(q->text, RAS_HELLO_ANSWER,
                            sizeof(RAS_HELLO_ANSWER) - 1) != 0) {
                        *nl = '\0';
                        snprintf(q->detail, sizeof(q->detail), "%.150s",
                                 q->text);
                        ras_finish(q, "unexpected answer", 0);
                        return;
                }
                memmove(q->text, nl + 1, rest);
                q->len = rest;
                q->text[q->len] = '\0';
                q->greeted = true;
                ras_send(q, RAS_STATUS);
        } else if (!q->greeted && q->len >= 1024) {
                ras_finish(q, "unexpected answer", 0);
        }
        if (q->len >= RAS_MAX_REPORT)
                ras_finish(q, "cut at 1 MiB", 0);
}

static void ras_connected(uv_connect_t *req, int status)
{
        struct hp_nccl_ras *q = req->data;
        int r;

        if (q->ended || q->done)
                return;
        if (status < 0) {
                ras_finish(q,
                           status == UV_ECONNREFUSED ? "not available"
                                                     : "error",
                           status);
                return;
        }
        r = uv_read_start((uv_stream_t *)&q->tcp, ras_alloc, ras_read);
        if (r < 0) {
                ras_finish(q, "error", r);
                return;
        }
        ras_send(q, RAS_HELLO);
}

/* "127.0.0.1:28028", "[::1]:28028" or "localhost:28028". */
static int ras_parse(const char *text, struct sockaddr_storage *sa)
{
        char host[256];
        const char *colon = strrchr(text, ':');
        char *end;
        long port;
        size_t n;

        if (colon == NULL || colon == text)
                return -EINVAL;
        port = strtol(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || port <= 0 || port > 65535)
                return -EINVAL;
        n = (size_t)(colon - text);
        if (text[0] == '[' && n >= 2 && text[n - 1] == ']') {
                text++;
                n -= 2;
        }
        if (n >= sizeof(host))
                return -EINVAL;
        memcpy(host, text, n);
        host[n] = '\0';
        if (strcmp(host, "localhost") == 0)
                snprintf(host, sizeof(host), "127.0.0.1");
        if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa) == 0 ||
            uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)sa) == 0)
                return 0;
        return -EINVAL;
}

struct hp_nccl_ras *hp_nccl_ras__begin(uv_loop_t *loop)
{
        const char *enable = getenv("NCCL_RAS_ENABLE");
        const char *addr = getenv("NCCL_RAS_ADDR");
        struct hp_nccl_ras *q;
        struct sockaddr_storage sa;
        int r;

        if (enable != NULL && strcmp(enable, "0") == 0)
                return NULL;
        q = calloc(1, sizeof(*q));
        if (q == NULL)
                return NULL;
        q->text = malloc(RAS_MAX_REPORT + 1);
        if (q->text == NULL) {
                free(q);
                return NULL;
        }
        q->text[0] = '\0';
        snprintf(q->address, sizeof(q->address), "%s",
                 addr && *addr ? addr : RAS_DEFAULT_ADDR);
        uv_tcp_init(loop, &q->tcp);
        q->tcp.data = q;
        q->connect.data = q;
        if (ras_parse(q->address, &sa) < 0) {
                snprintf(q->detail, sizeof(q->detail),
                         "NCCL_RAS_ADDR '%.150s' (from the environment) is "
                         "not <ip>:<port>",
                         q->address);
                ras_finish(q, "error", 0);
                return q;
        }
        r = uv_tcp_connect(&q->connect, &q->tcp, (struct sockaddr *)&sa,
                           ras_connected);
        if (r < 0)
                ras_finish(q,
                           r == UV_ECONNREFUSED ? "not available" : "error",
                           r);
        return q;
}

bool hp_nccl_ras__waiting(const struct hp_nccl_ras *q)
{
        return q != NULL && !q->done;
}

void hp_nccl_ras__end(struct hp_nccl_ras *q, cJSON *doc)
{
        cJSON *o;

        if (q == NULL)
                return;
        if (!q->done)
                ras_finish(q,
                           q->greeted && q->len > 0 ? "cut at the timeout"
                                                    : "no answer",
                           0);
        o = doc ? cJSON_AddObjectToObject(doc, "nccl_ras") : NULL;
        if (o != NULL) {
                cJSON_AddStringToObject(o, "address", q->address);
                cJSON_AddStringToObject(o, "status", q->status);
                if (q->detail[0] != '\0')
                        cJSON_AddStringToObject(o, "detail", q->detail);
                if (q->greeted)
                        cJSON_AddStringToObject(o, "report", q->text);
        }
        q->ended = true;
        uv_close((uv_handle_t *)&q->tcp, ras_free);
}
