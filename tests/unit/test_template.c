/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for hp_template_expand (src/common/template.c), the
 * string.Template-style expansion behind --log-line-prefix-template. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"

/* Bytes after the buffer the function was given: they must stay as they
 * were, so an overrun shows up as a changed sentinel. */
#define SENTINEL ((char)0xad)

static const struct hp_template_var vars[] = {
        { "role_name", "trainer" }, { "local_rank", "3" },
        { "rank", "11" },           { "empty", "" },
        { "dollar", "$x" },
};

struct expand_case {
        const char *name;
        const char *tmpl;
        size_t len; /* buffer size handed to the function */
        int result;
        const char *output; /* on success */
        const char *error;  /* on failure: a substring of errbuf */
};

static const struct expand_case expand_cases[] = {
        /* What expands. */
        { "braced variables", "[${role_name}${local_rank}]:", 64, 0,
          "[trainer3]:", NULL },
        { "bare variables stop at a non-name character",
          "$role_name-$local_rank:", 64, 0, "trainer-3:", NULL },
        { "a bare name runs over letters, digits and underscores",
          "$rank.$local_rank", 64, 0, "11.3", NULL },
        { "braces let a name touch letters", "${rank}th", 64, 0, "11th",
          NULL },
        { "$$ is one dollar sign", "cost: $$5", 64, 0, "cost: $5", NULL },
        { "$$ before a name is not a variable", "$$rank", 64, 0, "$rank",
          NULL },
        { "$$ between variables", "${rank}$$${rank}", 64, 0, "11$11", NULL },
        { "values are not expanded again", "${dollar}", 64, 0, "$x", NULL },
        { "an empty value", "<${empty}>", 64, 0, "<>", NULL },
        { "no variables at all", "plain text", 64, 0, "plain text", NULL },
        { "an empty template", "", 64, 0, "", NULL },

        /* What is refused, and what errbuf says. */
        { "an unknown braced variable", "[${nope}]", 64, HP_ECONFIG, NULL,
          "'nope'" },
        { "an unknown bare variable", "[$nope]", 64, HP_ECONFIG, NULL,
          "'nope'" },
        { "a known name followed by more name characters", "$rank_name", 64,
          HP_ECONFIG, NULL, "'rank_name'" },
        { "an empty name in braces", "${}", 64, HP_ECONFIG, NULL,
          "unknown variable ''" },
        { "an unterminated ${", "[${rank", 64, HP_ECONFIG, NULL,
          "unterminated" },
        { "a lone $ at the end", "rank$", 64, HP_ECONFIG, NULL, "lone" },
        { "a lone $ before a space", "$ rank", 64, HP_ECONFIG, NULL, "lone" },
        { "a lone $ before punctuation", "[$]", 64, HP_ECONFIG, NULL,
          "lone" },

        /* The output buffer: len counts the terminating NUL. */
        { "output exactly filling the buffer", "[${rank}]", 5, 0, "[11]",
          NULL },
        { "output one byte too long", "[${rank}]", 4, HP_ETOOBIG, NULL,
          "more than 3 bytes" },
        { "a variable value that does not fit", "${role_name}", 7, HP_ETOOBIG,
          NULL, "more than 6 bytes" },
        { "plain text exactly filling the buffer", "abcd", 5, 0, "abcd",
          NULL },
        { "plain text one byte too long", "abcde", 5, HP_ETOOBIG, NULL,
          "more than 4 bytes" },
        { "$$ exactly filling the buffer", "$$", 2, 0, "$", NULL },
        { "$$ one byte too long", "$$", 1, HP_ETOOBIG, NULL,
          "more than 0 bytes" },
        { "an empty template in a one-byte buffer", "", 1, 0, "", NULL },
        { "a zero-byte buffer", "", 0, HP_ETOOBIG, NULL, NULL },
};

static void test_expand_cases(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(expand_cases); k++) {
                const struct expand_case *c = &expand_cases[k];
                char out[80], errbuf[256] = "";
                size_t out_len = (size_t)-1;
                int r;

                assert_true(c->len + 8 <= sizeof(out));
                memset(out, SENTINEL, sizeof(out));
                r = hp_template_expand(c->tmpl, vars, HP_ARRAY_SIZE(vars),
                                       out, c->len, &out_len, errbuf,
                                       sizeof(errbuf));
                if (r != c->result)
                        fail_msg("%s: '%s' returned %s, expected %s (%s)",
                                 c->name, c->tmpl, hp_err_name(r),
                                 c->result ? hp_err_name(c->result) : "0",
                                 errbuf);
                for (size_t i = c->len; i < sizeof(out); i++)
                        if (out[i] != SENTINEL)
                                fail_msg("%s: byte %zu, past the %zu-byte "
                                         "buffer, was written",
                                         c->name, i, c->len);
                if (c->result == 0) {
                        if (strcmp(out, c->output) != 0)
                                fail_msg("%s: '%s' gave '%s', expected '%s'",
                                         c->name, c->tmpl, out, c->output);
                        if (out_len != strlen(c->output))
                                fail_msg("%s: out_len %zu, expected %zu",
                                         c->name, out_len, strlen(c->output));
                } else if (c->error != NULL &&
                           strstr(errbuf, c->error) == NULL) {
                        fail_msg("%s: errbuf '%s' does not contain '%s'",
                                 c->name, errbuf, c->error);
                }
        }
}

/* The error message names the template too, so a user can find it. */
static void test_errors_name_the_template(void **state)
{
        static const char *const bad[] = {
                "[${nope}]",
                "[${rank",
                "rank$",
                "${role_name}${role_name}",
        };

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(bad); k++) {
                char out[8], errbuf[256] = "";
                int r = hp_template_expand(bad[k], vars, HP_ARRAY_SIZE(vars),
                                           out, sizeof(out), NULL, errbuf,
                                           sizeof(errbuf));

                if (r >= 0)
                        fail_msg("'%s' was accepted", bad[k]);
                if (strstr(errbuf, bad[k]) == NULL)
                        fail_msg("errbuf '%s' does not name template '%s'",
                                 errbuf, bad[k]);
        }
}

/* out_len may be NULL, and the result is the same. */
static void test_out_len_is_optional(void **state)
{
        char out[32];

        (void)state;
        assert_int_equal(hp_template_expand("[${rank}]", vars,
                                            HP_ARRAY_SIZE(vars), out,
                                            sizeof(out), NULL, NULL, 0),
                         0);
        assert_string_equal(out, "[11]");
}

/* With no variables at all, any variable is unknown but text still
 * expands. */
static void test_empty_variable_table(void **state)
{
        char out[32], errbuf[128] = "";
        size_t out_len = 0;

        (void)state;
        assert_int_equal(hp_template_expand("a$$b", NULL, 0, out, sizeof(out),
                                            &out_len, errbuf, sizeof(errbuf)),
                         0);
        assert_string_equal(out, "a$b");
        assert_int_equal(out_len, 3);
        assert_int_equal(hp_template_expand("${rank}", NULL, 0, out,
                                            sizeof(out), &out_len, errbuf,
                                            sizeof(errbuf)),
                         HP_ECONFIG);
        assert_non_null(strstr(errbuf, "'rank'"));
}

/* hp_iso8601_ms: what ${time} writes, and the verdicts' times. Each
 * case is checked against Python's datetime. */
static void test_iso8601_ms(void **state)
{
        static const struct {
                int64_t ms;
                const char *iso;
        } cases[] = {
                { 0, "1970-01-01T00:00:00.000Z" },
                { 1750139489300, "2025-06-17T05:51:29.300Z" },
                { 951782400000, "2000-02-29T00:00:00.000Z" },
                { 4107542399999, "2100-02-28T23:59:59.999Z" },
                { 1767225599999, "2025-12-31T23:59:59.999Z" },
                { -1, "1969-12-31T23:59:59.999Z" },
        };
        char buf[HP_ISO8601_MS_LEN + 2];
        size_t i;

        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                memset(buf, SENTINEL, sizeof(buf));
                hp_iso8601_ms(cases[i].ms, buf);
                assert_string_equal(buf, cases[i].iso);
                assert_int_equal(buf[HP_ISO8601_MS_LEN + 1], SENTINEL);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_expand_cases),
                cmocka_unit_test(test_errors_name_the_template),
                cmocka_unit_test(test_out_len_is_optional),
                cmocka_unit_test(test_empty_variable_table),
                cmocka_unit_test(test_iso8601_ms),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
