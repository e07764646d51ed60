/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by the files of the log-rule engine: the compiled
 * rules (rule.c), the per-stream state (rulestate.c), and what the
 * loaders and replay share. The matcher has its own header, matcher.h. */
#ifndef LOGMON_PRIVATE_H
#define LOGMON_PRIVATE_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hyperpod/logmon.h"
#include "matcher.h"

enum logmon_op {
        LOGMON_OP_NONE = 0,
        LOGMON_OP_GT,
        LOGMON_OP_GTEQ,
        LOGMON_OP_LT,
        LOGMON_OP_LTEQ,
        LOGMON_OP_EQ,
};

struct logmon_rule {
        char *name;
        struct logmon_regex log;
        struct logmon_regex stop; /* stop.full NULL: no stopPattern */
        uint32_t captures;        /* capture groups in logPattern */
        bool has_cutoff;
        uint64_t cutoff_ms;
        bool has_freq;
        uint64_t freq_ms;
        bool has_threshold;
        double threshold;
        enum logmon_op op;
        uint32_t datapoints;
        bool fault_on_match;
        bool metric; /* capture 1 is compared with threshold */
};

struct logmon_ruleset {
        int refs;
        size_t n;
        struct logmon_rule *rules;
        size_t heads;              /* shared heads: head_id < heads */
        pcre2_match_context *mctx; /* the limits; each stream copies it */
        uint32_t max_pairs;        /* ovector pairs any pattern needs */
        bool jit;
        locale_t c_locale; /* strtod must not follow LC_NUMERIC */
        char *warnings;
};

struct logmon_rule_state {
        enum logmon_state state;
        bool retired;
        bool matched;
        /* Lines in a row that matched logPattern, up to
         * LOGMON_MATCH_STREAK: from then on the next one most likely
         * matches too, and its literal is not looked for first
         * (logmon__match, likely). */
        uint8_t streak;
        uint64_t last_match; /* effective ms */
        uint32_t consecutive;
        double last_value; /* the last metric compared */
        uint64_t matches;
        uint64_t nonnumeric;
        uint64_t limit_hits;
        size_t last_len;
        bool last_capped;
        char last_line[LOGMON_LAST_LINE_MAX];
};

/* Matches in a row after which a rule's literal is no longer looked for
 * before its pattern runs. A guess that fails costs one run of the
 * pattern on a line the literal search would have turned down, many
 * times what the search costs; a guess that holds saves the search. So
 * the guess pays off only on long runs of matching lines, which a flood
 * of progress lines is; a log where other lines come between progress
 * lines never makes the run and keeps the search. */
#define LOGMON_MATCH_STREAK 16

struct logmon_stream {
        struct logmon_ruleset *rs;
        struct logmon_matcher m; /* its memos follow st[] */
        bool states_changed;     /* a rule's state moved in this feed */
        bool installed;          /* started since new or clear */
        bool running;            /* installed and not suspended */
        uint64_t last_now;       /* largest now seen: time never goes back */
        uint64_t paused;         /* ms spent suspended since install */
        uint64_t suspended_at;
        uint64_t created; /* effective ms at install */
        uint64_t ignored;
        enum logmon_state state;
        int reason_rule;
        char reason[LOGMON_NAME_MAX + 16];
        struct logmon_rule_state st[];
};

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
