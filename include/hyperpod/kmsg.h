/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel log: node-problem-detector's kernel-monitor rules over the
 * records of /dev/kmsg, so that a node's hardware faults (an uncorrectable
 * ECC error, a GPU fallen off the bus, a Neuron DMA error) are told apart
 * from the job's own failures.
 *
 * Three layers: a record parser and a rule matcher that are pure (no
 * clock, no I/O; the caller passes the time), and a watcher that reads a
 * kernel log on a libuv loop without ever blocking it.
 */
#ifndef HYPERPOD_KMSG_H
#define HYPERPOD_KMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

/* ---- Records ---- */

/* One kernel log record: "<prio>,<seq>,<usec>,<flags>[,...];<message>"
 * and continuation lines (" KEY=value"), which are not part of message. */
struct kmsg_record {
        int prio; /* facility and level, as the kernel gives it */
        uint64_t seq;
        uint64_t usec;   /* since boot, CLOCK_BOOTTIME */
        const char *msg; /* borrowed from the parsed buffer */
        size_t msg_len;  /* the first line only, without "\n" */
};

/* Parses one record (buf need not end in "\n"). Returns 0; -EBADMSG
 * when buf is not in the /dev/kmsg format; -EPROTO when it starts as a
 * record ("<prio>,") but its sequence number or timestamp is not a
 * decimal number (a negative timestamp, say). */
int kmsg_record_parse(const char *buf, size_t len, struct kmsg_record *out);

/* ---- Rules: node-problem-detector's kernel-monitor JSON ---- */

enum kmsg_rule_type {
        KMSG_TEMPORARY = 0, /* logged and counted */
        KMSG_PERMANENT,     /* a node fault */
};

struct kmsg_rules;

/* Parses a kernel-monitor config (the JSON NPD's system-log-monitor
 * reads: "conditions", "rules", "bufferSize", "lookback", "source";
 * "plugin", when given, must be "kmsg": a journald or filelog config is
 * refused; "logPath" is read and ignored, as NPD's kmsg plugin does).
 * origin names the
 * text in errors. Returns 0 with *out (free with kmsg_rules_free), or
 * HP_ECONFIG with errbuf naming the field, or -ENOMEM. json is
 * borrowed. */
int kmsg_rules_parse(const char *json, size_t len, const char *origin,
                     struct kmsg_rules **out, char *errbuf, size_t errlen);
/* The same from a file. */
int kmsg_rules_load(const char *path, struct kmsg_rules **out, char *errbuf,
                    size_t errlen);
void kmsg_rules_free(struct kmsg_rules *rules);

size_t kmsg_rules_count(const struct kmsg_rules *rules);
/* A rule's type, reason and condition ("" for a temporary rule). */
enum kmsg_rule_type kmsg_rules_type(const struct kmsg_rules *rules, size_t i);
const char *kmsg_rules_reason(const struct kmsg_rules *rules, size_t i);
const char *kmsg_rules_condition(const struct kmsg_rules *rules, size_t i);
/* Why rule i deserves a warning at start, as a sentence naming the config
 * (its origin) and the rule, or NULL: its pattern is not anchored at the
 * start of the record (no leading '^', or a leading '.*'), so text an
 * unprivileged process gets into the kernel log (a crashing program's
 * name in its segfault line) could match it; or it starts with '^'
 * without (?m) while bufferSize is over 1, where '^' is the start of the
 * oldest buffered record. Borrowed from rules. */
const char *kmsg_rules_warning(const struct kmsg_rules *rules, size_t i);
/* The lookback window in microseconds (0: only records newer than the
 * start count) and the source name ("" when absent). */
uint64_t kmsg_rules_lookback_us(const struct kmsg_rules *rules);
const char *kmsg_rules_source(const struct kmsg_rules *rules);

/* ---- The matcher: the rules over a stream of records (pure) ---- */

/* What a record made a rule say. message holds the matched lines joined
 * by "\n", as NPD's event message. All borrowed for the call. */
struct kmsg_hit {
        size_t rule;
        enum kmsg_rule_type type;
        const char *reason;
        const char *condition;
        const char *message;
};

typedef void (*kmsg_hit_cb)(void *ctx, const struct kmsg_hit *hit);

struct kmsg_matcher;

/* rules is borrowed and must outlive the matcher. start_us is when
 * watching began (CLOCK_BOOTTIME, microseconds): records older than
 * start_us minus the config's lookback are ignored. NULL on ENOMEM. */
struct kmsg_matcher *kmsg_matcher_new(const struct kmsg_rules *rules,
                                      uint64_t start_us);
void kmsg_matcher_free(struct kmsg_matcher *m);

/*
 * Feeds one record. Each rule whose pattern matches the buffered lines up
 * to and including this one calls cb. Returns the number of hits, or 0 for
 * a record that is too old to count, or -ENOMEM.
 */
int kmsg_matcher_feed(struct kmsg_matcher *m, const struct kmsg_record *rec,
                      kmsg_hit_cb cb, void *ctx);

/* NPD's problem_counter (hits per rule) and problem_gauge (1 while a
 * permanent rule's condition holds with its reason). */
uint64_t kmsg_matcher_count(const struct kmsg_matcher *m, size_t rule);
bool kmsg_matcher_active(const struct kmsg_matcher *m, size_t rule);
/* Records ignored for being older than the window. */
uint64_t kmsg_matcher_old(const struct kmsg_matcher *m);

/* ---- The watcher ---- */

#define KMSG_WATCH_MAX_CONFIGS 4
/* The most records one loop turn reads: a burst of kernel noise is spread
 * over loop turns, and the workers' pipes are served between them. */
#define KMSG_WATCH_RECORDS_PER_TURN 64

struct kmsg_watch;
typedef void (*kmsg_watch_hit_cb)(struct kmsg_watch *w, size_t config,
                                  const struct kmsg_hit *hit);

struct kmsg_watch {
        uv_loop_t *loop;
        uv_poll_t poll;   /* a character device or a FIFO */
        uv_timer_t timer; /* a regular file: read in turns, then tailed */
        int fd;
        int hold_fd;    /* a FIFO's write end we hold: no EOF between
                           * writers */
        bool is_device; /* /dev/kmsg: one record per read(2) */
        bool polling;
        bool timing;
        bool active;
        char path[4096];
        size_t nconfigs;
        struct kmsg_rules *rules[KMSG_WATCH_MAX_CONFIGS]; /* owned */
        struct kmsg_matcher *matchers[KMSG_WATCH_MAX_CONFIGS];
        uint64_t start_us;
        /* A byte stream's partial line. Continuation lines (" KEY=value")
         * are skipped: rules see the message, as NPD's. */
        char line[8192];
        size_t line_len;
        bool line_overflow;
        bool eof;
        uint64_t records;     /* read and parsed */
        uint64_t overwritten; /* EPIPE: the kernel overwrote unread ones */
        uint64_t malformed;   /* not in the record format, or a broken
                              * record in a byte stream */
        bool warned_broken;   /* a broken record was logged once */
        uint64_t truncated;   /* longer than a buffer */
        kmsg_watch_hit_cb hit_cb;
        void *data;
};

/*
 * Opens path (a character device read one record per read(2), a FIFO or
 * a regular file read as a byte stream) and watches it with the rules
 * (ownership of each is taken, even on failure). Returns 0; or -EACCES,
 * -EPERM or -ENOENT when path cannot be opened (errbuf says what to mount
 * or grant), or another error.
 */
int kmsg_watch_start(struct kmsg_watch *w, uv_loop_t *loop, const char *path,
                     struct kmsg_rules **rules, size_t nconfigs,
                     uint64_t start_us, kmsg_watch_hit_cb cb, char *errbuf,
                     size_t errlen);
/* Closes the handles (uv_close: the loop must run once more) and frees the
 * rules. Safe on a watcher that never started (zeroed). */
void kmsg_watch_close(struct kmsg_watch *w);

/* CLOCK_BOOTTIME in microseconds: the clock of a record's usec. */
uint64_t kmsg_boottime_us(void);

#endif
