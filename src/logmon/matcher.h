/* SPDX-License-Identifier: Apache-2.0 */
/* The matcher of the log-rule engine: a pattern compiled into the forms
 * the engine picks from, and a line matched against one of them. It
 * knows nothing of rules, states or time: rule.c compiles each rule's
 * patterns through it, and rulestate.c asks it, line by line, whether a
 * pattern matches and what number its first group captured. matcher.c
 * holds the PCRE2 code; pattern.c reads a pattern's text without PCRE2
 * and number.c reads a number as Python's float() does. None of the
 * three includes more than this header of logmon's. */
#ifndef LOGMON_MATCHER_H
#define LOGMON_MATCHER_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---------------------------------------------------------------------
 * Patterns
 */

/* Literals kept from a pattern's text: a prefix is as good a filter. */
#define LOGMON_LITERAL_MAX 32

/* Bytes a match must hold, looked for by the one of them (anchor) that
 * is least common in log text, so that memchr stops at few false
 * starts. len 0: none. */
struct logmon_literal {
        uint8_t len;
        uint8_t anchor;
        char bytes[LOGMON_LITERAL_MAX];
};

/* One pattern in the forms the matcher picks from, line by line. Only
 * full is always there; each other form is kept where matcher.c proves it
 * gives full's answer for the lines it is used on, and compiled. */
struct logmon_regex {
        /* As written, anchored, UTF: the reference's answer and captures
         * for any line. */
        pcre2_code *full;
        /* Without the leading ".*", searched rather than anchored, lazy:
         * whether a line without "\n" matches, in a fraction of the time,
         * never the captures. */
        pcre2_code *quick;
        /* full and quick compiled without UTF, for lines that are all
         * ASCII (nearly all): UTF mode steps back over a character, not
         * a byte, and costs up to twice the time for the same answer. */
        pcre2_code *full_ascii;
        pcre2_code *quick_ascii;
        /* Without the leading and the trailing ".*", anchored, greedy,
         * no UTF: matched at each occurrence of first_unit from the end
         * of an ASCII line back, the first success is full's match with
         * full's captures, without full's byte-by-byte backtracking. */
        pcre2_code *rest_ascii;
        uint8_t first_unit;
        /* rest_ascii as head ".*" tail, cut at its first ".*" where head
         * has no group and tail starts with a literal (pattern.c). At a
         * start, head's first way of matching and then tail at each
         * occurrence of tail_literal from the line's end back make the
         * attempts rest_ascii would, less its byte-by-byte walk back
         * from the end to the literal. Both anchored, no UTF. */
        pcre2_code *head_ascii;
        pcre2_code *tail_ascii;
        struct logmon_literal tail_literal;
        /* tail_ascii for whether a line matches, not how: lazy, its
         * groups not capturing (NULL: tail_ascii answers that too). */
        pcre2_code *tail_quick;
        /* head's text, to find the patterns of a set that start the same
         * way (logmon__regex_share_heads). */
        char *head_text;
        /* Which of the set's shared heads this head is, or -1. Patterns
         * with the same head (JobHangingDetection's and
         * LowThroughputDetection's "\[Epoch 0 Batch \d+") run it once
         * per line: a matcher remembers where the line's last first_unit
         * is and where head matched there (struct logmon_head_memo), and
         * with that the split form answers even a pattern that needs no
         * captures for less than its quick form. */
        int head_id;
        /* Bytes every match contains (pattern.c): a line without them
         * is answered without a call into PCRE2, whose every call costs
         * about as much as scanning a 110-byte line. */
        struct logmon_literal literal;
};

/* What PCRE2 said about a pattern that does not compile. */
struct logmon_regex_error {
        char msg[256];
        size_t offset;
};

/*
 * Compiles text (NUL-terminated, borrowed) into p's forms, p zeroed by
 * the caller. jit: JIT-compile every form; a form that will not is left
 * out, and full without JIT clears *jit_ok (the interpreter gives the
 * same answers). full_only: full alone. Returns 0, HP_ECONFIG with *err
 * filled, or -ENOMEM. p is to be freed with logmon__regex_free on
 * failure as well.
 */
int logmon__regex_compile(struct logmon_regex *p, const char *text, bool jit,
                          bool full_only, bool *jit_ok,
                          struct logmon_regex_error *err);
void logmon__regex_free(struct logmon_regex *p);
/* Capture groups in the pattern. */
uint32_t logmon__regex_groups(const struct logmon_regex *p);
/* Gives the heads that two or more of the n patterns have in common an
 * id each (head_id); every other pattern gets -1. Returns how many heads
 * are shared: the memos a matcher for these patterns needs. */
size_t logmon__regex_share_heads(struct logmon_regex *const *list, size_t n);

/* A match context with the limits every match of a set runs under; NULL
 * when out of memory. Each matcher takes a copy. */
pcre2_match_context *logmon__match_limits_new(uint32_t match_limit,
                                              uint32_t depth_limit);
void logmon__match_limits_free(pcre2_match_context *limits);

/* ---------------------------------------------------------------------
 * Matching
 */

/* What a matcher found out about the line it is matching for one shared
 * head (struct logmon_regex, head_id), so that the next pattern with
 * that head does not look again. Each part is for the line whose number
 * it holds (logmon_matcher, line_seq). */
struct logmon_head_memo {
        uint64_t scan_seq;
        const char *last; /* the last first_unit; NULL: none */
        bool several;     /* first_unit occurs before last as well */
        uint64_t head_seq;
        size_t head_start; /* where head was run */
        int head_rc;       /* 1 matched, 0 did not, -1 gave up */
        size_t head_end;   /* where its first way of matching ended */
};

/* Room for a line whose invalid UTF-8 was replaced by U+FFFD. */
#define LOGMON_FIXED_MAX (64 * 1024)

/* One matcher per stream: everything a match writes. A set's patterns
 * are shared by the streams of all ranks, which run on different
 * threads at once (the agent's rule threads), so nothing a match writes
 * may live in the set. */
struct logmon_matcher {
        pcre2_match_data *md;
        /* The set's limits with a JIT stack of the matcher's own: one
         * stack for the set would let two matches write their frames
         * into the same memory, and a capture come back with another
         * line's bytes. */
        pcre2_match_context *mctx;
        pcre2_jit_stack *jit_stack;
        char *fixed;                   /* LOGMON_FIXED_MAX bytes */
        struct logmon_head_memo *memo; /* one per shared head */
        locale_t loc;                  /* strtod must not follow LC_NUMERIC */
        bool jit;                      /* every pattern is JIT-compiled */
        bool line_has_lf;  /* the quick and rest forms do not apply */
        bool line_ascii;   /* the ASCII forms apply */
        uint64_t line_seq; /* lines taken, for the memos */
};

/*
 * Makes m ready for patterns compiled with the given JIT setting (jit
 * true only when all of them were), whose widest has pairs ovector
 * pairs, under limits (copied). memo (borrowed, zeroed) has room for the
 * patterns' shared heads; loc (borrowed) reads the numbers. Allocates
 * everything a match needs: nothing does afterwards. Returns 0 or
 * -ENOMEM, m left with nothing to free.
 */
int logmon__matcher_init(struct logmon_matcher *m,
                         pcre2_match_context *limits, uint32_t pairs,
                         bool jit, locale_t loc,
                         struct logmon_head_memo *memo);
void logmon__matcher_fini(struct logmon_matcher *m);

/* 16 bytes as one value: GCC's vector extensions, which compile to SSE2
 * on x86-64 and to NEON on arm64, with no intrinsics of either. */
typedef uint8_t logmon_bytes16 __attribute__((vector_size(16)));

static inline logmon_bytes16 logmon__load16(const char *p)
{
        logmon_bytes16 v;

        memcpy(&v, p, sizeof(v));
        return v;
}

/* True when the line is all ASCII and holds no \n, which is what nearly
 * every line is: then it needs no repair and every form applies. 16
 * bytes a step, the last step overlapping the one before; a byte has its
 * top bit set in the sum when it is past ASCII or a \n (the comparison
 * gives 0xff): one pass instead of a word-at-a-time scan and a memchr
 * for \n. False sends the line to the scans that tell which. */
static inline bool logmon__plain_ascii(const char *line, size_t len)
{
        const logmon_bytes16 lf = { '\n', '\n', '\n', '\n', '\n', '\n',
                                    '\n', '\n', '\n', '\n', '\n', '\n',
                                    '\n', '\n', '\n', '\n' };
        logmon_bytes16 sum = { 0 }, v;
        uint64_t half[2];
        size_t i;

        if (len < sizeof(v)) {
                for (i = 0; i < len; i++)
                        if ((unsigned char)line[i] >= 0x80 || line[i] == '\n')
                                return false;
                return true;
        }
        for (i = 0; i + sizeof(v) < len; i += sizeof(v)) {
                v = logmon__load16(line + i);
                sum |= v | (logmon_bytes16)(v == lf);
        }
        v = logmon__load16(line + len - sizeof(v));
        sum |= v | (logmon_bytes16)(v == lf);
        memcpy(half, &sum, sizeof(half));
        return ((half[0] | half[1]) & 0x8080808080808080ull) == 0;
}

/* The part of logmon__matcher_line for a line that is not all ASCII or
 * holds a \n, out of line. */
const char *logmon__matcher_repair(struct logmon_matcher *m, const char *line,
                                   size_t len, size_t *slen);

/* Takes the next line: the subject every pattern is then matched
 * against, *slen bytes long, which is line itself unless line holds
 * invalid UTF-8 (then a repaired copy, valid until the next line).
 * Inline, as the check that nearly every line passes. */
static inline const char *logmon__matcher_line(struct logmon_matcher *m,
                                               const char *line, size_t len,
                                               size_t *slen)
{
        m->line_seq++;
        if (logmon__plain_ascii(line, len)) {
                *slen = len;
                m->line_ascii = true;
                m->line_has_lf = false;
                return line;
        }
        return logmon__matcher_repair(m, line, len, slen);
}

/* The slow part of logmon__match, out of line. */
int logmon__match_forms(struct logmon_matcher *m,
                        const struct logmon_regex *p, bool captures,
                        bool likely, const char *subject, size_t len);

/* Occurrences of a literal's anchor byte looked at before a search for
 * the literal gives up and lets PCRE2 answer: a bound on the cost of a
 * line made of that byte. */
#define LOGMON_LITERAL_TRIES_MAX 64

static inline uint64_t logmon__load8(const char *p)
{
        uint64_t w;

        memcpy(&w, p, sizeof(w));
        return w;
}

/* Whether lit starts at p: its first and last bytes, which turn down
 * most false starts, then eight bytes at a time, the last eight
 * overlapping the ones before, rather than through memcmp, whose call
 * and dispatch cost more than the comparison for literals of a log
 * pattern's length. Not inlined: most searches never get this far, and
 * inlined it would crowd the search loop; static, so that the compiler
 * knows which registers the call leaves alone. */
static __attribute__((noinline, unused)) bool
logmon__literal_at(const char *p, const struct logmon_literal *lit)
{
        size_t n = lit->len, i;

        if (p[0] != lit->bytes[0] || p[n - 1] != lit->bytes[n - 1])
                return false;
        if (n < 8)
                return memcmp(p, lit->bytes, n) == 0;
        for (i = 0; i + 8 < n; i += 8)
                if (logmon__load8(p + i) != logmon__load8(lit->bytes + i))
                        return false;
        return logmon__load8(p + n - 8) == logmon__load8(lit->bytes + n - 8);
}

/* The first occurrence of lit that lies wholly in [from, end): 1 with
 * its start in *out, 0 when there is none, -1 when the search gave up.
 * glibc's memmem sets up a shift table on every call, which costs more
 * than this on a log line. */
static inline int logmon__literal_first(const char *from, const char *end,
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
                if (logmon__literal_at(at - k, lit)) {
                        *out = at - k;
                        return 1;
                }
                if (++tries > LOGMON_LITERAL_TRIES_MAX)
                        return -1;
                at++;
        }
        return 0;
}

/*
 * Whether p matches the subject of the line m last took: 1 match, 0 no
 * match, -1 the match was abandoned at a limit (or an internal PCRE2
 * error, which is equally a reason to report). With captures, a match
 * leaves in m the groups full would have found (logmon__match_number);
 * without, the cheapest form that can answer does.
 *
 * likely: the caller expects a match (a run of lines matched). The
 * literal every match holds is then not looked for first: on a matching
 * line that search is pure cost. It is looked for before a limit is
 * reported, so the answer never depends on the guess: a line without
 * the literal is always a plain "no".
 *
 * The literal first, inline, and the forms only for a line that holds
 * it: most patterns turn most lines down this way, and then the call
 * into the forms with all it keeps in registers is not made. The branch
 * is marked as the expected one, so that the compiler lays the call and
 * the register saves around it off that path. Any line, with \n or
 * not: every match holds the literal.
 */
static inline int logmon__match(struct logmon_matcher *m,
                                const struct logmon_regex *p, bool captures,
                                bool likely, const char *subject, size_t len)
{
        const char *at;

        if (__builtin_expect(p->literal.len != 0 && !likely &&
                                     logmon__literal_first(subject,
                                                           subject + len,
                                                           &p->literal,
                                                           &at) == 0,
                             1))
                return 0;
        return logmon__match_forms(m, p, captures, likely, subject, len);
}

/* Python float() over n bytes: surrounding ASCII whitespace, underscores
 * between digits, inf/infinity/nan in any case, no hex (number.c). */
bool logmon__parse_float(const char *text, size_t n, locale_t loc,
                         double *out);

/* Capture group 1 of the last match with captures, read as Python's
 * float() reads it; false when it is not a number or took no part. */
static inline bool logmon__match_number(const struct logmon_matcher *m,
                                        const char *subject, double *out)
{
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);

        /* An optional group that took no part is no more a number than
         * "abc" is (Python's float(None) raises as well). */
        if (ov[2] == PCRE2_UNSET)
                return false;
        return logmon__parse_float(subject + ov[2], ov[3] - ov[2], m->loc,
                                   out);
}

/* ---------------------------------------------------------------------
 * What pattern.c reads from a pattern's text, for matcher.c
 */

/* The longest run of literal bytes at the top level of a pattern (one
 * that matcher.c's searchable() accepts), which every match contains; its
 * first cap bytes (at most LOGMON_LITERAL_MAX) go to out. 0 when there
 * is none or the text holds something the reader does not know. */
size_t logmon__required_literal(const char *pattern, size_t len, char *out,
                                size_t cap);

/* A rest form's text cut at its first top-level greedy ".*": head is
 * rest[0, head_len) and holds no group; tail is rest[tail_at, len) and
 * starts with the literal run whose first bytes are in literal. */
struct logmon_split {
        size_t head_len;
        size_t tail_at;
        size_t literal_len;
        char literal[LOGMON_LITERAL_MAX];
};

bool logmon__split_rest(const char *rest, size_t len,
                        struct logmon_split *out);

/* lit as a logmon_literal, its anchor chosen. */
void logmon__literal_set(struct logmon_literal *out, const char *lit,
                         size_t len);

#endif
