/* SPDX-License-Identifier: Apache-2.0 */
/* Splitting a byte stream into lines without copying complete lines. */
#include <string.h>

#include "hyperpod/linesplit.h"

void hp_linesplit_init(struct hp_linesplit *ls, char *buf, size_t cap)
{
        ls->buf = buf;
        ls->cap = cap;
        ls->len = 0;
        ls->after_cr = false;
}

/* Appends to the held partial line, emitting full-capacity pieces as
 * HP_LINE_CAPPED lines. */
static void hold(struct hp_linesplit *ls, const char *data, size_t n,
                 hp_line_cb cb, void *ctx)
{
        while (n > 0) {
                size_t room, take;

                /* A full buffer is emitted only when more bytes arrive, so
                 * that a line of exactly cap bytes ends as a normal line. */
                if (ls->len == ls->cap) {
                        cb(ctx, ls->buf, ls->len, HP_LINE_CAPPED);
                        ls->len = 0;
                }
                room = ls->cap - ls->len;
                take = n < room ? n : room;
                memcpy(ls->buf + ls->len, data, take);
                ls->len += take;
                data += take;
                n -= take;
        }
}

/* The first \n or \r in [p, end). Two memchr calls beat one byte loop
 * that tests both: glibc's memchr looks at 32 or 64 bytes per step. The
 * next of each is remembered (in *nl and *cr, end when there is none),
 * so that each is looked for once per occurrence, not once per line: a
 * chunk of \r-ended lines (a progress bar) is scanned for \n once, and a
 * chunk of ordinary lines for \r once (a memchr call per line cost a
 * third of the splitting). */
static const char *find_eol(const char *p, const char *end, const char **nl,
                            const char **cr)
{
        if (*nl == NULL || *nl < p) {
                *nl = memchr(p, '\n', (size_t)(end - p));
                if (*nl == NULL)
                        *nl = end;
        }
        if (*cr == NULL || *cr < p) {
                *cr = memchr(p, '\r', (size_t)(end - p));
                if (*cr == NULL)
                        *cr = end;
        }
        return *cr < *nl ? *cr : *nl;
}

void hp_linesplit_feed(struct hp_linesplit *ls, const char *data, size_t n,
                       hp_line_cb cb, void *ctx)
{
        const char *end = data + n;
        const char *p = data;
        const char *nl = NULL, *cr = NULL; /* not looked for yet */

        if (n == 0)
                return; /* an empty read must not forget a pending \r */
        if (ls->after_cr && *p == '\n')
                p++;
        ls->after_cr = false;
        while (p < end) {
                const char *eol = find_eol(p, end, &nl, &cr);

                if (eol == end) {
                        hold(ls, p, (size_t)(end - p), cb, ctx);
                        return;
                }
                if (ls->len == 0 && (size_t)(eol - p) <= ls->cap) {
                        cb(ctx, p, (size_t)(eol - p), HP_LINE_EOL);
                } else {
                        hold(ls, p, (size_t)(eol - p), cb, ctx);
                        cb(ctx, ls->buf, ls->len, HP_LINE_EOL);
                        ls->len = 0;
                }
                if (*eol == '\r') {
                        if (eol + 1 == end) {
                                ls->after_cr = true;
                                return;
                        }
                        if (eol[1] == '\n')
                                eol++;
                }
                p = eol + 1;
        }
}

void hp_linesplit_finish(struct hp_linesplit *ls, hp_line_cb cb, void *ctx)
{
        if (ls->len > 0)
                cb(ctx, ls->buf, ls->len, HP_LINE_EOF);
        ls->len = 0;
        ls->after_cr = false;
}
