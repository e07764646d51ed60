/* Replay: a recorded log through the rules, with time taken from the
 * lines themselves or from a fixed rate, and a checker that compares the
 * outcome with an expectation for CI. Unlike the engine, this is not a hot
 * path: it allocates freely. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

/* Lines longer than this are cut and continued as a new line, like the
 * live splitter does (HP_LINE_MAX in stream.h). */
#define REPLAY_LINE_MAX (64 * 1024)
#define REPLAY_CHUNK (64 * 1024)
#define PREFIX_MAX 64

struct replay_stream {
        char *name; /* NULL: lines without a console prefix */
        struct logmon_stream *mon;
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

struct logmon_replay {
        struct logmon_ruleset *rs;
        struct replay_stream *streams;
        size_t nstreams;
        struct replay_change *changes;
        size_t nchanges, capchanges;
        uint64_t lines;
        uint64_t now;     /* ms since the start */
        bool have_base;
        int64_t base;     /* epoch ms of the first timestamp */
        const struct logmon_replay_opts *opts;
        FILE *out;
        int error;
        /* The splitter's partial line. */
        char *buf;
        size_t len;
        bool after_cr;
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
                } else if ((k = logmon__utf8_len(p + i, n - i)) == 0) {
                        fputs("\\ufffd", f);
                        i++;
                } else {
                        fwrite(p + i, 1, k, f);
                        i += k;
                }
        }
        fputc('"', f);
}

static void json_cstr(FILE *f, const char *s)
{
        if (s == NULL)
                fputs("null", f);
        else
                logmon__json_string(f, s, strlen(s));
}

/* ---------------------------------------------------------------------
 * Timestamps
 */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil), so that no time zone or libc state is involved. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
        int64_t era;
        unsigned yoe, doy, doe;

        y -= m <= 2;
        era = (y >= 0 ? y : y - 399) / 400;
        yoe = (unsigned)(y - era * 400);
        doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + (int64_t)doe - 719468;
}

static bool digits(const char *p, const char *end, int n, int *out)
{
        int v = 0, i;

        if (end - p < n)
                return false;
        for (i = 0; i < n; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return false;
                v = v * 10 + (p[i] - '0');
        }
        *out = v;
        return true;
}

/* Ten digits: epoch seconds from 2001 to 2286. */
static bool epoch_digits(const char *p, const char *end)
{
        int i;

        if (end - p < 10)
                return false;
        for (i = 0; i < 10; i++)
                if (p[i] < '0' || p[i] > '9')
                        return false;
        return true;
}

/* Fraction digits after a '.' or ',' as milliseconds (truncated). */
static const char *fraction_ms(const char *p, const char *end, int *ms)
{
        int scale = 100;

        *ms = 0;
        while (p < end && *p >= '0' && *p <= '9') {
                *ms += (*p - '0') * scale;
                scale /= 10;
                p++;
        }
        return p;
}

/*
 * A timestamp at the start of the line, as epoch milliseconds:
 *   2025-06-17 05:51:29,300        Python logging's asctime
 *   2025-06-17T05:51:29.3+02:00    ISO 8601, fraction and zone optional
 *   1750139489.300                 epoch seconds (10 digits)
 * optionally inside a leading '['. A time without a zone is taken as UTC:
 * only differences matter here.
 */
static bool parse_timestamp(const char *line, size_t len, int64_t *out)
{
        const char *p = line, *end = line + len;
        int y, mo, d, h, mi, s, ms = 0, zh, zm = 0, sign;
        int64_t secs;

        if (p < end && *p == '[')
                p++;
        if (epoch_digits(p, end) && (end - p == 10 || p[10] == '.' ||
                                     p[10] == ' ' || p[10] == ']')) {
                secs = 0;
                for (h = 0; h < 10; h++)
                        secs = secs * 10 + (p[h] - '0');
                p += 10;
                if (p < end && *p == '.')
                        p = fraction_ms(p + 1, end, &ms);
                *out = secs * 1000 + ms;
                return true;
        }
        if (!digits(p, end, 4, &y) || end - p < 19 || p[4] != '-' ||
            !digits(p + 5, end, 2, &mo) || p[7] != '-' ||
            !digits(p + 8, end, 2, &d) || (p[10] != ' ' && p[10] != 'T') ||
            !digits(p + 11, end, 2, &h) || p[13] != ':' ||
            !digits(p + 14, end, 2, &mi) || p[16] != ':' ||
            !digits(p + 17, end, 2, &s))
                return false;
        if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
            s > 60)
                return false;
        p += 19;
        if (p < end && (*p == '.' || *p == ','))
                p = fraction_ms(p + 1, end, &ms);
        secs = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 +
               h * 3600 + mi * 60 + s;
        if (p < end && (*p == '+' || *p == '-') && digits(p + 1, end, 2, &zh)) {
                sign = *p == '-' ? -1 : 1;
                p += 3;
                if (p < end && *p == ':')
                        p++;
                if (!digits(p, end, 2, &zm))
                        zm = 0;
                secs -= sign * (zh * 3600 + zm * 60);
        }
        *out = secs * 1000 + ms;
        return true;
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

/* ---------------------------------------------------------------------
 * Feeding
 */

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

        fprintf(r->out, "{\"time\":%" PRIu64 ".%03" PRIu64 ",\"stream\":",
                r->now / 1000, r->now % 1000);
        json_cstr(r->out, r->streams[stream].name);
        fputs(",\"rule\":", r->out);
        json_cstr(r->out, logmon_ruleset_rule_name(r->rs, e->rule));
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

static int record_all(struct logmon_replay *r, size_t stream,
                      const struct logmon_events *ev, uint64_t line_no,
                      const char *line, size_t len)
{
        size_t i;
        int err;

        for (i = 0; i < ev->n; i++) {
                err = record(r, stream, &ev->ev[i], line_no, line, len);
                if (err != 0)
                        return err;
        }
        return 0;
}

/* Fires a stream's deadlines up to now at their own times, as the live
 * agent's timer would, so the output says when a rule went HANGING and
 * not when the next line happened to arrive. */
static int catch_up(struct logmon_replay *r, size_t i, uint64_t now)
{
        struct logmon_stream *s = r->streams[i].mon;
        struct logmon_events ev;
        uint64_t at, saved = r->now;
        int err = 0, guard;

        for (guard = 0; guard <= LOGMON_RULES_MAX; guard++) {
                at = logmon_stream_next_deadline(s);
                if (at > now)
                        break;
                r->now = at;
                logmon_stream_tick(s, at, &ev);
                err = record_all(r, i, &ev, 0, NULL, 0);
                if (err != 0)
                        break;
        }
        r->now = saved;
        return err;
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
        /* Every stream's clock starts with the log, not with its first
         * line: a rank that starts talking late is late. */
        logmon_stream_start(st->mon, 0);
        *out = r->nstreams++;
        return 0;
}

static void line_cb(struct logmon_replay *r, const char *line, size_t len)
{
        struct logmon_events ev;
        const char *name = NULL;
        size_t plen = 0, idx;
        int64_t ts;
        int err;

        if (r->error != 0)
                return;
        r->lines++;
        if (!r->opts->keep_prefix) {
                plen = console_prefix(line, len);
                if (plen > 0)
                        name = line + 1;
        }
        if (r->opts->rate > 0) {
                r->now = (uint64_t)llround((double)(r->lines - 1) * 1000.0 /
                                           r->opts->rate);
        } else if (parse_timestamp(line + plen, len - plen, &ts)) {
                if (!r->have_base) {
                        r->have_base = true;
                        r->base = ts;
                }
                /* Out-of-order timestamps (several writers) keep the
                 * clock where it is rather than running it back. */
                if (ts - r->base > (int64_t)r->now)
                        r->now = (uint64_t)(ts - r->base);
        }

        err = stream_get(r, name, plen > 0 ? plen - 3 : 0, &idx);
        if (err == 0)
                err = catch_up(r, idx, r->now);
        if (err == 0) {
                logmon_stream_feed(r->streams[idx].mon, line + plen,
                                   len - plen, r->now, &ev);
                err = record_all(r, idx, &ev, r->lines, line + plen,
                                 len - plen);
        }
        r->error = err;
}

/* The same splitting as the live stream: \n, \r and \r\n end a line, and
 * an overlong line is cut and continued. */
static void split(struct logmon_replay *r, const char *data, size_t n)
{
        size_t i;

        for (i = 0; i < n; i++) {
                char c = data[i];

                if (r->after_cr) {
                        r->after_cr = false;
                        if (c == '\n')
                                continue;
                }
                if (c == '\n' || c == '\r') {
                        line_cb(r, r->buf, r->len);
                        r->len = 0;
                        r->after_cr = c == '\r';
                        continue;
                }
                if (r->len == REPLAY_LINE_MAX) {
                        line_cb(r, r->buf, r->len);
                        r->len = 0;
                }
                r->buf[r->len++] = c;
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
        r->buf = calloc(1, REPLAY_LINE_MAX);
        if (r->buf == NULL) {
                free(r);
                return -ENOMEM;
        }
        r->rs = logmon_ruleset_ref(rs);
        r->opts = opts != NULL ? opts : &defaults;
        r->out = out;
        *rp = r;
        return 0;
}

static void summary(struct logmon_replay *r)
{
        struct logmon_rule_info info;
        size_t i, j;
        FILE *f = r->out;

        fprintf(f, "{\"summary\":{\"lines\":%" PRIu64 ",\"time\":%" PRIu64
                   ".%03" PRIu64 ",\"state\":\"%s\",\"streams\":[",
                r->lines, r->now / 1000, r->now % 1000,
                logmon_state_name(logmon_replay_state(r)));
        for (i = 0; i < r->nstreams; i++) {
                struct logmon_stream *s = r->streams[i].mon;

                fputs(i > 0 ? ",{\"stream\":" : "{\"stream\":", f);
                json_cstr(f, r->streams[i].name);
                fprintf(f, ",\"state\":\"%s\",\"reason\":",
                        logmon_state_name(logmon_stream_state(s)));
                json_cstr(f, logmon_stream_reason(s));
                fputs(",\"rules\":[", f);
                for (j = 0; j < logmon_ruleset_count(r->rs); j++) {
                        logmon_stream_rule_info(s, j, &info);
                        fputs(j > 0 ? ",{\"rule\":" : "{\"rule\":", f);
                        json_cstr(f, logmon_ruleset_rule_name(r->rs, j));
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

static int replay_end(struct logmon_replay *r, struct logmon_replay **result)
{
        struct logmon_events ev;
        uint64_t end;
        size_t i, idx;
        int err = r->error;

        if (err == 0 && r->len > 0)
                line_cb(r, r->buf, r->len);
        r->len = 0;
        err = r->error;
        /* An empty log still has the one unprefixed stream, so that a
         * start cut-off can be seen to expire on it. */
        if (err == 0 && r->nstreams == 0)
                err = stream_get(r, NULL, 0, &idx);
        end = r->now + r->opts->tail_ms;
        for (i = 0; err == 0 && i < r->nstreams; i++) {
                err = catch_up(r, i, end);
                if (err == 0) {
                        uint64_t saved = r->now;

                        r->now = end;
                        logmon_stream_tick(r->streams[i].mon, end, &ev);
                        err = record_all(r, i, &ev, 0, NULL, 0);
                        r->now = saved;
                }
        }
        r->now = end;
        if (err == 0 && r->out != NULL) {
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
        char *chunk;
        size_t got;
        int err;

        err = replay_begin(rs, opts, out, &r);
        if (err != 0)
                return err;
        chunk = malloc(REPLAY_CHUNK);
        if (chunk == NULL) {
                logmon_replay_free(r);
                return -ENOMEM;
        }
        while ((got = fread(chunk, 1, REPLAY_CHUNK, in)) > 0 && r->error == 0)
                split(r, chunk, got);
        free(chunk);
        if (ferror(in)) {
                logmon_replay_free(r);
                return -EIO;
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
                logmon_stream_free(r->streams[i].mon);
        }
        free(r->streams);
        free(r->changes);
        free(r->buf);
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

/* ---------------------------------------------------------------------
 * Expectations
 */

static const char *stream_label(const struct logmon_replay *r, size_t i)
{
        return r->streams[i].name != NULL ? r->streams[i].name : "(log)";
}

static bool stream_selected(const struct logmon_replay *r, size_t i,
                            const char *want)
{
        const char *name = r->streams[i].name;

        if (want == NULL)
                return true;
        return name != NULL ? strcmp(name, want) == 0 : want[0] == '\0';
}

static void print_change(FILE *f, const struct logmon_replay *r,
                         const struct replay_change *c)
{
        fprintf(f, "%s %s -> %s on %s at t=%" PRIu64 ".%03" PRIu64,
                logmon_ruleset_rule_name(r->rs, c->rule),
                logmon_state_name(c->from), logmon_state_name(c->to),
                stream_label(r, c->stream), c->time / 1000, c->time % 1000);
        if (c->line_no != 0)
                fprintf(f, " (line %" PRIu64 ")", c->line_no);
        else
                fputs(" (deadline)", f);
}

static int check_final(const struct logmon_replay *r, const cJSON *final,
                       const char *want, FILE *diff, char *errbuf,
                       size_t len)
{
        struct logmon_rule_info info;
        enum logmon_state expected;
        const cJSON *item;
        int diffs = 0, rule;
        size_t i;

        if (!cJSON_IsObject(final)) {
                snprintf(errbuf, len, "expect: final: expected an object "
                         "of rule names to states");
                return HP_ECONFIG;
        }
        cJSON_ArrayForEach(item, final) {
                rule = logmon_ruleset_find(r->rs, item->string);
                if (rule < 0) {
                        snprintf(errbuf, len, "expect: final: no rule "
                                 "named \"%s\"", item->string);
                        return HP_ECONFIG;
                }
                if (!cJSON_IsString(item) ||
                    logmon_state_parse(item->valuestring, &expected) != 0) {
                        snprintf(errbuf, len, "expect: final: %s: expected "
                                 "a state name", item->string);
                        return HP_ECONFIG;
                }
                for (i = 0; i < r->nstreams; i++) {
                        if (!stream_selected(r, i, want))
                                continue;
                        logmon_stream_rule_info(r->streams[i].mon,
                                                (size_t)rule, &info);
                        if (info.state == expected)
                                continue;
                        diffs++;
                        if (diff != NULL)
                                fprintf(diff, "final state of rule %s on "
                                        "%s: expected %s, got %s\n",
                                        item->string, stream_label(r, i),
                                        item->valuestring,
                                        logmon_state_name(info.state));
                }
        }
        return diffs;
}

struct expected_change {
        int rule;
        enum logmon_state state;
        const cJSON *line_no;
        const cJSON *time;
        const cJSON *stream;
};

static int parse_transition(const struct logmon_replay *r, const cJSON *t,
                            size_t i, struct expected_change *e,
                            char *errbuf, size_t len)
{
        const cJSON *rule = cJSON_GetObjectItemCaseSensitive(t, "rule");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(t, "state");

        if (!cJSON_IsString(rule) || !cJSON_IsString(state) ||
            logmon_state_parse(state->valuestring, &e->state) != 0) {
                snprintf(errbuf, len, "expect: transitions[%zu]: expected "
                         "{\"rule\": NAME, \"state\": STATE, ...}", i);
                return HP_ECONFIG;
        }
        e->rule = logmon_ruleset_find(r->rs, rule->valuestring);
        if (e->rule < 0) {
                snprintf(errbuf, len, "expect: transitions[%zu]: no rule "
                         "named \"%s\"", i, rule->valuestring);
                return HP_ECONFIG;
        }
        e->line_no = cJSON_GetObjectItemCaseSensitive(t, "line_no");
        e->time = cJSON_GetObjectItemCaseSensitive(t, "time");
        e->stream = cJSON_GetObjectItemCaseSensitive(t, "stream");
        if ((e->line_no != NULL && !cJSON_IsNumber(e->line_no) &&
             !cJSON_IsNull(e->line_no)) ||
            (e->time != NULL && !cJSON_IsNumber(e->time)) ||
            (e->stream != NULL && !cJSON_IsString(e->stream) &&
             !cJSON_IsNull(e->stream))) {
                snprintf(errbuf, len, "expect: transitions[%zu]: line_no "
                         "and time are numbers, stream a string", i);
                return HP_ECONFIG;
        }
        return 0;
}

static bool change_matches(const struct logmon_replay *r,
                           const struct replay_change *c,
                           const struct expected_change *e)
{
        const char *name = r->streams[c->stream].name;

        if ((int)c->rule != e->rule || c->to != e->state)
                return false;
        if (e->line_no != NULL &&
            (cJSON_IsNull(e->line_no) ?
                     c->line_no != 0 :
                     (double)c->line_no != e->line_no->valuedouble))
                return false;
        if (e->time != NULL &&
            fabs((double)c->time / 1000.0 - e->time->valuedouble) > 0.001)
                return false;
        if (e->stream != NULL &&
            (cJSON_IsNull(e->stream) ?
                     name != NULL :
                     name == NULL || strcmp(name, e->stream->valuestring)))
                return false;
        return true;
}

static void print_expected(FILE *f, const struct logmon_replay *r,
                           const struct expected_change *e)
{
        fprintf(f, "%s -> %s", logmon_ruleset_rule_name(r->rs, (size_t)e->rule),
                logmon_state_name(e->state));
        if (cJSON_IsString(e->stream))
                fprintf(f, " on %s", e->stream->valuestring);
        if (cJSON_IsNumber(e->time))
                fprintf(f, " at t=%.3f", e->time->valuedouble);
        if (cJSON_IsNumber(e->line_no))
                fprintf(f, " (line %.0f)", e->line_no->valuedouble);
        else if (cJSON_IsNull(e->line_no))
                fputs(" (deadline)", f);
}

static int check_transitions(const struct logmon_replay *r,
                             const cJSON *list, const char *want, FILE *diff,
                             char *errbuf, size_t len)
{
        struct expected_change e;
        size_t i = 0, k = 0, n;
        int diffs = 0, err;

        if (!cJSON_IsArray(list)) {
                snprintf(errbuf, len, "expect: transitions: expected a "
                         "list");
                return HP_ECONFIG;
        }
        n = (size_t)cJSON_GetArraySize(list);
        /* Validate everything first, so that a malformed expectation is
         * an error and not a diff. */
        for (i = 0; i < n; i++) {
                err = parse_transition(r, cJSON_GetArrayItem(list, (int)i), i,
                                       &e, errbuf, len);
                if (err != 0)
                        return err;
        }
        for (i = 0;; i++) {
                const struct replay_change *c = NULL;

                while (k < r->nchanges &&
                       (r->changes[k].kind != LOGMON_EVENT_STATE ||
                        !stream_selected(r, r->changes[k].stream, want)))
                        k++;
                if (k < r->nchanges)
                        c = &r->changes[k++];
                if (i >= n && c == NULL)
                        break;
                if (i < n)
                        parse_transition(r, cJSON_GetArrayItem(list, (int)i),
                                         i, &e, errbuf, len);
                if (i < n && c != NULL && change_matches(r, c, &e))
                        continue;
                diffs++;
                if (diff == NULL)
                        continue;
                fprintf(diff, "transition %zu:\n  expected: ", i + 1);
                if (i < n)
                        print_expected(diff, r, &e);
                else
                        fputs("(nothing more)", diff);
                fputs("\n  got:      ", diff);
                if (c != NULL)
                        print_change(diff, r, c);
                else
                        fputs("(nothing more)", diff);
                fputc('\n', diff);
        }
        return diffs;
}

int logmon_expect_check(const struct logmon_replay *r, const cJSON *expect,
                        FILE *diff, char *errbuf, size_t len)
{
        const cJSON *final, *state, *stream, *trans, *item;
        enum logmon_state want_state;
        const char *want = NULL;
        int diffs = 0, n;
        size_t i;

        if (!cJSON_IsObject(expect)) {
                snprintf(errbuf, len, "expect: expected a JSON object");
                return HP_ECONFIG;
        }
        cJSON_ArrayForEach(item, expect) {
                if (strcmp(item->string, "final") != 0 &&
                    strcmp(item->string, "state") != 0 &&
                    strcmp(item->string, "stream") != 0 &&
                    strcmp(item->string, "transitions") != 0) {
                        snprintf(errbuf, len, "expect: unknown key \"%s\"",
                                 item->string);
                        return HP_ECONFIG;
                }
        }
        stream = cJSON_GetObjectItemCaseSensitive(expect, "stream");
        if (stream != NULL) {
                if (!cJSON_IsString(stream)) {
                        snprintf(errbuf, len, "expect: stream: expected a "
                                 "string");
                        return HP_ECONFIG;
                }
                want = stream->valuestring;
                for (i = 0; i < r->nstreams; i++)
                        if (stream_selected(r, i, want))
                                break;
                if (i == r->nstreams) {
                        diffs++;
                        if (diff != NULL)
                                fprintf(diff, "stream %s: not in the log\n",
                                        want);
                }
        }
        final = cJSON_GetObjectItemCaseSensitive(expect, "final");
        if (final != NULL) {
                n = check_final(r, final, want, diff, errbuf, len);
                if (n < 0)
                        return n;
                diffs += n;
        }
        state = cJSON_GetObjectItemCaseSensitive(expect, "state");
        if (state != NULL) {
                if (!cJSON_IsString(state) ||
                    logmon_state_parse(state->valuestring, &want_state) != 0) {
                        snprintf(errbuf, len, "expect: state: expected a "
                                 "state name");
                        return HP_ECONFIG;
                }
                for (i = 0; i < r->nstreams; i++) {
                        struct logmon_stream *s = r->streams[i].mon;

                        if (!stream_selected(r, i, want) ||
                            logmon_stream_state(s) == want_state)
                                continue;
                        diffs++;
                        if (diff != NULL)
                                fprintf(diff, "state of %s: expected %s, got "
                                        "%s (%s)\n", stream_label(r, i),
                                        state->valuestring,
                                        logmon_state_name(
                                                logmon_stream_state(s)),
                                        logmon_stream_reason(s)[0] ?
                                                logmon_stream_reason(s) :
                                                "no reason");
                }
        }
        trans = cJSON_GetObjectItemCaseSensitive(expect, "transitions");
        if (trans != NULL) {
                n = check_transitions(r, trans, want, diff, errbuf, len);
                if (n < 0)
                        return n;
                diffs += n;
        }
        return diffs;
}
