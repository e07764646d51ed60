/* SPDX-License-Identifier: Apache-2.0 */
/* What a console line carries before its text (struct line_head): the
 * timestamps kubectl --timestamps and ${time} put there, srun --label's
 * task label, a torchrun console prefix, or the agent's own
 * "hyperpodrun[PID]: "; and the time the agent wrote in its own line.
 * A timestamp inside a line's text is replay_time.c's. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "replay-private.h"

/* A torchrun console prefix, "[default0]:": a short bracketed name with
 * no blanks, followed by a colon. Returns its length, 0 when absent. */
static size_t console_prefix(const char *line, size_t len)
{
        size_t i;

        if (len < 4 || line[0] != '[')
                return 0;
        for (i = 1; i < len && i <= PREFIX_MAX; i++) {
                if (line[i] == ']')
                        return i > 1 && i + 1 < len && line[i + 1] == ':'
                                       ? i + 2
                                       : 0;
                if (line[i] == ' ' || line[i] == '\t' || line[i] == '[')
                        return 0;
        }
        return 0;
}

/* "2025-06-17T05:51:29.123456789Z " as kubectl --timestamps and ${time}
 * write it: a 'T', a 'Z' and a blank after it, so that a Python logging
 * timestamp, which is part of the line's text, is never taken for one.
 * Returns its length with the blank, 0 when absent; *nanos: more than
 * three fraction digits (kubectl's). */
static size_t head_timestamp(const char *p, const char *end, int64_t *ts,
                             bool *nanos)
{
        enum replay_clock kind;
        size_t n = 0;

        while (p + n < end && n < 40 && p[n] != ' ')
                n++;
        if (n < 20 || p + n == end || p[n] != ' ' || p[n - 1] != 'Z' ||
            p[10] != 'T' || !logmon__ts_datetime(p, p + n, ts, &kind))
                return 0;
        *nanos = n > 24;
        return n + 1;
}

/* srun --label's "0: ", right-aligned with blanks in a wide job.
 * Returns its length, 0 when absent; *at and *digits: the label. */
static size_t srun_label(const char *p, const char *end, size_t *at,
                         size_t *digits)
{
        size_t i = 0, d = 0;

        while (p + i < end && i < 8 && p[i] == ' ')
                i++;
        while (p + i + d < end && d < 8 && p[i + d] >= '0' && p[i + d] <= '9')
                d++;
        if (d == 0 || p + i + d + 1 >= end || p[i + d] != ':' ||
            p[i + d + 1] != ' ')
                return 0;
        *at = i;
        *digits = d;
        return i + d + 2;
}

static const char AGENT[] = "hyperpodrun[";

/* hyperpodrun's own "hyperpodrun[PID]: " at p: its length, or 0. */
static size_t agent_prefix(const char *p, const char *end)
{
        size_t n = sizeof(AGENT) - 1, d = 0;

        if ((size_t)(end - p) < n + 3 || memcmp(p, AGENT, n) != 0)
                return 0;
        while (p + n + d < end && p[n + d] >= '0' && p[n + d] <= '9')
                d++;
        if (d == 0 || p + n + d + 1 >= end || p[n + d] != ']' ||
            p[n + d + 1] != ':')
                return 0;
        return n + d + 2;
}

/* Up to two leading RFC 3339 times at p, the inner one the line's. */
static const char *head_timestamps(const struct logmon_replay *r,
                                   struct line_head *h, const char *p,
                                   const char *end)
{
        bool nanos;
        int64_t ts;
        size_t n;

        if (r->layout != LOGMON_LAYOUT_AUTO && !r->head_ts)
                return p;
        while (h->ts_count < 2) {
                n = head_timestamp(p, end, &ts, &nanos);
                if (n == 0)
                        break;
                h->have_ts = true;
                h->ts = ts;
                h->ts_count++;
                h->kubectl = h->kubectl || nanos;
                p += n;
        }
        return p;
}

/* Splits a line's head off. When the layout is undecided every part is
 * looked for, to count them; once it is, only the layout's. */
void logmon__parse_head(const struct logmon_replay *r, const char *line,
                        size_t len, struct line_head *h)
{
        const char *p = line, *end = line + len;
        bool undecided = r->layout == LOGMON_LAYOUT_AUTO;
        size_t n, at, digits;

        memset(h, 0, sizeof(*h));
        p = head_timestamps(r, h, p, end);
        if (undecided || r->layout == LOGMON_LAYOUT_SRUN) {
                n = srun_label(p, end, &at, &digits);
                if (n != 0) {
                        h->label = p + at;
                        h->label_len = digits;
                        p += n;
                        /* ${time} inside srun's label. */
                        p = head_timestamps(r, h, p, end);
                }
        }
        n = agent_prefix(p, end);
        if (n != 0) {
                h->agent = true;
        } else if (r->layout != LOGMON_LAYOUT_PLAIN &&
                   (n = console_prefix(p, (size_t)(end - p))) != 0) {
                h->name = p + 1;
                h->name_len = n - 3;
        }
        h->body = p + n;
        h->body_len = (size_t)(end - p) - n;
}

/* An ISO 8601 time after " at " in the agent's own line: its start and
 * verdict lines say when, on the wall clock, the live rules started and
 * judged. */
bool logmon__agent_time(const char *p, size_t len, int64_t *ts)
{
        enum replay_clock kind;
        size_t i;

        for (i = 0; i + 4 + 20 <= len; i++)
                if (memcmp(p + i, " at ", 4) == 0 && p[i + 4 + 10] == 'T' &&
                    logmon__ts_datetime(p + i + 4, p + len, ts, &kind))
                        return true;
        return false;
}
