/* What replay.c, replay_time.c and replay_expect.c share: the replay's
 * state. */
#ifndef HP_LOGMON_REPLAY_PRIVATE_H
#define HP_LOGMON_REPLAY_PRIVATE_H

#include <stdio.h>

#include "hyperpod/linesplit.h"

#include "logmon-private.h"

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
        CLOCK_ASCTIME,  /* one parser with ISO 8601, named by the first */
        CLOCK_ISO8601,
        CLOCK_EPOCH,
        CLOCK_GLOG,
        CLOCK_HEAD,     /* kubectl --timestamps or ${time} before a line */
        CLOCK_AGENT,    /* only the agent's own start and verdict lines */
};

struct logmon_replay {
        struct logmon_ruleset *rs;
        struct replay_stream *streams;
        size_t nstreams;
        struct replay_change *changes;
        size_t nchanges, capchanges;
        uint64_t lines;
        uint64_t unprefixed;
        uint64_t now;     /* ms since the start */
        enum replay_clock clock;
        enum logmon_replay_layout layout; /* AUTO: not decided yet */
        bool have_base;
        int64_t base;     /* epoch ms of the first timestamp */
        int64_t last_ts;  /* the latest timestamp, for glog's year */
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
        uint64_t start_ms;         /* when the live rule clocks started */
        bool started;              /* the agent's start line was seen */
        bool live_verdict;         /* the agent's verdict line was seen */
        bool stopped;              /* --replay-until verdict: it was */
        uint64_t text_line_shown;  /* --replay-format text */
        bool until_set;            /* --replay-until TIME, or verdict's */
        int64_t until_ts;
        bool have_end;             /* no clock but the agent's: its */
        int64_t end_ts;            /* verdict's time ends the replay */
        uint64_t after_stop;       /* lines after it, not fed */
        /* The first verdict, as the live agent takes it (check_verdict in
         * src/supervise/rulewatch.c): the first judged stream to reach SLOW
         * or above, named by its reason rule. */
        bool have_verdict;
        size_t v_stream;
        int v_rule;
        enum logmon_state v_state;
        uint64_t v_time, v_line_no;
        char v_message[1024];
        char v_line[LOGMON_LAST_LINE_MAX + 1];
        /* The first verdict of each attempt (each "clock started" line of
         * the agent starts one, as live), in the live agent's words. */
        bool attempt_verdict;
        struct replay_verdict {
                int64_t wall_ms; /* LOGMON_NO_WALL_CLOCK: none */
                uint64_t time;
                char message[1024];
        } *verdicts;
        size_t nverdicts;
};

/* JSON string or null. */
void logmon__json_cstr(FILE *f, const char *s);
/* An ISO 8601 date and time at p (asctime's blank or a 'T', optional
 * fraction and zone; no zone is UTC) as epoch ms; *kind says which
 * spelling. */
bool logmon__ts_datetime(const char *p, const char *end, int64_t *out,
                         enum replay_clock *kind);
/* The timestamp at the start of a line's text, in the format the first
 * one fixed (r->clock). */
bool logmon__line_timestamp(struct logmon_replay *r, const char *line,
                            size_t len, int64_t *out);

#endif
