/* SPDX-License-Identifier: Apache-2.0 */
/* Replay: a recorded log through the rules, with time taken from the
 * lines themselves or from a fixed rate. This is the driver: the clock,
 * a stream per rank, the agent's own lines and attempts, the layout
 * decided from the first lines, and feeding lines in. What a line starts
 * with is read in replay_head.c and replay_time.c, per-rank files are
 * merged in replay_files.c, the output is replay_report.c's and the
 * expectation check replay_expect.c's. Unlike the engine, this is not a
 * hot path: it allocates freely. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/linesplit.h"
#include "replay-private.h"

/* Zero bytes after every buffer a line is matched in: the JIT reads
 * words past a line's end. */
#define REPLAY_PAD 64
/* Replay time saturates here (about 285 000 years), so that a tiny
 * --replay-rate cannot overflow a deadline. */
#define REPLAY_TIME_MAX 9000000000000000.0

/* Moves the clock to ts (epoch ms). Out-of-order timestamps (several
 * writers) keep the clock where it is rather than running it back. */
void logmon__set_clock(struct logmon_replay *r, int64_t ts)
{
        r->last_ts = ts;
        if (!r->have_base) {
                r->have_base = true;
                r->base = ts;
        }
        if (ts - r->base > (int64_t)r->now)
                r->now = (uint64_t)(ts - r->base);
}

/* The wall clock's epoch ms at replay time 0, or LOGMON_NO_WALL_CLOCK. */
/* The time of a line with its head parsed: from the rate, the leading
 * timestamp, or one at the start of its text. */
void logmon__advance_clock(struct logmon_replay *r, const struct line_head *h,
                           uint64_t line_no)
{
        double t;
        int64_t ts;

        if (r->opts->rate > 0) {
                t = (double)(line_no - 1) * 1000.0 / r->opts->rate;
                r->now = t < REPLAY_TIME_MAX ? (uint64_t)llround(t)
                                             : (uint64_t)REPLAY_TIME_MAX;
                return;
        }
        if (r->head_ts) {
                if (h->have_ts) {
                        r->clock = CLOCK_HEAD;
                        logmon__set_clock(r, h->ts);
                }
                return;
        }
        if (h->agent)
                return;
        if (logmon__line_timestamp(r, h->body, h->body_len, &ts))
                logmon__set_clock(r, ts);
}

/* A change, kept for --expect and printed. */
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
        if (r->out != NULL)
                logmon__print_change(r, stream, e, line_no, line, len);
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
        v->wall_ms = logmon__wall_offset(r);
        if (v->wall_ms != LOGMON_NO_WALL_CLOCK && v->time != UINT64_MAX)
                v->wall_ms += (int64_t)v->time;
        if (logmon_verdict_format(mon, r->streams[stream].local_rank,
                                  logmon__wall_offset(r), v->message,
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
                r->v_skew_ms = r->skew_ms;
                snprintf(r->v_line, sizeof(r->v_line), "%.*s",
                         (int)(len < LOGMON_LAST_LINE_MAX
                                       ? len
                                       : LOGMON_LAST_LINE_MAX),
                         line != NULL ? line : "");
                if (logmon_verdict_format(mon, r->streams[stream].local_rank,
                                          logmon__wall_offset(r),
                                          r->v_message,
                                          sizeof(r->v_message)) != 0)
                        r->v_message[0] = '\0';
        }
        if (!r->attempt_verdict && logmon_stream_state(mon) >= LOGMON_SLOW)
                return attempt_verdict(r, stream);
        return 0;
}

/* The earliest deadline of a judged stream, and which stream; UINT64_MAX
 * when none is pending. */
static uint64_t next_deadline(const struct logmon_replay *r, size_t *pick)
{
        uint64_t at, best = UINT64_MAX;
        size_t i;

        *pick = 0;
        for (i = 0; i < r->nstreams; i++) {
                if (!r->streams[i].judged)
                        continue;
                at = logmon_stream_next_deadline(r->streams[i].mon);
                if (at < best) {
                        best = at;
                        *pick = i;
                }
        }
        return best;
}

/* Fires every judged stream's deadlines up to now at their own times,
 * earliest first across streams, as the live agent's timer would: the
 * output says when a rule went HANGING, not when the next line happened
 * to arrive, and stays in time order. */
static int catch_up(struct logmon_replay *r, uint64_t now)
{
        struct logmon_events ev;
        uint64_t best, saved = r->now;
        size_t pick;
        int err = 0;

        for (;;) {
                best = next_deadline(r, &pick);
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

/*
 * Judging stops at end: the log's last line, or the agent's own verdict
 * line. The deadlines up to it fire, and so does one due at most
 * REPLAY_SKEW_MS after it, at its own time: a capture's stamps run a few
 * ms behind the agent's clock (kubectl --timestamps is when the runtime
 * read a line the agent had already judged by), so a deadline a stamped
 * line set comes that much after the agent's verdict and after the log's
 * end. Only a log's own clock has such a skew: time from --replay-rate,
 * or none, is exact.
 */
static int reach(struct logmon_replay *r, uint64_t end)
{
        uint64_t at;
        size_t pick;
        int err = catch_up(r, end);

        if (r->clock == CLOCK_RATE || r->clock == CLOCK_NONE)
                return err;
        while (err == 0) {
                at = next_deadline(r, &pick);
                if (at == UINT64_MAX || at > end + REPLAY_SKEW_MS)
                        break;
                r->skew_ms = at - end;
                r->skew_reached++;
                r->skew_until = at;
                err = catch_up(r, at);
                r->skew_ms = 0;
        }
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

static bool judged(const struct logmon_replay *r, const char *name, int rank)
{
        if (r->opts->monitored == NULL || name == NULL)
                return true;
        return rank >= 0 && (size_t)rank < r->opts->nmonitored &&
               r->opts->monitored[rank];
}

int logmon__replay_stream(struct logmon_replay *r, const char *name,
                          size_t name_len, size_t *out)
{
        struct replay_stream *st;
        size_t i;

        for (i = 0; i < r->nstreams; i++) {
                const char *n = r->streams[i].name;

                if (name == NULL ? n == NULL
                                 : n != NULL && strlen(n) == name_len &&
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
bool logmon__past_until(struct logmon_replay *r)
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
                err = logmon__replay_stream(r, name, strlen(name), &idx);
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

static bool contains(const char *p, size_t len, const char *what)
{
        size_t n = strlen(what), i;

        for (i = 0; i + n <= len; i++)
                if (memcmp(p + i, what, n) == 0)
                        return true;
        return false;
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
        if (timed && logmon__agent_time(h->body, h->body_len, &ts)) {
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
                        logmon__set_clock(r, ts);
                }
        } else {
                logmon__advance_clock(r, h, line_no);
        }
        if (logmon__past_until(r))
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
                r->job_ended = false;
        }
        /* The live agent stopped its rules when the training ended: a
         * deadline after its line that says so was never to be judged. */
        if (contains(h->body, h->body_len, "info: all stages succeeded") ||
            contains(h->body, h->body_len,
                     "agent state RUNNING \u2192 "
                     "COMPLETED"))
                r->job_ended = true;
        if (!r->live_verdict && verdict) {
                r->live_verdict = true;
                /* Lines read before the verdict can follow it on the
                 * console: only lines after its time are cut. */
                if (r->opts->until == LOGMON_UNTIL_VERDICT &&
                    logmon__agent_time(h->body, h->body_len, &ts)) {
                        r->until_set = true;
                        r->until_ts = ts;
                }
        }
        /* The live agent judged here: a deadline a late stamp put just
         * after it is the one it judged by. */
        if (verdict && r->clock != CLOCK_AGENT)
                return reach(r, r->now);
        return catch_up(r, r->now);
}

/* A rank's line, its clock moved: to its stream's rules. */
int logmon__feed_line(struct logmon_replay *r, const char *name,
                      size_t name_len, const struct line_head *h,
                      uint64_t line_no)
{
        struct logmon_events ev;
        size_t idx;
        int err;

        err = logmon__replay_stream(r, name, name_len, &idx);
        if (err == 0)
                err = catch_up(r, r->now);
        if (err != 0 || !r->streams[idx].judged)
                return err;
        logmon_stream_feed(r->streams[idx].mon, h->body, h->body_len, r->now,
                           &ev);
        err = record_all(r, idx, &ev, line_no, h->body, h->body_len);
        if (err == 0)
                logmon__write_values(r, idx, line_no);
        return err;
}

/* One line, once the layout is known. */
static int process_line(struct logmon_replay *r, const char *line, size_t len,
                        uint64_t line_no)
{
        char name[2 * PREFIX_MAX + 2];
        struct line_head h;
        size_t name_len = 0;

        if (r->stopped) {
                r->after_stop++;
                return 0;
        }
        logmon__parse_head(r, line, len, &h);
        if (h.agent)
                return agent_line(r, &h, line_no);
        logmon__advance_clock(r, &h, line_no);
        if (logmon__past_until(r))
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
        return logmon__feed_line(r, name_len > 0 ? name : NULL, name_len, &h,
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
        uint64_t held = r->pending_len > 0 ? r->lines - r->pending_first + 1
                                           : 0;
        uint64_t others = held - r->agent_lines;

        if (held > 0 && 2 * r->pending_labelled >= held)
                r->layout = LOGMON_LAYOUT_SRUN;
        else if (others == 0)
                r->layout = r->agent_lines > 0 ? LOGMON_LAYOUT_CONSOLE
                                               : LOGMON_LAYOUT_PLAIN;
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
        logmon__parse_head(r, line, len, &h);
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

int logmon__replay_begin(struct logmon_ruleset *rs,
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

/* Judges up to end, where judging stops, and moves the clock there. */
static int stop_at(struct logmon_replay *r, uint64_t end)
{
        int err;

        if (end < r->now)
                end = r->now;
        r->end_ms = end;
        err = reach(r, end);
        r->now = r->skew_until > end ? r->skew_until : end;
        return err;
}

/* The clock after the last line, as --replay-until says. */
static int run_until(struct logmon_replay *r)
{
        int64_t end;
        int err;

        r->end_ms = r->now;
        switch (r->opts->until) {
        case LOGMON_UNTIL_TIME:
                /* A time the user named: judged exactly to it. */
                if (!r->have_base)
                        return -EDOM;
                end = r->opts->until_ms - r->base;
                if (end >= (int64_t)r->now) {
                        err = catch_up(r, (uint64_t)end);
                        r->now = (uint64_t)end;
                        r->end_ms = r->now;
                        return err;
                }
                return 0;
        case LOGMON_UNTIL_VERDICT:
                if (!r->live_verdict)
                        return -ENOENT;
                if (!r->until_set)
                        return stop_at(r, r->now);
                end = r->until_ts - r->base;
                return stop_at(r, end > 0 ? (uint64_t)end : 0);
        case LOGMON_UNTIL_END:
                break;
        }
        end = (int64_t)r->now;
        if (r->have_end && r->end_ts - r->base > end)
                end = r->end_ts - r->base;
        err = stop_at(r, (uint64_t)end);
        if (err != 0 || r->opts->tail_ms == 0)
                return err;
        err = catch_up(r, r->now + r->opts->tail_ms);
        r->now += r->opts->tail_ms;
        r->end_ms = r->now;
        return err;
}

int logmon__replay_end(struct logmon_replay *r, struct logmon_replay **result)
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
                err = logmon__replay_stream(r, NULL, 0, &idx);
        if (err == 0)
                err = run_until(r);
        if (err == 0 && r->out != NULL) {
                logmon__write_summary(r);
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

        err = logmon__replay_begin(rs, opts, out, &r);
        if (err != 0)
                return err;
        split(r, data, n);
        return logmon__replay_end(r, result);
}

int logmon_replay_run(struct logmon_ruleset *rs, FILE *in,
                      const struct logmon_replay_opts *opts, FILE *out,
                      struct logmon_replay **result)
{
        struct logmon_replay *r;
        size_t got;
        int err;

        err = logmon__replay_begin(rs, opts, out, &r);
        if (err != 0)
                return err;
        while (r->error == 0 &&
               (got = fread(r->chunk, 1, REPLAY_CHUNK, in)) > 0)
                split_chunk(r, got);
        if (ferror(in)) {
                logmon_replay_free(r);
                return -EIO;
        }
        return logmon__replay_end(r, result);
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
