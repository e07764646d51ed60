/* The per-stream rule state machine (§4.2), driven by lines and by the
 * caller's clock. Nothing here allocates after logmon_stream_new. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

        /* The head memos after the rule states, in the same block. */
        s = calloc(1, sizeof(*s) + rs->n * sizeof(s->st[0]) +
                              rs->heads * sizeof(s->memo[0]));
        if (s == NULL)
                return NULL;
        s->memo = (struct logmon_head_memo *)&s->st[rs->n];
        /* Match data sized for the widest pattern, made once: with it the
         * interpreter keeps its backtracking frames between matches, so a
         * line costs no allocation even without JIT. */
        s->md = pcre2_match_data_create(rs->max_pairs, NULL);
        /* Zeroed: PCRE2's JIT reads ahead of a subject's end in whole
         * words (within the buffer), which valgrind would otherwise
         * report as a use of uninitialised bytes. Mapped rather than
         * calloc'd: only a line with invalid UTF-8 touches it, so most
         * streams never hold a page of it, where calloc wrote all 64 KiB
         * (4 MiB of the agent's memory with rules on 64 ranks). */
        s->fixed = mmap(NULL, LOGMON_FIXED_MAX, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s->fixed == MAP_FAILED)
                s->fixed = NULL;
        s->mctx = pcre2_match_context_copy(rs->mctx);
        /* The 32 KiB default on the machine stack gives up on patterns
         * like (a|b)* over long lines that Python handles. */
        if (rs->jit)
                s->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024,
                                                      NULL);
        if (s->md == NULL || s->fixed == NULL || s->mctx == NULL ||
            (rs->jit && s->jit_stack == NULL)) {
                pcre2_jit_stack_free(s->jit_stack);
                pcre2_match_context_free(s->mctx);
                pcre2_match_data_free(s->md);
                if (s->fixed != NULL)
                        munmap(s->fixed, LOGMON_FIXED_MAX);
                free(s);
                errno = ENOMEM;
                return NULL;
        }
        if (s->jit_stack != NULL)
                pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
        s->rs = logmon_ruleset_ref(rs);
        rule_states_reset(s);
        return s;
}

void logmon_stream_free(struct logmon_stream *s)
{
        if (s == NULL)
                return;
        pcre2_match_data_free(s->md);
        pcre2_jit_stack_free(s->jit_stack);
        pcre2_match_context_free(s->mctx);
        munmap(s->fixed, LOGMON_FIXED_MAX);
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

static void set_state(struct logmon_stream *s, size_t i,
                      enum logmon_state to, struct logmon_events *out)
{
        struct logmon_rule_state *st = &s->st[i];

        if (st->state == to)
                return;
        push(out, i, LOGMON_EVENT_STATE, st->state, to);
        st->state = to;
        s->states_changed = true;
}

static int run(const struct logmon_stream *s, const pcre2_code *code,
               const char *line, size_t len, size_t start)
{
        /* With every pattern of the set compiled (rule.c keeps another
         * form only if it compiled too), PCRE2's JIT fast path skips the
         * checks pcre2_match makes on each call: a quarter of the cost
         * of a line that no rule matches. The line was made valid UTF-8
         * by sanitize(). */
        if (s->rs->jit)
                return pcre2_jit_match(code, (PCRE2_SPTR)line, len, start,
                                       PCRE2_NO_UTF_CHECK, s->md,
                                       s->mctx);
        return pcre2_match(code, (PCRE2_SPTR)line, len, start,
                           PCRE2_NO_UTF_CHECK, s->md, s->mctx);
}

/* A line with more candidate starts than this is left to the full form,
 * which makes the same attempts within one call. */
#define REST_TRIES_MAX 16

/* Occurrences of a literal's first byte looked at before a search for
 * the literal gives up and lets PCRE2 answer: a bound on the cost of a
 * line made of that byte. */
#define LITERAL_TRIES_MAX 64

static uint64_t load8(const char *p)
{
        uint64_t w;

        memcpy(&w, p, sizeof(w));
        return w;
}

/* Whether lit starts at p: its first and last bytes, which turn down
 * most false starts, then eight bytes at a time, the last eight
 * overlapping the ones before, rather than through memcmp, whose call
 * and dispatch cost more than the comparison for literals of a log
 * pattern's length. */
static bool literal_at(const char *p, const struct logmon_literal *lit)
{
        size_t n = lit->len, i;

        if (p[0] != lit->bytes[0] || p[n - 1] != lit->bytes[n - 1])
                return false;
        if (n < 8)
                return memcmp(p, lit->bytes, n) == 0;
        for (i = 0; i + 8 < n; i += 8)
                if (load8(p + i) != load8(lit->bytes + i))
                        return false;
        return load8(p + n - 8) == load8(lit->bytes + n - 8);
}

/* The last occurrence of lit that lies wholly in [from, end): 1 with its
 * start in *out, 0 when there is none, -1 when the search gave up. The
 * anchor byte is looked for with memrchr. */
static int last_literal(const char *from, const char *end,
                        const struct logmon_literal *lit, const char **out)
{
        size_t n = lit->len, k = lit->anchor;
        const char *lo, *at;
        int tries = 0;

        if (end < from || (size_t)(end - from) < n)
                return 0;
        /* Where the anchor of an occurrence within [from, end) can be. */
        lo = from + k;
        at = end - n + k + 1;
        while (at > lo) {
                at = memrchr(lo, lit->bytes[k], (size_t)(at - lo));
                if (at == NULL)
                        return 0;
                if (literal_at(at - k, lit)) {
                        *out = at - k;
                        return 1;
                }
                if (++tries > LITERAL_TRIES_MAX)
                        return -1;
        }
        return 0;
}

/* The first occurrence of lit that lies wholly in [from, end): 1 with
 * its start in *out, 0 when there is none, -1 when the search gave up.
 * glibc's memmem sets up a shift table on every call, which costs more
 * than this on a log line. */
static inline int first_literal(const char *from, const char *end,
                                const struct logmon_literal *lit,
                                const char **out)
{
        size_t n = lit->len, k = lit->anchor;
        const char *at, *last;
        int tries = 0;

        if (end < from || (size_t)(end - from) < n)
                return 0;
        at = from + k;
        last = end - n + k;
        while (at <= last) {
                at = memchr(at, lit->bytes[k], (size_t)(last - at) + 1);
                if (at == NULL)
                        return 0;
                if (literal_at(at - k, lit)) {
                        *out = at - k;
                        return 1;
                }
                if (++tries > LITERAL_TRIES_MAX)
                        return -1;
                at++;
        }
        return 0;
}

/* False only when the line certainly does not hold lit. */
static inline bool may_contain(const char *line, size_t len,
                               const struct logmon_literal *lit)
{
        const char *at;

        return first_literal(line, line + len, lit, &at) != 0;
}

/* head anchored at start: 1 with where its first way of matching ends
 * in *end, 0 when it does not match there, -1 at a limit. A shared head
 * (rule.c, share_heads()) runs once per line and start. */
static int run_head(struct logmon_stream *s, const struct logmon_regex *p,
                    const char *line, size_t len, size_t start,
                    size_t *end)
{
        struct logmon_head_memo *memo =
                p->head_id >= 0 ? &s->memo[p->head_id] : NULL;
        int rc;

        if (memo != NULL && memo->head_seq == s->line_seq &&
            memo->head_start == start) {
                *end = memo->head_end;
                return memo->head_rc;
        }
        rc = run(s, p->head_ascii, line, len, start);
        rc = rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
        *end = rc > 0 ? pcre2_get_ovector_pointer(s->md)[1] : start;
        if (memo != NULL) {
                memo->head_seq = s->line_seq;
                memo->head_start = start;
                memo->head_rc = rc;
                memo->head_end = *end;
        }
        return rc;
}

/* The split rest form (rule.c) at start: 1 or 0 as rest_ascii anchored
 * there would answer, with its captures in s->md when captures is true,
 * or -1 when only rest_ascii can say (head's first way of matching
 * leaves tail no fit while the literal occurs where another way could
 * reach it, or a limit). Without captures only the answer counts, and
 * the tail's lazy form tries the literal's occurrences in line order. */
static int match_split(struct logmon_stream *s, const struct logmon_regex *p,
                       bool captures, const char *line, size_t len,
                       size_t start)
{
        const struct logmon_literal *lit = &p->tail_literal;
        const pcre2_code *tail = captures || p->tail_quick == NULL ?
                                         p->tail_ascii :
                                         p->tail_quick;
        const char *head_end, *limit, *at;
        size_t n = lit->len, end;
        int tries = 0, rc, found;

        rc = run_head(s, p, line, len, start, &end);
        if (rc <= 0)
                return rc;
        head_end = line + end;
        /* With captures, the occurrences from the line's end back, as
         * rest_ascii tries them. Without, only whether tail fits somewhere
         * from head_end on counts: the occurrences in line order, the
         * first of which is usually the one (the literal's anchor byte
         * may well occur again after it, and a search from the end back
         * stops at each). */
        for (at = NULL;;) {
                found = captures ?
                        last_literal(head_end,
                                     at == NULL ? line + len : at + n - 1,
                                     lit, &at) :
                        first_literal(at == NULL ? head_end : at + 1,
                                      line + len, lit, &at);
                if (found == 0)
                        break;
                if (found < 0 || ++tries > REST_TRIES_MAX)
                        return -1;
                rc = run(s, tail, line, len, (size_t)(at - line));
                if (rc >= 0)
                        return 1;
                if (rc != PCRE2_ERROR_NOMATCH)
                        return -1;
        }
        /* Tail does not fit at any occurrence from head_end on, whatever
         * head matched (it has no group tail could refer to). Another way
         * of matching head ends earlier, so only an occurrence starting
         * between start and head_end could still make a match. */
        limit = head_end + n - 1 < line + len ? head_end + n - 1 : line + len;
        found = last_literal(line + start, limit, lit, &at);
        return found == 0 ? 0 : -1;
}

/* The rest form (rule.c) at each occurrence of its first code unit, from
 * the line's end back: 1 or 0 as full would answer, with full's captures
 * in s->md, or -1 when it gave up (too many candidates, or a limit) and
 * full must answer instead. Most lines hold the first code unit once or
 * not at all, and then one attempt (or none) answers. Where it occurs
 * more often, one quick search first says whether any match remains and
 * where the leftmost starts, so that a line with many candidates and no
 * match costs one search, not an attempt at each (and, without
 * captures, answers). Where the rest form has a split form, that answers
 * first at each candidate. Captures are left in s->md only when asked
 * for. */
static int match_rest(struct logmon_stream *s, const struct logmon_regex *p,
                      bool captures, const char *line, size_t len)
{
        struct logmon_head_memo *memo =
                p->head_id >= 0 ? &s->memo[p->head_id] : NULL;
        const char *from = line, *at;
        bool several;
        int tries = 0, rc;

        if (memo != NULL && memo->scan_seq == s->line_seq) {
                at = memo->last;
                several = memo->several;
        } else {
                at = memrchr(line, p->first_unit, len);
                several = at != NULL &&
                          memchr(line, p->first_unit,
                                 (size_t)(at - line)) != NULL;
                if (memo != NULL) {
                        memo->scan_seq = s->line_seq;
                        memo->last = at;
                        memo->several = several;
                }
        }
        if (at == NULL)
                return 0;
        if (several) {
                rc = run(s, p->quick_ascii, line, len, 0);
                if (rc == PCRE2_ERROR_NOMATCH)
                        return 0;
                if (rc < 0)
                        return -1;
                if (!captures)
                        return 1;
                from = line + pcre2_get_ovector_pointer(s->md)[0];
        }
        for (;;) {
                if (++tries > REST_TRIES_MAX)
                        return -1;
                rc = p->head_ascii != NULL ?
                             match_split(s, p, captures, line, len,
                                         (size_t)(at - line)) :
                             -1;
                if (rc > 0)
                        return 1;
                if (rc < 0) {
                        rc = run(s, p->rest_ascii, line, len,
                                 (size_t)(at - line));
                        if (rc >= 0)
                                return 1;
                        if (rc != PCRE2_ERROR_NOMATCH)
                                return -1;
                }
                if (at == from)
                        return 0;
                at = memrchr(from, p->first_unit, (size_t)(at - from));
                if (at == NULL)
                        return 0;
        }
}


/* 1: match, 0: no match, -1: the match was abandoned at a limit (or an
 * internal PCRE2 error, which is equally a reason to report). With
 * captures, a match leaves in s->md the groups full would have found.
 * Without, the quick form answers alone unless it gave up at a limit.
 *
 * likely: the caller expects a match (LOGMON_MATCH_STREAK lines in a row
 * matched). The literal every match holds is then not looked for first:
 * on a matching line that search is pure cost. It is looked for before a
 * limit is reported, so the answer never depends on the guess: a line
 * without the literal is always a plain "no". */
static int __attribute__((noinline))
match_forms(struct logmon_stream *s, const struct logmon_regex *p,
            bool captures, bool likely, const char *line, size_t len)
{
        bool ascii = s->line_ascii && p->full_ascii != NULL;
        const pcre2_code *quick = NULL;
        int rc;

        if (!s->line_has_lf) {
                /* Without captures the rest form is worth it only where
                 * another pattern has already run, or will reuse, its
                 * head on this line. */
                if (s->line_ascii && p->rest_ascii != NULL &&
                    (captures || p->head_id >= 0)) {
                        rc = match_rest(s, p, captures, line, len);
                        if (rc >= 0)
                                return rc;
                } else {
                        quick = s->line_ascii && p->quick_ascii != NULL ?
                                        p->quick_ascii : p->quick;
                }
        }
        if (quick != NULL) {
                rc = run(s, quick, line, len, 0);
                if (rc == PCRE2_ERROR_NOMATCH)
                        return 0;
                if (rc >= 0 && !captures)
                        return 1;
        }
        rc = run(s, ascii ? p->full_ascii : p->full, line, len, 0);
        if (rc >= 0)
                return 1;
        if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL)
                return 0;
        if (likely && p->literal.len != 0 &&
            !may_contain(line, len, &p->literal))
                return 0;
        return -1;
}

/* The literal first, here, and the forms only for a line that holds it:
 * most rules turn most lines down this way, and then the call into the
 * forms with all it keeps in registers is not made. Any line, with \n or
 * not: every match holds the literal. */
static inline int match(struct logmon_stream *s,
                        const struct logmon_regex *p, bool captures,
                        bool likely, const char *line, size_t len)
{
        if (p->literal.len != 0 && !likely &&
            !may_contain(line, len, &p->literal))
                return 0;
        return match_forms(s, p, captures, likely, line, len);
}

static bool capture_value(struct logmon_stream *s, const char *line,
                          double *out)
{
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);

        /* An optional group that took no part is no more a number than
         * "abc" is (Python's float(None) raises as well). */
        if (ov[2] == PCRE2_UNSET)
                return false;
        return logmon__parse_float(line + ov[2], ov[3] - ov[2],
                                   s->rs->c_locale, out);
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

/* Steps 4 and 5 of §4.2: strict, so exactly at the cut-off is still in
 * time. */
static bool overdue(const struct logmon_stream *s,
                    const struct logmon_rule *r,
                    const struct logmon_rule_state *st, uint64_t eff)
{
        if (!st->matched)
                return r->has_cutoff && eff - s->created > r->cutoff_ms;
        return r->has_freq && eff - st->last_match > r->freq_ms;
}

static void record(struct logmon_rule_state *st, const char *line,
                   size_t len, uint64_t eff)
{
        size_t keep = len < sizeof(st->last_line) ? len : sizeof(st->last_line);

        /* memmove: GCC expands a memcpy of unknown size into "rep movsq",
         * whose start-up cost was a quarter of this function on a
         * 110-byte line; libc's memmove copies it with vector moves. */
        memmove(st->last_line, line, keep);
        st->last_len = keep;
        st->last_capped = keep < len;
        st->matched = true;
        st->last_match = eff;
        st->matches++;
}

/* Length of the valid UTF-8 sequence at p, or 0 (overlongs, surrogates
 * and code points past U+10FFFF are invalid, as for Python's decoder). */
size_t logmon__utf8_len(const unsigned char *p, size_t n)
{
        size_t len, i;
        uint32_t cp;

        if (p[0] >= 0xc2 && p[0] <= 0xdf)
                len = 2, cp = p[0] & 0x1fu;
        else if (p[0] >= 0xe0 && p[0] <= 0xef)
                len = 3, cp = p[0] & 0x0fu;
        else if (p[0] >= 0xf0 && p[0] <= 0xf4)
                len = 4, cp = p[0] & 0x07u;
        else
                return 0;
        if (len > n)
                return 0;
        for (i = 1; i < len; i++) {
                if ((p[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (p[i] & 0x3fu);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
                return 0;
        return len;
}

/*
 * The reference read logs as text; we see bytes. A line with invalid
 * UTF-8 is matched as if decoded with errors="replace": each bad byte
 * becomes U+FFFD, so "." still crosses it and ".*loss=(\d+)" still finds
 * the loss. The patterns are then always given valid UTF-8, which lets
 * them run with PCRE2_NO_UTF_CHECK. Valid lines (nearly all) are matched
 * in place, uncopied, after one scan. A repaired line is cut at
 * LOGMON_FIXED_MAX bytes, on a character boundary.
 */
static const char *sanitize(struct logmon_stream *s, const char *line,
                            size_t len, size_t *out_len)
{
        const unsigned char *p = (const unsigned char *)line;
        size_t i = 0, o, k;

        /* Lines are nearly always all ASCII: look at 32 bytes per step,
         * then eight, until one has its top bit set. */
        for (; i + 32 <= len; i += 32) {
                uint64_t word[4];

                memcpy(word, p + i, 32);
                if ((word[0] | word[1] | word[2] | word[3]) &
                    0x8080808080808080ull)
                        break;
        }
        for (; i + 8 <= len; i += 8) {
                uint64_t word;

                memcpy(&word, p + i, 8);
                if (word & 0x8080808080808080ull)
                        break;
        }
        /* Fewer than eight bytes left unchecked (the loops ran out, no
         * word had its top bit set): the last eight as one word that
         * overlaps the ones checked, rather than one at a time (a quarter
         * of this scan on a 110-byte line). */
        if (len - i < 8 && len >= 8) {
                uint64_t word;

                memcpy(&word, p + len - 8, 8);
                if (!(word & 0x8080808080808080ull))
                        i = len;
        }
        while (i < len && p[i] < 0x80)
                i++;
        s->line_ascii = i == len;
        for (; i < len; i += k) {
                if (p[i] < 0x80)
                        k = 1;
                else if ((k = logmon__utf8_len(p + i, len - i)) == 0)
                        break;
        }
        if (i == len) {
                *out_len = len;
                return line;
        }
        memcpy(s->fixed, line, i);
        o = i;
        while (i < len) {
                k = p[i] < 0x80 ? 1 : logmon__utf8_len(p + i, len - i);
                if (o + (k == 0 ? 3 : k) > LOGMON_FIXED_MAX)
                        break;
                if (k == 0) {
                        memcpy(s->fixed + o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                } else {
                        memcpy(s->fixed + o, p + i, k);
                        o += k;
                        i += k;
                }
        }
        *out_len = o;
        return s->fixed;
}

static void eval_line(struct logmon_stream *s, size_t i, const char *line,
                      size_t len, const char *subj, size_t slen,
                      uint64_t eff, struct logmon_events *out)
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

        m = match(s, &r->log, r->metric && !r->fault_on_match,
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
            !capture_value(s, subj, &value)) {
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
                stop = match(s, &r->stop, false, false, subj, slen);
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
                  st->consecutive >= r->datapoints ? LOGMON_SLOW :
                                                     LOGMON_HEALTHY,
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

/* 16 bytes as one value: GCC's vector extensions, which compile to SSE2
 * on x86-64 and to NEON on arm64, with no intrinsics of either. */
typedef uint8_t bytes16 __attribute__((vector_size(16)));

static bytes16 load16(const char *p)
{
        bytes16 v;

        memcpy(&v, p, sizeof(v));
        return v;
}

/* True when the line is all ASCII and holds no \n, which is what nearly
 * every line is: then sanitize() has nothing to do and every form
 * applies. 16 bytes a step, the last step overlapping the one before;
 * a byte has its top bit set in the sum when it is past ASCII or a \n
 * (the comparison gives 0xff): one pass instead of a word-at-a-time
 * scan and a memchr for \n. False sends the line to the scans that tell
 * which. */
static bool plain_ascii(const char *line, size_t len)
{
        const bytes16 lf = { '\n', '\n', '\n', '\n', '\n', '\n', '\n', '\n',
                             '\n', '\n', '\n', '\n', '\n', '\n', '\n', '\n' };
        bytes16 sum = { 0 }, v;
        uint64_t half[2];
        size_t i;

        if (len < sizeof(v)) {
                for (i = 0; i < len; i++)
                        if ((unsigned char)line[i] >= 0x80 || line[i] == '\n')
                                return false;
                return true;
        }
        for (i = 0; i + sizeof(v) < len; i += sizeof(v)) {
                v = load16(line + i);
                sum |= v | (bytes16)(v == lf);
        }
        v = load16(line + len - sizeof(v));
        sum |= v | (bytes16)(v == lf);
        memcpy(half, &sum, sizeof(half));
        return ((half[0] | half[1]) & 0x8080808080808080ull) == 0;
}

void logmon_stream_feed(struct logmon_stream *s, const char *line,
                        size_t len, uint64_t now_ms,
                        struct logmon_events *out)
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
        if (plain_ascii(line, len)) {
                subj = line;
                slen = len;
                s->line_ascii = true;
                s->line_has_lf = false;
        } else {
                subj = sanitize(s, line, len, &slen);
                s->line_has_lf = memchr(subj, '\n', slen) != NULL;
        }
        s->line_seq++;
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
