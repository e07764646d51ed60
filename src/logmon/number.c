/* SPDX-License-Identifier: Apache-2.0 */
/* Number parsing that accepts what Python's float() accepts, so that a
 * metric the reference agent understood is understood here too. */
#include <ctype.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hyperpod/common.h"

#include "matcher.h"

/* Longest number we copy for strtod. A metric capture longer than this is
 * not a number any training log prints; it is reported as non-numeric. */
#define NUMBER_MAX 128

static bool is_space(char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
               c == '\r';
}

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

/* Copies a run of digits with single underscores between them (Python's
 * digitpart). Returns the number of digits copied, 0 when there is no
 * digit part here, or -1 when an underscore is misplaced. */
static int digitpart(const char **p, const char *end, char *buf, size_t *o)
{
        const char *s = *p;
        int digits = 0;

        while (s < end) {
                if (is_digit(*s)) {
                        buf[(*o)++] = *s++;
                        digits++;
                } else if (*s == '_' && digits > 0 && s + 1 < end &&
                           is_digit(s[1])) {
                        s++;
                } else {
                        break;
                }
                if (*o >= NUMBER_MAX - 8)
                        return -1;
        }
        if (s < end && *s == '_')
                return -1;
        *p = s;
        return digits;
}

/*
 * Clinger's fast path: a decimal with at most 15 significant digits and
 * no exponent is m / 10^f with m and 10^f both exact doubles (m < 2^53,
 * f <= 22), and one IEEE division rounds that quotient correctly, which
 * is all strtod promises too. Metrics are printed this way ("123.45"),
 * and strtod's arbitrary-precision path costs five times as much. It
 * takes the capture as it is, [+-]digits[.digits], ".5" and "5." too
 * (as float() does); anything else (spaces, underscores, an exponent,
 * more digits) is for the full parser.
 */
static bool fast_decimal(const char *text, size_t n, double *out)
{
        static const double powers[] = {
                1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
        };
        const char *p = text, *end = text + n, *dot = NULL, *digits;
        bool negative = false;
        uint64_t m = 0;
        size_t fraction = 0;

        if (p < end && (*p == '+' || *p == '-'))
                negative = *p++ == '-';
        digits = p;
        for (; p < end; p++) {
                unsigned d = (unsigned char)*p - (unsigned)'0';

                if (d > 9) {
                        if (*p != '.' || dot != NULL)
                                return false;
                        dot = p;
                        continue;
                }
                /* Leading zeros leave m at 0; a 16th significant digit
                 * takes it to 10^15 or more. */
                m = m * 10 + d;
                if (m >= 1000000000000000ull)
                        return false;
        }
        if (dot != NULL)
                fraction = (size_t)(end - dot) - 1;
        /* With x87 arithmetic (FLT_EVAL_METHOD 2) the quotient would be
         * rounded twice; SSE2 and every 64-bit ABI round once. */
        if (FLT_EVAL_METHOD != 0 || end - digits == (dot != NULL) ||
            fraction >= HP_ARRAY_SIZE(powers))
                return false;
        *out = (double)m / powers[fraction];
        if (negative)
                *out = -*out;
        return true;
}

/* Everything else Python's float() takes, through strtod; kept out of
 * line so that the fast path pays for none of its buffer. */
static bool __attribute__((noinline))
parse_float_slow(const char *text, size_t n, locale_t loc, double *out)
{
        const char *p = text, *end = text + n;
        char buf[NUMBER_MAX];
        size_t o = 0, words;
        int ip, fp = 0;
        char *stop;

        while (p < end && is_space(*p))
                p++;
        while (end > p && is_space(end[-1]))
                end--;
        if (p < end && (*p == '+' || *p == '-'))
                buf[o++] = *p++;

        /* The words Python knows, in any case. strtod knows the same ones
         * but also hex and "nan(...)", which float() refuses. */
        words = (size_t)(end - p);
        if ((words == 3 && strncasecmp(p, "inf", 3) == 0) ||
            (words == 8 && strncasecmp(p, "infinity", 8) == 0) ||
            (words == 3 && strncasecmp(p, "nan", 3) == 0)) {
                memcpy(buf + o, p, words);
                buf[o + words] = '\0';
                *out = strtod_l(buf, &stop, loc);
                return true;
        }

        ip = digitpart(&p, end, buf, &o);
        if (ip < 0)
                return false;
        if (p < end && *p == '.') {
                buf[o++] = *p++;
                fp = digitpart(&p, end, buf, &o);
                if (fp < 0)
                        return false;
        }
        if (ip == 0 && fp == 0)
                return false;
        if (p < end && (*p == 'e' || *p == 'E')) {
                buf[o++] = *p++;
                if (p < end && (*p == '+' || *p == '-'))
                        buf[o++] = *p++;
                if (digitpart(&p, end, buf, &o) <= 0)
                        return false;
        }
        if (p != end)
                return false;
        buf[o] = '\0';
        *out = strtod_l(buf, &stop, loc);
        return *stop == '\0';
}

bool logmon__parse_float(const char *text, size_t n, locale_t loc,
                         double *out)
{
        return fast_decimal(text, n, out) ||
               parse_float_slow(text, n, loc, out);
}
