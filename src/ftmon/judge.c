/* SPDX-License-Identifier: Apache-2.0 */
/* The deadlines of one rank and the straggler windows: pure, handed now,
 * for the unit tests. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/ftmon.h"

const char *hp_ft_miss_name(enum hp_ft_miss miss)
{
        static const char *const names[] = {
                [HP_FT_OK] = "ok",
                [HP_FT_MISS_INITIAL] = "initial heartbeat",
                [HP_FT_MISS_HEARTBEAT] = "heartbeat",
                [HP_FT_MISS_SECTION] = "section",
                [HP_FT_MISS_OUT_OF_SECTION] = "out-of-section",
        };
        return (unsigned)miss < HP_FT_MISS_COUNT ? names[miss] : "?";
}

/* Keeps the earliest deadline seen so far in *best. */
static void consider(struct hp_ft_judgement *best, enum hp_ft_miss miss,
                     int section, uint64_t since, uint64_t timeout)
{
        uint64_t deadline = since + timeout;

        if (best->miss != HP_FT_OK && best->deadline_ms <= deadline)
                return;
        best->miss = miss;
        best->section = section;
        best->since_ms = since;
        best->timeout_ms = timeout;
        best->deadline_ms = deadline;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
        return a < b ? a : b;
}

uint64_t hp_ft_judge(const struct hp_ft_timeouts *t, int nsections,
                     const struct hp_ft_view *v, uint64_t now_ms,
                     struct hp_ft_judgement *out)
{
        struct hp_ft_judgement best = { .miss = HP_FT_OK, .section = -1 };
        /* The shortest timeout of a deadline that has not started: the
         * latest we may look again without missing it. */
        uint64_t ahead = UINT64_MAX;
        bool any_open = false;

        *out = best;
        if (v->init_ms == 0)
                return UINT64_MAX;
        if (v->hb_count == 0 && t->initial_ms > 0)
                consider(&best, HP_FT_MISS_INITIAL, -1, v->init_ms,
                         t->initial_ms);
        else if (v->hb_count > 0 && t->subsequent_ms > 0)
                consider(&best, HP_FT_MISS_HEARTBEAT, -1, v->hb_ms,
                         t->subsequent_ms);
        /* After the first heartbeat the subsequent timeout applies. */
        if (v->hb_count == 0 && t->subsequent_ms > 0)
                ahead = min_u64(ahead, t->subsequent_ms);
        for (int i = 0; i < nsections && i < HP_FT_SECTIONS_MAX; i++) {
                if (v->section_ms[i] != 0) {
                        any_open = true;
                        if (t->section_ms[i] > 0)
                                consider(&best, HP_FT_MISS_SECTION, i,
                                         v->section_ms[i], t->section_ms[i]);
                } else if (t->section_ms[i] > 0) {
                        ahead = min_u64(ahead, t->section_ms[i]);
                }
        }
        if (!any_open && v->oos_ms != 0 && t->oos_ms > 0)
                consider(&best, HP_FT_MISS_OUT_OF_SECTION, -1, v->oos_ms,
                         t->oos_ms);
        else if (t->oos_ms > 0)
                ahead = min_u64(ahead, t->oos_ms);
        if (best.miss != HP_FT_OK && best.deadline_ms <= now_ms) {
                *out = best;
                return UINT64_MAX;
        }
        if (ahead != UINT64_MAX)
                ahead = now_ms + ahead;
        return best.miss != HP_FT_OK ? min_u64(best.deadline_ms, ahead)
                                     : ahead;
}

int hp_ft_stragglers_init(struct hp_ft_stragglers *s, int nranks,
                          double ratio, int windows)
{
        size_t n = nranks > 0 ? (size_t)nranks : 1;

        memset(s, 0, sizeof(*s));
        s->nranks = nranks;
        s->ratio = ratio;
        s->windows = windows > 0 ? windows : 1;
        s->last = calloc(n, sizeof(*s->last));
        s->below = calloc(n, sizeof(*s->below));
        s->flagged = calloc(n, sizeof(*s->flagged));
        s->speed = calloc(n, sizeof(*s->speed));
        s->scratch = calloc(n, sizeof(*s->scratch));
        if (s->last == NULL || s->below == NULL || s->flagged == NULL ||
            s->speed == NULL || s->scratch == NULL) {
                hp_ft_stragglers_free(s);
                return -ENOMEM;
        }
        hp_ft_stragglers_reset(s);
        return 0;
}

void hp_ft_stragglers_free(struct hp_ft_stragglers *s)
{
        free(s->last);
        free(s->below);
        free(s->flagged);
        free(s->speed);
        free(s->scratch);
        memset(s, 0, sizeof(*s));
}

void hp_ft_stragglers_reset(struct hp_ft_stragglers *s)
{
        s->last_ms = 0;
        for (int i = 0; i < s->nranks; i++) {
                s->last[i] = HP_FT_NO_COUNT;
                s->below[i] = 0;
                s->flagged[i] = false;
                s->speed[i] = -1.0;
        }
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

int hp_ft_stragglers_window(struct hp_ft_stragglers *s,
                            const uint64_t *counts, uint64_t now_ms,
                            bool *newly)
{
        size_t n = 0;
        double median;
        int first = -1;
        bool have_window = s->last_ms != 0 && now_ms > s->last_ms;

        for (int i = 0; i < s->nranks; i++) {
                newly[i] = false;
                s->speed[i] = -1.0;
                /* A rate needs a count at both ends of the window, and a
                 * count that went back is a restarted client. */
                if (have_window && counts[i] != HP_FT_NO_COUNT &&
                    s->last[i] != HP_FT_NO_COUNT && counts[i] >= s->last[i])
                        s->scratch[n++] = (double)(counts[i] - s->last[i]);
        }
        /* Relative speed needs others to compare with, and some
         * progress: when no rank moved, it is a hang, not a straggler. */
        if (n >= 2) {
                qsort(s->scratch, n, sizeof(*s->scratch), cmp_double);
                median = n % 2 ? s->scratch[n / 2]
                               : (s->scratch[n / 2 - 1] + s->scratch[n / 2]) /
                                         2.0;
        } else {
                median = 0.0;
        }
        for (int i = 0; i < s->nranks; i++) {
                bool rated = have_window && counts[i] != HP_FT_NO_COUNT &&
                             s->last[i] != HP_FT_NO_COUNT &&
                             counts[i] >= s->last[i];

                if (!rated || median <= 0.0) {
                        s->below[i] = 0;
                } else {
                        s->speed[i] = (double)(counts[i] - s->last[i]) /
                                      median;
                        if (s->ratio > 0.0 && s->speed[i] < s->ratio) {
                                s->below[i]++;
                        } else {
                                s->below[i] = 0;
                                s->flagged[i] = false;
                        }
                        if (s->below[i] >= s->windows && !s->flagged[i]) {
                                s->flagged[i] = true;
                                newly[i] = true;
                                if (first < 0)
                                        first = i;
                        }
                }
                s->last[i] = counts[i];
        }
        s->last_ms = now_ms;
        return first;
}
