/* SPDX-License-Identifier: Apache-2.0 */
/* The metric parser's fast path against strtod: every decimal it takes
 * must come out bit for bit as strtod rounds it. Table cases at the
 * edges of the fast path, then a few hundred thousand generated ones. */
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

#include "logmon-private.h"

static locale_t c_locale;

static void assert_as_strtod(const char *text)
{
        double got = 0, want;
        char *stop;

        want = strtod_l(text, &stop, c_locale);
        assert_true(*stop == '\0');
        if (!logmon__parse_float(text, strlen(text), c_locale, &got))
                fail_msg("\"%s\" was refused", text);
        if (memcmp(&got, &want, sizeof(got)) != 0)
                fail_msg("\"%s\": %.17g, strtod says %.17g", text, got, want);
}

static void test_edges(void **state)
{
        static const char *const cases[] = {
                "0",
                "-0",
                "+0.0",
                "0.1",
                "0.2",
                "0.3",
                "123.45",
                "-123.45",
                "200.99",
                "1.",
                ".5",
                "00000000000000000000000001.5",
                /* 15 significant digits: the last the fast path takes. */
                "999999999999999",
                "99999999999999.9",
                "0.999999999999999",
                "1.00000000000000",
                "123456789012345",
                /* Past it: strtod decides. */
                "9999999999999999",
                "9007199254740993",
                "0.1000000000000001",
                "12345678901234567890",
                /* 10^22 is the last exact power of ten. */
                "1.0000000000000000000000",
                "0.0000000000000000000001",
                "0.00000000000000000000001",
                "1e5",
                "1.5E-3",
                "2.5e+10",
                "17976931348623157e292",
                "4.9e-324",
        };
        size_t i;

        (void)state;
        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                assert_as_strtod(cases[i]);
}

/* What Python's float() says of captures the fast path sees first. */
static void test_python_answers(void **state)
{
        static const struct {
                const char *text;
                bool ok;
                double value;
        } cases[] = {
                { ".", false, 0 },     { "+", false, 0 },
                { "-", false, 0 },     { "", false, 0 },
                { "1.2.3", false, 0 }, { "1..2", false, 0 },
                { "-.", false, 0 },    { "1-", false, 0 },
                { "+-1", false, 0 },   { "1e", false, 0 },
                { " 1", true, 1 },     { "1 ", true, 1 },
                { "1_0", true, 10 },   { "1__0", false, 0 },
                { "-.5", true, -0.5 }, { "5.", true, 5 },
                { "0x10", false, 0 },  { "1,5", false, 0 },
        };
        size_t i;

        (void)state;
        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                double got = 0;
                bool ok = logmon__parse_float(cases[i].text,
                                              strlen(cases[i].text), c_locale,
                                              &got);

                if (ok != cases[i].ok)
                        fail_msg("\"%s\": %s, Python %s it", cases[i].text,
                                 ok ? "taken" : "refused",
                                 cases[i].ok ? "takes" : "refuses");
                if (ok && got != cases[i].value)
                        fail_msg("\"%s\": %g, Python says %g", cases[i].text,
                                 got, cases[i].value);
        }
}

static uint64_t next(uint64_t *x)
{
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

static void test_generated(void **state)
{
        uint64_t x = 0x9e3779b97f4a7c15ull;
        char text[64];
        int n, i, digits, dot;

        (void)state;
        for (n = 0; n < 300000; n++) {
                size_t o = 0;

                if (next(&x) % 4 == 0)
                        text[o++] = next(&x) % 2 ? '-' : '+';
                digits = 1 + (int)(next(&x) % 26);
                dot = (int)(next(&x) % (uint64_t)(digits + 2)) - 1;
                for (i = 0; i < digits; i++) {
                        if (i == dot)
                                text[o++] = '.';
                        text[o++] = (char)('0' + next(&x) % 10);
                }
                text[o] = '\0';
                assert_as_strtod(text);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_edges),
                cmocka_unit_test(test_python_answers),
                cmocka_unit_test(test_generated),
        };
        int rc;

        c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        rc = cmocka_run_group_tests_name("logmon-number", tests, NULL, NULL);
        freelocale(c_locale);
        return rc;
}
