/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rules over a stream of records, as NPD's log monitor applies them:
 * each message is pushed into a ring of the config's bufferSize lines,
 * and each rule's end-anchored pattern is searched in the ring joined by
 * "\n", so a multi-line pattern ends at the newest line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kmsg-private.h"

struct kmsg_matcher {
        const struct kmsg_rules *rules;
        uint64_t cutoff_us; /* older records do not count */
        char **lines;       /* ring of buffer_size, oldest at head */
        size_t head, used;
        char *joined;
        size_t joined_cap;
        uint64_t *counts;
        bool *active;
        uint64_t old;
};

struct kmsg_matcher *kmsg_matcher_new(const struct kmsg_rules *rules,
                                      uint64_t start_us)
{
        struct kmsg_matcher *m = calloc(1, sizeof(*m));
        size_t n = rules->count ? rules->count : 1;

        if (m == NULL)
                return NULL;
        m->rules = rules;
        m->cutoff_us = start_us > rules->lookback_us
                               ? start_us - rules->lookback_us
                               : 0;
        m->lines = calloc(rules->buffer_size, sizeof(*m->lines));
        m->counts = calloc(n, sizeof(*m->counts));
        m->active = calloc(n, sizeof(*m->active));
        if (m->lines == NULL || m->counts == NULL || m->active == NULL) {
                kmsg_matcher_free(m);
                errno = ENOMEM;
                return NULL;
        }
        return m;
}

void kmsg_matcher_free(struct kmsg_matcher *m)
{
        if (m == NULL)
                return;
        for (size_t i = 0; m->lines != NULL && i < m->rules->buffer_size; i++)
                free(m->lines[i]);
        free(m->lines);
        free(m->joined);
        free(m->counts);
        free(m->active);
        free(m);
}

static int push(struct kmsg_matcher *m, const char *msg, size_t len)
{
        size_t cap = m->rules->buffer_size;
        char *copy = malloc(len + 1);
        size_t slot;

        if (copy == NULL)
                return -ENOMEM;
        memcpy(copy, msg, len);
        copy[len] = '\0';
        if (m->used == cap) {
                free(m->lines[m->head]);
                m->lines[m->head] = NULL;
                m->head = (m->head + 1) % cap;
                m->used--;
        }
        slot = (m->head + m->used) % cap;
        m->lines[slot] = copy;
        m->used++;
        return 0;
}

static int join(struct kmsg_matcher *m, size_t *out_len)
{
        size_t cap = m->rules->buffer_size, len = 0;

        for (size_t i = 0; i < m->used; i++)
                len += strlen(m->lines[(m->head + i) % cap]) + 1;
        if (len > m->joined_cap) {
                char *p = realloc(m->joined, len);
                if (p == NULL)
                        return -ENOMEM;
                m->joined = p;
                m->joined_cap = len;
        }
        len = 0;
        for (size_t i = 0; i < m->used; i++) {
                const char *line = m->lines[(m->head + i) % cap];
                size_t n = strlen(line);

                if (i > 0)
                        m->joined[len++] = '\n';
                memcpy(m->joined + len, line, n);
                len += n;
        }
        m->joined[len] = '\0';
        *out_len = len;
        return 0;
}

int kmsg_matcher_feed(struct kmsg_matcher *m, const struct kmsg_record *rec,
                      kmsg_hit_cb cb, void *ctx)
{
        const struct kmsg_rules *rs = m->rules;
        size_t len;
        int hits = 0, r;

        if (rec->usec < m->cutoff_us) {
                m->old++;
                return 0;
        }
        r = push(m, rec->msg, rec->msg_len);
        if (r == 0)
                r = join(m, &len);
        if (r < 0)
                return r;
        for (size_t i = 0; i < rs->count; i++) {
                const struct kmsg_rule *rule = &rs->rules[i];
                struct kmsg_hit hit;
                PCRE2_SIZE *ov;
                size_t start;

                if (pcre2_match(rule->code, (PCRE2_SPTR)m->joined, len, 0, 0,
                                rule->match, NULL) < 0)
                        continue;
                ov = pcre2_get_ovector_pointer(rule->match);
                /* The message is every line the match touches, whole. */
                start = ov[0];
                while (start > 0 && m->joined[start - 1] != '\n')
                        start--;
                m->counts[i]++;
                if (rule->type == KMSG_PERMANENT) {
                        /* A condition holds one reason at a time. */
                        for (size_t j = 0; j < rs->count; j++)
                                if (j != i &&
                                    rs->rules[j].type == KMSG_PERMANENT &&
                                    strcmp(rs->rules[j].condition,
                                           rule->condition) == 0)
                                        m->active[j] = false;
                        m->active[i] = true;
                }
                hit.rule = i;
                hit.type = rule->type;
                hit.reason = rule->reason;
                hit.condition = rule->condition;
                hit.message = m->joined + start;
                hits++;
                if (cb != NULL)
                        cb(ctx, &hit);
        }
        return hits;
}

uint64_t kmsg_matcher_count(const struct kmsg_matcher *m, size_t rule)
{
        return rule < m->rules->count ? m->counts[rule] : 0;
}

bool kmsg_matcher_active(const struct kmsg_matcher *m, size_t rule)
{
        return rule < m->rules->count && m->active[rule];
}

uint64_t kmsg_matcher_old(const struct kmsg_matcher *m)
{
        return m->old;
}
