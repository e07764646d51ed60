/* Replay: a recorded log through the rules, with time taken from the
 * lines themselves or from a fixed rate; its formats (the agent's
 * console, kubectl --timestamps, srun --label, plain files), the agent's
 * own lines and the output. Timestamps are in replay_time.c, the
 * expectation check in replay_expect.c. Unlike the engine, this is not a
 * hot path: it allocates freely. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/linesplit.h"
#include "replay-private.h"

#define REPLAY_CHUNK (64 * 1024)
/* Zero bytes after every buffer a line is matched in: the JIT reads
 * words past a line's end. */
#define REPLAY_PAD 64
#define PREFIX_MAX 64
/* Replay time saturates here (about 285 000 years), so that a tiny
 * --replay-rate cannot overflow a deadline. */
#define REPLAY_TIME_MAX 9000000000000000.0

static const char *const clock_names[] = {
        [CLOCK_NONE] = "none",       [CLOCK_RATE] = "rate",
        [CLOCK_ASCTIME] = "asctime", [CLOCK_ISO8601] = "iso8601",
        [CLOCK_EPOCH] = "epoch",     [CLOCK_GLOG] = "glog",
        [CLOCK_HEAD] = "prefix",     [CLOCK_AGENT] = "agent",
};

/* What a line carries before its text, outermost first: up to two RFC
 * 3339 timestamps (kubectl --timestamps, then the agent's ${time}), an
 * srun task label, and a console prefix or the agent's own "hyperpodrun
 * [PID]: ". */
struct line_head {
        const char *body;
        size_t body_len;
        bool have_ts;
        int64_t ts;            /* the innermost timestamp, epoch ms */
        size_t ts_count;
        bool kubectl;          /* nanoseconds: kubectl's */
        const char *label;     /* srun's task label, or NULL */
        size_t label_len;
        const char *name;      /* the console prefix's name, or NULL */
        size_t name_len;
        bool agent;            /* hyperpodrun's own line */
};


/* ---------------------------------------------------------------------
 * JSON output
 */

void logmon__json_string(FILE *f, const char *s, size_t n)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0, k;

        fputc('"', f);
        while (i < n) {
                unsigned char c = p[i];

                if (c == '"' || c == '\\') {
                        fputc('\\', f);
                        fputc(c, f);
                        i++;
                } else if (c < 0x20 || c == 0x7f) {
                        fprintf(f, "\\u%04x", c);
                        i++;
                } else if (c < 0x80) {
                        fputc(c, f);
                        i++;
                } else if ((k = hp_utf8_seq_len(p + i, n - i)) == 0) {
                        fputs("\\ufffd", f);
                        i++;
                } else {
                        fwrite(p + i, 1, k, f);
                        i += k;
                }
        }
        fputc('"', f);
}

void logmon__json_cstr(FILE *f, const char *s)
{
        if (s == NULL)
                fputs("null", f);
        else
                logmon__json_string(f, s, strlen(s));
}

/* Moves the clock to ts (epoch ms). Out-of-order timestamps (several
 * writers) keep the clock where it is rather than running it back. */
static void set_clock(struct logmon_replay *r, int64_t ts)
{
        r->last_ts = ts;
        if (!r->have_base) {
                r->have_base = true;
                r->base = ts;
        }
        if (ts - r->base > (int64_t)r->now)
                r->now = (uint64_t)(ts - r->base);
}

/* The time of a line with its head parsed: from the rate, the leading
 * timestamp, or one at the start of its text. */
static void advance_clock(struct logmon_replay *r,
                          const struct line_head *h, uint64_t line_no)
{
        double t;
        int64_t ts;

        if (r->opts->rate > 0) {
                t = (double)(line_no - 1) * 1000.0 / r->opts->rate;
                r->now = t < REPLAY_TIME_MAX ? (uint64_t)llround(t) :
                                               (uint64_t)REPLAY_TIME_MAX;
                return;
        }
        if (r->head_ts) {
                if (h->have_ts) {
                        r->clock = CLOCK_HEAD;
                        set_clock(r, h->ts);
                }
                return;
        }
        if (h->agent)
                return;
        if (logmon__line_timestamp(r, h->body, h->body_len, &ts))
                set_clock(r, ts);
}

/* A torchrun console prefix, "[default0]:": a short bracketed name with
 * no blanks, followed by a colon. Returns its length, 0 when absent. */
static size_t console_prefix(const char *line, size_t len)
{
        size_t i;

        if (len < 4 || line[0] != '[')
                return 0;
        for (i = 1; i < len && i <= PREFIX_MAX; i++) {
                if (line[i] == ']')
                        return i > 1 && i + 1 < len && line[i + 1] == ':' ?
                                       i + 2 : 0;
                if (line[i] == ' ' || line[i] == '\t' || line[i] == '[')
                        return 0;
        }
        return 0;
}

/* "2025-06-17T05:51:29.123456789Z " as kubectl --timestamps and ${time}
 * write it: a 'T', a 'Z' and a blank after it, so that a Python logging
 * timestamp, which is part of the line's text, is never taken for one.
 * Returns its length with the blank, 0 when absent; *nanos: more than
 * three fraction digits (kubectl's). */
static size_t head_timestamp(const char *p, const char *end, int64_t *ts,
                             bool *nanos)
{
        enum replay_clock kind;
        size_t n = 0;

        while (p + n < end && n < 40 && p[n] != ' ')
                n++;
        if (n < 20 || p + n == end || p[n] != ' ' || p[n - 1] != 'Z' ||
            p[10] != 'T' || !logmon__ts_datetime(p, p + n, ts, &kind))
                return 0;
        *nanos = n > 24;
        return n + 1;
}

/* srun --label's "0: ", right-aligned with blanks in a wide job.
 * Returns its length, 0 when absent; *at and *digits: the label. */
static size_t srun_label(const char *p, const char *end, size_t *at,
                         size_t *digits)
{
        size_t i = 0, d = 0;

        while (p + i < end && i < 8 && p[i] == ' ')
                i++;
        while (p + i + d < end && d < 8 && p[i + d] >= '0' &&
               p[i + d] <= '9')
                d++;
        if (d == 0 || p + i + d + 1 >= end || p[i + d] != ':' ||
            p[i + d + 1] != ' ')
                return 0;
        *at = i;
        *digits = d;
        return i + d + 2;
}

static const char AGENT[] = "hyperpodrun[";

/* hyperpodrun's own "hyperpodrun[PID]: " at p: its length, or 0. */
static size_t agent_prefix(const char *p, const char *end)
{
        size_t n = sizeof(AGENT) - 1, d = 0;

        if ((size_t)(end - p) < n + 3 || memcmp(p, AGENT, n) != 0)
                return 0;
        while (p + n + d < end && p[n + d] >= '0' && p[n + d] <= '9')
                d++;
        if (d == 0 || p + n + d + 1 >= end || p[n + d] != ']' ||
            p[n + d + 1] != ':')
                return 0;
        return n + d + 2;
}

/* Up to two leading RFC 3339 times at p, the inner one the line's. */
static const char *head_timestamps(const struct logmon_replay *r,
                                   struct line_head *h, const char *p,
                                   const char *end)
{
        bool nanos;
        int64_t ts;
        size_t n;

        if (r->layout != LOGMON_LAYOUT_AUTO && !r->head_ts)
                return p;
        while (h->ts_count < 2) {
                n = head_timestamp(p, end, &ts, &nanos);
                if (n == 0)
                        break;
                h->have_ts = true;
                h->ts = ts;
                h->ts_count++;
                h->kubectl = h->kubectl || nanos;
                p += n;
        }
        return p;
}

/* Splits a line's head off. When the layout is undecided every part is
 * looked for, to count them; once it is, only the layout's. */
static void parse_head(const struct logmon_replay *r, const char *line,
                       size_t len, struct line_head *h)
{
        const char *p = line, *end = line + len;
        bool undecided = r->layout == LOGMON_LAYOUT_AUTO;
        size_t n, at, digits;

        memset(h, 0, sizeof(*h));
        p = head_timestamps(r, h, p, end);
        if (undecided || r->layout == LOGMON_LAYOUT_SRUN) {
                n = srun_label(p, end, &at, &digits);
                if (n != 0) {
                        h->label = p + at;
                        h->label_len = digits;
                        p += n;
                        /* ${time} inside srun's label. */
                        p = head_timestamps(r, h, p, end);
                }
        }
        n = agent_prefix(p, end);
        if (n != 0) {
                h->agent = true;
        } else if (r->layout != LOGMON_LAYOUT_PLAIN &&
                   (n = console_prefix(p, (size_t)(end - p))) != 0) {
                h->name = p + 1;
                h->name_len = n - 3;
        }
        h->body = p + n;
        h->body_len = (size_t)(end - p) - n;
}

/* An ISO 8601 time after " at " in the agent's own line: its start and
 * verdict lines say when, on the wall clock, the live rules started and
 * judged. */
static bool agent_time(const char *p, size_t len, int64_t *ts)
{
        enum replay_clock kind;
        size_t i;

        for (i = 0; i + 4 + 20 <= len; i++)
                if (memcmp(p + i, " at ", 4) == 0 && p[i + 4 + 10] == 'T' &&
                    logmon__ts_datetime(p + i + 4, p + len, ts, &kind))
                        return true;
        return false;
}

static bool contains(const char *p, size_t len, const char *what)
{
        size_t n = strlen(what), i;

        for (i = 0; i + n <= len; i++)
                if (memcmp(p + i, what, n) == 0)
                        return true;
        return false;
}

/* ---------------------------------------------------------------------
 * Feeding
 */

/* The wall clock's epoch ms at replay time 0, or LOGMON_NO_WALL_CLOCK. */
static int64_t wall_offset(const struct logmon_replay *r)
{
        return r->have_base && r->clock != CLOCK_RATE ? r->base :
                                                        LOGMON_NO_WALL_CLOCK;
}

static void text_time(const struct logmon_replay *r, uint64_t t)
{
        char iso[HP_ISO8601_MS_LEN + 1];

        fprintf(r->out, "%" PRIu64 ".%03" PRIu64 " s", t / 1000, t % 1000);
        if (wall_offset(r) != LOGMON_NO_WALL_CLOCK) {
                hp_iso8601_ms(r->base + (int64_t)t, iso);
                fprintf(r->out, " (%s)", iso);
        }
}

/* --replay-format text: the line, then what it changed; a deadline's
 * change on its own. */
static void text_change(struct logmon_replay *r, size_t stream,
                        const struct logmon_event *e, uint64_t line_no,
                        const char *line, size_t len)
{
        const char *name = r->streams[stream].name;

        if (line_no != 0 && line_no != r->text_line_shown) {
                r->text_line_shown = line_no;
                fprintf(r->out, "line %" PRIu64 " ", line_no);
                if (name != NULL)
                        fprintf(r->out, "[%s] ", name);
                fputs("at ", r->out);
                text_time(r, r->now);
                fprintf(r->out, ": %.*s\n", (int)(len > 400 ? 400 : len),
                        line);
        }
        fputs("  ", r->out);
        if (line_no == 0) {
                fputs("deadline ", r->out);
                if (name != NULL)
                        fprintf(r->out, "[%s] ", name);
                fputs("at ", r->out);
                text_time(r, r->now);
                fputs(": ", r->out);
        }
        if (e->kind == LOGMON_EVENT_STATE) {
                char what[LOGMON_NAME_MAX + 128];

                (void)logmon_change_format(r->rs, e,
                                           r->streams[stream].local_rank,
                                           r->now, wall_offset(r), what,
                                           sizeof(what));
                fprintf(r->out, "log rule state change %s\n", what);
                return;
        }
        fprintf(r->out, "%s: ", logmon_ruleset_rule_name(r->rs, e->rule));
        if (e->kind == LOGMON_EVENT_NONNUMERIC)
                fputs("the captured metric is not a number\n", r->out);
        else
                fputs("a match was given up at a PCRE2 limit\n", r->out);
}

static int record(struct logmon_replay *r, size_t stream,
                  const struct logmon_event *e, uint64_t line_no,
                  const char *line, size_t len)
{
        struct replay_change *c;

        if (r->nchanges == r->capchanges) {
                size_t cap = r->capchanges ? 2 * r->capchanges : 64;
                void *p = realloc(r->changes, cap * sizeof(*r->changes));

                if (p == NULL)
                        return -ENOMEM;
                r->changes = p;
                r->capchanges = cap;
        }
        c = &r->changes[r->nchanges++];
        c->stream = stream;
        c->rule = e->rule;
        c->kind = e->kind;
        c->pattern = e->pattern;
        c->from = e->from;
        c->to = e->to;
        c->time = r->now;
        c->line_no = line_no;
        if (r->out == NULL)
                return 0;
        if (r->opts->text) {
                text_change(r, stream, e, line_no, line, len);
                return 0;
        }

        fprintf(r->out, "{\"time\":%" PRIu64 ".%03" PRIu64 ",\"stream\":",
                r->now / 1000, r->now % 1000);
        logmon__json_cstr(r->out, r->streams[stream].name);
        fputs(",\"rule\":", r->out);
        logmon__json_cstr(r->out, logmon_ruleset_rule_name(r->rs, e->rule));
        if (e->kind == LOGMON_EVENT_STATE)
                fprintf(r->out, ",\"from\":\"%s\",\"state\":\"%s\"",
                        logmon_state_name(e->from), logmon_state_name(e->to));
        else if (e->kind == LOGMON_EVENT_NONNUMERIC)
                fputs(",\"event\":\"nonnumeric\"", r->out);
        else
                fprintf(r->out, ",\"event\":\"regex_limit\",\"pattern\":\"%s\"",
                        e->pattern == LOGMON_PATTERN_STOP ? "stopPattern" :
                                                            "logPattern");
        if (line_no == 0) {
                fputs(",\"line_no\":null,\"line\":null}\n", r->out);
        } else {
                fprintf(r->out, ",\"line_no\":%" PRIu64 ",\"line\":", line_no);
                logmon__json_string(r->out, line, len);
                fputs("}\n", r->out);
        }
        return 0;
}

/* The attempt's first verdict, kept for the summary and, in text, printed
 * as the live agent logs it. */
static int attempt_verdict(struct logmon_replay *r, size_t stream)
{
        const struct logmon_stream *mon = r->streams[stream].mon;
        struct replay_verdict *v;
        void *p;

        r->attempt_verdict = true;
        p = realloc(r->verdicts, (r->nverdicts + 1) * sizeof(*r->verdicts));
        if (p == NULL)
                return -ENOMEM;
        r->verdicts = p;
        v = &r->verdicts[r->nverdicts++];
        v->time = logmon_verdict_time(mon);
        v->wall_ms = wall_offset(r);
        if (v->wall_ms != LOGMON_NO_WALL_CLOCK && v->time != UINT64_MAX)
                v->wall_ms += (int64_t)v->time;
        if (logmon_verdict_format(mon, r->streams[stream].local_rank,
                                  wall_offset(r), v->message,
                                  sizeof(v->message)) != 0)
                v->message[0] = '\0';
        if (r->out != NULL && r->opts->text)
                fprintf(r->out, "log rule verdict %s\n", v->message);
        return 0;
}

static int record_all(struct logmon_replay *r, size_t stream,
                      const struct logmon_events *ev, uint64_t line_no,
                      const char *line, size_t len)
{
        const struct logmon_stream *mon = r->streams[stream].mon;
        size_t i;
        int err;

        for (i = 0; i < ev->n; i++) {
                err = record(r, stream, &ev->ev[i], line_no, line, len);
                if (err != 0)
                        return err;
        }
        if (!r->have_verdict && logmon_stream_state(mon) >= LOGMON_SLOW) {
                r->have_verdict = true;
                r->v_stream = stream;
                r->v_rule = logmon_stream_reason_rule(mon);
                r->v_state = logmon_stream_state(mon);
                r->v_time = r->now;
                r->v_line_no = line_no;
                snprintf(r->v_line, sizeof(r->v_line), "%.*s",
                         (int)(len < LOGMON_LAST_LINE_MAX ?
                                       len :
                                       LOGMON_LAST_LINE_MAX),
                         line != NULL ? line : "");
                if (logmon_verdict_format(mon, r->streams[stream].local_rank,
                                          wall_offset(r), r->v_message,
                                          sizeof(r->v_message)) != 0)
                        r->v_message[0] = '\0';
        }
        if (!r->attempt_verdict && logmon_stream_state(mon) >= LOGMON_SLOW)
                return attempt_verdict(r, stream);
        return 0;
}

/* Fires every judged stream's deadlines up to now at their own times,
 * earliest first across streams, as the live agent's timer would: the
 * output says when a rule went HANGING, not when the next line happened
 * to arrive, and stays in time order. */
static int catch_up(struct logmon_replay *r, uint64_t now)
{
        struct logmon_events ev;
        uint64_t at, best, saved = r->now;
        size_t i, pick;
        int err = 0;

        for (;;) {
                best = UINT64_MAX;
                pick = 0;
                for (i = 0; i < r->nstreams; i++) {
                        if (!r->streams[i].judged)
                                continue;
                        at = logmon_stream_next_deadline(r->streams[i].mon);
                        if (at < best) {
                                best = at;
                                pick = i;
                        }
                }
                /* A tick at a rule's deadline turns it HANGING, which
                 * takes that deadline away: the loop ends. */
                if (best > now)
                        break;
                r->now = best;
                logmon_stream_tick(r->streams[pick].mon, best, &ev);
                err = record_all(r, pick, &ev, 0, NULL, 0);
                if (err != 0)
                        break;
        }
        r->now = saved;
        return err;
}

/* The local rank a stream's name ends in ("default3", "0/default3",
 * srun's "3"), or -1. */
static int name_rank(const char *name)
{
        size_t n = strlen(name), d = 0;

        while (d < n && d < 6 && name[n - 1 - d] >= '0' &&
               name[n - 1 - d] <= '9')
                d++;
        return d > 0 ? atoi(name + n - d) : -1;
}

static bool judged(const struct logmon_replay *r, const char *name,
                   int rank)
{
        if (r->opts->monitored == NULL || name == NULL)
                return true;
        return rank >= 0 && (size_t)rank < r->opts->nmonitored &&
               r->opts->monitored[rank];
}

static int stream_get(struct logmon_replay *r, const char *name,
                      size_t name_len, size_t *out)
{
        struct replay_stream *st;
        size_t i;

        for (i = 0; i < r->nstreams; i++) {
                const char *n = r->streams[i].name;

                if (name == NULL ? n == NULL :
                                   n != NULL && strlen(n) == name_len &&
                                           memcmp(n, name, name_len) == 0) {
                        *out = i;
                        return 0;
                }
        }
        for (i = 0; name != NULL && i < r->nstreams; i++) {
                char *copy;

                st = &r->streams[i];
                if (!st->placeholder)
                        continue;
                copy = strndup(name, name_len);
                if (copy == NULL)
                        return -ENOMEM;
                if (name_rank(copy) != st->local_rank) {
                        free(copy);
                        continue;
                }
                free(st->name);
                st->name = copy;
                st->placeholder = false;
                *out = i;
                return 0;
        }
        st = realloc(r->streams, (r->nstreams + 1) * sizeof(*st));
        if (st == NULL)
                return -ENOMEM;
        r->streams = st;
        st = &r->streams[r->nstreams];
        st->name = name != NULL ? strndup(name, name_len) : NULL;
        st->mon = logmon_stream_new(r->rs);
        if ((name != NULL && st->name == NULL) || st->mon == NULL) {
                free(st->name);
                logmon_stream_free(st->mon);
                return -ENOMEM;
        }
        st->local_rank = st->name != NULL ? name_rank(st->name) : -1;
        st->judged = judged(r, st->name, st->local_rank);
        st->placeholder = false;
        st->matches = calloc(logmon_ruleset_count(r->rs) + 1,
                             sizeof(*st->matches));
        if (st->matches == NULL) {
                free(st->name);
                logmon_stream_free(st->mon);
                return -ENOMEM;
        }
        /* Every stream's clock starts with the live rules' (the agent's
         * start line) or else with the log, not with its first line: a
         * rank that starts talking late is late. */
        logmon_stream_start(st->mon, r->start_ms);
        *out = r->nstreams++;
        return 0;
}

/* --replay-until TIME: a line after it stops the replay, unfed; the
 * clock goes back to TIME for the deadlines up to it. */
static bool past_until(struct logmon_replay *r)
{
        int64_t end;

        if (!r->until_set || !r->have_base)
                return false;
        end = r->until_ts - r->base;
        if ((int64_t)r->now <= end)
                return false;
        r->now = end > 0 ? (uint64_t)end : 0;
        r->stopped = true;
        r->after_stop++;
        return true;
}

/* A stream for each judged local rank, when the live rules started. */
static int placeholders(struct logmon_replay *r)
{
        char name[32];
        size_t i, idx;
        int err;

        if (r->layout == LOGMON_LAYOUT_PLAIN || r->opts->monitored == NULL)
                return 0;
        for (i = 0; i < r->opts->nmonitored; i++) {
                if (!r->opts->monitored[i])
                        continue;
                snprintf(name, sizeof(name), "local rank %zu", i);
                err = stream_get(r, name, strlen(name), &idx);
                if (err != 0)
                        return err;
                r->streams[idx].placeholder = true;
        }
        return 0;
}

/* A later attempt: live, its rules start afresh (the agent clears them
 * when an attempt ends and starts them with the next one's first stage),
 * so every stream does here, once what the last attempt's deadlines did
 * up to now is recorded. */
static int restart(struct logmon_replay *r)
{
        int err = catch_up(r, r->now);

        if (err != 0)
                return err;
        r->start_ms = r->now;
        r->attempt_verdict = false;
        for (size_t i = 0; i < r->nstreams; i++) {
                logmon_stream_clear(r->streams[i].mon);
                logmon_stream_start(r->streams[i].mon, r->now);
        }
        return 0;
}

/* The agent's own line: never a rule's input (live, the rules read the
 * workers' output only), but its start and verdict lines say when the
 * live rules started and when they judged. */
static int agent_line(struct logmon_replay *r, const struct line_head *h,
                      uint64_t line_no)
{
        bool timed = r->opts->rate <= 0 &&
                     (r->clock == CLOCK_NONE || r->clock == CLOCK_HEAD ||
                      r->clock == CLOCK_AGENT);
        bool verdict;
        int64_t ts;
        int err;

        /* The time the agent wrote in its line is the live rules' own;
         * kubectl's, before it, is when the runtime read the line. */
        r->agent_lines++;
        verdict = contains(h->body, h->body_len, "log rule verdict ");
        if (timed && agent_time(h->body, h->body_len, &ts)) {
                if (r->clock == CLOCK_NONE)
                        r->clock = CLOCK_AGENT;
                /* Without a clock on the workers' lines, the line that
                 * made a verdict may still come, at an unknown time (the
                 * console can show the verdict first): the verdict's
                 * time is only where the replay ends. */
                if (verdict && r->clock == CLOCK_AGENT) {
                        if (!r->have_end)
                                r->end_ts = ts;
                        r->have_end = true;
                } else {
                        set_clock(r, ts);
                }
        } else {
                advance_clock(r, h, line_no);
        }
        if (past_until(r))
                return 0;
        if (contains(h->body, h->body_len, "log rules: clock started at ")) {
                if (r->started) {
                        err = restart(r);
                        if (err != 0)
                                return err;
                } else if (r->nstreams == 0) {
                        r->start_ms = r->now;
                        err = placeholders(r);
                        if (err != 0)
                                return err;
                }
                r->started = true;
        }
        if (!r->live_verdict && verdict) {
                r->live_verdict = true;
                /* Lines read before the verdict can follow it on the
                 * console: only lines after its time are cut. */
                if (r->opts->until == LOGMON_UNTIL_VERDICT &&
                    agent_time(h->body, h->body_len, &ts)) {
                        r->until_set = true;
                        r->until_ts = ts;
                }
        }
        return catch_up(r, r->now);
}

/* The JSON output: each metric a threshold rule compared, as a "value"
 * event, so that a metric can be plotted against its threshold
 * (tools/plot_replay.py). */
static void write_values(struct logmon_replay *r, size_t stream,
                         uint64_t line_no)
{
        struct replay_stream *st = &r->streams[stream];
        struct logmon_rule_limits lim;
        struct logmon_rule_info info;
        size_t i;

        if (r->out == NULL || r->opts->text)
                return;
        for (i = 0; i < logmon_ruleset_count(r->rs); i++) {
                logmon_ruleset_rule_limits(r->rs, i, &lim);
                if (!lim.metric)
                        continue;
                logmon_stream_rule_info(st->mon, i, &info);
                /* A capture that is not a number is not a match. */
                if (info.matches == st->matches[i])
                        continue;
                st->matches[i] = info.matches;
                fprintf(r->out, "{\"time\":%" PRIu64 ".%03" PRIu64
                                ",\"stream\":",
                        r->now / 1000, r->now % 1000);
                logmon__json_cstr(r->out, st->name);
                fputs(",\"rule\":", r->out);
                logmon__json_cstr(r->out, logmon_ruleset_rule_name(r->rs, i));
                /* JSON has no infinity or NaN (a capture of "inf"
                 * parses, as in Python): null. */
                fputs(",\"event\":\"value\",\"value\":", r->out);
                if (isfinite(info.last_value))
                        fprintf(r->out, "%.17g", info.last_value);
                else
                        fputs("null", r->out);
                fprintf(r->out, ",\"line_no\":%" PRIu64 "}\n", line_no);
        }
}

/* A rank's line, its clock moved: to its stream's rules. */
static int feed_line(struct logmon_replay *r, const char *name,
                     size_t name_len, const struct line_head *h,
                     uint64_t line_no)
{
        struct logmon_events ev;
        size_t idx;
        int err;

        err = stream_get(r, name, name_len, &idx);
        if (err == 0)
                err = catch_up(r, r->now);
        if (err != 0 || !r->streams[idx].judged)
                return err;
        logmon_stream_feed(r->streams[idx].mon, h->body, h->body_len, r->now,
                           &ev);
        err = record_all(r, idx, &ev, line_no, h->body, h->body_len);
        if (err == 0)
                write_values(r, idx, line_no);
        return err;
}

/* One line, once the layout is known. */
static int process_line(struct logmon_replay *r, const char *line,
                        size_t len, uint64_t line_no)
{
        char name[2 * PREFIX_MAX + 2];
        struct line_head h;
        size_t name_len = 0;

        if (r->stopped) {
                r->after_stop++;
                return 0;
        }
        parse_head(r, line, len, &h);
        if (h.agent)
                return agent_line(r, &h, line_no);
        advance_clock(r, &h, line_no);
        if (past_until(r))
                return 0;
        if (r->layout == LOGMON_LAYOUT_SRUN && h.label != NULL) {
                memcpy(name, h.label, h.label_len);
                name_len = h.label_len;
                if (h.name != NULL) {
                        name[name_len++] = '/';
                        memcpy(name + name_len, h.name, h.name_len);
                        name_len += h.name_len;
                }
        } else if (r->layout == LOGMON_LAYOUT_CONSOLE && h.name != NULL) {
                memcpy(name, h.name, h.name_len);
                name_len = h.name_len;
        } else if (r->layout != LOGMON_LAYOUT_PLAIN) {
                /* Not a rank's output: it moves the clock and nothing
                 * else. */
                r->unprefixed++;
                return catch_up(r, r->now);
        }
        return feed_line(r, name_len > 0 ? name : NULL, name_len, &h,
                         line_no);
}

/* The layout is decided: the held lines go through in order, matched in
 * place (hold_line zeroed the buffer past them). */
static int flush_pending(struct logmon_replay *r)
{
        size_t off = 0, n;
        uint64_t line_no = r->pending_first;
        int err = 0;

        while (err == 0 && off < r->pending_len) {
                memcpy(&n, r->pending + off, sizeof(n));
                off += sizeof(n);
                err = process_line(r, r->pending + off, n, line_no++);
                off += n;
        }
        free(r->pending);
        r->pending = NULL;
        r->pending_len = 0;
        r->pending_cap = 0;
        return err;
}

/* Decides the layout from the lines held: srun --label output when at
 * least half carry a task label, else, leaving the agent's own lines out,
 * a console log when at least half carry a console prefix, else a
 * plain log. A plain log in which a few lines happen to start with
 * "[rank0]:" stays plain, and a console capture stays a console log
 * despite a container's prelude, which has no prefix. Leading RFC 3339
 * timestamps (kubectl --timestamps, ${time}) count when at least half
 * the lines other than the agent's have one (${time} never stamps the
 * agent's lines). */
static int decide_layout(struct logmon_replay *r)
{
        uint64_t held = r->pending_len > 0 ?
                                r->lines - r->pending_first + 1 : 0;
        uint64_t others = held - r->agent_lines;

        if (held > 0 && 2 * r->pending_labelled >= held)
                r->layout = LOGMON_LAYOUT_SRUN;
        else if (others == 0)
                r->layout = r->agent_lines > 0 ? LOGMON_LAYOUT_CONSOLE :
                                                 LOGMON_LAYOUT_PLAIN;
        else if (2 * r->pending_prefixed >= others)
                r->layout = LOGMON_LAYOUT_CONSOLE;
        else
                r->layout = LOGMON_LAYOUT_PLAIN;
        /* In a plain log a leading timestamp is the program's own, part
         * of the text the rules see, unless kubectl's nanoseconds or a
         * second one say kubectl put it there. */
        r->head_ts = held > 0 &&
                     2 * r->pending_stamped >= (others > 0 ? others : held) &&
                     (r->layout != LOGMON_LAYOUT_PLAIN || r->head_ts_kubectl);
        /* Counted again as they go through. */
        r->agent_lines = 0;
        return flush_pending(r);
}

/* Holds a line while the layout is undecided, up to the lookahead. The
 * buffer grows as needed, zeroed for the JIT's word-sized reads past a
 * line's end, so that a short log costs little. */
static int hold_line(struct logmon_replay *r, const char *line, size_t len,
                     uint64_t line_no)
{
        size_t need = r->pending_len + sizeof(len) + len + sizeof(size_t);
        size_t cap = r->pending_cap;
        struct line_head h;
        char *p;

        if (need > cap) {
                while (cap < need)
                        cap = cap != 0 ? 2 * cap : 64 * 1024;
                p = realloc(r->pending, cap);
                if (p == NULL)
                        return -ENOMEM;
                memset(p + r->pending_cap, 0, cap - r->pending_cap);
                r->pending = p;
                r->pending_cap = cap;
        }
        if (r->pending_len == 0)
                r->pending_first = line_no;
        memcpy(r->pending + r->pending_len, &len, sizeof(len));
        memcpy(r->pending + r->pending_len + sizeof(len), line, len);
        r->pending_len += sizeof(len) + len;
        parse_head(r, line, len, &h);
        if (h.label != NULL)
                r->pending_labelled++;
        if (h.agent)
                r->agent_lines++;
        else if (h.name != NULL)
                r->pending_prefixed++;
        if (h.have_ts && (!h.agent || h.kubectl || h.ts_count > 1))
                r->pending_stamped++;
        if (h.ts_count > 1 || h.kubectl)
                r->head_ts_kubectl = true;
        if (r->pending_len < LOGMON_REPLAY_LOOKAHEAD)
                return 0;
        return decide_layout(r);
}

static void line_cb(void *ctx, const char *line, size_t len,
                    enum hp_line_end end)
{
        struct logmon_replay *r = ctx;
        uint64_t line_no;

        (void)end;
        if (r->error != 0)
                return;
        line_no = ++r->lines;
        if (r->layout == LOGMON_LAYOUT_AUTO)
                r->error = hold_line(r, line, len, line_no);
        else
                r->error = process_line(r, line, len, line_no);
}

/* Splits the n bytes in r->chunk with the live splitter, so that a line
 * is the same line live and in replay; the padding after them is zeroed
 * first, for the lines matched in place. */
static void split_chunk(struct logmon_replay *r, size_t n)
{
        memset(r->chunk + n, 0, REPLAY_PAD);
        hp_linesplit_feed(&r->split, r->chunk, n, line_cb, r);
}

static void split(struct logmon_replay *r, const char *data, size_t n)
{
        while (n > 0 && r->error == 0) {
                size_t take = n < REPLAY_CHUNK ? n : REPLAY_CHUNK;

                memcpy(r->chunk, data, take);
                split_chunk(r, take);
                data += take;
                n -= take;
        }
}

static int replay_begin(struct logmon_ruleset *rs,
                        const struct logmon_replay_opts *opts, FILE *out,
                        struct logmon_replay **rp)
{
        static const struct logmon_replay_opts defaults = { 0 };
        struct logmon_replay *r = calloc(1, sizeof(*r));

        if (r == NULL)
                return -ENOMEM;
        /* Zeroed for the JIT's word-sized reads past a line's end. */
        r->buf = calloc(1, HP_LINE_MAX + REPLAY_PAD);
        r->chunk = malloc(REPLAY_CHUNK + REPLAY_PAD);
        if (r->buf == NULL || r->chunk == NULL) {
                free(r->buf);
                free(r->chunk);
                free(r);
                return -ENOMEM;
        }
        hp_linesplit_init(&r->split, r->buf, HP_LINE_MAX);
        r->rs = logmon_ruleset_ref(rs);
        r->opts = opts != NULL ? opts : &defaults;
        r->out = out;
        r->layout = r->opts->layout;
        r->head_ts = r->layout != LOGMON_LAYOUT_AUTO &&
                     r->layout != LOGMON_LAYOUT_PLAIN;
        r->clock = r->opts->rate > 0 ? CLOCK_RATE : CLOCK_NONE;
        r->until_set = r->opts->until == LOGMON_UNTIL_TIME;
        r->until_ts = r->opts->until_ms;
        /* A leap year, so that a glog "0229" is a real day. */
        r->glog_year = 2000;
        *rp = r;
        return 0;
}

bool logmon_replay_rule_matched(const struct logmon_replay *r, size_t i)
{
        struct logmon_rule_info info;
        size_t k;

        for (k = 0; k < r->nstreams; k++) {
                if (!r->streams[k].judged)
                        continue;
                logmon_stream_rule_info(r->streams[k].mon, i, &info);
                if (info.matched)
                        return true;
        }
        return false;
}

static const char *format_name(const struct logmon_replay *r)
{
        static const char *const names[][3] = {
                { "plain", "plain with kubectl --timestamps",
                  "plain with ${time}" },
                { "console", "console with kubectl --timestamps",
                  "console with ${time}" },
                { "srun --label", "srun --label with kubectl --timestamps",
                  "srun --label with ${time}" },
        };
        size_t row = r->layout == LOGMON_LAYOUT_CONSOLE ? 1 :
                     r->layout == LOGMON_LAYOUT_SRUN    ? 2 :
                                                          0;

        if (r->files)
                return "per-rank files";
        return names[row][!r->head_ts ? 0 : r->head_ts_kubectl ? 1 : 2];
}

static void summary_verdict(struct logmon_replay *r)
{
        struct logmon_verdict v;
        char wall[HP_ISO8601_MS_LEN + 1];
        FILE *f = r->out;

        if (!logmon_replay_verdict(r, &v)) {
                fputs("null", f);
                return;
        }
        fputs("{\"rule\":", f);
        logmon__json_cstr(f, v.rule);
        fputs(",\"stream\":", f);
        logmon__json_cstr(f, v.stream);
        fprintf(f, ",\"local_rank\":%d,\"state\":\"%s\",\"time\":%" PRIu64
                   ".%03" PRIu64 ",\"wall\":",
                v.local_rank, logmon_state_name(v.state), v.time_ms / 1000,
                v.time_ms % 1000);
        if (v.have_wall) {
                hp_iso8601_ms(v.wall_ms, wall);
                logmon__json_cstr(f, wall);
        } else {
                fputs("null", f);
        }
        if (v.line_no == 0)
                fputs(",\"line_no\":null", f);
        else
                fprintf(f, ",\"line_no\":%" PRIu64, v.line_no);
        fputs(",\"line\":", f);
        if (v.line_no == 0)
                fputs("null", f);
        else
                logmon__json_cstr(f, r->v_line);
        fputs(",\"message\":", f);
        logmon__json_cstr(f, v.message);
        fputc('}', f);
}

static void summary(struct logmon_replay *r)
{
        struct logmon_rule_info info;
        size_t i, j, k;
        FILE *f = r->out;

        fprintf(f, "{\"summary\":{\"lines\":%" PRIu64 ",\"time\":%" PRIu64
                   ".%03" PRIu64 ",\"clock\":\"%s\",\"layout\":\"%s\","
                   "\"format\":\"%s\",\"unprefixed_lines\":%" PRIu64
                   ",\"agent_lines\":%" PRIu64 ",\"agent_verdict\":%s,"
                   "\"lines_after_until\":%" PRIu64 ",\"state\":\"%s\","
                   "\"verdict\":",
                r->lines, r->now / 1000, r->now % 1000,
                clock_names[r->clock],
                r->layout == LOGMON_LAYOUT_CONSOLE ? "console" :
                r->layout == LOGMON_LAYOUT_SRUN    ? "srun" :
                                                     "plain",
                format_name(r), r->unprefixed, r->agent_lines,
                r->live_verdict ? "true" : "false", r->after_stop,
                logmon_state_name(logmon_replay_state(r)));
        summary_verdict(r);
        fputs(",\"verdicts\":[", f);
        for (i = 0; i < r->nverdicts; i++) {
                char wall[HP_ISO8601_MS_LEN + 1];

                fprintf(f, "%s{\"time\":", i > 0 ? "," : "");
                if (r->verdicts[i].time == UINT64_MAX)
                        fputs("null", f);
                else
                        fprintf(f, "%" PRIu64 ".%03" PRIu64,
                                r->verdicts[i].time / 1000,
                                r->verdicts[i].time % 1000);
                fputs(",\"wall\":", f);
                if (r->verdicts[i].wall_ms != LOGMON_NO_WALL_CLOCK &&
                    r->verdicts[i].time != UINT64_MAX) {
                        hp_iso8601_ms(r->verdicts[i].wall_ms, wall);
                        logmon__json_cstr(f, wall);
                } else {
                        fputs("null", f);
                }
                fputs(",\"message\":", f);
                logmon__json_cstr(f, r->verdicts[i].message);
                fputc('}', f);
        }
        fputs("],\"never_matched\":[", f);
        for (j = 0, k = 0; j < logmon_ruleset_count(r->rs); j++) {
                if (logmon_replay_rule_matched(r, j))
                        continue;
                if (k++ > 0)
                        fputc(',', f);
                logmon__json_cstr(f, logmon_ruleset_rule_name(r->rs, j));
        }
        fputs("],\"rules\":[", f);
        for (j = 0; j < logmon_ruleset_count(r->rs); j++) {
                struct logmon_rule_limits lim;

                logmon_ruleset_rule_limits(r->rs, j, &lim);
                fputs(j > 0 ? ",{\"rule\":" : "{\"rule\":", f);
                logmon__json_cstr(f, logmon_ruleset_rule_name(r->rs, j));
                if (lim.metric)
                        fprintf(f, ",\"threshold\":%.17g,\"operator\":"
                                   "\"%s\",\"datapoints\":%" PRIu32,
                                lim.threshold, lim.op, lim.datapoints);
                if (lim.cutoff_ms != UINT64_MAX)
                        fprintf(f, ",\"cutoff\":%" PRIu64 ".%03" PRIu64,
                                lim.cutoff_ms / 1000, lim.cutoff_ms % 1000);
                if (lim.freq_ms != UINT64_MAX)
                        fprintf(f, ",\"frequency\":%" PRIu64 ".%03" PRIu64,
                                lim.freq_ms / 1000, lim.freq_ms % 1000);
                fputc('}', f);
        }
        fputs("],\"streams\":[", f);
        for (i = 0; i < r->nstreams; i++) {
                struct logmon_stream *s = r->streams[i].mon;

                fputs(i > 0 ? ",{\"stream\":" : "{\"stream\":", f);
                logmon__json_cstr(f, r->streams[i].name);
                fprintf(f, ",\"judged\":%s,\"state\":\"%s\",\"reason\":",
                        r->streams[i].judged ? "true" : "false",
                        logmon_state_name(logmon_stream_state(s)));
                logmon__json_cstr(f, logmon_stream_reason(s));
                fputs(",\"rules\":[", f);
                for (j = 0; j < logmon_ruleset_count(r->rs); j++) {
                        logmon_stream_rule_info(s, j, &info);
                        fputs(j > 0 ? ",{\"rule\":" : "{\"rule\":", f);
                        logmon__json_cstr(f, logmon_ruleset_rule_name(r->rs, j));
                        fprintf(f, ",\"state\":\"%s\",\"matches\":%" PRIu64
                                   ",\"nonnumeric\":%" PRIu64
                                   ",\"regex_limit_hits\":%" PRIu64
                                   ",\"retired\":%s,\"last_line\":",
                                logmon_state_name(info.state), info.matches,
                                info.nonnumeric, info.limit_hits,
                                info.retired ? "true" : "false");
                        if (info.last_line == NULL)
                                fputs("null", f);
                        else
                                logmon__json_string(f, info.last_line,
                                                    info.last_line_len);
                        fputc('}', f);
                }
                fputs("]}", f);
        }
        fputs("]}}\n", f);
}

/* The clock after the last line, as --replay-until says. */
static int run_until(struct logmon_replay *r)
{
        int64_t end;
        int err;

        switch (r->opts->until) {
        case LOGMON_UNTIL_TIME:
                if (!r->have_base)
                        return -EDOM;
                end = r->opts->until_ms - r->base;
                if (end >= (int64_t)r->now) {
                        err = catch_up(r, (uint64_t)end);
                        r->now = (uint64_t)end;
                        return err;
                }
                return 0;
        case LOGMON_UNTIL_VERDICT:
                if (!r->live_verdict)
                        return -ENOENT;
                if (!r->until_set)
                        return 0;
                end = r->until_ts - r->base;
                if (end >= (int64_t)r->now) {
                        err = catch_up(r, (uint64_t)end);
                        r->now = (uint64_t)end;
                        return err;
                }
                return 0;
        case LOGMON_UNTIL_END:
                break;
        }
        if (r->have_end && r->end_ts - r->base > (int64_t)r->now) {
                end = r->end_ts - r->base;
                err = catch_up(r, (uint64_t)end);
                if (err != 0)
                        return err;
                r->now = (uint64_t)end;
        }
        err = catch_up(r, r->now + r->opts->tail_ms);
        r->now += r->opts->tail_ms;
        return err;
}

static void text_summary(struct logmon_replay *r)
{
        FILE *f = r->out;
        size_t i, k;

        fprintf(f, "summary: %" PRIu64 " lines read as a %s log (clock: "
                   "%s), %" PRIu64 " of them hyperpodrun's own; judged up to ",
                r->lines, format_name(r), clock_names[r->clock],
                r->agent_lines);
        text_time(r, r->now);
        fputc('\n', f);
        if (r->have_verdict)
                fprintf(f, "verdict: %s\n", r->v_message);
        else
                fputs("verdict: none (no judged stream reached SLOW, "
                      "HANGING or FAULTED)\n", f);
        for (i = 0; i < r->nstreams; i++) {
                const struct replay_stream *st = &r->streams[i];

                fprintf(f, "stream %s: ", st->name ? st->name : "(log)");
                if (!st->judged)
                        fputs("not judged (--log-monitor-ranks)\n", f);
                else
                        fprintf(f, "%s%s%s\n",
                                logmon_state_name(logmon_stream_state(st->mon)),
                                logmon_stream_reason(st->mon)[0] ? " " : "",
                                logmon_stream_reason(st->mon));
        }
        for (i = 0, k = 0; i < logmon_ruleset_count(r->rs); i++) {
                if (logmon_replay_rule_matched(r, i))
                        continue;
                fprintf(f, "%s%s", k++ == 0 ? "rules that never matched a "
                                             "line: " : ", ",
                        logmon_ruleset_rule_name(r->rs, i));
        }
        if (k > 0)
                fputc('\n', f);
}

static int replay_end(struct logmon_replay *r, struct logmon_replay **result)
{
        size_t idx;
        int err;

        if (r->error == 0)
                hp_linesplit_finish(&r->split, line_cb, r);
        err = r->error;
        /* A log shorter than the lookahead is decided at its end. */
        if (err == 0 && r->layout == LOGMON_LAYOUT_AUTO)
                err = decide_layout(r);
        /* An empty plain log still has its one stream, so that a start
         * cut-off can be seen to expire on it. */
        if (err == 0 && r->layout == LOGMON_LAYOUT_PLAIN && r->nstreams == 0)
                err = stream_get(r, NULL, 0, &idx);
        if (err == 0)
                err = run_until(r);
        if (err == 0 && r->out != NULL) {
                if (r->opts->text)
                        text_summary(r);
                else
                        summary(r);
                if (fflush(r->out) != 0 || ferror(r->out))
                        err = -EIO;
        }
        if (err != 0 || result == NULL) {
                logmon_replay_free(r);
                return err;
        }
        free(r->buf);
        r->buf = NULL;
        free(r->chunk);
        r->chunk = NULL;
        *result = r;
        return 0;
}

int logmon_replay_buffer(struct logmon_ruleset *rs, const char *data,
                         size_t n, const struct logmon_replay_opts *opts,
                         FILE *out, struct logmon_replay **result)
{
        struct logmon_replay *r;
        int err;

        err = replay_begin(rs, opts, out, &r);
        if (err != 0)
                return err;
        split(r, data, n);
        return replay_end(r, result);
}

int logmon_replay_run(struct logmon_ruleset *rs, FILE *in,
                      const struct logmon_replay_opts *opts, FILE *out,
                      struct logmon_replay **result)
{
        struct logmon_replay *r;
        size_t got;
        int err;

        err = replay_begin(rs, opts, out, &r);
        if (err != 0)
                return err;
        while (r->error == 0 &&
               (got = fread(r->chunk, 1, REPLAY_CHUNK, in)) > 0)
                split_chunk(r, got);
        if (ferror(in)) {
                logmon_replay_free(r);
                return -EIO;
        }
        return replay_end(r, result);
}

/* One per-rank file, read whole, split by the live splitter. */
struct rank_file {
        const char *name;
        char *data;        /* zero-padded for the JIT's reads past a line */
        size_t size;
        size_t *off, *len; /* its lines */
        size_t n, next;
        size_t at;         /* while splitting: where the next line starts */
        int64_t ts;        /* its clock: the last timestamp in it */
        bool have_ts;
};

/* The splitter hands each line over in place or, when it held it (one
 * longer than HP_LINE_MAX), from its buffer; either way the lines come in
 * order and cover the file, so each is where the last one's terminator
 * ended, and is matched there. */
static void rank_line_cb(void *ctx, const char *line, size_t len,
                         enum hp_line_end end)
{
        struct rank_file *f = ctx;

        (void)line;
        f->off[f->n] = f->at;
        f->len[f->n++] = len;
        f->at += len;
        if (end != HP_LINE_EOL || f->at >= f->size)
                return;
        if (f->data[f->at] == '\r' && f->at + 1 < f->size &&
            f->data[f->at + 1] == '\n')
                f->at++;
        f->at++;
}

static int read_rank_file(FILE *in, struct rank_file *f)
{
        size_t size = 0, cap = 0, got;
        struct hp_linesplit ls;
        char *p, *line;

        for (;;) {
                if (cap - size < REPLAY_CHUNK + 64) {
                        cap = cap ? 2 * cap : 2 * REPLAY_CHUNK;
                        p = realloc(f->data, cap);
                        if (p == NULL)
                                return -ENOMEM;
                        f->data = p;
                }
                got = fread(f->data + size, 1, REPLAY_CHUNK, in);
                size += got;
                if (got == 0)
                        break;
        }
        if (ferror(in))
                return -EIO;
        memset(f->data + size, 0, 64);
        /* At most one line per byte, and one for the end. */
        f->off = malloc((size + 1) * sizeof(*f->off));
        f->len = malloc((size + 1) * sizeof(*f->len));
        if (f->off == NULL || f->len == NULL)
                return -ENOMEM;
        f->size = size;
        f->at = 0;
        line = malloc(HP_LINE_MAX);
        if (line == NULL)
                return -ENOMEM;
        hp_linesplit_init(&ls, line, HP_LINE_MAX);
        hp_linesplit_feed(&ls, f->data, size, rank_line_cb, f);
        hp_linesplit_finish(&ls, rank_line_cb, f);
        free(line);
        return 0;
}

/* The file whose next line comes first: by the line's own timestamp, or
 * for a line without one its file's clock (before the file's first
 * timestamp: at once); the earlier file on a tie. *own: the line has a
 * timestamp of its own, *ts. */
static struct rank_file *next_rank_line(struct logmon_replay *r,
                                        struct rank_file *files, size_t n,
                                        int64_t *ts, bool *own)
{
        struct rank_file *best = NULL, *f;
        int64_t t, key, best_key = 0, best_t = 0;
        bool has, best_has = false;
        size_t i;

        for (i = 0; i < n; i++) {
                f = &files[i];
                if (f->next == f->n)
                        continue;
                has = r->opts->rate <= 0 &&
                      logmon__line_timestamp(r, f->data + f->off[f->next],
                                             f->len[f->next], &t);
                key = has ? t : f->have_ts ? f->ts : INT64_MIN;
                if (best == NULL || key < best_key) {
                        best = f;
                        best_key = key;
                        best_t = t;
                        best_has = has;
                }
        }
        *ts = best_t;
        *own = best_has;
        return best;
}

int logmon_replay_files(struct logmon_ruleset *rs, FILE *const *in,
                        const char *const *names, size_t n,
                        const struct logmon_replay_opts *opts, FILE *out,
                        struct logmon_replay **result)
{
        struct rank_file *files, *f;
        struct logmon_replay *r;
        struct line_head h;
        uint64_t line_no;
        bool have_ts;
        int64_t ts;
        size_t i, idx;
        int err;

        err = replay_begin(rs, opts, out, &r);
        if (err != 0)
                return err;
        /* Each file is one rank's output as written: no prefix to strip. */
        r->layout = LOGMON_LAYOUT_PLAIN;
        r->head_ts = false;
        r->files = true;
        files = calloc(n + 1, sizeof(*files));
        err = files == NULL ? -ENOMEM : 0;
        for (i = 0; err == 0 && i < n; i++) {
                files[i].name = names[i];
                err = read_rank_file(in[i], &files[i]);
        }
        /* Every rank's stream exists from the start, as live. */
        for (i = 0; err == 0 && i < n; i++)
                err = stream_get(r, names[i], strlen(names[i]), &idx);
        while (err == 0 &&
               (f = next_rank_line(r, files, n, &ts, &have_ts)) != NULL) {
                line_no = ++f->next;
                r->lines++;
                if (r->stopped) {
                        r->after_stop++;
                        continue;
                }
                memset(&h, 0, sizeof(h));
                h.body = f->data + f->off[line_no - 1];
                h.body_len = f->len[line_no - 1];
                if (r->opts->rate > 0) {
                        advance_clock(r, &h, r->lines);
                } else if (have_ts) {
                        f->ts = ts;
                        f->have_ts = true;
                        set_clock(r, ts);
                }
                if (past_until(r))
                        continue;
                err = feed_line(r, f->name, strlen(f->name), &h, line_no);
        }
        for (i = 0; files != NULL && i < n; i++) {
                free(files[i].data);
                free(files[i].off);
                free(files[i].len);
        }
        free(files);
        if (err != 0) {
                logmon_replay_free(r);
                return err;
        }
        return replay_end(r, result);
}

void logmon_replay_free(struct logmon_replay *r)
{
        size_t i;

        if (r == NULL)
                return;
        for (i = 0; i < r->nstreams; i++) {
                free(r->streams[i].name);
                free(r->streams[i].matches);
                logmon_stream_free(r->streams[i].mon);
        }
        free(r->streams);
        free(r->changes);
        free(r->verdicts);
        free(r->buf);
        free(r->chunk);
        free(r->pending);
        logmon_ruleset_unref(r->rs);
        free(r);
}

enum logmon_state logmon_replay_state(const struct logmon_replay *r)
{
        enum logmon_state top = LOGMON_WAITING, s;
        size_t i;

        for (i = 0; i < r->nstreams; i++) {
                s = logmon_stream_state(r->streams[i].mon);
                if (s > top)
                        top = s;
        }
        return top;
}

void logmon_replay_get_info(const struct logmon_replay *r,
                            struct logmon_replay_info *out)
{
        out->lines = r->lines;
        out->unprefixed = r->unprefixed;
        out->time_ms = r->now;
        out->streams = r->nstreams;
        out->console = r->layout == LOGMON_LAYOUT_CONSOLE;
        out->clock = clock_names[r->clock];
        out->format = format_name(r);
        out->agent_lines = r->agent_lines;
        out->agent_verdict = r->live_verdict;
}

bool logmon_replay_verdict(const struct logmon_replay *r,
                           struct logmon_verdict *out)
{
        const struct replay_stream *st;

        if (!r->have_verdict)
                return false;
        st = &r->streams[r->v_stream];
        out->rule = r->v_rule >= 0 ?
                            logmon_ruleset_rule_name(r->rs, (size_t)r->v_rule) :
                            "";
        out->stream = st->name;
        out->local_rank = st->local_rank;
        out->state = r->v_state;
        out->time_ms = r->v_time;
        out->have_wall = r->have_base && r->clock != CLOCK_RATE;
        out->wall_ms = r->base + (int64_t)r->v_time;
        out->line_no = r->v_line_no;
        out->message = r->v_message;
        return true;
}
