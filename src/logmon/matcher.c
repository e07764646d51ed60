/* SPDX-License-Identifier: Apache-2.0 */
/* The matcher: a pattern's text compiled into the forms that answer a
 * line soonest (struct logmon_regex, matcher.h), and a line matched with
 * the cheapest form that gives the pattern's own answer. Pure and, once
 * a matcher is made, allocation-free. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hyperpod/common.h"
#include "matcher.h"

/* ---------------------------------------------------------------------
 * Compilation
 */

/* The forms of a pattern other than full, each optional: a form that
 * does not compile (or JIT-compile, when JIT is wanted) is left out and
 * the engine uses the next best. */
static pcre2_code *compile_form(const char *pattern, size_t len,
                                uint32_t options, bool jit)
{
        pcre2_code *code;
        PCRE2_SIZE offset;
        int err;

        code = pcre2_compile((PCRE2_SPTR)pattern, len, options, &err, &offset,
                             NULL);
        if (code != NULL && jit &&
            pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) != 0) {
                pcre2_code_free(code);
                code = NULL;
        }
        return code;
}

/* The quick form answers only whether a line matches, so its groups need
 * not capture, and saving them would be a good part of its search's cost
 * on a progress line. searchable() has refused named groups, so no group
 * is left to capture, and a pattern that refers to one (\1, \g{-1})
 * does not compile that way: it keeps its groups. */
static pcre2_code *compile_quick_len(const char *pattern, size_t len,
                                     uint32_t options, bool jit)
{
        pcre2_code *code;

        code = compile_form(pattern, len, options | PCRE2_NO_AUTO_CAPTURE,
                            jit);
        return code != NULL ? code : compile_form(pattern, len, options, jit);
}

static pcre2_code *compile_quick(const char *pattern, uint32_t options,
                                 bool jit)
{
        return compile_quick_len(pattern, strlen(pattern), options, jit);
}

static bool all_ascii(const char *text)
{
        for (; *text != '\0'; text++)
                if ((unsigned char)*text >= 0x80)
                        return false;
        return true;
}

/*
 * Whether the pattern is ".*X" where a search for X answers the same. The
 * AWS rules are all ".*X.*": anchored, the leading ".*" swallows the line
 * and backs off one character at a time looking for X, and the inner
 * ".*" does it again, so a 110-byte line costs hundreds of steps per
 * rule. Searching for X instead lets PCRE2 jump to X's first character
 * with memchr. The answer is the same when
 *   - the line holds no \n (the only character "." refuses under the LF
 *     newline convention; the engine checks each line), so ".*" can
 *     reach any position where X starts;
 *   - there is no "|": ".*a|b" is (.*a)|b, which a search for "a|b" is
 *     not;
 *   - nothing is atomic: greedy or lazy only changes the order in which
 *     the alternatives are tried, which decides captures but not whether
 *     there is a match, unless something cuts the search short. Atomic
 *     groups, lookarounds, conditions, options and verbs all start with
 *     "(?" (other than "(?:") or "(*"; possessive quantifiers end in "+";
 *   - nothing reads the start offset, moves the match's start or quotes:
 *     "\G" is where a match attempt starts, "\K" makes a match report a
 *     later start than where it began (the rest form takes a search's
 *     start as the leftmost candidate), and "\Q" makes what follows
 *     literal, ".*" included.
 * The test is on the pattern's text, so an escaped "\|" or "\(?" only
 * costs the speed-up.
 */
static bool searchable(const char *pattern)
{
        static const char *const refused[] = { "|",  "(*",  "*+",  "++", "?+",
                                               "}+", "\\G", "\\K", "\\Q" };
        const char *p;
        uint32_t newline = 0;
        size_t i;

        /* ".*?", ".*+", ".**" and ".*{" are other quantifiers. */
        if (strncmp(pattern, ".*", 2) != 0 ||
            (pattern[2] != '\0' && strchr("?+*{", pattern[2]) != NULL))
                return false;
        for (i = 0; i < HP_ARRAY_SIZE(refused); i++)
                if (strstr(pattern, refused[i]) != NULL)
                        return false;
        for (p = strstr(pattern, "(?"); p != NULL; p = strstr(p + 2, "(?"))
                if (p[2] != ':')
                        return false;
        return pcre2_config(PCRE2_CONFIG_NEWLINE, &newline) >= 0 &&
               newline == PCRE2_NEWLINE_LF;
}

/* Length of a searchable pattern without a trailing ".*" (one not
 * escaped: an odd number of backslashes before the dot makes it "\.*").
 * On a line without \n a trailing ".*" always matches what is left, on
 * the first try, so it never sends the match back into what precedes it:
 * the captures are the same without it. */
static size_t without_trailing_any(const char *pattern)
{
        size_t len = strlen(pattern), slashes = 0;

        if (len < 4 || strcmp(pattern + len - 2, ".*") != 0)
                return len;
        while (slashes < len - 2 && pattern[len - 3 - slashes] == '\\')
                slashes++;
        return slashes % 2 == 0 ? len - 2 : len;
}

static uint32_t capture_count(const pcre2_code *code)
{
        uint32_t n = UINT32_MAX;

        pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &n);
        return n;
}

/*
 * The rest form cut in two (see struct logmon_regex). Anchored at a
 * start s, rest is head, then ".*", then tail. PCRE2 finds head's first
 * way of matching at s, lets ".*" take the line and gives it back one
 * character at a time, trying tail at each position from the end; only
 * when none fits does it go back into head for its next way. On a line
 * without \n ".*" can stop anywhere, and tail can only fit where its
 * literal is, so the first success is tail at the last occurrence of
 * the literal, at or after where head ended, at which tail matches, with
 * the captures tail finds there. Head has no group, so tail's groups are
 * numbered as in rest. Where head's first way leaves no fit, the engine
 * asks rest itself (match_rest()).
 */
static void split_form(struct logmon_regex *p, const char *rest, size_t len,
                       bool jit)
{
        struct logmon_split split;

        if (!logmon__split_rest(rest, len, &split) || split.head_len == 0)
                return;
        p->head_ascii = compile_form(rest, split.head_len, PCRE2_ANCHORED,
                                     jit);
        p->tail_ascii = compile_form(rest + split.tail_at,
                                     len - split.tail_at, PCRE2_ANCHORED,
                                     jit);
        if (p->head_ascii == NULL || p->tail_ascii == NULL ||
            capture_count(p->head_ascii) != 0 ||
            capture_count(p->tail_ascii) != capture_count(p->rest_ascii)) {
                pcre2_code_free(p->head_ascii);
                pcre2_code_free(p->tail_ascii);
                p->head_ascii = p->tail_ascii = NULL;
                return;
        }
        logmon__literal_set(&p->tail_literal, split.literal,
                            split.literal_len);
        /* Lazy and without groups, as the quick form is (compile_quick),
         * and for the same reason: whether tail fits at a place does not
         * depend on how (searchable() has refused what would make it). */
        p->tail_quick = compile_quick_len(rest + split.tail_at,
                                          len - split.tail_at,
                                          PCRE2_ANCHORED | PCRE2_UNGREEDY,
                                          jit);
        p->head_text = strndup(rest, split.head_len);
}

/*
 * The rest form (see struct logmon_regex). Anchored at 0, ".*R" makes
 * the ".*" take the whole line and give it back one character at a time,
 * trying R at each position from the end; on a line without \n the first
 * position where R matches decides the match and its captures. R can
 * only match where its fixed first code unit is, so trying R anchored at
 * each occurrence of that unit, from the end back, makes the same
 * attempts in the same order and skips only those that fail at once.
 * Only for ASCII lines, where a byte is a character. A pattern whose
 * matches do not all start with one code unit (PCRE2 says which) has no
 * rest form. The quick form's pattern is R with the trailing ".*".
 */
static void rest_form(struct logmon_regex *p, const char *pattern, bool jit)
{
        uint32_t type = 0, unit = 0;

        if (p->quick_ascii == NULL ||
            pcre2_pattern_info(p->quick_ascii, PCRE2_INFO_FIRSTCODETYPE,
                               &type) != 0 ||
            type != 1 ||
            pcre2_pattern_info(p->quick_ascii, PCRE2_INFO_FIRSTCODEUNIT,
                               &unit) != 0 ||
            unit == 0 || unit >= 0x80)
                return;
        p->first_unit = (uint8_t)unit;
        p->rest_ascii = compile_form(pattern + 2,
                                     without_trailing_any(pattern) - 2,
                                     PCRE2_ANCHORED, jit);
        if (p->rest_ascii != NULL)
                split_form(p, pattern + 2, without_trailing_any(pattern) - 2,
                           jit);
}

int logmon__regex_compile(struct logmon_regex *p, const char *text, bool jit,
                          bool full_only, bool *jit_ok,
                          struct logmon_regex_error *err)
{
        /* Anchored at compile time rather than per match: PCRE2 runs a
         * match-time PCRE2_ANCHORED without JIT. UTF without
         * PCRE2_MATCH_INVALID_UTF: the matcher repairs each line to valid
         * UTF-8 once and matches with PCRE2_NO_UTF_CHECK, which is both
         * cheaper than a check per pattern and avoids a PCRE2 10.42 JIT
         * bug in invalid-UTF mode (\S, \D and \W never match a multi-byte
         * character; PCRE2Project/pcre2#224, fixed in 10.43). No
         * PCRE2_UCP: \d, \w, \s and \b stay ASCII, which keeps \d in
         * line with the ASCII float parser (a Python str pattern would
         * match other scripts' digits). */
        const uint32_t options = PCRE2_ANCHORED | PCRE2_UTF;
        char literal[LOGMON_LITERAL_MAX];
        size_t literal_len;
        PCRE2_SIZE offset;
        bool ascii;
        int code;

        p->head_id = -1;
        p->full = pcre2_compile((PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED,
                                options, &code, &offset, NULL);
        if (p->full == NULL) {
                pcre2_get_error_message(code, (PCRE2_UCHAR *)err->msg,
                                        sizeof(err->msg));
                err->offset = (size_t)offset;
                return code == PCRE2_ERROR_HEAPLIMIT ? -ENOMEM : HP_ECONFIG;
        }
        /* A JIT failure (no executable memory under some hardening) is
         * not an error: the interpreter gives the same answers. */
        if (!jit || pcre2_jit_compile(p->full, PCRE2_JIT_COMPLETE) != 0)
                *jit_ok = false;
        if (full_only)
                return 0;

        /* On a line that is all ASCII, an ASCII pattern means the same
         * with UTF or without: every character is one byte, and no
         * character past U+007F, where the two modes part (case folding,
         * \h, \v, \R, classes past U+00FF), can occur in the line. A
         * pattern that needs UTF to compile (\x{100}, \N{U+...}) has no
         * ASCII forms. */
        ascii = all_ascii(text);
        if (ascii)
                p->full_ascii = compile_form(text, strlen(text),
                                             PCRE2_ANCHORED, jit);
        if (!searchable(text))
                return 0;
        literal_len = logmon__required_literal(text, strlen(text), literal,
                                               sizeof(literal));
        logmon__literal_set(&p->literal, literal, literal_len);
        p->quick = compile_quick(text + 2, PCRE2_UTF | PCRE2_UNGREEDY, jit);
        if (ascii) {
                p->quick_ascii = compile_quick(text + 2, PCRE2_UNGREEDY, jit);
                rest_form(p, text, jit);
        }
        return 0;
}

void logmon__regex_free(struct logmon_regex *p)
{
        pcre2_code_free(p->full);
        pcre2_code_free(p->quick);
        pcre2_code_free(p->full_ascii);
        pcre2_code_free(p->quick_ascii);
        pcre2_code_free(p->rest_ascii);
        pcre2_code_free(p->head_ascii);
        pcre2_code_free(p->tail_ascii);
        pcre2_code_free(p->tail_quick);
        free(p->head_text);
}

uint32_t logmon__regex_groups(const struct logmon_regex *p)
{
        return capture_count(p->full);
}

/* A strndup of head_text that failed leaves that pattern's head
 * unshared, which only costs the speed-up. */
size_t logmon__regex_share_heads(struct logmon_regex *const *list, size_t n)
{
        struct logmon_regex *p, *q;
        size_t heads = 0, j, k;

        for (k = 0; k < n; k++)
                list[k]->head_id = -1;
        for (k = 0; k < n; k++) {
                p = list[k];
                if (p->head_text == NULL || p->head_id >= 0)
                        continue;
                for (j = k + 1; j < n; j++) {
                        q = list[j];
                        if (q->head_text == NULL || q->head_id >= 0 ||
                            q->first_unit != p->first_unit ||
                            strcmp(q->head_text, p->head_text) != 0)
                                continue;
                        p->head_id = (int)heads;
                        q->head_id = (int)heads;
                }
                if (p->head_id >= 0)
                        heads++;
        }
        return heads;
}

pcre2_match_context *logmon__match_limits_new(uint32_t match_limit,
                                              uint32_t depth_limit)
{
        pcre2_match_context *mctx = pcre2_match_context_create(NULL);

        if (mctx == NULL)
                return NULL;
        pcre2_set_match_limit(mctx, match_limit);
        pcre2_set_depth_limit(mctx, depth_limit);
        return mctx;
}

void logmon__match_limits_free(pcre2_match_context *limits)
{
        pcre2_match_context_free(limits);
}

/* ---------------------------------------------------------------------
 * Matching
 */

int logmon__matcher_init(struct logmon_matcher *m,
                         pcre2_match_context *limits, uint32_t pairs,
                         bool jit, locale_t loc,
                         struct logmon_head_memo *memo)
{
        memset(m, 0, sizeof(*m));
        m->jit = jit;
        m->loc = loc;
        m->memo = memo;
        /* Match data sized for the widest pattern, made once: with it the
         * interpreter keeps its backtracking frames between matches, so a
         * line costs no allocation even without JIT. */
        m->md = pcre2_match_data_create(pairs, NULL);
        /* Zeroed: PCRE2's JIT reads ahead of a subject's end in whole
         * words (within the buffer), which valgrind would otherwise
         * report as a use of uninitialised bytes. Mapped rather than
         * calloc'd: only a line with invalid UTF-8 touches it, so most
         * matchers never hold a page of it, where calloc wrote all
         * 64 KiB for each rank. */
        m->fixed = mmap(NULL, LOGMON_FIXED_MAX, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m->fixed == MAP_FAILED)
                m->fixed = NULL;
        m->mctx = pcre2_match_context_copy(limits);
        /* The 32 KiB default on the machine stack gives up on patterns
         * like (a|b)* over long lines that Python handles. */
        if (jit)
                m->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024,
                                                      NULL);
        if (m->md == NULL || m->fixed == NULL || m->mctx == NULL ||
            (jit && m->jit_stack == NULL)) {
                logmon__matcher_fini(m);
                return -ENOMEM;
        }
        if (m->jit_stack != NULL)
                pcre2_jit_stack_assign(m->mctx, NULL, m->jit_stack);
        return 0;
}

void logmon__matcher_fini(struct logmon_matcher *m)
{
        pcre2_match_data_free(m->md);
        pcre2_jit_stack_free(m->jit_stack);
        pcre2_match_context_free(m->mctx);
        if (m->fixed != NULL)
                munmap(m->fixed, LOGMON_FIXED_MAX);
        memset(m, 0, sizeof(*m));
}

static int run(const struct logmon_matcher *m, const pcre2_code *code,
               const char *line, size_t len, size_t start)
{
        /* With every pattern of the set compiled (a form other than full
         * is kept only if it compiled too), PCRE2's JIT fast path skips
         * the checks pcre2_match makes on each call, a good part of the
         * cost of a line that no pattern matches. The line was made valid
         * UTF-8 by sanitize(). */
        if (m->jit)
                return pcre2_jit_match(code, (PCRE2_SPTR)line, len, start,
                                       PCRE2_NO_UTF_CHECK, m->md, m->mctx);
        return pcre2_match(code, (PCRE2_SPTR)line, len, start,
                           PCRE2_NO_UTF_CHECK, m->md, m->mctx);
}

/* A line with more candidate starts than this is left to the full form,
 * which makes the same attempts within one call. */
#define REST_TRIES_MAX 16

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
                if (logmon__literal_at(at - k, lit)) {
                        *out = at - k;
                        return 1;
                }
                if (++tries > LOGMON_LITERAL_TRIES_MAX)
                        return -1;
        }
        return 0;
}

/* head anchored at start: 1 with where its first way of matching ends
 * in *end, 0 when it does not match there, -1 at a limit. A shared head
 * (logmon__regex_share_heads) runs once per line and start. */
static int run_head(struct logmon_matcher *m, const struct logmon_regex *p,
                    const char *line, size_t len, size_t start, size_t *end)
{
        struct logmon_head_memo *memo = p->head_id >= 0 ? &m->memo[p->head_id]
                                                        : NULL;
        int rc;

        if (memo != NULL && memo->head_seq == m->line_seq &&
            memo->head_start == start) {
                *end = memo->head_end;
                return memo->head_rc;
        }
        rc = run(m, p->head_ascii, line, len, start);
        rc = rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
        *end = rc > 0 ? pcre2_get_ovector_pointer(m->md)[1] : start;
        if (memo != NULL) {
                memo->head_seq = m->line_seq;
                memo->head_start = start;
                memo->head_rc = rc;
                memo->head_end = *end;
        }
        return rc;
}

/* The split rest form (split_form()) at start: 1 or 0 as rest_ascii anchored
 * there would answer, with its captures in m->md when captures is true,
 * or -1 when only rest_ascii can say (head's first way of matching
 * leaves tail no fit while the literal occurs where another way could
 * reach it, or a limit). Without captures only the answer counts, and
 * the tail's lazy form tries the literal's occurrences in line order. */
static int match_split(struct logmon_matcher *m, const struct logmon_regex *p,
                       bool captures, const char *line, size_t len,
                       size_t start)
{
        const struct logmon_literal *lit = &p->tail_literal;
        const pcre2_code *tail = captures || p->tail_quick == NULL
                                         ? p->tail_ascii
                                         : p->tail_quick;
        const char *head_end, *limit, *at;
        size_t n = lit->len, end;
        int tries = 0, rc, found;

        rc = run_head(m, p, line, len, start, &end);
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
                found = captures
                                ? last_literal(head_end,
                                               at == NULL ? line + len
                                                          : at + n - 1,
                                               lit, &at)
                                : logmon__literal_first(at == NULL ? head_end
                                                                   : at + 1,
                                                        line + len, lit, &at);
                if (found == 0)
                        break;
                if (found < 0 || ++tries > REST_TRIES_MAX)
                        return -1;
                rc = run(m, tail, line, len, (size_t)(at - line));
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

/* The rest form (rest_form()) at each occurrence of its first code unit, from
 * the line's end back: 1 or 0 as full would answer, with full's captures
 * in m->md, or -1 when it gave up (too many candidates, or a limit) and
 * full must answer instead. Most lines hold the first code unit once or
 * not at all, and then one attempt (or none) answers. Where it occurs
 * more often, one quick search first says whether any match remains and
 * where the leftmost starts, so that a line with many candidates and no
 * match costs one search, not an attempt at each (and, without
 * captures, answers). Where the rest form has a split form, that answers
 * first at each candidate. Captures are left in m->md only when asked
 * for. */
static int match_rest(struct logmon_matcher *m, const struct logmon_regex *p,
                      bool captures, const char *line, size_t len)
{
        struct logmon_head_memo *memo = p->head_id >= 0 ? &m->memo[p->head_id]
                                                        : NULL;
        const char *from = line, *at;
        bool several;
        int tries = 0, rc;

        if (memo != NULL && memo->scan_seq == m->line_seq) {
                at = memo->last;
                several = memo->several;
        } else {
                at = memrchr(line, p->first_unit, len);
                several = at != NULL && memchr(line, p->first_unit,
                                               (size_t)(at - line)) != NULL;
                if (memo != NULL) {
                        memo->scan_seq = m->line_seq;
                        memo->last = at;
                        memo->several = several;
                }
        }
        if (at == NULL)
                return 0;
        if (several) {
                rc = run(m, p->quick_ascii, line, len, 0);
                if (rc == PCRE2_ERROR_NOMATCH)
                        return 0;
                if (rc < 0)
                        return -1;
                if (!captures)
                        return 1;
                from = line + pcre2_get_ovector_pointer(m->md)[0];
        }
        for (;;) {
                if (++tries > REST_TRIES_MAX)
                        return -1;
                rc = p->head_ascii != NULL
                             ? match_split(m, p, captures, line, len,
                                           (size_t)(at - line))
                             : -1;
                if (rc > 0)
                        return 1;
                if (rc < 0) {
                        rc = run(m, p->rest_ascii, line, len,
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

/* The forms of p in the order that answers soonest (logmon__match). */
int logmon__match_forms(struct logmon_matcher *m,
                        const struct logmon_regex *p, bool captures,
                        bool likely, const char *line, size_t len)
{
        bool ascii = m->line_ascii && p->full_ascii != NULL;
        const pcre2_code *quick = NULL;
        const char *at;
        int rc;

        if (!m->line_has_lf) {
                /* Without captures the rest form is worth it only where
                 * another pattern has already run, or will reuse, its
                 * head on this line. */
                if (m->line_ascii && p->rest_ascii != NULL &&
                    (captures || p->head_id >= 0)) {
                        rc = match_rest(m, p, captures, line, len);
                        if (rc >= 0)
                                return rc;
                } else {
                        quick = m->line_ascii && p->quick_ascii != NULL
                                        ? p->quick_ascii
                                        : p->quick;
                }
        }
        if (quick != NULL) {
                rc = run(m, quick, line, len, 0);
                if (rc == PCRE2_ERROR_NOMATCH)
                        return 0;
                if (rc >= 0 && !captures)
                        return 1;
        }
        rc = run(m, ascii ? p->full_ascii : p->full, line, len, 0);
        if (rc >= 0)
                return 1;
        if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL)
                return 0;
        if (likely && p->literal.len != 0 &&
            logmon__literal_first(line, line + len, &p->literal, &at) == 0)
                return 0;
        return -1;
}

/* ---------------------------------------------------------------------
 * Lines
 */

/*
 * The reference read logs as text; we see bytes. A line with invalid
 * UTF-8 is matched as if decoded with errors="replace": each bad byte
 * becomes U+FFFD, so "." still crosses it and ".*loss=(\d+)" still finds
 * the loss. The patterns are then always given valid UTF-8, which lets
 * them run with PCRE2_NO_UTF_CHECK. Valid lines (nearly all) are matched
 * in place, uncopied, after one scan. A repaired line is cut at
 * LOGMON_FIXED_MAX bytes, on a character boundary.
 */
static const char *sanitize(struct logmon_matcher *m, const char *line,
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
         * overlaps the ones checked, rather than one at a time. */
        if (len - i < 8 && len >= 8) {
                uint64_t word;

                memcpy(&word, p + len - 8, 8);
                if (!(word & 0x8080808080808080ull))
                        i = len;
        }
        while (i < len && p[i] < 0x80)
                i++;
        m->line_ascii = i == len;
        for (; i < len; i += k) {
                if (p[i] < 0x80)
                        k = 1;
                else if ((k = hp_utf8_seq_len(p + i, len - i)) == 0)
                        break;
        }
        if (i == len) {
                *out_len = len;
                return line;
        }
        memcpy(m->fixed, line, i);
        o = i;
        while (i < len) {
                k = p[i] < 0x80 ? 1 : hp_utf8_seq_len(p + i, len - i);
                if (o + (k == 0 ? 3 : k) > LOGMON_FIXED_MAX)
                        break;
                if (k == 0) {
                        memcpy(m->fixed + o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                } else {
                        memcpy(m->fixed + o, p + i, k);
                        o += k;
                        i += k;
                }
        }
        *out_len = o;
        return m->fixed;
}

const char *logmon__matcher_repair(struct logmon_matcher *m, const char *line,
                                   size_t len, size_t *slen)
{
        const char *subject = sanitize(m, line, len, slen);

        m->line_has_lf = memchr(subject, '\n', *slen) != NULL;
        return subject;
}
