/* SPDX-License-Identifier: Apache-2.0 */
/* The matcher on its own (src/logmon/matcher.c), with no rule around it: a
 * table of patterns and lines with the answer and the number group 1
 * captured, each case with JIT and without, with the pattern as written
 * only and with every form the matcher derives, the literal looked for
 * first and not. All of them must give the same answer. */
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

#define PROGRESS                                                             \
        "[Epoch 0 Batch 12] {'training_loss_step': 2.345, "                  \
        "'samples/sec': 95.5, 'lr': 0.0001}"
#define HANG                                                                 \
        ".*\\[Epoch 0 Batch \\d+.*'training_loss_step': (\\d+(\\.\\d+)?).*"
#define SLOW ".*\\[Epoch 0 Batch \\d+.*'samples\\/sec': (\\d+(\\.\\d+)?).*"

static const struct match_case {
        const char *pattern;
        const char *line;
        int match;    /* 1 or 0 */
        bool numeric; /* group 1 read as a number */
        double number;
} cases[] = {
        { ".*Experiment configuration.*", "x Experiment configuration: y", 1,
          false, 0 },
        { ".*Experiment configuration.*", "Experiment config", 0, false, 0 },
        { HANG, PROGRESS, 1, true, 2.345 },
        { SLOW, PROGRESS, 1, true, 95.5 },
        { HANG, "[Epoch 0 Batch x] 'training_loss_step': 2", 0, false, 0 },
        /* The leading ".*" is greedy: the last occurrence decides. */
        { ".*x=(\\d+).*", "x=1 x=2 y", 1, true, 2 },
        { ".*loss=(\\d+).*", "loss=abc", 0, false, 0 },
        /* A match whose group is no number. */
        { ".*loss=(\\S+).*", "loss=abc", 1, false, 0 },
        { ".*loss=(\\S+).*", "loss=1_000", 1, true, 1000 },
        /* A group that took no part is no number either. */
        { ".*step(?: (\\d+))?.*", "step", 1, false, 0 },
        { ".*step(?: (\\d+))?.*", "step 7", 1, true, 7 },
        /* Invalid UTF-8 is matched as U+FFFD; the number still counts. */
        { ".*loss=(\\d+).*", "\xff\xfe loss=12", 1, true, 12 },
        { ".*a.b.*",
          "a\xff"
          "b",
          1, false, 0 },
        { ".*\xc3\xa9=(\\d+).*", "\xc3\xa9=5", 1, true, 5 },
        /* "." stops at \n: a line that holds one is matched as written. */
        { ".*a.*b.*", "a\nb", 0, false, 0 },
        { ".*a.*b.*", "ab\nx", 1, false, 0 },
        /* Anchored at the start, as the reference's re.match. */
        { "ERROR.*", "ERROR: disk", 1, false, 0 },
        { "ERROR.*", " ERROR: disk", 0, false, 0 },
        { ".*(?:NCCL|nccl) (error|timeout).*", "NCCL timeout", 1, false, 0 },
        { ".*ab|cd.*", "cd", 1, false, 0 },
        { "", "anything", 1, false, 0 },
};

static int run_case(const struct match_case *c, bool jit, bool full_only,
                    bool likely, double *number, bool *numeric)
{
        struct logmon_regex p = { 0 };
        struct logmon_regex *list[] = { &p };
        struct logmon_regex_error err;
        struct logmon_head_memo memo[1];
        struct logmon_matcher m;
        pcre2_match_context *limits;
        bool jit_ok = jit;
        const char *subject;
        locale_t loc;
        size_t slen;
        int rc;

        assert_int_equal(logmon__regex_compile(&p, c->pattern, jit, full_only,
                                               &jit_ok, &err),
                         0);
        assert_int_equal(logmon__regex_share_heads(list, 1), 0);
        limits = logmon__match_limits_new(LOGMON_MATCH_LIMIT,
                                          LOGMON_DEPTH_LIMIT);
        assert_non_null(limits);
        loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        assert_true(loc != (locale_t)0);
        memset(memo, 0, sizeof(memo));
        assert_int_equal(logmon__matcher_init(&m, limits,
                                              logmon__regex_groups(&p) + 1,
                                              jit_ok, loc, memo),
                         0);
        subject = logmon__matcher_line(&m, c->line, strlen(c->line), &slen);
        rc = logmon__match(&m, &p, true, likely, subject, slen);
        *numeric = rc > 0 && logmon__regex_groups(&p) > 0 &&
                   logmon__match_number(&m, subject, number);
        logmon__matcher_fini(&m);
        logmon__match_limits_free(limits);
        freelocale(loc);
        logmon__regex_free(&p);
        return rc;
}

static void test_cases(void **state)
{
        size_t i, k;

        (void)state;
        for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                for (k = 0; k < 8; k++) {
                        const struct match_case *c = &cases[i];
                        bool jit = k & 1, full_only = k & 2, likely = k & 4;
                        double number = NAN;
                        bool numeric;
                        int rc;

                        rc = run_case(c, jit, full_only, likely, &number,
                                      &numeric);
                        if (rc != c->match || numeric != c->numeric ||
                            (numeric && number != c->number))
                                fail_msg("case %zu (%s on \"%s\"), %s%s%s: "
                                         "got %d, number %s %g; want %d, "
                                         "%s %g",
                                         i, c->pattern, c->line,
                                         jit ? "jit" : "interpreter",
                                         full_only ? ", full only" : "",
                                         likely ? ", likely" : "", rc,
                                         numeric ? "yes" : "no", number,
                                         c->match, c->numeric ? "yes" : "no",
                                         c->number);
                }
        }
}

/* Two patterns with the same head (the AWS progress rules) share it: the
 * second is answered from what the first found on the same line, and a
 * new line is looked at afresh. */
static void test_shared_head(void **state)
{
        struct logmon_regex hang = { 0 }, slow = { 0 };
        struct logmon_regex *list[] = { &hang, &slow };
        struct logmon_regex_error err;
        struct logmon_head_memo memo[1];
        struct logmon_matcher m;
        pcre2_match_context *limits;
        static const char other[] = "[Epoch 0 Batch 13] 'samples/sec': 7";
        bool jit_ok = true;
        const char *subject;
        locale_t loc;
        double v;
        size_t slen;

        (void)state;
        assert_int_equal(logmon__regex_compile(&hang, HANG, true, false,
                                               &jit_ok, &err),
                         0);
        assert_int_equal(logmon__regex_compile(&slow, SLOW, true, false,
                                               &jit_ok, &err),
                         0);
        assert_int_equal(logmon__regex_share_heads(list, 2), 1);
        assert_int_equal(hang.head_id, 0);
        assert_int_equal(slow.head_id, 0);
        limits = logmon__match_limits_new(LOGMON_MATCH_LIMIT,
                                          LOGMON_DEPTH_LIMIT);
        loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        memset(memo, 0, sizeof(memo));
        assert_int_equal(logmon__matcher_init(&m, limits, 3, jit_ok, loc,
                                              memo),
                         0);

        subject = logmon__matcher_line(&m, PROGRESS, strlen(PROGRESS), &slen);
        assert_int_equal(logmon__match(&m, &hang, true, false, subject, slen),
                         1);
        assert_true(logmon__match_number(&m, subject, &v));
        assert_true(v == 2.345);
        assert_int_equal(logmon__match(&m, &slow, true, false, subject, slen),
                         1);
        assert_true(logmon__match_number(&m, subject, &v));
        assert_true(v == 95.5);

        subject = logmon__matcher_line(&m, other, strlen(other), &slen);
        assert_int_equal(logmon__match(&m, &hang, true, false, subject, slen),
                         0);
        assert_int_equal(logmon__match(&m, &slow, true, false, subject, slen),
                         1);
        assert_true(logmon__match_number(&m, subject, &v));
        assert_true(v == 7);

        logmon__matcher_fini(&m);
        logmon__match_limits_free(limits);
        freelocale(loc);
        logmon__regex_free(&hang);
        logmon__regex_free(&slow);
}

/* A pattern PCRE2 refuses says why and where; a runaway one gives up at
 * the limit with -1, not with an answer. */
static void test_error_and_limit(void **state)
{
        struct logmon_regex p = { 0 };
        struct logmon_regex_error err;
        struct logmon_head_memo memo[1];
        struct logmon_matcher m;
        pcre2_match_context *limits;
        /* The b is there, so that PCRE2 cannot turn the line down before
         * it backtracks. */
        static const char line[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaacb";
        bool jit_ok = true;
        const char *subject;
        locale_t loc;
        size_t slen;
        int jit;

        (void)state;
        assert_int_equal(logmon__regex_compile(&p, ".*(loss", true, false,
                                               &jit_ok, &err),
                         HP_ECONFIG);
        assert_string_equal(err.msg, "missing closing parenthesis");
        assert_int_equal(err.offset, 7);
        logmon__regex_free(&p);

        for (jit = 0; jit < 2; jit++) {
                memset(&p, 0, sizeof(p));
                jit_ok = jit;
                assert_int_equal(logmon__regex_compile(&p, "(a+)+b", jit,
                                                       false, &jit_ok, &err),
                                 0);
                limits = logmon__match_limits_new(1000, 1000);
                loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
                assert_int_equal(logmon__matcher_init(&m, limits, 2, jit_ok,
                                                      loc, memo),
                                 0);
                subject = logmon__matcher_line(&m, line, strlen(line), &slen);
                assert_int_equal(logmon__match(&m, &p, false, false, subject,
                                               slen),
                                 -1);
                logmon__matcher_fini(&m);
                logmon__match_limits_free(limits);
                freelocale(loc);
                logmon__regex_free(&p);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cases),
                cmocka_unit_test(test_shared_head),
                cmocka_unit_test(test_error_and_limit),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
