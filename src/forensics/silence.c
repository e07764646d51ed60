/* SPDX-License-Identifier: Apache-2.0 */
/* The silence line of a hang report: which rank stopped writing first, and
 * when the others followed. Pure: the times and the clock are arguments. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hyperpod/common.h"
#include "hyperpod/forensics.h"

static int by_time(const void *pa, const void *pb)
{
        const struct hp_silence *a = pa, *b = pb;

        if (a->last_ms != b->last_ms)
                return a->last_ms < b->last_ms ? -1 : 1;
        return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static int by_rank(const void *pa, const void *pb)
{
        const int *a = pa, *b = pb;

        return *a < *b ? -1 : *a > *b;
}

/* Appends to buf at *at; on overflow the line ends in "..." and the
 * result is -ENOSPC, which later calls keep. */
__attribute__((format(printf, 5, 6))) static int
put(char *buf, size_t len, size_t *at, int r, const char *fmt, ...)
{
        va_list ap;
        int n;

        if (r < 0)
                return r;
        va_start(ap, fmt);
        n = vsnprintf(buf + *at, len - *at, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= len - *at) {
                if (len >= 4)
                        memcpy(buf + len - 4, "...", 4);
                *at = len - 1;
                return -ENOSPC;
        }
        *at += (size_t)n;
        return 0;
}

/* "rank 3" or "ranks 0-2,4-7" for the ranks of ranks[0..n); "local
 * rank 1" and so on with local. */
static int put_ranks(char *buf, size_t len, size_t *at, int r,
                     const struct hp_silence *ranks, size_t n, bool local)
{
        int *sorted = malloc(n * sizeof(*sorted));

        if (sorted == NULL)
                return put(buf, len, at, r, "%zu ranks", n);
        for (size_t i = 0; i < n; i++)
                sorted[i] = local ? ranks[i].local_rank : ranks[i].rank;
        qsort(sorted, n, sizeof(*sorted), by_rank);
        if (local)
                r = put(buf, len, at, r, "local ");
        r = put(buf, len, at, r, n == 1 ? "rank " : "ranks ");
        for (size_t i = 0; i < n;) {
                size_t j = i;
                while (j + 1 < n && sorted[j + 1] == sorted[j] + 1)
                        j++;
                r = put(buf, len, at, r, "%s%d", i ? "," : "", sorted[i]);
                if (j > i)
                        r = put(buf, len, at, r, "-%d", sorted[j]);
                i = j + 1;
        }
        free(sorted);
        return r;
}

/* "10:42:01.120", local time, for the loop time t. */
static int put_time(char *buf, size_t len, size_t *at, int r, uint64_t t,
                    uint64_t now_ms, double now_wall)
{
        double wall = now_wall - (double)(now_ms - t) / 1000.0;
        time_t secs = (time_t)wall;
        int ms = (int)((wall - (double)secs) * 1000.0);
        struct tm tm;

        if (ms > 999)
                ms = 999;
        if (localtime_r(&secs, &tm) == NULL)
                return put(buf, len, at, r, "?");
        return put(buf, len, at, r, "%02d:%02d:%02d.%03d", tm.tm_hour,
                   tm.tm_min, tm.tm_sec, ms);
}

/* Exited ranks first, in the order they ended. */
static int by_exit(const void *pa, const void *pb)
{
        const struct hp_silence *a = pa, *b = pb;

        if (a->exited != b->exited)
                return a->exited ? -1 : 1;
        if (a->exited && a->exit_ms != b->exit_ms)
                return a->exit_ms < b->exit_ms ? -1 : 1;
        return by_time(pa, pb);
}

/* "rank 0 exited with code 1 at 10:41:59.002 (65.3 s before the
 * verdict)" for each exited rank of ranks[0..n). */
static int put_exited(char *buf, size_t len, size_t *at, int r,
                      const struct hp_silence *ranks, size_t n, bool local,
                      uint64_t now_ms, double now_wall, const char *event)
{
        for (size_t i = 0; i < n; i++) {
                const struct hp_silence *x = &ranks[i];

                if (i > 0)
                        r = put(buf, len, at, r, "; ");
                r = put_ranks(buf, len, at, r, x, 1, local);
                if (x->exit_signal > 0)
                        r = put(buf, len, at, r, " killed by %s at ",
                                hp_signal_name(x->exit_signal));
                else
                        r = put(buf, len, at, r, " exited with code %d at ",
                                x->exit_code);
                r = put_time(buf, len, at, r, x->exit_ms, now_ms, now_wall);
                r = put(buf, len, at, r, " (%.1f s before %s)",
                        (double)(now_ms - x->exit_ms) / 1000.0, event);
        }
        return r;
}

/* The live ranks, sorted by their last output: which went quiet first. */
static int put_live(char *buf, size_t len, size_t *at, int r,
                    struct hp_silence *ranks, size_t count, bool local,
                    uint64_t now_ms, double now_wall, const char *event)
{
        if (count == 1 ||
            ranks[1].last_ms - ranks[0].last_ms >= HP_SILENCE_TIE_MS) {
                /* One rank went quiet before all the others. */
                r = put_ranks(buf, len, at, r, ranks, 1, local);
                r = put(buf, len, at, r, " silent since ");
                r = put_time(buf, len, at, r, ranks[0].last_ms, now_ms,
                             now_wall);
                r = put(buf, len, at, r, " (%.1f s before %s",
                        (double)(now_ms - ranks[0].last_ms) / 1000.0, event);
                if (count > 1)
                        r = put(buf, len, at, r, ", %.1f s before the %s",
                                (double)(ranks[1].last_ms -
                                         ranks[0].last_ms) /
                                        1000.0,
                                count == 2 ? "other" : "others");
                r = put(buf, len, at, r, ")");
                if (count == 1)
                        return r;
                r = put(buf, len, at, r, "; ");
                r = put_ranks(buf, len, at, r, ranks + 1, count - 1, local);
                if (now_ms - ranks[count - 1].last_ms < HP_SILENCE_TIE_MS) {
                        r = put(buf, len, at, r, " still writing");
                        return r;
                }
                r = put(buf, len, at, r, " silent since ");
                r = put_time(buf, len, at, r, ranks[1].last_ms, now_ms,
                             now_wall);
                if (ranks[count - 1].last_ms - ranks[1].last_ms >=
                    HP_SILENCE_TIE_MS) {
                        r = put(buf, len, at, r, "-");
                        r = put_time(buf, len, at, r,
                                     ranks[count - 1].last_ms, now_ms,
                                     now_wall);
                }
                return put(buf, len, at, r, " (blocked in a collective?)");
        }
        /* No rank stopped first: they went quiet together, or none did. */
        if (now_ms - ranks[0].last_ms < HP_SILENCE_TIE_MS) {
                r = put(buf, len, at, r, count == 2 ? "both " : "all ");
                r = put_ranks(buf, len, at, r, ranks, count, local);
                return put(buf, len, at, r, " still writing");
        }
        if (count == 2)
                r = put(buf, len, at, r, "both ");
        else
                r = put(buf, len, at, r, "all %zu ", count);
        r = put_ranks(buf, len, at, r, ranks, count, local);
        r = put(buf, len, at, r, " silent since ");
        r = put_time(buf, len, at, r, ranks[0].last_ms, now_ms, now_wall);
        return put(buf, len, at, r, " (%.1f s before %s; none stopped first)",
                   (double)(now_ms - ranks[0].last_ms) / 1000.0, event);
}

int hp_silence_format(struct hp_silence *ranks, size_t count, uint64_t now_ms,
                      double now_wall, const char *event, char *buf,
                      size_t len)
{
        size_t at = 0, exited = 0;
        int r = 0;
        bool local = false;

        if (len == 0)
                return -ENOSPC;
        buf[0] = '\0';
        if (count == 0)
                return put(buf, len, &at, r, "no rank to compare");
        /* Global ranks the agent does not know yet (in-process restart
         * before /start): the line names local ranks. */
        for (size_t i = 0; i < count; i++) {
                if (ranks[i].rank < 0)
                        local = true;
                if (ranks[i].last_ms > now_ms)
                        ranks[i].last_ms = now_ms;
                if (ranks[i].exit_ms > now_ms)
                        ranks[i].exit_ms = now_ms;
                exited += ranks[i].exited;
        }
        qsort(ranks, count, sizeof(*ranks), by_exit);
        r = put_exited(buf, len, &at, r, ranks, exited, local, now_ms,
                       now_wall, event);
        if (exited == count)
                return r;
        if (exited > 0)
                r = put(buf, len, &at, r, "; ");
        return put_live(buf, len, &at, r, ranks + exited, count - exited,
                        local, now_ms, now_wall, event);
}
