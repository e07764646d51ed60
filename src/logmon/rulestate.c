/* SPDX-License-Identifier: Apache-2.0 */
/* The per-stream rule state machine (docs/rules-and-replay.md, "How a rule
 * is judged"): a logmon_stream, driven by lines and by the caller's clock.
 * Whether a line matches a pattern is the matcher's answer (matcher.h);
 * what a match or its absence does to a rule is decided here. Nothing here
 * allocates after logmon_stream_new. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

static const char *const state_names[] = {
        [LOGMON_WAITING] = "WAITING", [LOGMON_HEALTHY] = "HEALTHY",
        [LOGMON_SLOW] = "SLOW",       [LOGMON_HANGING] = "HANGING",
        [LOGMON_FAULTED] = "FAULTED",
};

static const char *const reason_prefix[] = {
        [LOGMON_SLOW] = "LogSlow_",
        [LOGMON_HANGING] = "LogHang_",
        [LOGMON_FAULTED] = "LogFault_",
};

const char *logmon_reason_prefix(enum logmon_state state)
{
        if (state < LOGMON_SLOW ||
            (size_t)state >= HP_ARRAY_SIZE(reason_prefix))
                return NULL;
        return reason_prefix[state];
}

const char *logmon_state_name(enum logmon_state state)
{
        if ((unsigned)state >= HP_ARRAY_SIZE(state_names))
                return "?";
        return state_names[state];
}

int logmon_state_parse(const char *name, enum logmon_state *out)
{
        size_t i;

        for (i = 0; i < HP_ARRAY_SIZE(state_names); i++) {
                if (strcmp(name, state_names[i]) == 0) {
                        *out = (enum logmon_state)i;
                        return 0;
                }
        }
        return HP_ECONFIG;
}

bool logmon_state_transition_allowed(enum logmon_state from,
                                     enum logmon_state to)
{
        if (from == to || from == LOGMON_FAULTED)
                return false;
        return to != LOGMON_WAITING;
}

static void rule_states_reset(struct logmon_stream *s)
{
        size_t i;

        for (i = 0; i < s->rs->n; i++) {
                struct logmon_rule_state *st = &s->st[i];

                st->state = LOGMON_WAITING;
                st->retired = false;
                st->matched = false;
                st->streak = 0;
                st->last_match = 0;
                st->consecutive = 0;
                st->matches = 0;
                st->nonnumeric = 0;
                st->limit_hits = 0;
                st->last_len = 0;
                st->last_capped = false;
        }
        s->state = LOGMON_WAITING;
        s->reason_rule = -1;
        s->reason[0] = '\0';
}

struct logmon_stream *logmon_stream_new(struct logmon_ruleset *rs)
{
        struct logmon_stream *s;
        int err;

        /* The matcher's head memos after the rule states, in the same
         * block. */
        s = calloc(1, sizeof(*s) + rs->n * sizeof(s->st[0]) +
                              rs->heads * sizeof(struct logmon_head_memo));
        if (s == NULL)
                return NULL;
        err = logmon__matcher_init(&s->m, rs->mctx, rs->max_pairs, rs->jit,
                                   rs->c_locale,
                                   (struct logmon_head_memo *)&s->st[rs->n]);
        if (err != 0) {
                free(s);
                errno = -err;
                return NULL;
        }
        s->rs = logmon_ruleset_ref(rs);
        rule_states_reset(s);
        return s;
}

void logmon_stream_free(struct logmon_stream *s)
{
        if (s == NULL)
                return;
        logmon__matcher_fini(&s->m);
        logmon_ruleset_unref(s->rs);
        free(s);
}

/* A caller's clock that steps back (two sources, a bug) must not make an
 * unsigned difference wrap into an enormous age. */
static uint64_t clamp_now(struct logmon_stream *s, uint64_t now)
{
        if (now < s->last_now)
                return s->last_now;
        s->last_now = now;
        return now;
}

void logmon_stream_start(struct logmon_stream *s, uint64_t now_ms)
{
        uint64_t now = clamp_now(s, now_ms);

        if (!s->installed) {
                s->installed = true;
                s->running = true;
                s->paused = 0;
                s->created = now;
                return;
        }
        logmon_stream_resume(s, now);
}

void logmon_stream_suspend(struct logmon_stream *s, uint64_t now_ms)
{
        uint64_t now = clamp_now(s, now_ms);

        if (!s->running)
                return;
        s->running = false;
        s->suspended_at = now;
}

void logmon_stream_resume(struct logmon_stream *s, uint64_t now_ms)
{
        uint64_t now = clamp_now(s, now_ms);

        if (!s->installed || s->running)
                return;
        s->paused += now - s->suspended_at;
        s->running = true;
}

void logmon_stream_clear(struct logmon_stream *s)
{
        s->installed = false;
        s->running = false;
        s->paused = 0;
        s->ignored = 0;
        rule_states_reset(s);
}

bool logmon_stream_running(const struct logmon_stream *s)
{
        return s->running;
}

static void push(struct logmon_events *out, size_t rule,
                 enum logmon_event_kind kind, unsigned a, unsigned b)
{
        struct logmon_event *e;

        /* The array holds three events per rule and a call makes at most
         * that many, so this bound is only a guard. */
        if (out == NULL || out->n >= LOGMON_EVENTS_MAX)
                return;
        e = &out->ev[out->n++];
        e->rule = (uint32_t)rule;
        e->kind = (uint8_t)kind;
        e->pattern = kind == LOGMON_EVENT_LIMIT ? (uint8_t)a : 0;
        e->from = kind == LOGMON_EVENT_STATE ? (uint8_t)a : 0;
        e->to = kind == LOGMON_EVENT_STATE ? (uint8_t)b : 0;
}

static void set_state(struct logmon_stream *s, size_t i, enum logmon_state to,
                      struct logmon_events *out)
{
        struct logmon_rule_state *st = &s->st[i];

        if (st->state == to)
                return;
        push(out, i, LOGMON_EVENT_STATE, st->state, to);
        st->state = to;
        s->states_changed = true;
}

static bool compare(enum logmon_op op, double v, double t)
{
        switch (op) {
        case LOGMON_OP_GT:
                return v > t;
        case LOGMON_OP_GTEQ:
                return v >= t;
        case LOGMON_OP_LT:
                return v < t;
        case LOGMON_OP_LTEQ:
                return v <= t;
        case LOGMON_OP_EQ:
                return v == t;
        case LOGMON_OP_NONE:
                break;
        }
        return false;
}

/* Effective time: the caller's clock minus the time spent suspended. */
static uint64_t effective(const struct logmon_stream *s, uint64_t now)
{
        return now - s->paused;
}

/* The deadlines of docs/rules-and-replay.md ("How a rule is judged"):
 * strict, so exactly at the cut-off is still in time. */
static bool overdue(const struct logmon_stream *s,
                    const struct logmon_rule *r,
                    const struct logmon_rule_state *st, uint64_t eff)
{
        if (!st->matched)
                return r->has_cutoff && eff - s->created > r->cutoff_ms;
        return r->has_freq && eff - st->last_match > r->freq_ms;
}

static void record(struct logmon_rule_state *st, const char *line, size_t len,
                   uint64_t eff)
{
        size_t keep = len < sizeof(st->last_line) ? len
                                                  : sizeof(st->last_line);

        /* memmove: GCC expands a memcpy of unknown size into "rep movsq",
         * whose start-up costs more than copying a log line does; libc's
         * memmove copies it with vector moves. */
        memmove(st->last_line, line, keep);
        st->last_len = keep;
        st->last_capped = keep < len;
        st->matched = true;
        st->last_match = eff;
        st->matches++;
}

static void eval_line(struct logmon_stream *s, size_t i, const char *line,
                      size_t len, const char *subj, size_t slen, uint64_t eff,
                      struct logmon_events *out)
{
        const struct logmon_rule *r = &s->rs->rules[i];
        struct logmon_rule_state *st = &s->st[i];
        double value = 0;
        int m, stop;

        /* FAULTED is final for the rule, not only for the stream: the
         * reference could move a faulted rule on to HANGING or HEALTHY
         * and then die publishing that. A retired rule has said its last
         * word. */
        if (st->state == LOGMON_FAULTED || st->retired)
                return;

        m = logmon__match(&s->m, &r->log, r->metric && !r->fault_on_match,
                          st->streak >= LOGMON_MATCH_STREAK, subj, slen);
        if (m <= 0)
                st->streak = 0;
        else if (st->streak < LOGMON_MATCH_STREAK)
                st->streak++;
        if (m < 0) {
                st->limit_hits++;
                push(out, i, LOGMON_EVENT_LIMIT, LOGMON_PATTERN_LOG, 0);
                m = 0;
        }
        /* The metric is read before anything is recorded, so that a line
         * whose capture is not a number is, for this rule only, a line
         * that did not match; the reference raised here and skipped the
         * remaining rules too. */
        if (m > 0 && r->metric && !r->fault_on_match &&
            !logmon__match_number(&s->m, subj, &value)) {
                st->nonnumeric++;
                push(out, i, LOGMON_EVENT_NONNUMERIC, 0, 0);
                m = 0;
        }
        if (m > 0) {
                record(st, line, len, eff);
                if (r->fault_on_match) {
                        set_state(s, i, LOGMON_FAULTED, out);
                        return;
                }
        }
        /* After the logPattern, so that a line matching both counts as a
         * match before it retires the rule. */
        if (r->stop.full != NULL) {
                stop = logmon__match(&s->m, &r->stop, false, false, subj,
                                     slen);
                if (stop < 0) {
                        st->limit_hits++;
                        push(out, i, LOGMON_EVENT_LIMIT, LOGMON_PATTERN_STOP,
                             0);
                } else if (stop > 0) {
                        st->retired = true;
                        set_state(s, i, LOGMON_HEALTHY, out);
                        return;
                }
        }
        if (m == 0) {
                if (overdue(s, r, st, eff))
                        set_state(s, i, LOGMON_HANGING, out);
                return;
        }
        if (!r->metric) {
                set_state(s, i, LOGMON_HEALTHY, out);
                return;
        }
        /* Consecutive matching lines over the threshold; a line that does
         * not match neither counts nor resets. nan compares false and so
         * resets, as in Python. */
        st->last_value = value;
        if (compare(r->op, value, r->threshold)) {
                if (st->consecutive < r->datapoints)
                        st->consecutive++;
        } else {
                st->consecutive = 0;
        }
        set_state(s, i,
                  st->consecutive >= r->datapoints ? LOGMON_SLOW
                                                   : LOGMON_HEALTHY,
                  out);
}

/* The stream's state is the highest rule state; its reason names the
 * first rule in configuration order in that state. Rule states never go
 * back to WAITING and FAULTED never changes, so the stream's transitions
 * stay within the published table without further checks. */
static void aggregate(struct logmon_stream *s, struct logmon_events *out)
{
        enum logmon_state top = LOGMON_WAITING;
        enum logmon_state old = s->state;
        size_t i;

        s->reason_rule = -1;
        for (i = 0; i < s->rs->n; i++) {
                if (s->st[i].state > top) {
                        top = s->st[i].state;
                        s->reason_rule = (int)i;
                }
        }
        s->state = top;
        if (top >= LOGMON_SLOW)
                snprintf(s->reason, sizeof(s->reason), "%s%s",
                         reason_prefix[top],
                         s->rs->rules[s->reason_rule].name);
        else {
                s->reason[0] = '\0';
                s->reason_rule = -1;
        }
        if (out != NULL && old != top) {
                out->stream_changed = true;
                out->stream_from = (uint8_t)old;
                out->stream_to = (uint8_t)top;
        }
}

static void events_reset(struct logmon_events *out)
{
        if (out == NULL)
                return;
        out->n = 0;
        out->stream_changed = false;
        out->stream_from = 0;
        out->stream_to = 0;
}

void logmon_stream_feed(struct logmon_stream *s, const char *line, size_t len,
                        uint64_t now_ms, struct logmon_events *out)
{
        const char *subj;
        uint64_t eff;
        size_t i, slen;

        events_reset(out);
        now_ms = clamp_now(s, now_ms);
        if (!s->running) {
                s->ignored++;
                return;
        }
        eff = effective(s, now_ms);
        subj = logmon__matcher_line(&s->m, line, len, &slen);
        s->states_changed = false;
        for (i = 0; i < s->rs->n; i++)
                eval_line(s, i, line, len, subj, slen, eff, out);
        /* A line that moved no rule leaves the stream's state as it was
         * (nearly every line of a healthy job). */
        if (s->states_changed)
                aggregate(s, out);
}

void logmon_stream_tick(struct logmon_stream *s, uint64_t now_ms,
                        struct logmon_events *out)
{
        uint64_t eff;
        size_t i;

        events_reset(out);
        now_ms = clamp_now(s, now_ms);
        if (!s->running)
                return;
        eff = effective(s, now_ms);
        for (i = 0; i < s->rs->n; i++) {
                struct logmon_rule_state *st = &s->st[i];

                if (st->state == LOGMON_FAULTED || st->retired)
                        continue;
                if (overdue(s, &s->rs->rules[i], st, eff))
                        set_state(s, i, LOGMON_HANGING, out);
        }
        aggregate(s, out);
}

/* When rule i turns HANGING unless a line matches, on the caller's clock;
 * UINT64_MAX when nothing but a line can change it (no cut-off or
 * frequency, FAULTED, retired). For a HANGING rule, when it did. */
static uint64_t rule_due(const struct logmon_stream *s, size_t i)
{
        const struct logmon_rule *r = &s->rs->rules[i];
        const struct logmon_rule_state *st = &s->st[i];
        uint64_t at;

        if (st->state == LOGMON_FAULTED || st->retired)
                return UINT64_MAX;
        if (!st->matched && r->has_cutoff)
                at = s->created + r->cutoff_ms + 1;
        else if (st->matched && r->has_freq)
                at = st->last_match + r->freq_ms + 1;
        else
                return UINT64_MAX;
        /* Back from effective time to the caller's clock. */
        return at + s->paused;
}

uint64_t logmon_stream_next_deadline(const struct logmon_stream *s)
{
        uint64_t best = UINT64_MAX, at;
        size_t i;

        if (!s->running)
                return UINT64_MAX;
        for (i = 0; i < s->rs->n; i++) {
                /* Only a match can take a rule out of HANGING. */
                if (s->st[i].state == LOGMON_HANGING)
                        continue;
                at = rule_due(s, i);
                if (at < best)
                        best = at;
        }
        return best;
}

enum logmon_state logmon_stream_state(const struct logmon_stream *s)
{
        return s->state;
}

const char *logmon_stream_reason(const struct logmon_stream *s)
{
        return s->reason;
}

int logmon_stream_reason_rule(const struct logmon_stream *s)
{
        return s->reason_rule;
}

int logmon_stream_rule_info(const struct logmon_stream *s, size_t i,
                            struct logmon_rule_info *out)
{
        const struct logmon_rule_state *st;

        if (i >= s->rs->n)
                return -EINVAL;
        st = &s->st[i];
        out->state = st->state;
        out->retired = st->retired;
        out->matched = st->matched;
        out->matches = st->matches;
        out->nonnumeric = st->nonnumeric;
        out->limit_hits = st->limit_hits;
        out->consecutive = st->consecutive;
        out->last_value = st->last_value;
        out->last_line = st->matched ? st->last_line : NULL;
        out->last_line_len = st->last_len;
        out->last_line_capped = st->last_capped;
        out->last_match_ms = st->matched ? st->last_match + s->paused : 0;
        out->due_ms = rule_due(s, i);
        return 0;
}

uint64_t logmon_stream_idle_ms(const struct logmon_stream *s, size_t i,
                               uint64_t now_ms)
{
        const struct logmon_rule_state *st;
        uint64_t eff;

        if (i >= s->rs->n)
                return UINT64_MAX;
        st = &s->st[i];
        eff = effective(s, now_ms);
        if (st->matched)
                return eff > st->last_match ? eff - st->last_match : 0;
        return eff > s->created ? eff - s->created : 0;
}

uint64_t logmon_stream_lines_ignored(const struct logmon_stream *s)
{
        return s->ignored;
}
