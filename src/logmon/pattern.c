/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a pattern's text says about every line it can match, read without
 * PCRE2: the literal each match contains, and where the rest form splits
 * around its first inner ".*". Both only ever lose a speed-up when in
 * doubt: anything this reader does not know for certain (an escape with
 * arguments, a brace that may or may not be a quantifier, a stray "]")
 * makes it answer "nothing known", never a wrong literal.
 *
 * The reader walks the top level of the pattern one item at a time. A
 * group or a class is one item (its inside never yields a literal: a
 * group can be optional or repeated, a class is a choice), and so is an
 * item's quantifier. Callers have already refused what changes the
 * meaning of the text around it: "|", "(?" other than "(?:", verbs,
 * "\Q", "\G" and "\K" (matcher.c, searchable()).
 */
#include <string.h>

#include "hyperpod/common.h"
#include "matcher.h"

enum item_kind {
        ITEM_LITERAL,    /* one byte that must appear as written */
        ITEM_ANY,        /* "." */
        ITEM_QUANTIFIER, /* "*", "+", "?", "{n,m}", each maybe lazy or
                          * possessive */
        ITEM_GROUP,      /* "(...)", inside unread */
        ITEM_OTHER,      /* a class, \d and the like, an assertion, a
                          * character outside ASCII */
        ITEM_UNKNOWN,    /* stop: the reader is not sure what this is */
};

struct item {
        enum item_kind kind;
        size_t len;
        char byte; /* ITEM_LITERAL */
};

/* Index just past the class that starts at i ("["), or 0. A "]" right
 * after "[" or "[^" is a member, not the end. */
static size_t class_end(const char *p, size_t len, size_t i)
{
        i++;
        if (i < len && p[i] == '^')
                i++;
        if (i < len && p[i] == ']')
                i++;
        while (i < len) {
                if (p[i] == '\\') {
                        i += 2;
                } else if (p[i] == '[' && i + 1 < len && p[i + 1] == ':') {
                        const char *close = memmem(p + i + 2, len - i - 2,
                                                   ":]", 2);

                        if (close == NULL)
                                return 0;
                        i = (size_t)(close - p) + 2;
                } else if (p[i] == ']') {
                        return i + 1;
                } else {
                        i++;
                }
        }
        return 0;
}

/* Index just past the group that starts at i ("("), or 0. */
static size_t group_end(const char *p, size_t len, size_t i)
{
        size_t depth = 0;

        while (i < len) {
                if (p[i] == '\\') {
                        i += 2;
                        continue;
                }
                if (p[i] == '[') {
                        i = class_end(p, len, i);
                        if (i == 0)
                                return 0;
                        continue;
                }
                if (p[i] == '(')
                        depth++;
                else if (p[i] == ')' && --depth == 0)
                        return i + 1;
                i++;
        }
        return 0;
}

/* Length of a quantifier at i, lazy or possessive suffix included, or 0
 * when there is none. A "{" is a quantifier only as "{n}", "{n,}" or
 * "{n,m}"; any other "{" makes the item unknown (PCRE2 releases differ
 * on "{,m}" and on spaces inside), reported as SIZE_MAX. */
static size_t quantifier_len(const char *p, size_t len, size_t i)
{
        size_t j = i, digits = 0;

        if (i >= len)
                return 0;
        if (p[i] == '*' || p[i] == '+' || p[i] == '?') {
                j = i + 1;
        } else if (p[i] == '{') {
                for (j = i + 1; j < len && p[j] >= '0' && p[j] <= '9'; j++)
                        digits++;
                if (j < len && p[j] == ',')
                        for (j++; j < len && p[j] >= '0' && p[j] <= '9'; j++)
                                ;
                if (digits == 0 || j >= len || p[j] != '}')
                        return SIZE_MAX;
                j++;
        } else {
                return 0;
        }
        if (j < len && (p[j] == '?' || p[j] == '+'))
                j++;
        return j - i;
}

static bool is_alnum(char c)
{
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
               (c >= 'A' && c <= 'Z');
}

static struct item read_item(const char *p, size_t len, size_t i)
{
        struct item it = { .kind = ITEM_UNKNOWN, .len = 1 };
        unsigned char c = (unsigned char)p[i];
        size_t end, q;

        if (c == '\\') {
                if (i + 1 >= len || (unsigned char)p[i + 1] >= 0x80)
                        return it;
                it.len = 2;
                if (!is_alnum(p[i + 1])) {
                        it.kind = ITEM_LITERAL;
                        it.byte = p[i + 1];
                } else if (strchr("dDwWsShHvVbB", p[i + 1]) != NULL) {
                        /* Character types and word boundaries take no
                         * arguments; every other letter escape might
                         * (\x41, \p{Lu}, \g{1}, \k<n>) or means a byte
                         * this reader would have to decode. */
                        it.kind = ITEM_OTHER;
                }
                return it;
        }
        if (c >= 0x80) {
                end = hp_utf8_seq_len((const unsigned char *)p + i, len - i);
                it.kind = ITEM_OTHER;
                it.len = end == 0 ? 1 : end;
                return it;
        }
        switch (c) {
        case '.':
                it.kind = ITEM_ANY;
                return it;
        case '(':
                end = group_end(p, len, i);
                if (end != 0) {
                        it.kind = ITEM_GROUP;
                        it.len = end - i;
                }
                return it;
        case '[':
                end = class_end(p, len, i);
                if (end != 0) {
                        it.kind = ITEM_OTHER;
                        it.len = end - i;
                }
                return it;
        case '*':
        case '+':
        case '?':
        case '{':
                q = quantifier_len(p, len, i);
                if (q != SIZE_MAX) {
                        it.kind = ITEM_QUANTIFIER;
                        it.len = q;
                }
                return it;
        case '^':
        case '$':
                it.kind = ITEM_OTHER;
                return it;
        case ')':
        case ']':
        case '}':
        case '|':
                return it;
        default:
                it.kind = ITEM_LITERAL;
                it.byte = (char)c;
                return it;
        }
}

/* The item at *i and the quantifier after it, if any; *i moves past
 * both. False at an unknown item. */
static bool next(const char *p, size_t len, size_t *i, struct item *it,
                 struct item *quant)
{
        *it = read_item(p, len, *i);
        if (it->kind == ITEM_UNKNOWN || it->kind == ITEM_QUANTIFIER)
                return false;
        *i += it->len;
        quant->kind = ITEM_OTHER;
        quant->len = 0;
        if (*i < len) {
                struct item q = read_item(p, len, *i);

                if (q.kind == ITEM_QUANTIFIER) {
                        *quant = q;
                        *i += q.len;
                } else if (q.kind == ITEM_UNKNOWN &&
                           (p[*i] == '{' || p[*i] == '}')) {
                        return false;
                }
        }
        return true;
}

/* The run of unquantified literals at *i, its first cap bytes copied to
 * out; *i moves past it (to the first item that is not part of it). */
static size_t literal_run(const char *p, size_t len, size_t *i, char *out,
                          size_t cap, size_t *total)
{
        size_t n = 0, at;
        struct item it, quant;

        *total = 0;
        while (*i < len) {
                at = *i;
                if (!next(p, len, &at, &it, &quant) ||
                    it.kind != ITEM_LITERAL || quant.len != 0)
                        break;
                if (n < cap)
                        out[n++] = it.byte;
                ++*total;
                *i = at;
        }
        return n;
}

size_t logmon__required_literal(const char *pattern, size_t len, char *out,
                                size_t cap)
{
        char run[LOGMON_LITERAL_MAX];
        size_t i = 0, best = 0, best_total = 0, n, total;
        struct item it, quant;

        if (cap > sizeof(run))
                cap = sizeof(run);
        while (i < len) {
                n = literal_run(pattern, len, &i, run, cap, &total);
                if (total > best_total) {
                        memcpy(out, run, n);
                        best = n;
                        best_total = total;
                }
                if (i >= len)
                        break;
                if (!next(pattern, len, &i, &it, &quant))
                        return 0;
        }
        return best;
}

bool logmon__split_rest(const char *rest, size_t len,
                        struct logmon_split *out)
{
        size_t i = 0, at, total;
        struct item it, quant;

        while (i < len) {
                at = i;
                if (!next(rest, len, &i, &it, &quant) ||
                    it.kind == ITEM_GROUP)
                        return false;
                if (it.kind == ITEM_ANY && quant.len == 1 &&
                    rest[i - 1] == '*')
                        break;
        }
        if (i >= len)
                return false;
        out->head_len = at;
        out->tail_at = i;
        out->literal_len = literal_run(rest, len, &i, out->literal,
                                       sizeof(out->literal), &total);
        return out->literal_len > 0;
}

/* How common a byte is in log text, roughly: spaces, digits and the
 * frequent lowercase letters fill most lines; then the other lowercase
 * letters and the punctuation of numbers and key-value pairs; then
 * brackets and slashes; then capitals, which start words ("Epoch",
 * "INFO") often enough; then x, j, q and z; then everything else. Only a
 * guess that makes memchr stop at fewer false starts; any anchor gives
 * the same answers. With capitals as the rarest, JobStart's "Experiment
 * configuration" was looked for by its "E", which every "[Epoch" line
 * holds: a false start and a second memchr on each progress line, where
 * its "x" costs one memchr that finds nothing. */
static int commonness(unsigned char c)
{
        if (c == ' ' || (c >= '0' && c <= '9') ||
            (c != '\0' && strchr("etaoinsrhldcum", c) != NULL))
                return 6;
        if (c != '\0' && strchr("fpgwybvk.,:;'\"=-_", c) != NULL)
                return 5;
        if (c != '\0' && strchr("[](){}/", c) != NULL)
                return 4;
        if (c >= 'A' && c <= 'Z')
                return 3;
        if (c != '\0' && strchr("xjqz", c) != NULL)
                return 2;
        return 1;
}

void logmon__literal_set(struct logmon_literal *out, const char *lit,
                         size_t len)
{
        size_t i;

        if (len > sizeof(out->bytes))
                len = sizeof(out->bytes);
        memcpy(out->bytes, lit, len);
        out->len = (uint8_t)len;
        out->anchor = 0;
        for (i = 1; i < len; i++)
                if (commonness((unsigned char)lit[i]) <
                    commonness((unsigned char)lit[out->anchor]))
                        out->anchor = (uint8_t)i;
}
