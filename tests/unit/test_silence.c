/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the silence line of a hang report (src/forensics/silence.c):
 * which rank went quiet first, from last-output times and a given clock. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "hyperpod/forensics.h"

/* 2023-11-14 22:13:20.000 UTC, at loop time NOW. */
#define WALL 1700000000.0
#define NOW 100000

/* A live rank: its global and local rank, its last output. */
#define LIVE(r, ms, local)                                                   \
        {                                                                    \
                .rank = (r), .last_ms = (ms), .local_rank = (local)          \
        }
/* A rank that exited with code (or was killed by sig) at exit_at. */
#define GONE(r, ms, local, code, sig, exit_at)                               \
        {                                                                    \
                .rank = (r), .last_ms = (ms), .local_rank = (local),         \
                .exited = true, .exit_code = (code), .exit_signal = (sig),   \
                .exit_ms = (exit_at)                                         \
        }

struct silence_case {
        const char *name;
        struct hp_silence ranks[8];
        size_t count;
        const char *event;
        size_t len; /* of the buffer; 0: 512 */
        int result;
        const char *line;
};

static const struct silence_case cases[] = {
        { "one rank stopped a step before the others in a collective",
          { LIVE(0, 97000, 0), LIVE(1, 97000, 1), LIVE(2, 96700, 2),
            LIVE(3, 97004, 3) },
          4,
          "the verdict",
          0,
          0,
          "rank 2 silent since 22:13:16.700 (3.3 s before the verdict, 0.3 s "
          "before the others); ranks 0-1,3 silent since 22:13:17.000 "
          "(blocked in a collective?)" },
        { "the others spread out: their first and last times",
          { LIVE(0, 97000, 0), LIVE(1, 97100, 1), LIVE(2, 97200, 2),
            LIVE(3, 97300, 3), LIVE(4, 97400, 4), LIVE(5, 40000, 5),
            LIVE(6, 97500, 6), LIVE(7, 97000, 7) },
          8,
          "the verdict",
          0,
          0,
          "rank 5 silent since 22:12:20.000 (60.0 s before the verdict, 57.0 "
          "s before the others); ranks 0-4,6-7 silent since "
          "22:13:17.000-22:13:17.500 (blocked in a collective?)" },
        { "one other is just 'the other'",
          { LIVE(0, 99000, 0), LIVE(1, 90000, 1) },
          2,
          "the failure",
          0,
          0,
          "rank 1 silent since 22:13:10.000 (10.0 s before the failure, 9.0 s "
          "before the other); rank 0 silent since 22:13:19.000 (blocked in a "
          "collective?)" },
        { "the others still writing (a SLOW verdict)",
          { LIVE(0, 99990, 0), LIVE(1, 90000, 1), LIVE(2, 99960, 2) },
          3,
          "the verdict",
          0,
          0,
          "rank 1 silent since 22:13:10.000 (10.0 s before the verdict, 10.0 "
          "s before the others); ranks 0,2 still writing" },
        { "closer than HP_SILENCE_TIE_MS: none stopped first",
          { LIVE(3, 97010, 3), LIVE(1, 97000, 1), LIVE(0, 97049, 0),
            LIVE(2, 97020, 2) },
          4,
          "the verdict",
          0,
          0,
          "all 4 ranks 0-3 silent since 22:13:17.000 (3.0 s before the "
          "verdict; none stopped first)" },
        { "two together",
          { LIVE(4, 97000, 4), LIVE(6, 97000, 6) },
          2,
          "the request",
          0,
          0,
          "both ranks 4,6 silent since 22:13:17.000 (3.0 s before the "
          "request; none stopped first)" },
        { "all still writing",
          { LIVE(0, 99990, 0), LIVE(1, 99980, 1), LIVE(2, 100000, 2) },
          3,
          "the request",
          0,
          0,
          "all ranks 0-2 still writing" },
        { "a single rank",
          { LIVE(7, 97000, 7) },
          1,
          "the verdict",
          0,
          0,
          "rank 7 silent since 22:13:17.000 (3.0 s before the verdict)" },
        { "a time after now counts as now",
          { LIVE(0, NOW + 5000, 0), LIVE(1, 90000, 1) },
          2,
          "the verdict",
          0,
          0,
          "rank 1 silent since 22:13:10.000 (10.0 s before the verdict, 10.0 "
          "s before the other); rank 0 still writing" },
        { "ranges and single ranks in one list",
          { LIVE(1, 97000, 1), LIVE(3, 97000, 3), LIVE(5, 97000, 5),
            LIVE(6, 97000, 6), LIVE(7, 97000, 7), LIVE(0, 10000, 0) },
          6,
          "the verdict",
          0,
          0,
          "rank 0 silent since 22:11:50.000 (90.0 s before the verdict, 87.0 "
          "s before the others); ranks 1,3,5-7 silent since 22:13:17.000 "
          "(blocked in a collective?)" },
        { "nothing to compare",
          { LIVE(0, 0, 0) },
          0,
          "the verdict",
          0,
          0,
          "no rank to compare" },
        { "a buffer too small: cut, with a marker",
          { LIVE(0, 97000, 0), LIVE(1, 97000, 1), LIVE(2, 96700, 2),
            LIVE(3, 97000, 3) },
          4,
          "the verdict",
          40,
          -ENOSPC,
          "rank 2 silent since 22:13:16.700 (3...." },
        { "a rank that exited is named with how, not as silent; the live "
          "ones are compared",
          { LIVE(1, 97000, 1), GONE(0, 96000, 0, 1, 0, 96500),
            LIVE(2, 97000, 2), LIVE(3, 96700, 3) },
          4,
          "the failure",
          0,
          0,
          "rank 0 exited with code 1 at 22:13:16.500 (3.5 s before the "
          "failure); rank 3 silent since 22:13:16.700 (3.3 s before the "
          "failure, 0.3 s before the others); ranks 1-2 silent since "
          "22:13:17.000 (blocked in a collective?)" },
        { "ranks that exited, in the order they ended, and none live",
          { GONE(1, 90000, 1, 0, 9, 99000), GONE(0, 96000, 0, 2, 0, 98000) },
          2,
          "the failure",
          0,
          0,
          "rank 0 exited with code 2 at 22:13:18.000 (2.0 s before the "
          "failure); rank 1 killed by SIGKILL at 22:13:19.000 (1.0 s "
          "before the failure)" },
        { "global ranks not known yet (in-process restart before /start): "
          "local ranks",
          { LIVE(-2, 97000, 0), LIVE(-1, 90000, 1) },
          2,
          "the failure",
          0,
          0,
          "local rank 1 silent since 22:13:10.000 (10.0 s before the "
          "failure, 7.0 s before the other); local rank 0 silent since "
          "22:13:17.000 (blocked in a collective?)" },
};

static void test_silence_table(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const struct silence_case *c = &cases[i];
                struct hp_silence ranks[8];
                char buf[512];
                size_t len = c->len ? c->len : sizeof(buf);
                int r;

                memcpy(ranks, c->ranks, sizeof(ranks));
                memset(buf, 'x', sizeof(buf));
                r = hp_silence_format(ranks, c->count, NOW, WALL, c->event,
                                      buf, len);
                if (r != c->result || strcmp(buf, c->line) != 0) {
                        print_error("%s:\n  got  %d '%s'\n  want %d '%s'\n",
                                    c->name, r, buf, c->result, c->line);
                        failures++;
                }
                /* The ranks come back in order: those that exited as
                 * they ended, then the others as they went quiet. */
                for (size_t j = 1; j < c->count; j++)
                        if (ranks[j].exited > ranks[j - 1].exited ||
                            (ranks[j].exited &&
                             ranks[j].exit_ms < ranks[j - 1].exit_ms) ||
                            (!ranks[j].exited &&
                             ranks[j].last_ms < ranks[j - 1].last_ms)) {
                                print_error("%s: not sorted at %zu\n",
                                            c->name, j);
                                failures++;
                        }
        }
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_silence_table),
        };

        /* The line is in local time: make that UTC for the table. */
        setenv("TZ", "UTC", 1);
        tzset();
        return cmocka_run_group_tests(tests, NULL, NULL);
}
