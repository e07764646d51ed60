/* SPDX-License-Identifier: Apache-2.0 */
/* The bytes of a response: status line, our headers, the handler's, the
 * body; and the count by status class for /metrics. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/httpd.h"

#include "httpd-private.h"

void hp_httpd__count_status(struct hp_httpd_stats *s, int status)
{
        s->requests_total++;
        switch (status / 100) {
        case 1:
                s->responses_1xx++;
                break;
        case 2:
                s->responses_2xx++;
                break;
        case 3:
                s->responses_3xx++;
                break;
        case 4:
                s->responses_4xx++;
                break;
        default:
                s->responses_5xx++;
                break;
        }
}

int hp_httpd__format_response(struct growbuf *o, int status,
                              const char *content_type, const char *headers,
                              const char *body, size_t body_len,
                              bool send_body, bool keep_alive,
                              unsigned short http_minor)
{
        /* RFC 9110: no Content-Length and no body with 1xx, 204 and 304. */
        bool bodyless = status < 200 || status == 204 || status == 304;
        size_t ct_len = content_type ? strlen(content_type) : 0;
        size_t h_len = headers ? strlen(headers) : 0;
        int n;

        if (bodyless)
                body_len = 0;
        o->len = 0;
        if (hp_httpd__growbuf_reserve(o, HTTPD_HEAD_ROOM + ct_len + h_len +
                                                 body_len) < 0)
                return -ENOMEM;
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
        if (!keep_alive)
                n += snprintf(o->data + n, o->cap - (size_t)n,
                              "connection: close\r\n");
        else if (http_minor == 0)
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
        return 0;
}
