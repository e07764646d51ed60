/* SPDX-License-Identifier: Apache-2.0 */
/* --replay of per-rank files, those check.c finds in a torchrun attempt
 * directory: each file read whole and split by the live splitter, and
 * their lines merged into one replay in time order, each rank's a stream
 * of its own. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/linesplit.h"
#include "replay-private.h"

/* One per-rank file, read whole, split by the live splitter. */
struct rank_file {
        const char *name;
        char *data; /* zero-padded for the JIT's reads past a line */
        size_t size;
        size_t *off, *len; /* its lines */
        size_t n, next;
        size_t at;  /* while splitting: where the next line starts */
        int64_t ts; /* its clock: the last timestamp in it */
        bool have_ts;
};

/* The splitter hands each line over in place or, when it held it (one
 * longer than HP_LINE_MAX), from its buffer; either way the lines come in
 * order and cover the file, so each is where the last one's terminator
 * ended, and is matched there. */
static void rank_line_cb(void *ctx, const char *line, size_t len,
                         enum hp_line_end end)
{
        struct rank_file *f = ctx;

        (void)line;
        f->off[f->n] = f->at;
        f->len[f->n++] = len;
        f->at += len;
        if (end != HP_LINE_EOL || f->at >= f->size)
                return;
        if (f->data[f->at] == '\r' && f->at + 1 < f->size &&
            f->data[f->at + 1] == '\n')
                f->at++;
        f->at++;
}

static int read_rank_file(FILE *in, struct rank_file *f)
{
        size_t size = 0, cap = 0, got;
        struct hp_linesplit ls;
        char *p, *line;

        for (;;) {
                if (cap - size < REPLAY_CHUNK + 64) {
                        cap = cap ? 2 * cap : 2 * REPLAY_CHUNK;
                        p = realloc(f->data, cap);
                        if (p == NULL)
                                return -ENOMEM;
                        f->data = p;
                }
                got = fread(f->data + size, 1, REPLAY_CHUNK, in);
                size += got;
                if (got == 0)
                        break;
        }
        if (ferror(in))
                return -EIO;
        memset(f->data + size, 0, 64);
        /* At most one line per byte, and one for the end. */
        f->off = malloc((size + 1) * sizeof(*f->off));
        f->len = malloc((size + 1) * sizeof(*f->len));
        if (f->off == NULL || f->len == NULL)
                return -ENOMEM;
        f->size = size;
        f->at = 0;
        line = malloc(HP_LINE_MAX);
        if (line == NULL)
                return -ENOMEM;
        hp_linesplit_init(&ls, line, HP_LINE_MAX);
        hp_linesplit_feed(&ls, f->data, size, rank_line_cb, f);
        hp_linesplit_finish(&ls, rank_line_cb, f);
        free(line);
        return 0;
}

/* The file whose next line comes first: by the line's own timestamp, or
 * for a line without one its file's clock (before the file's first
 * timestamp: at once); the earlier file on a tie. *own: the line has a
 * timestamp of its own, *ts. */
static struct rank_file *next_rank_line(struct logmon_replay *r,
                                        struct rank_file *files, size_t n,
                                        int64_t *ts, bool *own)
{
        struct rank_file *best = NULL, *f;
        int64_t t, key, best_key = 0, best_t = 0;
        bool has, best_has = false;
        size_t i;

        for (i = 0; i < n; i++) {
                f = &files[i];
                if (f->next == f->n)
                        continue;
                has = r->opts->rate <= 0 &&
                      logmon__line_timestamp(r, f->data + f->off[f->next],
                                             f->len[f->next], &t);
                key = has ? t : f->have_ts ? f->ts : INT64_MIN;
                if (best == NULL || key < best_key) {
                        best = f;
                        best_key = key;
                        best_t = t;
                        best_has = has;
                }
        }
        *ts = best_t;
        *own = best_has;
        return best;
}

int logmon_replay_files(struct logmon_ruleset *rs, FILE *const *in,
                        const char *const *names, size_t n,
                        const struct logmon_replay_opts *opts, FILE *out,
                        struct logmon_replay **result)
{
        struct rank_file *files, *f;
        struct logmon_replay *r;
        struct line_head h;
        uint64_t line_no;
        bool have_ts;
        int64_t ts;
        size_t i, idx;
        int err;

        err = logmon__replay_begin(rs, opts, out, &r);
        if (err != 0)
                return err;
        /* Each file is one rank's output as written: no prefix to strip. */
        r->layout = LOGMON_LAYOUT_PLAIN;
        r->head_ts = false;
        r->files = true;
        files = calloc(n + 1, sizeof(*files));
        err = files == NULL ? -ENOMEM : 0;
        for (i = 0; err == 0 && i < n; i++) {
                files[i].name = names[i];
                err = read_rank_file(in[i], &files[i]);
        }
        /* Every rank's stream exists from the start, as live. */
        for (i = 0; err == 0 && i < n; i++)
                err = logmon__replay_stream(r, names[i], strlen(names[i]),
                                            &idx);
        while (err == 0 &&
               (f = next_rank_line(r, files, n, &ts, &have_ts)) != NULL) {
                line_no = ++f->next;
                r->lines++;
                if (r->stopped) {
                        r->after_stop++;
                        continue;
                }
                memset(&h, 0, sizeof(h));
                h.body = f->data + f->off[line_no - 1];
                h.body_len = f->len[line_no - 1];
                if (r->opts->rate > 0) {
                        logmon__advance_clock(r, &h, r->lines);
                } else if (have_ts) {
                        f->ts = ts;
                        f->have_ts = true;
                        logmon__set_clock(r, ts);
                }
                if (logmon__past_until(r))
                        continue;
                err = logmon__feed_line(r, f->name, strlen(f->name), &h,
                                        line_no);
        }
        for (i = 0; files != NULL && i < n; i++) {
                free(files[i].data);
                free(files[i].off);
                free(files[i].len);
        }
        free(files);
        if (err != 0) {
                logmon_replay_free(r);
                return err;
        }
        return logmon__replay_end(r, result);
}
