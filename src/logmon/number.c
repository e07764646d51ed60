/* Number parsing that accepts what Python's float() accepts, so that a
 * metric the reference agent understood is understood here too. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "logmon-private.h"

/* Longest number we copy for strtod. A metric capture longer than this is
 * not a number any training log prints; it is reported as non-numeric. */
#define NUMBER_MAX 128

static bool is_space(char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' ||
               c == '\f' || c == '\r';
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

bool logmon__parse_float(const char *text, size_t n, locale_t loc,
                         double *out)
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
