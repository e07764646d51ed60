/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of what hyperpodrun --replay adds around the engine: the
 * clock (timestamp formats, the format fixed by the first line, glog's
 * missing year, --replay-rate), the layout (console or plain log), the
 * time order of deadlines across streams, the aligned transition diff,
 * the rule times a verdict reports, and logmon_check_run, the --replay
 * entry point, with its error messages, on files in a temporary
 * directory. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/linesplit.h"
#include "hyperpod/logmon.h"

static char scratch_dir[] = "/tmp/hp-test-replay-XXXXXX";

static struct logmon_ruleset *ruleset(const char *json)
{
        struct logmon_ruleset *rs = NULL;
        char errbuf[512];
        cJSON *rules = cJSON_Parse(json);

        assert_non_null(rules);
        if (logmon_ruleset_new(rules, NULL, &rs, errbuf, sizeof(errbuf)))
                fail_msg("%s", errbuf);
        cJSON_Delete(rules);
        return rs;
}

/* A replay of log (n bytes) with its JSON output, one string. */
struct replay {
        struct logmon_replay *r;
        struct logmon_replay_info info;
        char *out;
        size_t len;
};

static void replay_n(const char *rules, const char *log, size_t n,
                     const struct logmon_replay_opts *opts, struct replay *o)
{
        struct logmon_ruleset *rs = ruleset(rules);
        FILE *f = open_memstream(&o->out, &o->len);

        assert_non_null(f);
        assert_int_equal(logmon_replay_buffer(rs, log, n, opts, f, &o->r), 0);
        fclose(f);
        logmon_replay_get_info(o->r, &o->info);
        logmon_ruleset_unref(rs);
}

static void replay(const char *rules, const char *log,
                   const struct logmon_replay_opts *opts, struct replay *o)
{
        replay_n(rules, log, strlen(log), opts, o);
}

static void replay_done(struct replay *o)
{
        logmon_replay_free(o->r);
        free(o->out);
}

/* The output's n-th JSON line (from 0), parsed; NULL past the end. */
static cJSON *output_line(const struct replay *o, int n)
{
        const char *p = o->out;
        int i;

        for (i = 0; i < n; i++) {
                p = strchr(p, '\n');
                if (p == NULL || p[1] == '\0')
                        return NULL;
                p++;
        }
        return cJSON_ParseWithOpts(p, NULL, false);
}

/* The summary: the last output line's "summary" object (the caller
 * deletes the returned root). */
static cJSON *summary_line(const struct replay *o)
{
        const char *p = o->out, *last = o->out, *nl;

        while ((nl = strchr(p, '\n')) != NULL && nl[1] != '\0') {
                p = nl + 1;
                last = p;
        }
        return cJSON_ParseWithOpts(last, NULL, false);
}

static double num(const cJSON *j, const char *key)
{
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(j, key);

        assert_true(cJSON_IsNumber(item));
        return item->valuedouble;
}

static const char *str(const cJSON *j, const char *key)
{
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(j, key);

        return cJSON_IsString(item) ? item->valuestring : NULL;
}

/* The n-th event line must be rule's change to state at time t. */
static void assert_event(const struct replay *o, int n, const char *rule,
                         const char *state, double t)
{
        cJSON *j = output_line(o, n);

        if (j == NULL)
                fail_msg("no event %d in:\n%s", n, o->out);
        if (str(j, "rule") == NULL || strcmp(str(j, "rule"), rule) != 0 ||
            str(j, "state") == NULL || strcmp(str(j, "state"), state) != 0 ||
            num(j, "time") < t - 1e-9 || num(j, "time") > t + 1e-9)
                fail_msg("event %d: expected %s %s at %.3f in:\n%s", n, rule,
                         state, t, o->out);
        cJSON_Delete(j);
}

static const char never_rule[] =
        "[{\"name\": \"Start\", \"logPattern\": \"never\","
        "  \"expectedStartCutOffInSeconds\": 100}]";

/* ---------------------------------------------------------------------
 * The clock
 */

struct clock_case {
        const char *log;
        const char *clock;
        uint64_t end_ms;
};

static const struct clock_case clock_cases[] = {
        /* glog has no year: December to January is 2 minutes, not -364
         * days. */
        { "I1231 23:59:00.000000  77 train.cc:12] go\n"
          "W0101 00:01:00.500000  77 train.cc:13] x\n",
          "glog", 120500 },
        { "[I0617 05:51:29.300123 1 a.cc:1] go\n"
          "[E0617 05:51:30.300999 1 a.cc:1] x\n",
          "glog", 1000 },
        /* The first timestamp fixes the format: a later line that starts
         * with ten digits is not epoch seconds. */
        { "2025-06-17 05:51:00,000 go\n"
          "1750139999 samples seen\n"
          "2025-06-17 05:51:10,000 x\n",
          "asctime", 10000 },
        { "1750139460 go\n"
          "2025-06-17 09:00:00,000 not a time in an epoch log\n"
          "1750139470.250 x\n",
          "epoch", 10250 },
        { "2025-06-17T05:51:00Z go\n"
          "2025-06-17 05:51:02,000 the same format, spelt as asctime\n",
          "iso8601", 2000 },
        /* Lines before the first timestamp happen at 0, and a line
         * without one when the line before it did. */
        { "booting\n2025-06-17 05:51:00,000 go\n"
          "  traceback line\n2025-06-17 05:51:05,000 x\n"
          "  and another\n",
          "asctime", 5000 },
        /* The clock never runs back. */
        { "2025-06-17 05:51:00,000 a\n2025-06-17 05:51:10,000 b\n"
          "2025-06-17 05:51:05,000 c\n",
          "asctime", 10000 },
        /* Not timestamps: a glog letter without the blank, a month 13,
         * nine digits. */
        { "I061705:51:29.3 x\nI1317 05:51:29.3 x\n123456789 x\n", "none", 0 },
};

/* Lines as the live splitter cuts them: \r of a progress bar, a line of
 * exactly HP_LINE_MAX bytes (one line), a longer one (cut and continued),
 * \r\n. The line numbers the replay gives the rules' first matches must
 * be the splitter's own, from the console reader and the per-rank file
 * reader alike. */
static const char split_rules[] =
        "[{\"name\":\"Bar\",\"logPattern\":\"^c 3$\"},"
        " {\"name\":\"Rest\",\"logPattern\":\"^y{4464}$\"},"
        " {\"name\":\"End\",\"logPattern\":\"^end$\"}]";

struct split_count {
        uint64_t lines, bar, rest, end;
};

static void count_cb(void *ctx, const char *line, size_t len,
                     enum hp_line_end end)
{
        struct split_count *c = ctx;

        (void)end;
        c->lines++;
        if (len == 3 && memcmp(line, "c 3", 3) == 0)
                c->bar = c->lines;
        if (len == 4464 && line[0] == 'y')
                c->rest = c->lines;
        if (len == 3 && memcmp(line, "end", 3) == 0)
                c->end = c->lines;
}

static char *split_log(size_t *n)
{
        size_t cap = HP_LINE_MAX + 70000 + 64, len = 0;
        char *log = malloc(cap);

        assert_non_null(log);
        len += (size_t)sprintf(log, "a 1\rb 2\rc 3\r\n");
        memset(log + len, 'x', HP_LINE_MAX);
        len += HP_LINE_MAX;
        log[len++] = '\n';
        memset(log + len, 'y', 70000);
        len += 70000;
        len += (size_t)sprintf(log + len, "\r\nend\n");
        *n = len;
        return log;
}

static uint64_t first_line_no(const char *out, size_t len, const char *rule)
{
        char needle[64];
        const char *p;

        snprintf(needle, sizeof(needle), "\"rule\":\"%s\"", rule);
        p = memmem(out, len, needle, strlen(needle));
        assert_non_null(p);
        p = strstr(p, "\"line_no\":");
        assert_non_null(p);
        return strtoull(p + strlen("\"line_no\":"), NULL, 10);
}

static void test_split_as_live(void **state)
{
        struct logmon_replay_opts opts = { .layout = LOGMON_LAYOUT_PLAIN };
        struct split_count c = { 0 };
        struct hp_linesplit ls;
        size_t n, len;
        char *log = split_log(&n), *buf = malloc(HP_LINE_MAX), *out;
        struct logmon_ruleset *rs = ruleset(split_rules);
        struct logmon_replay *r;
        const char *names[] = { "0" };
        FILE *in, *f;

        (void)state;
        assert_non_null(buf);
        /* The live splitter, fed in reads of odd sizes. */
        hp_linesplit_init(&ls, buf, HP_LINE_MAX);
        for (size_t off = 0; off < n; off += 4099)
                hp_linesplit_feed(&ls, log + off,
                                  n - off < 4099 ? n - off : 4099, count_cb,
                                  &c);
        hp_linesplit_finish(&ls, count_cb, &c);
        assert_int_equal(c.bar, 3);
        assert_int_equal(c.rest, 6);
        assert_int_equal(c.end, 7);

        for (int reader = 0; reader < 2; reader++) {
                f = open_memstream(&out, &len);
                assert_non_null(f);
                if (reader == 0) {
                        assert_int_equal(logmon_replay_buffer(rs, log, n,
                                                              &opts, f, &r),
                                         0);
                } else {
                        in = fmemopen(log, n, "r");
                        assert_non_null(in);
                        assert_int_equal(logmon_replay_files(rs, &in, names,
                                                             1, &opts, f, &r),
                                         0);
                        fclose(in);
                }
                fclose(f);
                assert_int_equal(first_line_no(out, len, "Bar"), c.bar);
                assert_int_equal(first_line_no(out, len, "Rest"), c.rest);
                assert_int_equal(first_line_no(out, len, "End"), c.end);
                free(out);
                logmon_replay_free(r);
        }
        logmon_ruleset_unref(rs);
        free(buf);
        free(log);
}

static void test_clock_formats(void **state)
{
        size_t i;

        for (i = 0; i < HP_ARRAY_SIZE(clock_cases); i++) {
                struct replay o = { 0 };

                replay(never_rule, clock_cases[i].log, NULL, &o);
                if (strcmp(o.info.clock, clock_cases[i].clock) != 0 ||
                    o.info.time_ms != clock_cases[i].end_ms)
                        fail_msg("case %zu: clock %s, end %llu ms; expected "
                                 "%s, %llu ms",
                                 i, o.info.clock,
                                 (unsigned long long)o.info.time_ms,
                                 clock_cases[i].clock,
                                 (unsigned long long)clock_cases[i].end_ms);
                replay_done(&o);
        }
}

/* The glog log of the first case crosses the 100 s cut-off between its
 * two lines: the deadline is reported at its own time. */
static void test_clock_glog_deadline(void **state)
{
        struct replay o = { 0 };

        replay(never_rule, clock_cases[0].log, NULL, &o);
        assert_event(&o, 0, "Start", "HANGING", 100.001);
        replay_done(&o);
}

static void test_clock_rate(void **state)
{
        struct logmon_replay_opts opts = { .rate = 4 };
        struct replay o = { 0 };

        /* The rate wins over timestamps: line 5 is at 1 s. */
        replay(never_rule,
               "2025-06-17 05:51:00,000 a\nb\nc\nd\n"
               "2030-01-01 00:00:00,000 e\n",
               &opts, &o);
        assert_string_equal(o.info.clock, "rate");
        assert_int_equal(o.info.time_ms, 1000);
        replay_done(&o);

        /* A tiny rate saturates the clock instead of overflowing it. */
        opts.rate = 1e-300;
        memset(&o, 0, sizeof(o));
        replay(never_rule, "a\nb\n", &opts, &o);
        assert_int_equal(o.info.time_ms, 9000000000000000ULL);
        assert_int_equal(logmon_replay_state(o.r), LOGMON_HANGING);
        replay_done(&o);
}

/* ---------------------------------------------------------------------
 * Layout
 */

static const char heartbeat_rules[] =
        "[{\"name\": \"Beat\", \"logPattern\": \".*loss\","
        "  \"expectedStartCutOffInSeconds\": 10,"
        "  \"expectedRecurringFrequencyInSeconds\": 5}]";

/* A console capture: the launcher's own lines have no prefix and go to
 * no rule, so no stream of their own runs out the cut-off. */
static void test_layout_console(void **state)
{
        static const char log[] =
                "hyperpodrun[7]: info: rendezvous done\n"
                "[default0]:2025-06-17 05:51:00,000 loss 1\n"
                "[default1]:2025-06-17 05:51:01,000 loss 1\n"
                "hyperpodrun[7]: warning: something\n"
                "[default0]:2025-06-17 05:51:04,000 loss 1\n"
                "[default1]:2025-06-17 05:51:05,000 loss 1\n";
        struct replay o = { 0 };
        cJSON *j;

        replay(heartbeat_rules, log, NULL, &o);
        assert_true(o.info.console);
        assert_int_equal(o.info.streams, 2);
        assert_int_equal(o.info.unprefixed, 0);
        assert_int_equal(o.info.agent_lines, 2);
        assert_int_equal(o.info.lines, 6);
        assert_int_equal(logmon_replay_state(o.r), LOGMON_HEALTHY);
        j = output_line(&o, 0);
        assert_string_equal(str(j, "stream"), "default0");
        assert_string_equal(str(j, "line"), "2025-06-17 05:51:00,000 loss 1");
        assert_int_equal((int)num(j, "line_no"), 2);
        cJSON_Delete(j);
        replay_done(&o);
}

/* A plain log with the odd "[rank0]:" line stays one stream, and that
 * line is text. */
static void test_layout_plain(void **state)
{
        static const char log[] = "2025-06-17 05:51:00,000 starting\n"
                                  "[rank0]: loss 1 printed with a prefix\n"
                                  "2025-06-17 05:51:01,000 loss 2\n";
        struct replay o = { 0 };
        cJSON *j;

        replay(heartbeat_rules, log, NULL, &o);
        assert_false(o.info.console);
        assert_int_equal(o.info.streams, 1);
        j = output_line(&o, 0);
        assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "stream")));
        assert_string_equal(str(j, "line"),
                            "[rank0]: loss 1 printed with a prefix");
        cJSON_Delete(j);
        replay_done(&o);
}

/* The layout is decided on the first MiB: prefixed lines after a plain
 * first MiB are text. */
static void test_layout_lookahead(void **state)
{
        const size_t plain = LOGMON_REPLAY_LOOKAHEAD / 10 + 1;
        size_t i, n = 0;
        struct replay o = { 0 };
        char *log = malloc(plain * 10 + 100 * 20 + 1);

        assert_non_null(log);
        for (i = 0; i < plain; i++)
                n += (size_t)sprintf(log + n, "plain %03zu\n", i % 1000);
        for (i = 0; i < 100; i++)
                n += (size_t)sprintf(log + n, "[default0]:loss\n");
        replay_n(heartbeat_rules, log, n, NULL, &o);
        assert_false(o.info.console);
        assert_int_equal(o.info.streams, 1);
        replay_done(&o);
        free(log);
}

static void test_layout_forced(void **state)
{
        struct logmon_replay_opts opts = { .layout = LOGMON_LAYOUT_PLAIN };
        struct replay o = { 0 };

        replay(heartbeat_rules, "[default0]:loss\n[default1]:loss\n", &opts,
               &o);
        assert_false(o.info.console);
        assert_int_equal(o.info.streams, 1);
        replay_done(&o);

        /* Forced console on a log with no prefix: no stream at all. */
        opts.layout = LOGMON_LAYOUT_CONSOLE;
        memset(&o, 0, sizeof(o));
        replay(heartbeat_rules, "loss\nloss\n", &opts, &o);
        assert_true(o.info.console);
        assert_int_equal(o.info.streams, 0);
        assert_int_equal(o.info.unprefixed, 2);
        assert_int_equal(logmon_replay_state(o.r), LOGMON_WAITING);
        replay_done(&o);
}

/* ---------------------------------------------------------------------
 * Formats: each log, what it is read as, which streams it has, which are
 * judged (local rank 0, as live, unless all), and the first verdict.
 */

struct format_case {
        const char *log;
        bool all_ranks;
        const char *format;
        const char *clock;
        const char *streams; /* "name:judged ..." in order */
        uint64_t agent_lines;
        const char *verdict; /* "stream state time_ms", or NULL */
};

static const char beat_rule[] =
        "[{\"name\": \"Beat\", \"logPattern\": \".*loss\","
        "  \"expectedRecurringFrequencyInSeconds\": 5}]";

static const struct format_case format_cases[] = {
        /* kubectl logs --timestamps: the stamp is before the prefix, and
         * the ranks stay apart; the agent's lines are its own. */
        { "2025-06-17T05:51:00.000000001Z hyperpodrun[7]: info: go\n"
          "2025-06-17T05:51:00.100000001Z [default0]:loss\n"
          "2025-06-17T05:51:00.200000001Z [default1]:loss\n"
          "2025-06-17T05:51:09.000000001Z [default1]:loss\n",
          false, "console with kubectl --timestamps", "prefix",
          "default0:1 default1:0", 1, "default0 HANGING 5101" },
        /* ${time}, and the agent's start line starts the rule clocks: a
         * rank that never prints runs out its cut-off from there. */
        { "hyperpodrun[7]: info: log rules: clock started at "
          "2025-06-17T05:51:00.000Z\n"
          "2025-06-17T05:51:00.100Z [default1]:loss\n"
          "2025-06-17T05:51:09.000Z [default1]:loss\n",
          false, "console with ${time}", "prefix",
          "local rank 0:1 default1:0", 1, NULL },
        /* srun --label over the agent's console: label/prefix names. */
        { "0: hyperpodrun[7]: info: go\n"
          "0: 2025-06-17T05:51:00.100Z [default0]:loss\n"
          "1: 2025-06-17T05:51:00.200Z [default0]:loss\n"
          "0: 2025-06-17T05:51:09.000Z [default0]:loss\n",
          true, "srun --label with ${time}", "prefix",
          "0/default0:1 1/default0:1", 1, "0/default0 HANGING 5001" },
        /* srun --label of plain tasks: the label is the rank. */
        { "0: 1750000000 loss\n1: 1750000000 loss\n 1: 1750000009 loss\n",
          false, "srun --label", "epoch", "0:1 1:0", 0, "0 HANGING 5001" },
        /* The agent's own verdict line quotes the matching line: it must
         * not match again (the hung log that replayed HEALTHY). */
        { "[default0]:1750000000 loss\n"
          "hyperpodrun[7]: warning: log rule verdict LogHang_Beat "
          "(HANGING) by rule Beat on local rank 0 at "
          "2025-06-15T15:06:45.001Z: ...; last matching line: "
          "1750000000 loss\n"
          "hyperpodrun[7]: error: LogHang_Beat ended the job\n",
          false, "console", "epoch", "default0:1", 2, NULL },
        /* Without a clock on the workers' lines, the agent's verdict
         * time ends the replay: the deadline before it is reached. */
        { "hyperpodrun[7]: info: log rules: clock started at "
          "2025-06-15T15:06:40.000Z\n"
          "[default0]:loss\n"
          "hyperpodrun[7]: warning: log rule verdict LogHang_Beat "
          "(HANGING) by rule Beat on local rank 0 at "
          "2025-06-15T15:06:45.001Z: ...\n",
          false, "console", "agent", "default0:1", 2,
          "default0 HANGING 5001" },
};

static void test_formats(void **state)
{
        const bool rank0[1] = { true };
        struct logmon_replay_opts opts = { 0 };
        struct logmon_verdict v;
        char streams[256], want[128];
        cJSON *sum, *list;
        size_t i, k, n;

        for (i = 0; i < HP_ARRAY_SIZE(format_cases); i++) {
                const struct format_case *c = &format_cases[i];
                struct replay o = { 0 };

                opts.monitored = c->all_ranks ? NULL : rank0;
                opts.nmonitored = 1;
                replay(beat_rule, c->log, &opts, &o);
                sum = summary_line(&o);
                list = cJSON_GetObjectItem(cJSON_GetObjectItem(sum,
                                                               "summary"),
                                           "streams");
                streams[0] = '\0';
                for (k = 0, n = 0; k < o.info.streams; k++) {
                        cJSON *st = cJSON_GetArrayItem(list, (int)k);

                        n += (size_t)snprintf(
                                streams + n, sizeof(streams) - n, "%s%s:%d",
                                k ? " " : "", str(st, "stream"),
                                cJSON_IsTrue(
                                        cJSON_GetObjectItem(st, "judged")));
                }
                cJSON_Delete(sum);
                if (logmon_replay_verdict(o.r, &v))
                        snprintf(want, sizeof(want), "%s %s %llu",
                                 v.stream ? v.stream : "(log)",
                                 logmon_state_name(v.state),
                                 (unsigned long long)v.time_ms);
                if (strcmp(o.info.format, c->format) != 0 ||
                    strcmp(o.info.clock, c->clock) != 0 ||
                    strcmp(streams, c->streams) != 0 ||
                    o.info.agent_lines != c->agent_lines ||
                    logmon_replay_verdict(o.r, &v) != (c->verdict != NULL) ||
                    (c->verdict != NULL && strcmp(want, c->verdict) != 0))
                        fail_msg("case %zu: %s, clock %s, streams \"%s\", "
                                 "%llu agent lines, verdict %s\n%s",
                                 i, o.info.format, o.info.clock, streams,
                                 (unsigned long long)o.info.agent_lines,
                                 logmon_replay_verdict(o.r, &v) ? want
                                                                : "none",
                                 o.out);
                replay_done(&o);
        }
}

/* Deadlines come out in time order across streams: default0 goes quiet
 * while default1 keeps talking, and default0's HANGING sits between
 * default1's lines at its own time. */
static void test_deadlines_in_time_order(void **state)
{
        static const char log[] = "[default0]:1750000000 loss\n"
                                  "[default1]:1750000001 loss\n"
                                  "[default1]:1750000004 loss\n"
                                  "[default1]:1750000008 loss\n"
                                  "[default1]:1750000012 loss\n";
        struct replay o = { 0 };
        double last = 0, t;
        cJSON *j;
        int i;

        replay(heartbeat_rules, log, NULL, &o);
        assert_event(&o, 0, "Beat", "HEALTHY", 0);
        assert_event(&o, 1, "Beat", "HEALTHY", 1);
        assert_event(&o, 2, "Beat", "HANGING", 5.001);
        for (i = 0; (j = output_line(&o, i)) != NULL; i++) {
                if (cJSON_GetObjectItem(j, "summary") == NULL) {
                        t = num(j, "time");
                        assert_true(t >= last);
                        last = t;
                }
                cJSON_Delete(j);
        }
        assert_int_equal(i, 4);
        replay_done(&o);
}

/* ---------------------------------------------------------------------
 * --expect's diff
 */

static void test_diff_aligned(void **state)
{
        static const char log[] = "1750000000 loss\n1750000020 loss\n";
        struct replay o = { 0 };
        char errbuf[256], *diff = NULL;
        size_t dlen;
        cJSON *expect;
        FILE *f;

        replay(heartbeat_rules, log, NULL, &o);
        /* Got: HEALTHY (line 1), HANGING at 5.001, HEALTHY (line 2). The
         * expectation misses the HANGING and has an extra SLOW. */
        expect = cJSON_Parse(
                "{\"transitions\": ["
                " {\"rule\": \"Beat\", \"state\": \"HEALTHY\", \"line_no\": 1},"
                " {\"rule\": \"Beat\", \"state\": \"HEALTHY\", \"line_no\": 2},"
                " {\"rule\": \"Beat\", \"state\": \"SLOW\"}]}");
        assert_non_null(expect);
        f = open_memstream(&diff, &dlen);
        assert_int_equal(logmon_expect_check(o.r, expect, f, errbuf,
                                             sizeof(errbuf)),
                         2);
        fclose(f);
        assert_string_equal(
                diff, "transitions (- expected, + got):\n"
                      "+ got #2:      Beat HEALTHY -> HANGING on (log) at "
                      "t=5.001 (deadline)\n"
                      "- expected #3: Beat -> SLOW\n");
        free(diff);
        cJSON_Delete(expect);
        replay_done(&o);
}

/* ---------------------------------------------------------------------
 * Rule times for a verdict's log line
 */

static void test_rule_info_times(void **state)
{
        struct logmon_ruleset *rs = ruleset(heartbeat_rules);
        struct logmon_stream *s = logmon_stream_new(rs);
        struct logmon_rule_info info;

        assert_non_null(s);
        logmon_stream_start(s, 1000);
        logmon_stream_rule_info(s, 0, &info);
        assert_int_equal(info.due_ms, 11001);
        /* Suspended time moves the deadline on. */
        logmon_stream_suspend(s, 2000);
        logmon_stream_resume(s, 2500);
        logmon_stream_rule_info(s, 0, &info);
        assert_int_equal(info.due_ms, 11501);
        logmon_stream_feed(s, "loss", 4, 3000, NULL);
        logmon_stream_rule_info(s, 0, &info);
        assert_int_equal(info.last_match_ms, 3000);
        assert_int_equal(info.due_ms, 8001);
        assert_int_equal(logmon_stream_next_deadline(s), 8001);
        /* Once HANGING, the deadline it missed is still reported. */
        logmon_stream_tick(s, 8001, NULL);
        logmon_stream_rule_info(s, 0, &info);
        assert_int_equal(info.state, LOGMON_HANGING);
        assert_int_equal(info.due_ms, 8001);
        assert_int_equal(logmon_stream_next_deadline(s), UINT64_MAX);
        logmon_stream_free(s);
        logmon_ruleset_unref(rs);
}

/* ---------------------------------------------------------------------
 * logmon_check_run
 */

static const char *scratch(const char *name, const char *text)
{
        static char paths[8][4096];
        static int next;
        char *path = paths[next++ % 8];
        FILE *f;

        snprintf(path, 4096, "%s/%s", scratch_dir, name);
        if (text != NULL) {
                f = fopen(path, "w");
                assert_non_null(f);
                fputs(text, f);
                fclose(f);
        }
        return path;
}

struct check_result {
        int rc;
        char errbuf[512];
        char *out, *diff;
        size_t out_len, diff_len;
};

static void check(const struct logmon_check_opts *opts, FILE *in,
                  struct check_result *res)
{
        FILE *out = open_memstream(&res->out, &res->out_len);
        FILE *diff = open_memstream(&res->diff, &res->diff_len);

        assert_non_null(out);
        assert_non_null(diff);
        res->errbuf[0] = '\0';
        res->rc = logmon_check_run(opts, in, out, diff, res->errbuf,
                                   sizeof(res->errbuf));
        fclose(out);
        fclose(diff);
}

static void check_done(struct check_result *res)
{
        free(res->out);
        free(res->diff);
}

static void test_check_run(void **state)
{
        struct logmon_check_opts opts = {
                .rules = scratch("rules.json", heartbeat_rules),
                .log = scratch("train.log", "1750000000 loss\n"
                                            "1750000020 loss\n"),
                .expect = scratch("met.json",
                                  "{\"final\": {\"Beat\": \"HEALTHY\"}}"),
        };
        struct check_result res = { 0 };
        FILE *in;

        check(&opts, NULL, &res);
        assert_int_equal(res.rc, 0);
        assert_non_null(strstr(res.out, "\"state\":\"HANGING\""));
        assert_string_equal(res.diff, "");
        check_done(&res);

        opts.expect = scratch("unmet.json",
                              "{\"final\": {\"Beat\": \"HANGING\"}}");
        check(&opts, NULL, &res);
        assert_int_equal(res.rc, 1);
        assert_string_equal(res.diff, "final state of rule Beat on (log): "
                                      "expected HANGING, got HEALTHY\n");
        check_done(&res);

        /* Standard input, at a rate: the second line is at 0.5 s. */
        opts.log = "-";
        opts.rate = 2;
        opts.expect = scratch("rate.json",
                              "{\"transitions\": [{\"rule\": \"Beat\","
                              " \"state\": \"HEALTHY\", \"line_no\": 1,"
                              " \"time\": 0}]}");
        in = fmemopen((void *)"no match\nloss\n", 14, "r");
        assert_non_null(in);
        check(&opts, in, &res);
        fclose(in);
        assert_int_equal(res.rc, 2);
        assert_string_equal(res.diff,
                            "transitions (- expected, + got):\n"
                            "- expected #1: Beat -> HEALTHY at t=0.000 "
                            "(line 1)\n"
                            "+ got #1:      Beat WAITING -> HEALTHY on (log) "
                            "at t=0.500 (line 2)\n");
        check_done(&res);
}

struct check_error {
        const char *rules, *expect, *log; /* file contents; NULL: none */
        const char *log_path;             /* instead of a scratch log */
        int rc;
        const char *error; /* after the scratch directory and a '/' */
};

static const struct check_error check_errors[] = {
        { NULL, NULL, "x\n", NULL, -ENOENT,
          "rules.json: No such file or directory" },
        { "[{\"name\": \"A\"}]", NULL, "x\n", NULL, HP_ECONFIG,
          "rules.json: rule 0 (A): logPattern: required" },
        /* The expectation is checked before the log is opened: the log
         * does not exist here. */
        { heartbeat_rules, "{\"finale\": {}}", NULL, "/nonexistent.log",
          HP_ECONFIG, "expect.json: expect: unknown key \"finale\"" },
        { heartbeat_rules, "{\"final\": {\"Nope\": \"HEALTHY\"}}", NULL,
          "/nonexistent.log", HP_ECONFIG,
          "expect.json: expect: final: no rule named \"Nope\"" },
        { heartbeat_rules, "[1,", NULL, NULL, HP_ECONFIG,
          "expect.json:1:3: invalid JSON" },
        { heartbeat_rules, NULL, NULL, NULL, -ENOENT,
          "--replay <dir>/train.log: No such file or directory" },
        { heartbeat_rules, NULL, NULL, ".", -EISDIR,
          "--replay .: is a directory with no <local_rank>/stdout.log in "
          "it (an attempt directory of per-rank files)" },
};

static void test_check_errors(void **state)
{
        char want[1024], *dir;
        size_t i;

        for (i = 0; i < HP_ARRAY_SIZE(check_errors); i++) {
                const struct check_error *c = &check_errors[i];
                struct logmon_check_opts opts = {
                        .rules = scratch("rules.json", c->rules),
                        .expect = c->expect != NULL
                                          ? scratch("expect.json", c->expect)
                                          : NULL,
                        .log = c->log_path != NULL
                                       ? c->log_path
                                       : scratch("train.log", c->log),
                };
                struct check_result res = { 0 };

                remove(scratch("missing", NULL));
                if (c->rules == NULL)
                        remove(opts.rules);
                if (c->log == NULL && c->log_path == NULL)
                        remove(opts.log);
                check(&opts, NULL, &res);
                dir = strstr(c->error, "<dir>");
                if (dir != NULL)
                        snprintf(want, sizeof(want), "%.*s%s%s",
                                 (int)(dir - c->error), c->error, scratch_dir,
                                 dir + 5);
                else if (c->error[0] == '-')
                        snprintf(want, sizeof(want), "%s", c->error);
                else
                        snprintf(want, sizeof(want), "%s/%s", scratch_dir,
                                 c->error);
                if (res.rc != c->rc || strcmp(res.errbuf, want) != 0)
                        fail_msg("case %zu: %d \"%s\"; expected %d \"%s\"", i,
                                 res.rc, res.errbuf, c->rc, want);
                /* Nothing was replayed. */
                assert_string_equal(res.out, "");
                check_done(&res);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_split_as_live),
                cmocka_unit_test(test_clock_formats),
                cmocka_unit_test(test_clock_glog_deadline),
                cmocka_unit_test(test_clock_rate),
                cmocka_unit_test(test_layout_console),
                cmocka_unit_test(test_layout_plain),
                cmocka_unit_test(test_layout_lookahead),
                cmocka_unit_test(test_layout_forced),
                cmocka_unit_test(test_formats),
                cmocka_unit_test(test_deadlines_in_time_order),
                cmocka_unit_test(test_diff_aligned),
                cmocka_unit_test(test_rule_info_times),
                cmocka_unit_test(test_check_run),
                cmocka_unit_test(test_check_errors),
        };

        int failed;

        if (mkdtemp(scratch_dir) == NULL) {
                perror("mkdtemp");
                return 1;
        }
        failed = cmocka_run_group_tests(tests, NULL, NULL);
        hp_remove_tree(scratch_dir);
        return failed;
}
