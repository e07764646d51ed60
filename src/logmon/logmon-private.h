/* Internals shared by the files of the log-rule engine. */
#ifndef LOGMON_PRIVATE_H
#define LOGMON_PRIVATE_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "hyperpod/logmon.h"

enum logmon_op {
        LOGMON_OP_NONE = 0,
        LOGMON_OP_GT,
        LOGMON_OP_GTEQ,
        LOGMON_OP_LT,
        LOGMON_OP_LTEQ,
        LOGMON_OP_EQ,
};

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

/* One pattern in the forms the engine picks from, line by line. Only
 * full is always there; each other form is kept where rule.c proves it
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
         * way (rule.c, share_heads()). */
        char *head_text;
        /* Which of the set's shared heads this head is, or -1. Patterns
         * with the same head (JobHangingDetection's and
         * LowThroughputDetection's "\[Epoch 0 Batch \d+") run it once
         * per line: a stream remembers where the line's last first_unit
         * is and where head matched there (struct logmon_head_memo), and
         * with that the split form answers even a pattern that needs no
         * captures for less than its quick form. */
        int head_id;
        /* Bytes every match contains (pattern.c): a line without them
         * is answered without a call into PCRE2, whose every call costs
         * about as much as scanning a 110-byte line. */
        struct logmon_literal literal;
};

struct logmon_rule {
        char *name;
        struct logmon_regex log;
        struct logmon_regex stop; /* stop.full NULL: no stopPattern */
        uint32_t captures;    /* capture groups in logPattern */
        bool has_cutoff;
        uint64_t cutoff_ms;
        bool has_freq;
        uint64_t freq_ms;
        bool has_threshold;
        double threshold;
        enum logmon_op op;
        uint32_t datapoints;
        bool fault_on_match;
        bool metric;          /* capture 1 is compared with threshold */
};

struct logmon_ruleset {
        int refs;
        size_t n;
        struct logmon_rule *rules;
        size_t heads;         /* shared heads: head_id < heads */
        pcre2_match_context *mctx; /* the limits; each stream copies it */
        uint32_t max_pairs;   /* ovector pairs any pattern needs */
        bool jit;
        locale_t c_locale;    /* strtod must not follow LC_NUMERIC */
        char *warnings;
};

struct logmon_rule_state {
        enum logmon_state state;
        bool retired;
        bool matched;
        /* Lines in a row that matched logPattern, up to
         * LOGMON_MATCH_STREAK: from then on the next one most likely
         * matches too, and its literal is not looked for first (stream.c,
         * match()). */
        uint8_t streak;
        uint64_t last_match;  /* effective ms */
        uint32_t consecutive;
        double last_value;    /* the last metric compared */
        uint64_t matches;
        uint64_t nonnumeric;
        uint64_t limit_hits;
        size_t last_len;
        bool last_capped;
        char last_line[LOGMON_LAST_LINE_MAX];
};

/* Matches in a row after which a rule's literal is no longer looked for
 * before its pattern runs. A guess that fails costs one run of the
 * pattern on a line the literal search would have turned down (up to
 * ~50 ns on a 110-byte line); a guess that holds saves the search (~3 ns).
 * After 16 matches the guess pays off on a run of about 33 matching lines
 * and more, which a flood of progress lines is; a log where other lines
 * come between progress lines never makes the run and keeps the search. */
#define LOGMON_MATCH_STREAK 16

/* What a stream found out about the line it is feeding for one shared
 * head (struct logmon_regex, head_id), so that the next pattern with
 * that head does not look again. Each part is for the line whose number
 * it holds (logmon_stream, line_seq). */
struct logmon_head_memo {
        uint64_t scan_seq;
        const char *last;     /* the last first_unit; NULL: none */
        bool several;         /* first_unit occurs before last as well */
        uint64_t head_seq;
        size_t head_start;    /* where head was run */
        int head_rc;          /* 1 matched, 0 did not, -1 gave up */
        size_t head_end;      /* where its first way of matching ended */
};

/* Room for a line whose invalid UTF-8 was replaced by U+FFFD. */
#define LOGMON_FIXED_MAX (64 * 1024)

struct logmon_stream {
        struct logmon_ruleset *rs;
        pcre2_match_data *md;
        /* The set's match context with a JIT stack of the stream's own.
         * A set is shared by the streams of all ranks, and these run on
         * different threads at once (the agent's rule threads): one stack
         * for the set let two matches write their frames into the same
         * memory, and a capture came back with another line's bytes. */
        pcre2_match_context *mctx;
        pcre2_jit_stack *jit_stack;
        char *fixed;          /* LOGMON_FIXED_MAX bytes */
        bool line_has_lf;     /* the quick and rest forms do not apply */
        bool line_ascii;      /* the ASCII forms apply */
        bool states_changed;  /* a rule's state moved in this feed */
        uint64_t line_seq;    /* lines fed, for the memos */
        struct logmon_head_memo *memo; /* rs->heads of them */
        bool installed;       /* started since new or clear */
        bool running;         /* installed and not suspended */
        uint64_t last_now;    /* largest now seen: time never goes back */
        uint64_t paused;      /* ms spent suspended since install */
        uint64_t suspended_at;
        uint64_t created;     /* effective ms at install */
        uint64_t ignored;
        enum logmon_state state;
        int reason_rule;
        char reason[LOGMON_NAME_MAX + 16];
        struct logmon_rule_state st[];
};

/* Python float() over n bytes: surrounding ASCII whitespace, underscores
 * between digits, inf/infinity/nan in any case, no hex. */
bool logmon__parse_float(const char *text, size_t n, locale_t loc,
                         double *out);

/* Length of the valid UTF-8 sequence starting with a byte >= 0x80 at p,
 * or 0 when it is invalid (overlong, surrogate, past U+10FFFF, cut). */
size_t logmon__utf8_len(const unsigned char *p, size_t n);

/* The longest run of literal bytes at the top level of a pattern (one
 * that searchable() in rule.c accepts), which every match contains; its
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

/* A whole string as an ISO 8601 date and time (a time without a zone is
 * UTC), into epoch ms. */
bool logmon__parse_time(const char *s, int64_t *ms);

/* JSON string escaping for the replay output: control characters are
 * escaped and invalid UTF-8 becomes U+FFFD, so the output is always
 * valid JSON. */
void logmon__json_string(FILE *f, const char *s, size_t n);

/* The two halves of logmon_config_parse, which picks one by the first
 * character; separate so that each can be fuzzed with any input. */
int logmon__config_parse_json(const char *name, const char *data, size_t n,
                              cJSON **out, char *errbuf, size_t len);
int logmon__config_parse_yaml(const char *name, const char *data, size_t n,
                              cJSON **out, char *errbuf, size_t len);

#endif
