/* SPDX-License-Identifier: Apache-2.0 */
/* What the engine reads from a pattern's text (src/logmon/pattern.c): the
 * literal every match holds and the cut of a rest form around its first
 * ".*". A table of patterns with the answers a reader of PCRE2's syntax
 * gives, then generated patterns and lines: whenever PCRE2 says a line
 * matches, the line holds the literal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "logmon-private.h"

static void test_required_literal(void **state)
{
        static const struct {
                const char *pattern;
                const char *literal; /* "" for none */
        } cases[] = {
                { ".*Experiment configuration.*",
                  "Experiment configuration" },
                /* "." is any character: the longest run either side. */
                { ".*The checkpoint is finalized. All shards is written.*",
                  "The checkpoint is finalized" },
                { ".*\\[Epoch 0 Batch \\d+.*'training_loss_step': "
                  "(\\d+(\\.\\d+)?).*",
                  "'training_loss_step': " },
                /* Escaped punctuation is itself; the first of two runs
                 * of the same length wins. */
                { ".*\\[E\\] \\$(\\d+).*", "[E] $" },
                { ".*ab.*cd.*", "ab" },
                /* A quantified character is not part of a run, whatever
                 * the quantifier. */
                { ".*abc?de.*", "ab" },
                { ".*abc*de.*", "ab" },
                { ".*abc+de.*", "ab" },
                { ".*abc{2}de.*", "ab" },
                { ".*abc{2,}de.*", "ab" },
                { ".*abc{2,3}?de.*", "ab" },
                { ".*abc??def.*", "def" },
                /* Groups and classes are single items whose inside is
                 * not read, quantified or not. */
                { ".*(abcdef)?x.*", "x" },
                { ".*(?:abcdef)x.*", "x" },
                { ".*[abcdef]x.*", "x" },
                { ".*[]abcdef]x.*", "x" },
                { ".*[^]abcdef]x.*", "x" },
                { ".*[[:alpha:]]xy.*", "xy" },
                { ".*[\\]abcdef]x.*", "x" },
                { ".*(a[)]bcd)x.*", "x" },
                { ".*\\d\\w\\s\\bxy.*", "xy" },
                /* Anything the reader is unsure of: no literal at all. */
                { ".*{'k': (\\d+).*", "" },
                { ".*a{,3}bcd.*", "" },
                { ".*ab{ 1}cd.*", "" },
                { ".*\\x41bcd.*", "" },
                { ".*\\p{Lu}bcd.*", "" },
                { ".*(a)\\1bcd.*", "" },
                { ".*\\Nbcd.*", "" },
                { ".*ab]cd.*", "" },
                { ".*ab}cd.*", "" },
                { ".*ab(cd.*", "" },
                { ".*[abcd.*", "" },
                { ".*ab\\", "" },
                /* A character outside ASCII ends a run. */
                { ".*ab\xc3\xa9xyz.*", "xyz" },
                { ".*", "" },
                { "", "" },
        };
        char out[LOGMON_LITERAL_MAX];
        size_t i, n;

        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                n = logmon__required_literal(cases[i].pattern,
                                             strlen(cases[i].pattern), out,
                                             sizeof(out));
                if (n != strlen(cases[i].literal) ||
                    memcmp(out, cases[i].literal, n) != 0)
                        fail_msg("%s: got \"%.*s\", want \"%s\"",
                                 cases[i].pattern, (int)n, out,
                                 cases[i].literal);
        }
}

static void test_long_literal_is_cut(void **state)
{
        const char *pattern = ".*0123456789abcdefghijklmnopqrstuvwxyz.*";
        char out[LOGMON_LITERAL_MAX];
        size_t n;

        n = logmon__required_literal(pattern, strlen(pattern), out,
                                     sizeof(out));
        assert_int_equal(n, LOGMON_LITERAL_MAX);
        assert_memory_equal(out, pattern + 2, LOGMON_LITERAL_MAX);
        /* A shorter run counts by its whole length, not its kept part. */
        pattern = ".*a.*0123456789abcdefghijklmnopqrstuvwxyz.*bcdef.*";
        n = logmon__required_literal(pattern, strlen(pattern), out, 4);
        assert_int_equal(n, 4);
        assert_memory_equal(out, "0123", 4);
}

static void test_split_rest(void **state)
{
        static const struct {
                const char *rest;
                const char *head; /* NULL: no split */
                const char *tail;
                const char *literal;
        } cases[] = {
                { "\\[Epoch 0 Batch \\d+.*'samples\\/sec': (\\d+(\\.\\d+)?)",
                  "\\[Epoch 0 Batch \\d+",
                  "'samples\\/sec': (\\d+(\\.\\d+)?)", "'samples/sec': " },
                /* The first ".*" cuts; a later one stays in the tail. */
                { "a\\d+.*x=(\\d).*y", "a\\d+", "x=(\\d).*y", "x=" },
                /* The tail's literal stops before a quantified one. */
                { "ab.*xyz?(\\d)", "ab", "xyz?(\\d)", "xy" },
                { "a[.]*.*b(\\d)", "a[.]*", "b(\\d)", "b" },
                /* No cut: a group in the head, no literal after the ".*",
                 * a lazy or possessive ".*", or no ".*" at all. */
                { "(a).*b(\\d)", NULL, NULL, NULL },
                { "a.*(b)", NULL, NULL, NULL },
                { "a.*\\db", NULL, NULL, NULL },
                { "a.*?b(\\d)", NULL, NULL, NULL },
                { "a.*+b(\\d)", NULL, NULL, NULL },
                { "a.+b(\\d)", NULL, NULL, NULL },
                { "a\\.*b(\\d)", NULL, NULL, NULL },
                { "ab(\\d)", NULL, NULL, NULL },
                { "a.*", NULL, NULL, NULL },
                { "a.*b?", NULL, NULL, NULL },
                { "a{,2}.*b", NULL, NULL, NULL },
        };
        struct logmon_split split;
        size_t i;
        bool cut;

        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *rest = cases[i].rest;

                cut = logmon__split_rest(rest, strlen(rest), &split);
                if (cases[i].head == NULL) {
                        if (cut)
                                fail_msg("%s: cut after %zu bytes", rest,
                                         split.head_len);
                        continue;
                }
                if (!cut)
                        fail_msg("%s: not cut", rest);
                if (split.head_len != strlen(cases[i].head) ||
                    strncmp(rest, cases[i].head, split.head_len) != 0 ||
                    strcmp(rest + split.tail_at, cases[i].tail) != 0 ||
                    split.literal_len != strlen(cases[i].literal) ||
                    memcmp(split.literal, cases[i].literal,
                           split.literal_len) != 0)
                        fail_msg("%s: head \"%.*s\" tail \"%s\" literal "
                                 "\"%.*s\"",
                                 rest, (int)split.head_len, rest,
                                 rest + split.tail_at, (int)split.literal_len,
                                 split.literal);
        }
}

static uint64_t next_random(uint64_t *x)
{
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

/* Patterns made of pieces over a three-letter alphabet, and lines over
 * the same letters, so that matches are frequent: each line PCRE2
 * matches must hold the pattern's literal. */
static void test_generated(void **state)
{
        static const char *const pieces[] = {
                "a",    "b",    "c",      "ab",      "a?",        "b*",
                "c+",   "a{2}", "b{1,2}", ".",       ".*",        ".+?",
                "[ab]", "[^c]", "(a|b)",  "(?:ab)?", "(c)",       "\\.",
                "\\d",  "\\bc", "b??",    "c*+",     "(?:a|bc)+",
        };
        char pattern[128], line[24], literal[LOGMON_LITERAL_MAX];
        pcre2_match_data *md = pcre2_match_data_create(8, NULL);
        uint64_t x = 0x9e3779b97f4a7c15ull;
        int checked = 0, k, i, j;

        for (k = 0; k < 3000; k++) {
                pcre2_code *code;
                PCRE2_SIZE offset;
                size_t n, len;
                int err;

                strcpy(pattern, ".*");
                for (i = 0, n = 2 + next_random(&x) % 5; i < (int)n; i++)
                        strcat(pattern,
                               pieces[next_random(&x) %
                                      (sizeof(pieces) / sizeof(pieces[0]))]);
                strcat(pattern, ".*");
                n = logmon__required_literal(pattern, strlen(pattern),
                                             literal, sizeof(literal));
                if (n == 0)
                        continue;
                code = pcre2_compile((PCRE2_SPTR)pattern,
                                     PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED,
                                     &err, &offset, NULL);
                assert_non_null(code);
                for (j = 0; j < 200; j++) {
                        len = next_random(&x) % sizeof(line);
                        for (i = 0; i < (int)len; i++)
                                line[i] = "abc.1 "[next_random(&x) % 6];
                        if (pcre2_match(code, (PCRE2_SPTR)line, len, 0, 0, md,
                                        NULL) < 0)
                                continue;
                        if (memmem(line, len, literal, n) == NULL)
                                fail_msg("%s matches \"%.*s\" without "
                                         "\"%.*s\"",
                                         pattern, (int)len, line, (int)n,
                                         literal);
                        checked++;
                }
                pcre2_code_free(code);
        }
        pcre2_match_data_free(md);
        /* The generator must reach matching lines, or this proves
         * nothing. */
        assert_true(checked > 10000);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_required_literal),
                cmocka_unit_test(test_long_literal_is_cut),
                cmocka_unit_test(test_split_rest),
                cmocka_unit_test(test_generated),
        };

        return cmocka_run_group_tests_name("logmon-pattern", tests, NULL,
                                           NULL);
}
