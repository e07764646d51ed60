/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of the replay share: its state, and the functions one
 * file calls in another. replay.c is the driver (the clock, streams,
 * attempts, the layout and feeding lines), replay_head.c reads what a
 * line carries before its text, replay_time.c the timestamps in it,
 * replay_files.c merges per-rank files, replay_report.c is what a replay
 * prints and tells its caller, replay_expect.c checks and writes
 * expectations. */
#ifndef HP_LOGMON_REPLAY_PRIVATE_H
#define HP_LOGMON_REPLAY_PRIVATE_H

#include <stdio.h>

#include "hyperpod/linesplit.h"

#include "logmon-private.h"

/* How much of a log is read at a time. */
#define REPLAY_CHUNK (64 * 1024)
/* How far a deadline may lie past where judging stops (the log's last
 * line, or the agent's own verdict line) and still count as reached:
 * the stamps a capture adds (kubectl --timestamps: when the runtime read
 * the line, after the agent did) run behind the agent's clock by a few
 * ms, and so does every deadline a stamped line sets. */
#define REPLAY_SKEW_MS LOGMON_REPLAY_SKEW_MS
/* A console prefix's name, "default0" in "[default0]:", is shorter. */
#define PREFIX_MAX 64

struct replay_stream {
        char *name; /* NULL: the one stream of a plain log */
        struct logmon_stream *mon;
        int local_rank; /* the number its name ends in; -1: none */
        bool judged;    /* --log-monitor-ranks selects it */
        /* Made at the agent's start line for a judged local rank, before
         * any of its lines: the first stream named for that rank takes
         * it over. A rank that never prints still runs out its cut-off,
         * as live. */
        bool placeholder;
        uint64_t *matches; /* per rule: metric matches written out */
};

struct replay_change {
        size_t stream;
        uint32_t rule;
        uint8_t kind;
        uint8_t pattern;
        uint8_t from;
        uint8_t to;
        uint64_t time;    /* ms since the start */
        uint64_t line_no; /* 0: a deadline, not a line */
};

enum replay_clock {
        CLOCK_NONE = 0, /* no timestamp seen yet */
        CLOCK_RATE,
        CLOCK_ASCTIME, /* one parser with ISO 8601, named by the first */
        CLOCK_ISO8601,
        CLOCK_EPOCH,
        CLOCK_GLOG,
        CLOCK_HEAD,  /* kubectl --timestamps or ${time} before a line */
        CLOCK_AGENT, /* only the agent's own start and verdict lines */
};

/* What a line carries before its text, outermost first: up to two RFC
 * 3339 timestamps (kubectl --timestamps, then the agent's ${time}), an
 * srun task label, and a console prefix or the agent's own "hyperpodrun
 * [PID]: ". */
struct line_head {
        const char *body;
        size_t body_len;
        bool have_ts;
        int64_t ts; /* the innermost timestamp, epoch ms */
        size_t ts_count;
        bool kubectl;      /* nanoseconds: kubectl's */
        const char *label; /* srun's task label, or NULL */
        size_t label_len;
        const char *name; /* the console prefix's name, or NULL */
        size_t name_len;
        bool agent; /* hyperpodrun's own line */
};

struct logmon_replay {
        struct logmon_ruleset *rs;
        struct replay_stream *streams;
        size_t nstreams;
        struct replay_change *changes;
        size_t nchanges, capchanges;
        uint64_t lines;
        uint64_t unprefixed;
        uint64_t now; /* ms since the start */
        enum replay_clock clock;
        enum logmon_replay_layout layout; /* AUTO: not decided yet */
        bool have_base;
        int64_t base;    /* epoch ms of the first timestamp */
        int64_t last_ts; /* the latest timestamp, for glog's year */
        int glog_year;
        const struct logmon_replay_opts *opts;
        FILE *out;
        int error;
        /* The live splitter, its partial line and the chunk it reads. */
        struct hp_linesplit split;
        char *buf;
        char *chunk;
        /* While the layout is undecided: the lines so far, each a size_t
         * length and its bytes, numbered from pending_first. */
        char *pending;
        size_t pending_len, pending_cap;
        uint64_t pending_first;
        uint64_t pending_prefixed; /* held lines with a console prefix */
        uint64_t pending_labelled; /* held lines with an srun label */
        uint64_t pending_stamped;  /* held lines with a leading RFC 3339 */
        bool head_ts;              /* lines carry leading timestamps */
        bool files;                /* per-rank files, one stream each */
        bool head_ts_kubectl;      /* two of them, or nanoseconds */
        uint64_t agent_lines;
        uint64_t start_ms;        /* when the live rule clocks started */
        bool started;             /* the agent's start line was seen */
        bool live_verdict;        /* the agent's verdict line was seen */
        bool job_ended;           /* the agent's line that the job ended */
        bool stopped;             /* --replay-until verdict: it was */
        uint64_t text_line_shown; /* --replay-format text */
        bool until_set;           /* --replay-until TIME, or verdict's */
        int64_t until_ts;
        bool have_end;         /* no clock but the agent's: its */
        int64_t end_ts;        /* verdict's time ends the replay */
        uint64_t after_stop;   /* lines after it, not fed */
        uint64_t end_ms;       /* where judging stopped, before the
                                    * deadlines within REPLAY_SKEW_MS */
        uint64_t skew_ms;      /* while one fires: how far past */
        uint64_t skew_reached; /* deadlines reached within the skew */
        uint64_t skew_until;   /* the latest of them */
        /* The first verdict, as the live agent takes it (check_verdict in
         * src/supervise/rulewatch.c): the first judged stream to reach SLOW
         * or above, named by its reason rule. */
        bool have_verdict;
        size_t v_stream;
        int v_rule;
        enum logmon_state v_state;
        uint64_t v_time, v_line_no;
        uint64_t v_skew_ms; /* its deadline past the stop: 0 none */
        char v_message[1024];
        char v_line[LOGMON_LAST_LINE_MAX + 1];
        /* The first verdict of each attempt (each "clock started" line of
         * the agent starts one, as live), in the live agent's words. */
        bool attempt_verdict;
        struct replay_verdict {
                int64_t wall_ms; /* LOGMON_NO_WALL_CLOCK: none */
                uint64_t time;
                char message[1024];
        } * verdicts;
        size_t nverdicts;
};

/* replay.c: the driver, for the per-rank files. */

int logmon__replay_begin(struct logmon_ruleset *rs,
                         const struct logmon_replay_opts *opts, FILE *out,
                         struct logmon_replay **rp);
/* Ends the log, judges up to --replay-until and writes the summary; r is
 * freed on failure or without result. */
int logmon__replay_end(struct logmon_replay *r,
                       struct logmon_replay **result);
/* The index of the stream named name (NULL: the plain log's one),
 * made when it is new. */
int logmon__replay_stream(struct logmon_replay *r, const char *name,
                          size_t name_len, size_t *out);
void logmon__set_clock(struct logmon_replay *r, int64_t ts);
void logmon__advance_clock(struct logmon_replay *r, const struct line_head *h,
                           uint64_t line_no);
bool logmon__past_until(struct logmon_replay *r);
int logmon__feed_line(struct logmon_replay *r, const char *name,
                      size_t name_len, const struct line_head *h,
                      uint64_t line_no);
/* The wall clock's epoch ms at replay time 0, or LOGMON_NO_WALL_CLOCK. */
int64_t logmon__wall_offset(const struct logmon_replay *r);

/* Whether rule of stream i still had a deadline to come when judging
 * stopped, and when (*due_ms, on the replay's clock). */
bool logmon__pending(const struct logmon_replay *r, size_t i, size_t rule,
                     uint64_t *due_ms);

/* replay_head.c */

void logmon__parse_head(const struct logmon_replay *r, const char *line,
                        size_t len, struct line_head *h);
/* An ISO 8601 time after " at " in the agent's own line. */
bool logmon__agent_time(const char *p, size_t len, int64_t *ts);

/* replay_time.c */

/* An ISO 8601 date and time at p (asctime's blank or a 'T', optional
 * fraction and zone; no zone is UTC) as epoch ms; *kind says which
 * spelling. */
bool logmon__ts_datetime(const char *p, const char *end, int64_t *out,
                         enum replay_clock *kind);
/* The timestamp at the start of a line's text, in the format the first
 * one fixed (r->clock). */
bool logmon__line_timestamp(struct logmon_replay *r, const char *line,
                            size_t len, int64_t *out);

/* replay_report.c */

/* JSON string or null. */
void logmon__json_cstr(FILE *f, const char *s);
/* A recorded change, as a JSON line or in text. */
void logmon__print_change(struct logmon_replay *r, size_t stream,
                          const struct logmon_event *e, uint64_t line_no,
                          const char *line, size_t len);
void logmon__write_values(struct logmon_replay *r, size_t stream,
                          uint64_t line_no);
/* The summary, JSON or text, after the last change. */
void logmon__write_summary(struct logmon_replay *r);

#endif
