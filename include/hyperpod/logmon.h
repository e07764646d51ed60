/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: the log-rule engine ("logagent" of the HyperPod agent).
 *
 *   rules (cJSON) ──logmon_ruleset_new──▶ compiled, shared ruleset
 *                                            │
 *   lines + now ──logmon_stream_feed──▶ one logmon_stream per monitored rank
 *   timer   now ──logmon_stream_tick──▶   ──▶ state changes (events),
 *                                             next deadline, verdict
 *
 * The engine is pure: it never reads a clock, never touches libuv and does
 * not allocate once a stream exists. Time is a caller-supplied millisecond
 * count that never goes backwards (a smaller value is treated as the last
 * one seen). The caller arms one timer at logmon_stream_next_deadline().
 *
 * Semantics are those of docs/rules-and-replay.md ("How a rule is
 * judged"): the reference agent's, with the deliberate improvements
 * listed in docs/differences.md and the man page: decimal thresholds,
 * no idle evaluation of "", millisecond deadlines, sticky FAULTED, and
 * bad input (invalid UTF-8, NUL bytes, non-numeric captures, runaway
 * regexes) reported and survived instead of ending monitoring.
 */
#ifndef HYPERPOD_LOGMON_H
#define HYPERPOD_LOGMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* At most this many rules in one configuration. It bounds the per-call
 * event array, so that feeding a line never allocates or loses events. */
#define LOGMON_RULES_MAX 64
/* Longest rule name, in bytes; it becomes part of the reason code. */
#define LOGMON_NAME_MAX 256
/* The last matched line of each rule is kept up to this many bytes. */
#define LOGMON_LAST_LINE_MAX 1024
/* Default PCRE2 limits: a runaway pattern costs at most a few
 * milliseconds per line instead of stalling the agent. */
#define LOGMON_MATCH_LIMIT 1000000
#define LOGMON_DEPTH_LIMIT 100000

/* Rule and stream states, in precedence order: a stream's state is the
 * highest state of its rules. */
enum logmon_state {
        LOGMON_WAITING = 0,
        LOGMON_HEALTHY,
        LOGMON_SLOW,
        LOGMON_HANGING,
        LOGMON_FAULTED,
};

/* "WAITING", "HEALTHY", ... ; "?" for an out-of-range value. */
const char *logmon_state_name(enum logmon_state state);
/* The reason code's prefix for a state ("LogSlow_", "LogHang_",
 * "LogFault_"; the rule's name follows it), or NULL for WAITING, HEALTHY
 * and an out-of-range value: the one table, also for the operator's
 * /status. */
const char *logmon_reason_prefix(enum logmon_state state);
/* Parses a state name (case-sensitive). Returns 0 or HP_ECONFIG. */
int logmon_state_parse(const char *name, enum logmon_state *out);
/* Whether a stream may go from one state to the other
 * (docs/rules-and-replay.md, "How a rule is judged"): WAITING to
 * anything, never back to WAITING, nothing out of FAULTED. */
bool logmon_state_transition_allowed(enum logmon_state from,
                                     enum logmon_state to);

/* ---------------------------------------------------------------------
 * Rule sets
 */

struct logmon_ruleset;

struct logmon_ruleset_opts {
        uint32_t match_limit; /* 0: LOGMON_MATCH_LIMIT */
        uint32_t depth_limit; /* 0: LOGMON_DEPTH_LIMIT */
        bool no_jit;          /* use the interpreter even where JIT works */
        /* Match with the patterns as written only, never with the faster
         * forms the engine derives from them (the same answers, slower):
         * for tests that compare the two. */
        bool full_only;
        /* Unknown keys in a rule are errors, not warnings (--strict). */
        bool strict;
};

/*
 * Validates and compiles a JSON list of rule objects (borrowed; nothing is
 * kept from it). All or nothing: on any invalid rule, *out is left alone,
 * HP_ECONFIG is returned and errbuf names the rule index and name, the
 * field and the problem (for a regex, PCRE2's message and offset). opts
 * may be NULL. Returns 0, HP_ECONFIG or -ENOMEM. The new set has one
 * reference.
 */
int logmon_ruleset_new(const cJSON *rules,
                       const struct logmon_ruleset_opts *opts,
                       struct logmon_ruleset **out, char *errbuf, size_t len);
struct logmon_ruleset *logmon_ruleset_ref(struct logmon_ruleset *rs);
void logmon_ruleset_unref(struct logmon_ruleset *rs);

size_t logmon_ruleset_count(const struct logmon_ruleset *rs);
/* Index of the first rule with a start cut-off or a recurring frequency
 * (a rule that needs a clock), or -1. */
int logmon_ruleset_timed(const struct logmon_ruleset *rs);

/* What rule i was configured with, for messages. */
struct logmon_rule_limits {
        uint64_t cutoff_ms; /* UINT64_MAX: none */
        uint64_t freq_ms;   /* UINT64_MAX: none */
        bool metric;        /* a threshold, an operator and a capture */
        double threshold;
        const char *op; /* "gt", ... "eq"; "" when none */
        uint32_t datapoints;
        bool fault_on_match;
};
int logmon_ruleset_rule_limits(const struct logmon_ruleset *rs, size_t i,
                               struct logmon_rule_limits *out);
/* The name of rule i (borrowed from the set). */
const char *logmon_ruleset_rule_name(const struct logmon_ruleset *rs,
                                     size_t i);
/* Index of the rule called name, or -1. */
int logmon_ruleset_find(const struct logmon_ruleset *rs, const char *name);
/* Things that were accepted but are probably mistakes (unknown keys, a
 * threshold without an operator, duplicate names): one per line, "" when
 * there are none. Borrowed from the set. */
const char *logmon_ruleset_warnings(const struct logmon_ruleset *rs);
/* Whether every pattern runs JIT-compiled. */
bool logmon_ruleset_jit(const struct logmon_ruleset *rs);

/* ---------------------------------------------------------------------
 * Per-stream monitors
 */

enum logmon_event_kind {
        LOGMON_EVENT_STATE = 0,  /* a rule changed state */
        LOGMON_EVENT_NONNUMERIC, /* capture 1 was not a number: the line
                                  * counted as non-matching for the rule */
        LOGMON_EVENT_LIMIT,      /* a pattern hit a PCRE2 limit and counted
                                  * as not matching */
};

enum logmon_pattern {
        LOGMON_PATTERN_LOG = 0,
        LOGMON_PATTERN_STOP,
};

struct logmon_event {
        uint32_t rule;
        uint8_t kind;    /* enum logmon_event_kind */
        uint8_t pattern; /* LIMIT: enum logmon_pattern */
        uint8_t from;    /* STATE: enum logmon_state */
        uint8_t to;
};

/* Room for every event one call can produce: per rule a state change, a
 * logPattern problem and a stopPattern problem. */
#define LOGMON_EVENTS_MAX (3 * LOGMON_RULES_MAX)

/* What one feed or tick did; filled by the call (no allocation). */
struct logmon_events {
        size_t n;
        bool stream_changed; /* the stream's state changed */
        uint8_t stream_from;
        uint8_t stream_to;
        struct logmon_event ev[LOGMON_EVENTS_MAX];
};

/* A rule's state on one stream, as seen by logmon_stream_rule_info. */
struct logmon_rule_info {
        enum logmon_state state;
        bool retired;          /* a stopPattern matched */
        bool matched;          /* logPattern matched at least once */
        uint64_t matches;      /* lines that matched logPattern */
        uint64_t nonnumeric;   /* matches whose capture was not a number */
        uint64_t limit_hits;   /* matches abandoned at a PCRE2 limit */
        uint32_t consecutive;  /* consecutive data points over threshold */
        double last_value;     /* the last metric compared (0: none) */
        const char *last_line; /* borrowed until the next feed; NULL */
        size_t last_line_len;  /* when nothing matched yet */
        bool last_line_capped; /* cut at LOGMON_LAST_LINE_MAX */
        /* On the caller's clock, as if the stream had not been suspended
         * since: when logPattern last matched (valid when matched), and
         * when the rule turns (or turned) HANGING without a match:
         * cut-off or frequency plus 1 ms; UINT64_MAX when it has no such
         * deadline or is FAULTED or retired. For a verdict's log line. */
        uint64_t last_match_ms;
        uint64_t due_ms;
};

struct logmon_stream;

/* A monitor for one stream (one rank's stdout), holding a reference to rs.
 * It starts out stopped: lines and ticks are ignored until start. Returns
 * NULL with errno set (ENOMEM). */
struct logmon_stream *logmon_stream_new(struct logmon_ruleset *rs);
void logmon_stream_free(struct logmon_stream *s);

/*
 * Lifecycle (docs/rules-and-replay.md, "How a rule is judged"). start
 * begins monitoring; the first start after new or clear starts the cut-off
 * clocks. suspend stops the clocks and ignores input, keeping every rule's
 * state; resume (or start) continues. All are idempotent; resume does
 * nothing on a never-started stream. clear forgets all rule state and
 * stops, as if new.
 */
void logmon_stream_start(struct logmon_stream *s, uint64_t now_ms);
void logmon_stream_suspend(struct logmon_stream *s, uint64_t now_ms);
void logmon_stream_resume(struct logmon_stream *s, uint64_t now_ms);
void logmon_stream_clear(struct logmon_stream *s);
bool logmon_stream_running(const struct logmon_stream *s);

/*
 * Evaluates one line (without its terminator; the bytes are borrowed for
 * the call and may hold anything, NUL and invalid UTF-8 included) against
 * every rule in configuration order. out (may be NULL) receives what
 * changed. Ignored unless running.
 */
void logmon_stream_feed(struct logmon_stream *s, const char *line, size_t len,
                        uint64_t now_ms, struct logmon_events *out);
/* Applies the time-based checks at now_ms: call it when the deadline
 * timer fires (calling it early or often is harmless). */
void logmon_stream_tick(struct logmon_stream *s, uint64_t now_ms,
                        struct logmon_events *out);
/* The earliest time at which a tick can change a state, or UINT64_MAX.
 * Cut-offs are strict: a rule with a 10 s cut-off started at 0 turns
 * HANGING at 10001 ms, not at 10000 ms. */
uint64_t logmon_stream_next_deadline(const struct logmon_stream *s);

/* The stream's state: the highest of its rules' states. */
enum logmon_state logmon_stream_state(const struct logmon_stream *s);
/* "LogFault_<rule>", "LogHang_<rule>" or "LogSlow_<rule>", naming the
 * first rule in configuration order that is in the stream's state; ""
 * when the stream is WAITING or HEALTHY. Borrowed from the stream. */
const char *logmon_stream_reason(const struct logmon_stream *s);
/* Index of the rule the reason names, or -1. */
int logmon_stream_reason_rule(const struct logmon_stream *s);

/*
 * A verdict in words, as the live agent logs it and a replay prints it:
 *   LogHang_Hang (HANGING) by rule Hang on local rank 0 at
 *   2025-06-17T05:51:29.300Z: 30.001 s since the last match at
 *   2025-06-17T05:50:59.299Z, limit 30.000 s
 *   (expectedRecurringFrequencyInSeconds)
 * and for SLOW the last value, the operator, the threshold and the data
 * points. Times are on the stream's clock plus wall_offset_ms (epoch ms
 * of the stream's 0), or seconds on its clock with LOGMON_NO_WALL_CLOCK;
 * local_rank -1 leaves the rank out. Returns 0, or -EINVAL when the
 * stream is not SLOW or worse.
 */
#define LOGMON_NO_WALL_CLOCK INT64_MIN
int logmon_verdict_format(const struct logmon_stream *s, int local_rank,
                          int64_t wall_offset_ms, char *buf, size_t len);
/* When the verdict's state change happened on the stream's clock: a
 * hang's deadline, or the line that made it; UINT64_MAX when none. */
uint64_t logmon_verdict_time(const struct logmon_stream *s);
/*
 * A rule's state change in words, as the live agent logs it at debug and
 * a replay's text output prints it:
 *   rule Hang on local rank 0: HEALTHY -> HANGING at
 *   2025-06-17T05:51:29.300Z
 * t_ms on the stream's clock, wall_offset_ms and local_rank as for
 * logmon_verdict_format. Formats e only when it is a state change;
 * returns 0, or -EINVAL for another event.
 */
int logmon_change_format(const struct logmon_ruleset *rs,
                         const struct logmon_event *e, int local_rank,
                         uint64_t t_ms, int64_t wall_offset_ms, char *buf,
                         size_t len);
/* Fills *out for rule i. Returns 0 or -EINVAL for a bad index. */
int logmon_stream_rule_info(const struct logmon_stream *s, size_t i,
                            struct logmon_rule_info *out);
/* Monitored time (suspended time left out) since rule i last matched, or
 * since monitoring started when it never matched; UINT64_MAX for a bad
 * index. What a recurring-frequency rule compares with its threshold. */
uint64_t logmon_stream_idle_ms(const struct logmon_stream *s, size_t i,
                               uint64_t now_ms);
/* Lines given to feed while not running. */
uint64_t logmon_stream_lines_ignored(const struct logmon_stream *s);

/* ---------------------------------------------------------------------
 * Configuration files
 */

/*
 * Reads rules from path: a JSON list of rules, a JSON object with a
 * "logMonitoringConfiguration" list (or a whole job as JSON), or a
 * HyperPodPyTorchJob job.yaml (spec.runPolicy.logMonitoringConfiguration;
 * the first document of a stream that has one). *out receives the rule
 * list (ownership passes to the caller, cJSON_Delete it). Errors name the
 * file and, for syntax errors, line and column. Returns 0, HP_ECONFIG,
 * HP_ETOOBIG or -errno.
 */
int logmon_config_load(const char *path, cJSON **out, char *errbuf,
                       size_t len);
/* The same from a buffer (borrowed); name is used in messages. */
int logmon_config_parse(const char *name, const char *data, size_t n,
                        cJSON **out, char *errbuf, size_t len);
/* logmon_config_load followed by logmon_ruleset_new; validation errors
 * are prefixed with the path. */
int logmon_config_load_ruleset(const char *path,
                               const struct logmon_ruleset_opts *opts,
                               struct logmon_ruleset **out, char *errbuf,
                               size_t len);

/* ---------------------------------------------------------------------
 * Replay: recorded logs through the rules, with no processes
 */

/* How lines name their stream. */
enum logmon_replay_layout {
        /* A console log when at least half the lines within the first
         * LOGMON_REPLAY_LOOKAHEAD bytes (all of a shorter log) carry a
         * console prefix, else a plain log. */
        LOGMON_LAYOUT_AUTO = 0,
        /* One stream, lines as they are ("[rank0]:" stays text). */
        LOGMON_LAYOUT_PLAIN,
        /* Every line names its stream with a "[default0]:" prefix; lines
         * without one (the launcher's own messages, a container's
         * prelude) are counted and not given to any rule, though their
         * timestamps still move the clock. */
        LOGMON_LAYOUT_CONSOLE,
        /* srun --label output: every line starts with a task label, "0: ",
         * which names the stream; a console prefix after it, when there
         * is one (hyperpodrun under srun), is part of the stream's name:
         * "0/default1". */
        LOGMON_LAYOUT_SRUN,
};
#define LOGMON_REPLAY_LOOKAHEAD (1024 * 1024)

struct logmon_replay_opts {
        /* Lines per second: line i (from 1) happens at (i - 1) * 1000 /
         * rate ms, and timestamps are ignored. 0 means: take time from a
         * timestamp at the start of each line (after a console prefix,
         * optionally inside '['), in the format of the first line that
         * has one, so that a number that merely looks like a time later
         * cannot move the clock:
         *   2025-06-17 05:51:29,300      asctime (Python logging)
         *   2025-06-17T05:51:29.3+02:00  ISO 8601, fraction and zone
         *                                optional (asctime and ISO 8601
         *                                are one format here)
         *   1750139489.300               epoch seconds, 10 digits
         *   I0617 05:51:29.300000        glog (no year: a step back of
         *                                more than 180 days is a new year)
         * A line without a timestamp happens when the line before it did;
         * lines before the first timestamp happen at 0. The clock never
         * runs back. */
        double rate;
        /* How long the clock runs on after the last line, so that a log
         * that ends in silence can still turn HANGING. */
        uint64_t tail_ms;
        enum logmon_replay_layout layout;
        /* Which streams are judged, as --log-monitor-ranks does live: a
         * stream whose name ends in local rank i is judged when i <
         * nmonitored and monitored[i]; the others are listed but get no
         * line. NULL: every stream. A plain log's one stream (a rank's own
         * file) is always judged. */
        const bool *monitored;
        size_t nmonitored;
        /* --replay-until: LOGMON_UNTIL_END runs tail_ms past the last
         * line; LOGMON_UNTIL_TIME to until_ms (epoch ms, needs a clock in
         * the log); LOGMON_UNTIL_VERDICT to the agent's own recorded
         * verdict line, where the live run stopped judging (lines after
         * it are not fed). */
        /* Readable lines instead of JSON (--replay-format text): each
         * state change after the line that made it, each verdict in the
         * live agent's words, and a short summary. */
        bool text;
        enum logmon_replay_until {
                LOGMON_UNTIL_END = 0,
                LOGMON_UNTIL_TIME,
                LOGMON_UNTIL_VERDICT,
        } until;
        int64_t until_ms;
};

struct logmon_replay;

/*
 * Feeds the log in (borrowed, read to EOF) through rs. Lines are split at
 * \n, \r and \r\n and cut at 64 KiB, as the live splitter does. In a
 * console log a leading "[default0]:" prefix is stripped and names the
 * stream; each stream has its own monitor, started at time 0, which is
 * the first timestamp's time. Deadlines fire at their own times, across
 * streams in time order. If out is not NULL, every event is written to
 * it as one JSON object per line:
 *   {"time":1.5,"stream":"default0","rule":"Hang","from":"HEALTHY",
 *    "state":"HANGING","line_no":null,"line":null}
 * ("time" in seconds since the start, line_no 1-based, null for a
 * deadline; stream null in a plain log; nonnumeric captures and regex
 * limits appear with an "event" key instead of "state"), then one
 * {"summary":{...}} object. Each "log rules: clock started" line of the
 * agent after the first starts a new attempt: every stream starts
 * afresh, as live, and the summary's "verdicts" has each attempt's first
 * verdict. *result (may be NULL) receives what
 * happened, for logmon_expect_check. opts may be NULL. Returns 0 or
 * -errno.
 */
int logmon_replay_run(struct logmon_ruleset *rs, FILE *in,
                      const struct logmon_replay_opts *opts, FILE *out,
                      struct logmon_replay **result);
/*
 * The same over per-rank files (a torchrun attempt directory's
 * <local_rank>/stdout.log), in[i] (borrowed, read whole) being the stream
 * names[i]: each file one rank's output as written, every stream started
 * with the replay. Lines are taken in time order across the files by
 * their own timestamps (a line without one comes with the line before it
 * in its file); line_no counts within each file.
 */
int logmon_replay_files(struct logmon_ruleset *rs, FILE *const *in,
                        const char *const *names, size_t n,
                        const struct logmon_replay_opts *opts, FILE *out,
                        struct logmon_replay **result);
/* The same over a buffer (borrowed). */
int logmon_replay_buffer(struct logmon_ruleset *rs, const char *data,
                         size_t n, const struct logmon_replay_opts *opts,
                         FILE *out, struct logmon_replay **result);
void logmon_replay_free(struct logmon_replay *r);
/* The highest state any stream ended in. */
enum logmon_state logmon_replay_state(const struct logmon_replay *r);

struct logmon_replay_info {
        uint64_t lines;
        uint64_t unprefixed; /* console log: lines with no prefix */
        uint64_t time_ms;    /* the clock at the end */
        size_t streams;
        bool console; /* the layout that was used */
        /* "plain", "console", "srun --label", each followed by " with
         * kubectl --timestamps" or " with ${time}" when lines carry such
         * a leading timestamp. Static. */
        const char *format;
        uint64_t agent_lines; /* hyperpodrun's own, given to no rule */
        bool agent_verdict;   /* the log holds the agent's verdict line */
        /* "prefix" (a leading RFC 3339 timestamp: kubectl --timestamps
         * or ${time}), "agent" (only the agent's own start and verdict
         * lines had a time), "asctime", "iso8601", "epoch", "glog", "rate" or
         * "none" (no line had a timestamp: time stood still at 0).
         * Static. */
        const char *clock;
};
void logmon_replay_get_info(const struct logmon_replay *r,
                            struct logmon_replay_info *out);

/* A verdict as the live agent gives one: the first state change to SLOW
 * or above on a judged stream, in time order. */
struct logmon_verdict {
        const char *rule;   /* borrowed from the replay */
        const char *stream; /* NULL: a plain log's */
        int local_rank;     /* from the stream's name; -1: none */
        enum logmon_state state;
        /* In the live agent's words (logmon_verdict_format); borrowed. */
        const char *message;
        uint64_t time_ms; /* since the start */
        bool have_wall;
        int64_t wall_ms;  /* epoch ms, when the log has a clock */
        uint64_t line_no; /* 0: a deadline */
};
/* Whether rule i matched a line on any judged stream. */
bool logmon_replay_rule_matched(const struct logmon_replay *r, size_t i);
/* How many judged rules still had a deadline to come where judging
 * stopped (the log ended first: neither HEALTHY nor HANGING is known);
 * the summary's "pending" lists them. A deadline due within
 * LOGMON_REPLAY_SKEW_MS after the stop counts as reached instead. */
#define LOGMON_REPLAY_SKEW_MS 100
size_t logmon_replay_pending(const struct logmon_replay *r);
/* Returns true and fills *out when the replay reached a verdict. */
bool logmon_replay_verdict(const struct logmon_replay *r,
                           struct logmon_verdict *out);

/*
 * Expectations (borrowed), for a replay over rs:
 *   {"final": {"<rule>": "HEALTHY", ...},    rules not named: unchecked
 *    "state": "HANGING",                      optional: the stream state
 *    "stream": "default0",                    optional: which stream; by
 *                                             default every stream
 *    "reached": {"Hang": ["HEALTHY", "HANGING"]}, states entered, any
 *                                             order
 *    "verdict": {"rule": "Hang", "state": "HANGING", "stream": "...",
 *                "time": 30.0, "within": 1.0},  the first verdict (null:
 *                                             none); stream, time optional
 *    "pending_deadline": false,               optional: whether a judged
 *                                             rule's deadline was still to
 *                                             come where the log ends
 *    "transitions": [{"rule": "Hang", "state": "HANGING",
 *                     "line_no": 12, "time": 30.0, "stream": "..."}]}
 * transitions, when present, must be exactly the state changes in order;
 * line_no (null: a deadline), time (seconds, 1 ms tolerance) and stream
 * (null: the plain log's) are compared only where given.
 *
 * logmon_expect_validate checks the expectation's shape, rule names and
 * state names. Returns 0 or HP_ECONFIG, described in errbuf.
 */
int logmon_expect_validate(const struct logmon_ruleset *rs,
                           const cJSON *expect, char *errbuf, size_t len);
/* Compares a replay with an expectation. A readable diff goes to diff
 * (may be NULL). Returns the number of differences (0: met), or
 * HP_ECONFIG for a malformed expectation, described in errbuf. */
int logmon_expect_check(const struct logmon_replay *r, const cJSON *expect,
                        FILE *diff, char *errbuf, size_t len);
/* Writes what the replay's judged streams did as an expectation that
 * logmon_expect_check then meets, and so does another recording of the
 * same job: final rule states and the stream state where every judged
 * stream agrees, pending_deadline, the states each rule reached and the
 * verdict's rule, state and stream; no times or line numbers (record
 * once, review, commit). 0 or -EIO. */
int logmon_expect_emit(const struct logmon_replay *r, FILE *f);
/* Reads an expectation JSON file. Returns 0, HP_ECONFIG or -errno. */
int logmon_expect_load(const char *path, cJSON **out, char *errbuf,
                       size_t len);

/* ---------------------------------------------------------------------
 * hyperpodrun --replay: the check a user or CI runs
 */

struct logmon_check_opts {
        const char *log;    /* a file, or "-" for in */
        const char *rules;  /* --log-monitoring-config */
        const char *expect; /* --expect, or NULL */
        double rate;        /* --replay-rate, or 0 for timestamps */
        enum logmon_replay_layout layout; /* --replay-input */
        const bool *monitored;            /* --log-monitor-ranks */
        size_t nmonitored;
        const char *until;       /* --replay-until TIME|+SECONDS|verdict */
        bool text;               /* --replay-format text */
        bool strict;             /* --strict */
        const char *emit_expect; /* --emit-expect FILE, or NULL */
};

/*
 * Loads the rules and the expectation (both checked before the log is
 * read), replays the log, writes the JSON lines to out and, with an
 * expectation, every difference to diff. Warns (hp_log) when no line had
 * a timestamp and no rate was given, or when a console log had lines
 * without a prefix. Returns 0 (no expectation, or it was met), the
 * number of differences (> 0), or a negative error described in errbuf
 * with the file it concerns.
 */
int logmon_check_run(const struct logmon_check_opts *opts, FILE *in,
                     FILE *out, FILE *diff, char *errbuf, size_t len);

/*
 * hyperpodrun --check-rules: validates the rules at path (strict: unknown
 * keys are errors) and prints each as the engine took it to out. Returns
 * 0, or HP_ECONFIG / -errno described in errbuf (with the rule index,
 * name, field and a suggestion for a misspelling).
 */
int logmon_rules_check(const char *path, bool strict, FILE *out, char *errbuf,
                       size_t len);

#endif
