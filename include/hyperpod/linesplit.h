/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: the line splitter, shared by the live streams and replay
 * so that a line is the same line in both. Pure: no libuv, no clock, no
 * allocation. */
#ifndef HYPERPOD_LINESPLIT_H
#define HYPERPOD_LINESPLIT_H

#include <stdbool.h>
#include <stddef.h>

/* Longest line held for the console and the rules. A longer line is cut
 * here, emitted with HP_LINE_CAPPED, and continued as a new line. */
#define HP_LINE_MAX (64 * 1024)

enum hp_line_end {
        HP_LINE_EOL = 0, /* ended by \n, \r or \r\n */
        HP_LINE_CAPPED,  /* HP_LINE_MAX bytes without an end; more follows */
        HP_LINE_EOF,     /* the stream ended without a final newline */
};

/* Receives each line, without its terminator. The bytes are borrowed for
 * the duration of the call. */
typedef void (*hp_line_cb)(void *ctx, const char *line, size_t len,
                           enum hp_line_end end);

/*
 * The line splitter: a pure state machine over byte chunks. \n, \r and
 * \r\n each end a line (tqdm redraws with \r), also across chunk borders.
 * buf is borrowed storage of cap bytes for a line split across chunks.
 * A line that lies whole in a chunk is handed over in place, so the
 * bytes after it are the chunk's.
 */
struct hp_linesplit {
        char *buf;
        size_t cap;
        size_t len;
        bool after_cr; /* the last byte was \r: a leading \n is its pair */
};

void hp_linesplit_init(struct hp_linesplit *ls, char *buf, size_t cap);
void hp_linesplit_feed(struct hp_linesplit *ls, const char *data, size_t n,
                       hp_line_cb cb, void *ctx);
/* End of stream: a held partial line is emitted with HP_LINE_EOF. */
void hp_linesplit_finish(struct hp_linesplit *ls, hp_line_cb cb, void *ctx);

#endif
