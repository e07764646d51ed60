/* SPDX-License-Identifier: Apache-2.0 */
/* What a replay prints and tells its caller: each rule state change as a
 * JSON line or in text, the metric values a threshold rule compared, the
 * summary at the end, and the results the caller reads back
 * (logmon_replay_state(), logmon_replay_get_info(),
 * logmon_replay_verdict()). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hyperpod/common.h"
#include "replay-private.h"

static const char *const clock_names[] = {
        [CLOCK_NONE] = "none",       [CLOCK_RATE] = "rate",
        [CLOCK_ASCTIME] = "asctime", [CLOCK_ISO8601] = "iso8601",
        [CLOCK_EPOCH] = "epoch",     [CLOCK_GLOG] = "glog",
        [CLOCK_HEAD] = "prefix",     [CLOCK_AGENT] = "agent",
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

static void text_time(const struct logmon_replay *r, uint64_t t)
{
        char iso[HP_ISO8601_MS_LEN + 1];

        fprintf(r->out, "%" PRIu64 ".%03" PRIu64 " s", t / 1000, t % 1000);
        if (logmon__wall_offset(r) != LOGMON_NO_WALL_CLOCK) {
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
                                           r->now, logmon__wall_offset(r),
                                           what, sizeof(what));
                fprintf(r->out, "log rule state change %s\n", what);
                return;
        }
        fprintf(r->out, "%s: ", logmon_ruleset_rule_name(r->rs, e->rule));
        if (e->kind == LOGMON_EVENT_NONNUMERIC)
                fputs("the captured metric is not a number\n", r->out);
        else
                fputs("a match was given up at a PCRE2 limit\n", r->out);
}

void logmon__print_change(struct logmon_replay *r, size_t stream,
                          const struct logmon_event *e, uint64_t line_no,
                          const char *line, size_t len)
{
        if (r->opts->text) {
                text_change(r, stream, e, line_no, line, len);
                return;
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
                fprintf(r->out,
                        ",\"event\":\"regex_limit\",\"pattern\":\"%s\"",
                        e->pattern == LOGMON_PATTERN_STOP ? "stopPattern"
                                                          : "logPattern");
        if (line_no == 0) {
                fputs(",\"line_no\":null,\"line\":null}\n", r->out);
        } else {
                fprintf(r->out,
                        ",\"line_no\":%" PRIu64 ",\"line\":", line_no);
                logmon__json_string(r->out, line, len);
                fputs("}\n", r->out);
        }
}

/* The JSON output: each metric a threshold rule compared, as a "value"
 * event, so that a metric can be plotted against its threshold
 * (tools/plot_replay.py). */
void logmon__write_values(struct logmon_replay *r, size_t stream,
                          uint64_t line_no)
{
        struct replay_stream *st = &r->streams[stream];
        struct logmon_rule_limits lim;
        char number[HP_DOUBLE_LEN];
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
                fprintf(r->out,
                        "{\"time\":%" PRIu64 ".%03" PRIu64 ",\"stream\":",
                        r->now / 1000, r->now % 1000);
                logmon__json_cstr(r->out, st->name);
                fputs(",\"rule\":", r->out);
                logmon__json_cstr(r->out, logmon_ruleset_rule_name(r->rs, i));
                /* JSON has no infinity or NaN (a capture of "inf"
                 * parses, as in Python): null. */
                fputs(",\"event\":\"value\",\"value\":", r->out);
                if (isfinite(info.last_value))
                        fputs(hp_format_double(info.last_value, number),
                              r->out);
                else
                        fputs("null", r->out);
                fprintf(r->out, ",\"line_no\":%" PRIu64 "}\n", line_no);
        }
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
        size_t row = r->layout == LOGMON_LAYOUT_CONSOLE ? 1
                     : r->layout == LOGMON_LAYOUT_SRUN  ? 2
                                                        : 0;

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
        fprintf(f,
                ",\"local_rank\":%d,\"state\":\"%s\",\"time\":%" PRIu64
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
        /* Reached within the capture's skew: how far past the stop. */
        if (r->v_skew_ms > 0)
                fprintf(f, ",\"skew\":%" PRIu64 ".%03" PRIu64,
                        r->v_skew_ms / 1000, r->v_skew_ms % 1000);
        fputc('}', f);
}

/* Each judged stream's rule whose deadline was still to come where
 * judging stopped: the log ends before it could turn HANGING, so neither
 * HEALTHY nor HANGING is known for it. */
static void summary_pending(struct logmon_replay *r)
{
        char wall[HP_ISO8601_MS_LEN + 1];
        uint64_t due, past;
        FILE *f = r->out;
        size_t i, j, k = 0;

        fputs(",\"pending\":[", f);
        for (i = 0; i < r->nstreams; i++) {
                for (j = 0; j < logmon_ruleset_count(r->rs); j++) {
                        if (!logmon__pending(r, i, j, &due))
                                continue;
                        past = due > r->end_ms ? due - r->end_ms : 0;
                        fputs(k++ > 0 ? ",{\"stream\":" : "{\"stream\":", f);
                        logmon__json_cstr(f, r->streams[i].name);
                        fputs(",\"rule\":", f);
                        logmon__json_cstr(f,
                                          logmon_ruleset_rule_name(r->rs, j));
                        fprintf(f,
                                ",\"deadline\":%" PRIu64 ".%03" PRIu64
                                ",\"wall\":",
                                due / 1000, due % 1000);
                        if (logmon__wall_offset(r) != LOGMON_NO_WALL_CLOCK) {
                                hp_iso8601_ms(r->base + (int64_t)due, wall);
                                logmon__json_cstr(f, wall);
                        } else {
                                fputs("null", f);
                        }
                        fprintf(f, ",\"past_end\":%" PRIu64 ".%03" PRIu64 "}",
                                past / 1000, past % 1000);
                }
        }
        fputc(']', f);
}

static void text_pending(struct logmon_replay *r)
{
        uint64_t due, past;
        FILE *f = r->out;
        size_t i, j;

        for (i = 0; i < r->nstreams; i++) {
                for (j = 0; j < logmon_ruleset_count(r->rs); j++) {
                        if (!logmon__pending(r, i, j, &due))
                                continue;
                        past = due > r->end_ms ? due - r->end_ms : 0;
                        fprintf(f, "pending: rule %s on %s: deadline at ",
                                logmon_ruleset_rule_name(r->rs, j),
                                r->streams[i].name ? r->streams[i].name
                                                   : "(log)");
                        text_time(r, due);
                        fprintf(f,
                                ", %" PRIu64 ".%03" PRIu64 " s past "
                                "the end of the log: neither HEALTHY nor "
                                "HANGING is known\n",
                                past / 1000, past % 1000);
                }
        }
}

static void summary(struct logmon_replay *r)
{
        struct logmon_rule_info info;
        char number[HP_DOUBLE_LEN];
        size_t i, j, k;
        FILE *f = r->out;

        fprintf(f,
                "{\"summary\":{\"lines\":%" PRIu64 ",\"time\":%" PRIu64
                ".%03" PRIu64 ",\"clock\":\"%s\",\"layout\":\"%s\","
                "\"format\":\"%s\",\"unprefixed_lines\":%" PRIu64
                ",\"agent_lines\":%" PRIu64 ",\"agent_verdict\":%s,"
                "\"agent_ended\":%s,"
                "\"lines_after_until\":%" PRIu64 ",\"state\":\"%s\","
                "\"verdict\":",
                r->lines, r->now / 1000, r->now % 1000, clock_names[r->clock],
                r->layout == LOGMON_LAYOUT_CONSOLE ? "console"
                : r->layout == LOGMON_LAYOUT_SRUN  ? "srun"
                                                   : "plain",
                format_name(r), r->unprefixed, r->agent_lines,
                r->live_verdict ? "true" : "false",
                r->job_ended ? "true" : "false", r->after_stop,
                logmon_state_name(logmon_replay_state(r)));
        summary_verdict(r);
        summary_pending(r);
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
                        fprintf(f,
                                ",\"threshold\":%s,\"operator\":"
                                "\"%s\",\"datapoints\":%" PRIu32,
                                hp_format_double(lim.threshold, number),
                                lim.op, lim.datapoints);
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
                        logmon__json_cstr(f,
                                          logmon_ruleset_rule_name(r->rs, j));
                        fprintf(f,
                                ",\"state\":\"%s\",\"matches\":%" PRIu64
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

static void text_summary(struct logmon_replay *r)
{
        FILE *f = r->out;
        size_t i, k;

        fprintf(f,
                "summary: %" PRIu64 " lines read as a %s log (clock: "
                "%s), %" PRIu64 " of them hyperpodrun's own; judged up to ",
                r->lines, format_name(r), clock_names[r->clock],
                r->agent_lines);
        text_time(r, r->now);
        fputc('\n', f);
        if (r->have_verdict && r->v_skew_ms > 0)
                fprintf(f,
                        "verdict: %s (due %" PRIu64 " ms after the "
                        "%s, within the %d ms the capture's stamps may "
                        "lag)\n",
                        r->v_message, r->v_skew_ms,
                        r->live_verdict ? "agent's verdict" : "log's end",
                        REPLAY_SKEW_MS);
        else if (r->have_verdict)
                fprintf(f, "verdict: %s\n", r->v_message);
        else
                fputs("verdict: none (no judged stream reached SLOW, "
                      "HANGING or FAULTED)\n",
                      f);
        for (i = 0; i < r->nstreams; i++) {
                const struct replay_stream *st = &r->streams[i];

                fprintf(f, "stream %s: ", st->name ? st->name : "(log)");
                if (!st->judged)
                        fputs("not judged (--log-monitor-ranks)\n", f);
                else
                        fprintf(f, "%s%s%s\n",
                                logmon_state_name(
                                        logmon_stream_state(st->mon)),
                                logmon_stream_reason(st->mon)[0] ? " " : "",
                                logmon_stream_reason(st->mon));
        }
        text_pending(r);
        if (r->job_ended)
                fputs("ended: the agent's line says the job ended; its "
                      "rules stopped there, with no deadline pending\n",
                      f);
        for (i = 0, k = 0; i < logmon_ruleset_count(r->rs); i++) {
                if (logmon_replay_rule_matched(r, i))
                        continue;
                fprintf(f, "%s%s",
                        k++ == 0 ? "rules that never matched a "
                                   "line: "
                                 : ", ",
                        logmon_ruleset_rule_name(r->rs, i));
        }
        if (k > 0)
                fputc('\n', f);
}

void logmon__write_summary(struct logmon_replay *r)
{
        if (r->opts->text)
                text_summary(r);
        else
                summary(r);
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
        out->rule = r->v_rule >= 0
                            ? logmon_ruleset_rule_name(r->rs,
                                                       (size_t)r->v_rule)
                            : "";
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
