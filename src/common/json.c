/* SPDX-License-Identifier: Apache-2.0 */
/* JSON numbers kept as they were written. cJSON reads every number into a
 * double and prints it back from there, so "1.0" comes out as "1", a
 * 20-digit integer loses its last digits and "-0.0" its sign; Python's
 * json (the reference's) keeps ints exact and floats as written. For the
 * values the agent only passes on, the text of each number is kept. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"

struct cursor {
        const char *text;
        size_t len;
        size_t pos; /* where the search for the next number starts */
};

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

/* The characters cJSON takes into a number before strtod() reads it. */
static bool in_number(char c)
{
        return is_digit(c) || c == '+' || c == '-' || c == '.' || c == 'e' ||
               c == 'E';
}

/* The next number outside a string: its offset and length, or false at
 * the end. Outside strings, only a number holds '-' or a digit. */
static bool next_number(struct cursor *c, size_t *at, size_t *len)
{
        const char *s = c->text;
        size_t i = c->pos;

        while (i < c->len) {
                if (s[i] == '"') {
                        for (i++; i < c->len && s[i] != '"'; i++)
                                if (s[i] == '\\')
                                        i++;
                        i++;
                        continue;
                }
                if (s[i] == '-' || is_digit(s[i])) {
                        size_t end = i;

                        while (end < c->len && in_number(s[end]))
                                end++;
                        *at = i;
                        *len = end - i;
                        c->pos = end;
                        return true;
                }
                i++;
        }
        c->pos = c->len;
        return false;
}

/* JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 * cJSON also takes "01", "1." and "1.e5", which Python's json refuses. */
static bool json_number(const char *s, size_t n)
{
        size_t i = 0;
        size_t digits;

        if (i < n && s[i] == '-')
                i++;
        if (i < n && s[i] == '0') {
                i++;
        } else if (i < n && s[i] >= '1' && s[i] <= '9') {
                while (i < n && is_digit(s[i]))
                        i++;
        } else {
                return false;
        }
        if (i < n && s[i] == '.') {
                for (i++, digits = 0; i < n && is_digit(s[i]); i++)
                        digits++;
                if (digits == 0)
                        return false;
        }
        if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                i++;
                if (i < n && (s[i] == '+' || s[i] == '-'))
                        i++;
                for (digits = 0; i < n && is_digit(s[i]); i++)
                        digits++;
                if (digits == 0)
                        return false;
        }
        return i == n;
}

/* Walks v in document order, taking one number of the text for each
 * number item, and turns those inside `within` into raw items. */
static int keep(cJSON *v, const cJSON *within, bool inside, struct cursor *c)
{
        size_t at, len;
        char *copy;

        inside = inside || v == within;
        if (cJSON_IsNumber(v)) {
                if (!next_number(c, &at, &len))
                        return -EINVAL; /* not the text v came from */
                if (!inside)
                        return 0;
                copy = strndup(c->text + at, len);
                if (copy == NULL)
                        return -ENOMEM;
                v->type = cJSON_Raw;
                v->valuestring = copy;
                return 0;
        }
        for (cJSON *it = v->child; it != NULL; it = it->next) {
                int r = keep(it, within, inside, c);
                if (r < 0)
                        return r;
        }
        return 0;
}

int hp_json_exact_numbers(struct cJSON *doc, const struct cJSON *within,
                          const char *text, size_t len, size_t *bad_at)
{
        struct cursor c = { .text = text, .len = len };
        size_t at, n;

        while (next_number(&c, &at, &n)) {
                if (!json_number(text + at, n)) {
                        if (bad_at != NULL)
                                *bad_at = at;
                        return -EINVAL;
                }
        }
        if (within == NULL)
                return 0;
        c.pos = 0;
        return keep(doc, within, false, &c);
}
