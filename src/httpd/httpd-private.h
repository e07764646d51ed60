/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside src/httpd only: the connection and the helpers of the
 * parsing (parse.c) and response (response.c) files, which call nothing
 * of the connection's lifetime (httpd.c). */
#ifndef HP_HTTPD_PRIVATE_H
#define HP_HTTPD_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
        bool served;    /* counted in current_connections */
        bool answered;  /* has had a response */
        uint64_t since; /* loop time the current state began */
        bool reading;
        bool keep_alive;   /* after the response being written */
        bool message_done; /* the parser paused at the end of a request */
        bool began; /* a request began in this parse: arm its deadline */
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

/* parse.c: the request, as http-parser's callbacks read it within the
 * limits. */
void hp_httpd__parser_settings(http_parser_settings *s);
/* Fills req from the message the parser paused after; points into c. */
void hp_httpd__request_fill(struct hp_httpd_conn *c,
                            struct hp_httpd_request *req);
int hp_httpd__growbuf_reserve(struct growbuf *b, size_t extra);
/* Gives a buffer grown over HTTPD_KEEP_BUFFER back. */
void hp_httpd__growbuf_trim(struct growbuf *b);
void hp_httpd__growbuf_free(struct growbuf *b);

/* response.c: the bytes of a response and its count. */
/* Formats the status line, headers and (when send_body) the body into o;
 * 0, or -ENOMEM. */
int hp_httpd__format_response(struct growbuf *o, int status,
                              const char *content_type, const char *headers,
                              const char *body, size_t body_len,
                              bool send_body, bool keep_alive,
                              unsigned short http_minor);
void hp_httpd__count_status(struct hp_httpd_stats *s, int status);

#endif
