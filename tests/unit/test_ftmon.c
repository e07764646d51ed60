/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the rank monitor's pure parts (src/ftmon/judge.c): a
 * rank's deadlines at a given now, and the straggler windows; plus the
 * verdict's reason codes and wording (src/supervise/verdict.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/ftmon.h"
#include "hyperpod/supervise.h"
#include "table.h"

#define NEVER UINT64_MAX

struct judge_case {
        const char *name;
        struct hp_ft_timeouts t;
        int nsections;
        struct hp_ft_view v;
        uint64_t now;
        enum hp_ft_miss miss;
        int section;
        uint64_t deadline; /* of the miss */
        uint64_t next;     /* when no miss: when to look again */
};

static const struct judge_case judge_cases[] = {
        { "not initialized: nothing to judge",
          .t = { .initial_ms = 100, .subsequent_ms = 10 }, .v = { 0 },
          .now = 5000, .next = NEVER },
        { "no timeout set: never looks", .v = { .init_ms = 1000 },
          .now = 5000, .next = NEVER },
        { "initial heartbeat due at init + initial",
          .t = { .initial_ms = 100, .subsequent_ms = 10 },
          .v = { .init_ms = 1000 }, .now = 1050,
          /* The subsequent timeout is shorter: after a first beat at
           * 1051 the deadline is 1061, so look at 1060. */
          .next = 1060 },
        { "initial heartbeat missed at the deadline, to the ms",
          .t = { .initial_ms = 100 }, .v = { .init_ms = 1000 }, .now = 1100,
          .miss = HP_FT_MISS_INITIAL, .deadline = 1100 },
        { "a millisecond before the deadline is not a miss",
          .t = { .initial_ms = 100 }, .v = { .init_ms = 1000 }, .now = 1099,
          .next = 1100 },
        { "heartbeat: the latest counts",
          .t = { .initial_ms = 100, .subsequent_ms = 50 },
          .v = { .init_ms = 1000, .hb_count = 3, .hb_ms = 1200 }, .now = 1220,
          .next = 1250 },
        { "heartbeat missed", .t = { .initial_ms = 100, .subsequent_ms = 50 },
          .v = { .init_ms = 1000, .hb_count = 3, .hb_ms = 1200 }, .now = 1260,
          .miss = HP_FT_MISS_HEARTBEAT, .deadline = 1250 },
        { "initial unset: no first-beat deadline, subsequent after one",
          .t = { .subsequent_ms = 50 }, .v = { .init_ms = 1000 }, .now = 9000,
          .next = 9050 },
        { "open section with a timeout", .t = { .section_ms = { 0, 300 } },
          .nsections = 2, .v = { .init_ms = 1000, .section_ms = { 0, 1100 } },
          .now = 1200, .next = 1400 },
        { "open section overran: names it", .t = { .section_ms = { 0, 300 } },
          .nsections = 2, .v = { .init_ms = 1000, .section_ms = { 0, 1100 } },
          .now = 1400, .miss = HP_FT_MISS_SECTION, .section = 1,
          .deadline = 1400 },
        { "closed sections: look before one could open and overrun",
          .t = { .section_ms = { 500, 300 } }, .nsections = 2,
          .v = { .init_ms = 1000, .oos_ms = 1000 }, .now = 2000,
          .next = 2300 },
        { "out of section counts from the last close",
          .t = { .oos_ms = 200, .section_ms = { 500 } }, .nsections = 1,
          .v = { .init_ms = 1000, .oos_ms = 1500 }, .now = 1600,
          .next = 1700 },
        { "out of section missed",
          .t = { .oos_ms = 200, .section_ms = { 500 } }, .nsections = 1,
          .v = { .init_ms = 1000, .oos_ms = 1500 }, .now = 1700,
          .miss = HP_FT_MISS_OUT_OF_SECTION, .deadline = 1700 },
        { "out of section not judged while a section is open",
          .t = { .oos_ms = 200, .section_ms = { 0, 900 } }, .nsections = 2,
          .v = { .init_ms = 1000, .section_ms = { 0, 1500 } }, .now = 2300,
          .next = 2400 },
        { "a section without a timeout never overruns",
          .t = { .section_ms = { 0 } }, .nsections = 1,
          .v = { .init_ms = 1000, .section_ms = { 1001 } }, .now = 99999,
          .next = NEVER },
        { "two passed: the earlier deadline is reported",
          .t = { .subsequent_ms = 100, .section_ms = { 50 } }, .nsections = 1,
          .v = { .init_ms = 1000,
                 .hb_count = 1,
                 .hb_ms = 1000,
                 .section_ms = { 1020 } },
          .now = 5000, .miss = HP_FT_MISS_SECTION, .section = 0,
          .deadline = 1070 },
        { "sections past nsections are not read",
          .t = { .section_ms = { 0, 10 } }, .nsections = 1,
          .v = { .init_ms = 1000, .section_ms = { 0, 1000 } }, .now = 5000,
          .next = NEVER },
};

static void test_judge(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(judge_cases) / sizeof(judge_cases[0]);
             i++) {
                const struct judge_case *c = &judge_cases[i];
                struct hp_ft_judgement j;
                uint64_t next = hp_ft_judge(&c->t, c->nsections, &c->v,
                                            c->now, &j);

                if (j.miss != c->miss)
                        CASE_FAILED(failures, "%s: miss %s, expected %s",
                                    c->name, hp_ft_miss_name(j.miss),
                                    hp_ft_miss_name(c->miss));
                else if (c->miss != HP_FT_OK &&
                         (next != NEVER || j.deadline_ms != c->deadline ||
                          (c->miss == HP_FT_MISS_SECTION &&
                           j.section != c->section)))
                        CASE_FAILED(failures,
                                    "%s: deadline %llu section %d next %llu",
                                    c->name,
                                    (unsigned long long)j.deadline_ms,
                                    j.section, (unsigned long long)next);
                else if (c->miss == HP_FT_OK && next != c->next)
                        CASE_FAILED(failures, "%s: next %llu, expected %llu",
                                    c->name, (unsigned long long)next,
                                    (unsigned long long)c->next);
        }
        assert_int_equal(failures, 0);
}

#define N HP_FT_NO_COUNT

/* Windows of counts for 4 ranks; what each window flags. */
struct straggler_case {
        const char *name;
        double ratio;
        int windows;
        int nwin;
        uint64_t counts[6][4];
        int first[6];  /* the window's result */
        double speed3; /* rank 3's speed after the last window */
};

static const struct straggler_case straggler_cases[] = {
        { "a quarter-rate rank, 2 windows below 0.5: flagged once",
          0.5,
          2,
          5,
          { { 0, 0, 0, 0 },
            { 40, 40, 40, 10 },
            { 80, 80, 80, 20 },
            { 120, 120, 120, 30 },
            { 160, 160, 160, 40 } },
          { -1, -1, 3, -1, -1 },
          0.25 },
        { "recovers, then slows again: flagged again",
          0.5,
          1,
          5,
          { { 0, 0, 0, 0 },
            { 40, 40, 40, 10 },
            { 80, 80, 80, 50 },
            { 120, 120, 120, 60 },
            { 160, 160, 160, 70 } },
          { -1, 3, -1, 3, -1 },
          0.25 },
        { "ratio 0: speeds only",
          0.0,
          1,
          3,
          { { 0, 0, 0, 0 }, { 40, 40, 40, 10 }, { 80, 80, 80, 20 } },
          { -1, -1, -1 },
          0.25 },
        { "nobody moved: a hang, not a straggler",
          0.5,
          1,
          3,
          { { 5, 5, 5, 5 }, { 5, 5, 5, 5 }, { 5, 5, 5, 5 } },
          { -1, -1, -1 },
          -1.0 },
        { "a rank that does not report is left out of the median",
          0.5,
          1,
          3,
          { { 0, 0, N, 0 }, { 40, 40, N, 40 }, { 80, 80, N, 50 } },
          { -1, -1, 3 },
          0.25 },
        { "a count that went back (a new client) starts over",
          0.5,
          1,
          3,
          { { 0, 0, 0, 100 }, { 40, 40, 40, 2 }, { 80, 80, 80, 42 } },
          { -1, -1, -1 },
          1.0 },
        { "below for fewer windows than asked: nothing",
          0.5,
          3,
          4,
          { { 0, 0, 0, 0 },
            { 40, 40, 40, 10 },
            { 80, 80, 80, 20 },
            { 120, 120, 120, 60 } },
          { -1, -1, -1, -1 },
          1.0 },
};

static void test_stragglers(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0;
             i < sizeof(straggler_cases) / sizeof(straggler_cases[0]); i++) {
                const struct straggler_case *c = &straggler_cases[i];
                struct hp_ft_stragglers s;
                bool newly[4];

                assert_int_equal(hp_ft_stragglers_init(&s, 4, c->ratio,
                                                       c->windows),
                                 0);
                for (int w = 0; w < c->nwin; w++) {
                        int first = hp_ft_stragglers_window(
                                &s, c->counts[w], 1000 * (uint64_t)(w + 1),
                                newly);
                        if (first != c->first[w])
                                CASE_FAILED(failures,
                                            "%s: window %d flagged %d, "
                                            "expected %d",
                                            c->name, w, first, c->first[w]);
                }
                if (s.speed[3] < c->speed3 - 1e-9 ||
                    s.speed[3] > c->speed3 + 1e-9)
                        CASE_FAILED(failures, "%s: speed %g, expected %g",
                                    c->name, s.speed[3], c->speed3);
                hp_ft_stragglers_free(&s);
        }
        assert_int_equal(failures, 0);
}

static void test_reasons(void **state)
{
        static const struct {
                enum hp_verdict_kind kind;
                const char *rule;
                const char *reason;
                const char *words;
        } cases[] = {
                { HP_VERDICT_HEARTBEAT, "heartbeat", "RankHeartbeatTimeout",
                  "Local rank 2 (rank 10) sent no heartbeat for 1.500 s" },
                { HP_VERDICT_INITIAL_HEARTBEAT, "initial heartbeat",
                  "RankInitialHeartbeatTimeout",
                  "Local rank 2 (rank 10) sent no first heartbeat" },
                { HP_VERDICT_SECTION, "step", "RankSectionTimeout_step",
                  "Section step of local rank 2 (rank 10) was open for "
                  "1.500 s" },
                { HP_VERDICT_OUT_OF_SECTION, "out-of-section",
                  "RankOutOfSectionTimeout",
                  "Local rank 2 (rank 10) opened no section for 1.500 s" },
                { HP_VERDICT_STRAGGLER, "straggler", "RankStraggler",
                  "Local rank 2 (rank 10) is a straggler: 0.25 of the "
                  "median" },
        };
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct hp_verdict v = { .state = LOGMON_HANGING,
                                        .kind = cases[i].kind,
                                        .local_rank = 2,
                                        .rank = 10,
                                        .timeout_ms = 1500,
                                        .speed = 0.25 };
                char reason[HP_VERDICT_REASON_MAX], words[512];

                snprintf(v.rule, sizeof(v.rule), "%s", cases[i].rule);
                if (hp_verdict_reason(&v, reason, sizeof(reason)) < 0 ||
                    strcmp(reason, cases[i].reason) != 0)
                        CASE_FAILED(failures, "reason %s, expected %s",
                                    reason, cases[i].reason);
                if (hp_verdict_describe(&v, words, sizeof(words)) < 0 ||
                    strncmp(words, cases[i].words, strlen(cases[i].words)) !=
                            0)
                        CASE_FAILED(failures, "words '%s', expected '%s...'",
                                    words, cases[i].words);
        }
        /* No verdict: no code. */
        {
                struct hp_verdict none = { .kind = HP_VERDICT_HEARTBEAT };
                char buf[64];

                if (hp_verdict_reason(&none, buf, sizeof(buf)) != -22)
                        CASE_FAILED(failures, "a WAITING verdict has a code");
        }
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_judge),
                cmocka_unit_test(test_stragglers),
                cmocka_unit_test(test_reasons),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
