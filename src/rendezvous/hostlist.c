/* SPDX-License-Identifier: Apache-2.0 */
/* Slurm hostlist expansion: "ip-10-1-[2-4,7],gpu[001-002]" → host names.
 *
 * The grammar and the order of the names follow `scontrol show hostnames`
 * of Slurm 22.05 (Debian 12), whose answers the unit tests hold. Slurm is
 * lenient with some broken lists (it skips empty items, reads "n[1-]" as
 * n1 and "n[ 1-2]" as n01 n02); here they are errors, because a node list
 * that hyperpodrun misreads would give two nodes the same rank. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/rendezvous.h"

/* Slurm names at most 5 dimensions; more groups in one name is a typo. */
#define MAX_GROUPS 8
/* 10^18 fits in 64 bits with room for the increment. */
#define MAX_DIGITS 18

struct range {
        uint64_t lo, hi;
        int width; /* digits of lo: the zero padding */
};

/* One bracket group of an item: its ranges, and the odometer position. */
struct group {
        const char *prefix; /* literal text before the '[' */
        size_t prefix_len;
        struct range *ranges;
        size_t nranges;
        uint64_t count;  /* values in all ranges */
        size_t at_range; /* current position */
        uint64_t at_value;
};

/* Growing output: names back to back, each ended by a NUL. */
struct builder {
        char *bytes;
        size_t used, size;
        size_t *offsets;
        size_t count, offsets_size;
};

static int fail(char *errbuf, size_t errlen, int code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int fail(char *errbuf, size_t errlen, int code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
        return code;
}

static int builder_add(struct builder *b, const char *name, size_t len)
{
        if (b->count == b->offsets_size) {
                size_t n = b->offsets_size ? 2 * b->offsets_size : 16;
                size_t *p = realloc(b->offsets, n * sizeof(*p));

                if (p == NULL)
                        return -ENOMEM;
                b->offsets = p;
                b->offsets_size = n;
        }
        if (b->used + len + 1 > b->size) {
                size_t n = b->size ? 2 * b->size : 256;
                char *p;

                while (n < b->used + len + 1)
                        n *= 2;
                p = realloc(b->bytes, n);
                if (p == NULL)
                        return -ENOMEM;
                b->bytes = p;
                b->size = n;
        }
        memcpy(b->bytes + b->used, name, len);
        b->bytes[b->used + len] = '\0';
        b->offsets[b->count++] = b->used;
        b->used += len + 1;
        return 0;
}

/* One allocation holds the pointer array and the names after it, so that
 * hp_hostlist_free is a single free(). */
static int builder_finish(struct builder *b, struct hp_hostlist *out)
{
        size_t head = b->count * sizeof(char *);
        char **names = malloc(head + b->used);
        char *text;

        if (names == NULL)
                return -ENOMEM;
        text = (char *)names + head;
        memcpy(text, b->bytes, b->used);
        for (size_t i = 0; i < b->count; i++)
                names[i] = text + b->offsets[i];
        out->names = names;
        out->count = b->count;
        return 0;
}

static int parse_number(const char *p, size_t len, uint64_t *out)
{
        uint64_t v = 0;

        if (len == 0 || len > MAX_DIGITS)
                return -1;
        for (size_t i = 0; i < len; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return -1;
                v = v * 10 + (uint64_t)(p[i] - '0');
        }
        *out = v;
        return 0;
}

/* Parses the text between '[' and ']' (at offset base of the list). The
 * group's ranges array has room for one range per comma plus one. */
static int parse_group(const char *list, size_t base, size_t len,
                       struct group *g, char *errbuf, size_t errlen)
{
        const char *text = list + base;
        size_t start = 0;

        g->nranges = 0;
        g->count = 0;
        if (len == 0)
                return fail(errbuf, errlen, HP_ECONFIG,
                            "empty brackets at offset %zu", base - 1);
        while (start <= len) {
                const char *comma = memchr(text + start, ',', len - start);
                size_t end = comma ? (size_t)(comma - text) : len;
                const char *item = text + start;
                size_t item_len = end - start;
                const char *dash = memchr(item, '-', item_len);
                struct range *r = &g->ranges[g->nranges];

                if (item_len == 0)
                        return fail(errbuf, errlen, HP_ECONFIG,
                                    "empty range at offset %zu",
                                    base + start);
                if (dash == NULL) {
                        if (parse_number(item, item_len, &r->lo) < 0)
                                goto bad_range;
                        r->hi = r->lo;
                        r->width = (int)item_len;
                } else {
                        size_t lo_len = (size_t)(dash - item);

                        if (parse_number(item, lo_len, &r->lo) < 0 ||
                            parse_number(dash + 1, item_len - lo_len - 1,
                                         &r->hi) < 0)
                                goto bad_range;
                        if (r->hi < r->lo)
                                return fail(errbuf, errlen, HP_ECONFIG,
                                            "reversed range '%.*s' at "
                                            "offset %zu (the first bound "
                                            "must not be above the second)",
                                            (int)item_len, item,
                                            base + start);
                        r->width = (int)lo_len;
                }
                if (r->hi - r->lo >= HP_HOSTLIST_MAX_HOSTS ||
                    g->count + (r->hi - r->lo + 1) > HP_HOSTLIST_MAX_HOSTS)
                        return fail(errbuf, errlen, HP_ETOOBIG,
                                    "range '%.*s' at offset %zu expands to "
                                    "more than %d hosts",
                                    (int)item_len, item, base + start,
                                    HP_HOSTLIST_MAX_HOSTS);
                g->count += r->hi - r->lo + 1;
                g->nranges++;
                start = end + 1;
                continue;
bad_range:
                return fail(errbuf, errlen, HP_ECONFIG,
                            "invalid range '%.*s' at offset %zu: expected "
                            "N or LO-HI with up to %d decimal digits each",
                            (int)item_len, item, base + start, MAX_DIGITS);
        }
        return 0;
}

/* Formats the current name of an item whose groups are positioned. */
static int format_name(const struct group *groups, size_t ngroups,
                       const char *suffix, size_t suffix_len, char *name,
                       size_t *name_len)
{
        size_t n = 0;

        for (size_t i = 0; i < ngroups; i++) {
                const struct group *g = &groups[i];
                int w;

                if (n + g->prefix_len > HP_HOSTLIST_MAX_NAME)
                        return -1;
                memcpy(name + n, g->prefix, g->prefix_len);
                n += g->prefix_len;
                w = snprintf(name + n, HP_HOSTLIST_MAX_NAME + 1 - n, "%0*llu",
                             g->ranges[g->at_range].width,
                             (unsigned long long)g->at_value);
                if (w < 0 || n + (size_t)w > HP_HOSTLIST_MAX_NAME)
                        return -1;
                n += (size_t)w;
        }
        if (n + suffix_len > HP_HOSTLIST_MAX_NAME)
                return -1;
        memcpy(name + n, suffix, suffix_len);
        n += suffix_len;
        name[n] = '\0';
        *name_len = n;
        return 0;
}

/* Moves one group to its next value; true when it wrapped around. */
static bool group_step(struct group *g)
{
        if (g->at_value < g->ranges[g->at_range].hi) {
                g->at_value++;
                return false;
        }
        g->at_range++;
        if (g->at_range == g->nranges)
                g->at_range = 0;
        g->at_value = g->ranges[g->at_range].lo;
        return g->at_range == 0;
}

/*
 * Emits every name of one item. Slurm's order, taken from scontrol: the
 * last group varies fastest, then the first, the second, and so on; for
 * one or two groups that is plain row-major order.
 */
static int expand_item(struct group *groups, size_t ngroups,
                       const char *suffix, size_t suffix_len,
                       struct builder *b, size_t item_offset, char *errbuf,
                       size_t errlen)
{
        char name[HP_HOSTLIST_MAX_NAME + 1];
        size_t order[MAX_GROUPS], name_len;
        uint64_t total = 1;
        int r;

        for (size_t i = 0; i < ngroups; i++) {
                total *= groups[i].count; /* each <= the cap: no overflow */
                if (total + b->count > HP_HOSTLIST_MAX_HOSTS)
                        return fail(errbuf, errlen, HP_ETOOBIG,
                                    "the list expands to more than %d hosts",
                                    HP_HOSTLIST_MAX_HOSTS);
                groups[i].at_range = 0;
                groups[i].at_value = groups[i].ranges[0].lo;
        }
        if (total + b->count > HP_HOSTLIST_MAX_HOSTS)
                return fail(errbuf, errlen, HP_ETOOBIG,
                            "the list expands to more than %d hosts",
                            HP_HOSTLIST_MAX_HOSTS);
        if (ngroups > 0) {
                order[0] = ngroups - 1;
                for (size_t i = 0; i + 1 < ngroups; i++)
                        order[i + 1] = i;
        }
        for (uint64_t k = 0; k < total; k++) {
                if (format_name(groups, ngroups, suffix, suffix_len, name,
                                &name_len) < 0)
                        return fail(errbuf, errlen, HP_ETOOBIG,
                                    "the item at offset %zu makes a name "
                                    "longer than %d bytes",
                                    item_offset, HP_HOSTLIST_MAX_NAME);
                r = builder_add(b, name, name_len);
                if (r < 0)
                        return fail(errbuf, errlen, r, "out of memory");
                for (size_t d = 0; d < ngroups; d++)
                        if (!group_step(&groups[order[d]]))
                                break;
        }
        return 0;
}

/* Splits one item (no comma outside brackets) into groups and expands it.
 * ranges has room for every range of the item. */
static int parse_item(const char *list, size_t start, size_t end,
                      struct range *ranges, struct builder *b, char *errbuf,
                      size_t errlen)
{
        struct group groups[MAX_GROUPS];
        size_t ngroups = 0, literal = start, used_ranges = 0;

        if (end == start)
                return fail(errbuf, errlen, HP_ECONFIG,
                            "empty item at offset %zu", start);
        for (size_t i = start; i < end; i++) {
                const char *close;
                size_t commas = 0;
                int r;

                if (list[i] != '[')
                        continue;
                if (ngroups == MAX_GROUPS)
                        return fail(errbuf, errlen, HP_ECONFIG,
                                    "more than %d bracket groups in the "
                                    "item at offset %zu",
                                    MAX_GROUPS, start);
                close = memchr(list + i, ']', end - i);
                /* The caller checked the balance, so close is found. */
                for (const char *p = list + i; p < close; p++)
                        commas += *p == ',';
                groups[ngroups].prefix = list + literal;
                groups[ngroups].prefix_len = i - literal;
                groups[ngroups].ranges = ranges + used_ranges;
                r = parse_group(list, i + 1, (size_t)(close - list) - i - 1,
                                &groups[ngroups], errbuf, errlen);
                if (r < 0)
                        return r;
                used_ranges += commas + 1;
                ngroups++;
                i = (size_t)(close - list);
                literal = i + 1;
        }
        return expand_item(groups, ngroups, list + literal, end - literal, b,
                           start, errbuf, errlen);
}

/* Checks the characters and the brackets of the whole list first, so that
 * the item parser only meets balanced, un-nested groups. */
static int check_syntax(const char *text, size_t *nranges, char *errbuf,
                        size_t errlen)
{
        size_t open_at = 0, commas = 0, groups = 0;
        bool inside = false;

        for (size_t i = 0; text[i] != '\0'; i++) {
                unsigned char c = (unsigned char)text[i];

                if (c <= ' ' || c == 0x7f)
                        return fail(errbuf, errlen, HP_ECONFIG,
                                    "blank or control character at offset "
                                    "%zu",
                                    i);
                if (c == '[') {
                        if (inside)
                                return fail(errbuf, errlen, HP_ECONFIG,
                                            "nested '[' at offset %zu", i);
                        inside = true;
                        open_at = i;
                        groups++;
                } else if (c == ']') {
                        if (!inside)
                                return fail(errbuf, errlen, HP_ECONFIG,
                                            "']' without '[' at offset %zu",
                                            i);
                        inside = false;
                } else if (c == ',') {
                        commas++;
                }
        }
        if (inside)
                return fail(errbuf, errlen, HP_ECONFIG,
                            "'[' at offset %zu is never closed", open_at);
        /* Each group has one range more than it has commas. */
        *nranges = commas + groups + 1;
        return 0;
}

int hp_hostlist_expand(const char *text, struct hp_hostlist *out,
                       char *errbuf, size_t errlen)
{
        struct builder b = { 0 };
        struct range *ranges = NULL;
        size_t nranges = 1, start = 0, depth = 0;
        int r;

        out->count = 0;
        out->names = NULL;
        if (*text == '\0')
                return fail(errbuf, errlen, HP_ECONFIG, "empty host list");
        r = check_syntax(text, &nranges, errbuf, errlen);
        if (r < 0)
                return r;
        /* One array serves every item in turn: it has room for all the
         * ranges of the list. */
        ranges = calloc(nranges, sizeof(*ranges));
        if (ranges == NULL)
                return fail(errbuf, errlen, -ENOMEM, "out of memory");
        for (size_t i = 0;; i++) {
                char c = text[i];

                if (c == '[')
                        depth = 1;
                else if (c == ']')
                        depth = 0;
                if ((c == ',' && depth == 0) || c == '\0') {
                        r = parse_item(text, start, i, ranges, &b, errbuf,
                                       errlen);
                        if (r < 0)
                                goto out;
                        start = i + 1;
                }
                if (c == '\0')
                        break;
        }
        r = builder_finish(&b, out);
        if (r < 0)
                fail(errbuf, errlen, r, "out of memory");
out:
        free(ranges);
        free(b.bytes);
        free(b.offsets);
        return r;
}

void hp_hostlist_free(struct hp_hostlist *list)
{
        free(list->names);
        list->names = NULL;
        list->count = 0;
}
