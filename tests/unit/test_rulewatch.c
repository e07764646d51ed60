/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the log rule watch (src/supervise/rulewatch.c) and its
 * verdict (src/supervise/verdict.c): the reason code and wording the
 * operator reports, and a watch on a real loop fed lines and ticks with
 * the loop's time, with rulesets compiled from JSON. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/logmon.h"
#include "hyperpod/supervise.h"
#include "supervise-private.h"

#include "table.h"

/* ---- The reason code ---- */

#define SENTINEL ((char)0xad)

struct reason_case {
        const char *name;
        enum logmon_state state;
        const char *rule; /* NULL: LOGMON_NAME_MAX times 'n' */
        size_t len;       /* of the buffer given */
        int ret;
        /* What buf holds: want exactly, or (want NULL) want_prefix then
         * want_n times 'n'. */
        const char *want;
        const char *want_prefix;
        size_t want_n;
};

#define LONG_FULL ((int)(sizeof("LogFault_") - 1 + LOGMON_NAME_MAX))

static const struct reason_case reason_cases[] = {
        { "SLOW", LOGMON_SLOW, "Tput", 64, 12, "LogSlow_Tput", NULL, 0 },
        { "HANGING", LOGMON_HANGING, "JobHangingDetection", 64, 27,
          "LogHang_JobHangingDetection", NULL, 0 },
        { "FAULTED", LOGMON_FAULTED, "F", 64, 10, "LogFault_F", NULL, 0 },
        { "a rule name with underscores", LOGMON_HANGING, "a_b_c", 64, 13,
          "LogHang_a_b_c", NULL, 0 },
        { "exactly fits", LOGMON_SLOW, "Tput", 13, 12, "LogSlow_Tput", NULL,
          0 },
        { "one byte short: cut, terminated", LOGMON_SLOW, "Tput", 12, 12,
          "LogSlow_Tpu", NULL, 0 },
        { "cut inside the prefix", LOGMON_HANGING, "Beat", 6, 12, "LogHa",
          NULL, 0 },
        { "room for the NUL only", LOGMON_HANGING, "Beat", 1, 12, "", NULL,
          0 },
        { "no room at all: nothing written", LOGMON_HANGING, "Beat", 0, 12,
          NULL, NULL, 0 },
        { "the longest name fits HP_VERDICT_REASON_MAX", LOGMON_FAULTED, NULL,
          HP_VERDICT_REASON_MAX, LONG_FULL, NULL, "LogFault_",
          LOGMON_NAME_MAX },
        { "the longest name in 100 bytes", LOGMON_HANGING, NULL, 100,
          LONG_FULL - 1, NULL, "LogHang_", 91 },
        { "WAITING: no verdict", LOGMON_WAITING, "Beat", 64, -EINVAL, "",
          NULL, 0 },
        { "HEALTHY: no verdict", LOGMON_HEALTHY, "Beat", 64, -EINVAL, "",
          NULL, 0 },
        { "a state out of range", (enum logmon_state)99, "Beat", 64, -EINVAL,
          "", NULL, 0 },
};

/* buf[0..len) holds the expected bytes and nothing past len was
 * written. */
static bool check_buf(const char *buf, size_t size, size_t len,
                      const char *want, const char *want_prefix,
                      size_t want_n, char *why, size_t whylen)
{
        for (size_t i = len; i < size; i++)
                if (buf[i] != SENTINEL) {
                        snprintf(why, whylen, "byte %zu past len written", i);
                        return false;
                }
        if (len == 0)
                return true;
        if (memchr(buf, '\0', len) == NULL) {
                snprintf(why, whylen, "not terminated");
                return false;
        }
        if (want != NULL) {
                if (strcmp(buf, want) != 0) {
                        snprintf(why, whylen, "'%s', expected '%s'", buf,
                                 want);
                        return false;
                }
                return true;
        }
        if (strncmp(buf, want_prefix, strlen(want_prefix)) != 0 ||
            strlen(buf) != strlen(want_prefix) + want_n ||
            strspn(buf + strlen(want_prefix), "n") != want_n) {
                snprintf(why, whylen,
                         "%zu bytes '%.20s...', expected %s "
                         "and %zu times n",
                         strlen(buf), buf, want_prefix, want_n);
                return false;
        }
        return true;
}

static void test_verdict_reason(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(reason_cases); i++) {
                const struct reason_case *c = &reason_cases[i];
                struct hp_verdict v = { .state = c->state };
                char buf[HP_VERDICT_REASON_MAX + 64], why[128];
                int r;

                if (c->rule != NULL)
                        snprintf(v.rule, sizeof(v.rule), "%s", c->rule);
                else
                        memset(v.rule, 'n', LOGMON_NAME_MAX);
                memset(buf, SENTINEL, sizeof(buf));
                r = hp_verdict_reason(&v, buf, c->len);
                if (r != c->ret)
                        CASE_FAILED(failures, "%s: returned %d, expected %d",
                                    c->name, r, c->ret);
                else if (!check_buf(buf, sizeof(buf), c->len, c->want,
                                    c->want_prefix, c->want_n, why,
                                    sizeof(why)))
                        CASE_FAILED(failures, "%s: %s", c->name, why);
        }
        assert_int_equal(failures, 0);
}

/* ---- What it means ---- */

struct describe_case {
        const char *name;
        enum logmon_state state;
        const char *rule;
        int local_rank;
        const char *line;
        size_t len;
        const char *want;
        int ret; /* -1: strlen(want) */
};

static const struct describe_case describe_cases[] = {
        { "HANGING with a last line", LOGMON_HANGING, "Beat", 3,
          "step 41 loss 0.2", 256,
          "Log rule Beat is HANGING on local rank 3; last matching line: "
          "step 41 loss 0.2",
          -1 },
        { "HANGING with no line", LOGMON_HANGING, "Start", 0, "", 256,
          "Log rule Start is HANGING on local rank 0; no line matched it "
          "yet",
          -1 },
        { "SLOW", LOGMON_SLOW, "Tput", 7, "tput 50", 256,
          "Log rule Tput is SLOW on local rank 7; last matching line: tput "
          "50",
          -1 },
        { "FAULTED", LOGMON_FAULTED, "Cuda", 1, "CUDA error: 5", 256,
          "Log rule Cuda is FAULTED on local rank 1; last matching line: "
          "CUDA error: 5",
          -1 },
        { "cut to the buffer", LOGMON_FAULTED, "Cuda", 1, "CUDA error: 5", 20,
          "Log rule Cuda is FA", 75 },
        { "no verdict", LOGMON_WAITING, "Cuda", 1, "", 256, "", -EINVAL },
};

static void test_verdict_describe(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(describe_cases); i++) {
                const struct describe_case *c = &describe_cases[i];
                struct hp_verdict v = { .state = c->state,
                                        .local_rank = c->local_rank };
                char buf[512], why[256];
                int want_ret = c->ret == -1 ? (int)strlen(c->want) : c->ret;
                int r;

                snprintf(v.rule, sizeof(v.rule), "%s", c->rule);
                snprintf(v.line, sizeof(v.line), "%s", c->line);
                memset(buf, SENTINEL, sizeof(buf));
                r = hp_verdict_describe(&v, buf, c->len);
                if (r != want_ret)
                        CASE_FAILED(failures, "%s: returned %d, expected %d",
                                    c->name, r, want_ret);
                else if (!check_buf(buf, sizeof(buf), c->len, c->want, NULL,
                                    0, why, sizeof(why)))
                        CASE_FAILED(failures, "%s: %s", c->name, why);
        }
        assert_int_equal(failures, 0);
}

/* ---- The watch ---- */

#define NPROC 4
#define BASE_RANK 8
/* The wall clock the watch is given: epoch ms at loop ms 0. */
#define WALL_OFFSET_MS 1700000000000ll

struct fixture {
        uv_loop_t loop;
        struct hp_rulewatch w;
        bool monitored[NPROC];
        int verdicts;
        struct hp_verdict v;
        char stream_reason[HP_VERDICT_REASON_MAX]; /* the engine's own */
        int reads;
        int commits;
};

static void read_now_cb(void *ctx)
{
        ((struct fixture *)ctx)->reads++;
}

static void commit_cb(void *ctx)
{
        ((struct fixture *)ctx)->commits++;
}

static void verdict_cb(void *ctx, const struct hp_verdict *v)
{
        struct fixture *f = ctx;
        const struct logmon_stream *s = hp_rulewatch__stream(&f->w,
                                                             v->local_rank);

        f->verdicts++;
        f->v = *v;
        snprintf(f->stream_reason, sizeof(f->stream_reason), "%s",
                 s != NULL ? logmon_stream_reason(s) : "(no stream)");
}

static struct logmon_ruleset *ruleset(const char *json)
{
        struct logmon_ruleset *rs = NULL;
        char errbuf[512];
        cJSON *rules = cJSON_Parse(json);

        assert_non_null(rules);
        if (logmon_ruleset_new(rules, NULL, &rs, errbuf, sizeof(errbuf)))
                fail_msg("%s: %s", json, errbuf);
        cJSON_Delete(rules);
        return rs;
}

/* A watch on ranks 0-3 but monitored, running the rules in json from the
 * loop's now. */
static void start(struct fixture *f, const char *json,
                  const bool monitored[NPROC])
{
        struct logmon_ruleset *rs = ruleset(json);
        char errbuf[256] = "";

        memset(f, 0, sizeof(*f));
        memcpy(f->monitored, monitored, sizeof(f->monitored));
        assert_int_equal(uv_loop_init(&f->loop), 0);
        assert_int_equal(
                hp_rulewatch__init(&f->w,
                                   &(struct hp_rulewatch_params){
                                           .loop = &f->loop,
                                           .nproc = NPROC,
                                           .monitored = f->monitored,
                                           .read_now = read_now_cb,
                                           .commit_output = commit_cb,
                                           .on_verdict = verdict_cb,
                                           .ctx = f },
                                   errbuf, sizeof(errbuf)),
                0);
        hp_rulewatch__set_wall_offset(&f->w, WALL_OFFSET_MS);
        assert_int_equal(hp_rulewatch__use(&f->w, rs), 0);
        logmon_ruleset_unref(rs); /* the watch holds its own reference */
        hp_rulewatch__resume(&f->w, BASE_RANK);
}

static void stop(struct fixture *f)
{
        hp_rulewatch__close(&f->w);
        assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
        assert_int_equal(uv_loop_close(&f->loop), 0);
}

static void feed(struct fixture *f, int rank, const char *line)
{
        struct hp_rulewatch__rank *m = hp_rulewatch__rank(&f->w, rank);

        assert_non_null(m);
        hp_rulewatch__line_cb(m, line, strlen(line), HP_LINE_EOL);
        /* A slow first line (valgrind) sends the rest of the iteration to
         * a rule thread: its verdict is the loop's once settled. */
        hp_rulewatch__settle(&f->w);
}

/* One step: a line on a rank, or (line NULL) a tick at the start plus
 * tick_ms. */
struct step {
        int rank;
        const char *line;
        uint64_t tick_ms;
};

struct watch_case {
        const char *name;
        const char *rules;
        bool monitored[NPROC];
        struct step steps[6];
        size_t nsteps;
        /* Exactly one verdict: */
        enum logmon_state state;
        const char *rule;
        int local_rank;
        const char *line;
        uint64_t deadline_ms; /* after the start; UINT64_MAX: a line's */
        uint64_t seen_ms;     /* after the start */
        uint64_t latency_ms;
};

#define ALL                                                                  \
        {                                                                    \
                true, true, true, true                                       \
        }

static const struct watch_case watch_cases[] = {
        {
                .name = "a faultOnMatch line on rank 2; later faults are "
                        "not a second verdict",
                .rules = "[{\"name\": \"Cuda\", \"logPattern\": "
                         "\".*CUDA error\", \"faultOnMatch\": true},"
                         " {\"name\": \"Any\", \"logPattern\": \".*\"}]",
                .monitored = ALL,
                .steps = { { 0, "step 1", 0 },
                           { 2, "x CUDA error: 5", 0 },
                           { 1, "CUDA error: 7", 0 },
                           { 2, "CUDA error: 9", 0 } },
                .nsteps = 4,
                .state = LOGMON_FAULTED,
                .rule = "Cuda",
                .local_rank = 2,
                .line = "x CUDA error: 5",
                .deadline_ms = UINT64_MAX,
                .seen_ms = 0,
                .latency_ms = 0,
        },
        {
                .name = "SLOW on a metric below its threshold, rank 3",
                .rules = "[{\"name\": \"Tput\", \"logPattern\": "
                         "\"tput (\\\\d+)\", \"metricThreshold\": 80, "
                         "\"operator\": \"lteq\"}]",
                .monitored = ALL,
                .steps = { { 3, "tput 90", 0 },
                           { 0, "tput 95", 0 },
                           { 3, "tput 50", 0 } },
                .nsteps = 3,
                .state = LOGMON_SLOW,
                .rule = "Tput",
                .local_rank = 3,
                .line = "tput 50",
                .deadline_ms = UINT64_MAX,
                .seen_ms = 0,
                .latency_ms = 0,
        },
        {
                .name = "a hang a tick finds 250 ms late, on the one rank "
                        "that beat and went quiet",
                .rules = "[{\"name\": \"Beat\", \"logPattern\": \"step\", "
                         "\"expectedRecurringFrequencyInSeconds\": 5}]",
                .monitored = { true, true, false, true },
                .steps = { { 3, "step 1", 0 },
                           { 0, "no beat", 0 },
                           { 0, NULL, 4000 },
                           { 0, NULL, 5251 } },
                .nsteps = 4,
                .state = LOGMON_HANGING,
                .rule = "Beat",
                .local_rank = 3,
                .line = "step 1",
                .deadline_ms = 5001,
                .seen_ms = 5251,
                .latency_ms = 250,
        },
        {
                .name = "a start cut-off with no line yet: the first "
                        "watched rank, no line",
                .rules = "[{\"name\": \"Start\", \"logPattern\": \"ready\", "
                         "\"expectedStartCutOffInSeconds\": 2}]",
                .monitored = { false, true, true, false },
                .steps = { { 0, NULL, 2000 },
                           { 0, NULL, 2001 },
                           { 0, NULL, 9000 } },
                .nsteps = 3,
                .state = LOGMON_HANGING,
                .rule = "Start",
                .local_rank = 1,
                .line = "",
                .deadline_ms = 2001,
                .seen_ms = 2001,
                .latency_ms = 0,
        },
};

static bool check_verdict(const struct fixture *f, const struct watch_case *c,
                          uint64_t t0, char *why, size_t len)
{
        const struct hp_verdict *v = &f->v;
        uint64_t deadline = c->deadline_ms == UINT64_MAX
                                    ? UINT64_MAX
                                    : t0 + c->deadline_ms;
        char reason[HP_VERDICT_REASON_MAX];

        if (f->verdicts != 1)
                snprintf(why, len, "%d verdicts", f->verdicts);
        else if (v->state != c->state || strcmp(v->rule, c->rule) != 0)
                snprintf(why, len, "%s %.100s, expected %s %.100s",
                         logmon_state_name(v->state), v->rule,
                         logmon_state_name(c->state), c->rule);
        else if (v->local_rank != c->local_rank ||
                 v->rank != BASE_RANK + c->local_rank)
                snprintf(why, len, "local rank %d rank %d", v->local_rank,
                         v->rank);
        else if (strcmp(v->line, c->line) != 0)
                snprintf(why, len, "line '%.100s', expected '%.100s'",
                         v->line, c->line);
        else if (v->deadline_ms != deadline ||
                 v->seen_ms != t0 + c->seen_ms ||
                 v->latency_ms != c->latency_ms)
                snprintf(why, len, "deadline %llu seen %llu latency %llu",
                         (unsigned long long)(v->deadline_ms - t0),
                         (unsigned long long)(v->seen_ms - t0),
                         (unsigned long long)v->latency_ms);
        else if (v->wall !=
                 (double)((int64_t)v->seen_ms + WALL_OFFSET_MS) / 1000.0)
                snprintf(why, len, "wall %.3f", v->wall);
        else if (hp_verdict_reason(v, reason, sizeof(reason)) < 0 ||
                 strcmp(reason, f->stream_reason) != 0)
                snprintf(why, len, "reason '%.100s', the engine's '%.100s'",
                         reason, f->stream_reason);
        else if (f->commits != 1)
                snprintf(why, len, "consoles committed %d times", f->commits);
        else
                return true;
        return false;
}

static void test_watch_verdicts(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(watch_cases); i++) {
                const struct watch_case *c = &watch_cases[i];
                struct fixture *f = calloc(1, sizeof(*f));
                char why[512];
                uint64_t t0;

                assert_non_null(f);
                start(f, c->rules, c->monitored);
                t0 = uv_now(&f->loop);
                for (size_t s = 0; s < c->nsteps; s++) {
                        const struct step *st = &c->steps[s];

                        if (st->line != NULL)
                                feed(f, st->rank, st->line);
                        else
                                hp_rulewatch__tick(&f->w, t0 + st->tick_ms);
                }
                if (!check_verdict(f, c, t0, why, sizeof(why)))
                        CASE_FAILED(failures, "%s: %s", c->name, why);
                stop(f);
                free(f);
        }
        assert_int_equal(failures, 0);
}

/* Ranks not watched get no listener; out of range neither. */
static void test_watch_ranks(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));

        (void)state;
        assert_non_null(f);
        start(f, "[{\"name\": \"A\", \"logPattern\": \"a\"}]",
              (bool[NPROC]){ true, false, true, false });
        assert_non_null(hp_rulewatch__rank(&f->w, 0));
        assert_null(hp_rulewatch__rank(&f->w, 1));
        assert_non_null(hp_rulewatch__rank(&f->w, 2));
        assert_null(hp_rulewatch__rank(&f->w, 3));
        assert_null(hp_rulewatch__rank(&f->w, NPROC));
        assert_null(hp_rulewatch__rank(&f->w, -1));
        assert_int_equal(hp_rulewatch__rank(&f->w, 2)->local_rank, 2);
        assert_int_equal(logmon_ruleset_count(hp_rulewatch__ruleset(&f->w)),
                         1);
        /* No rules: nothing is watched. */
        assert_int_equal(hp_rulewatch__use(&f->w, NULL), 0);
        assert_null(hp_rulewatch__rank(&f->w, 0));
        assert_null(hp_rulewatch__ruleset(&f->w));
        stop(f);
        free(f);
}

/* A verdict is once per attempt: after a clear the next attempt's rules
 * judge afresh, and a suspended watch judges nothing. */
static void test_watch_attempts(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        uint64_t t0;

        (void)state;
        assert_non_null(f);
        start(f,
              "[{\"name\": \"Cuda\", \"logPattern\": \"CUDA error\", "
              "\"faultOnMatch\": true}]",
              (bool[NPROC]){ true, true, false, false });
        t0 = uv_now(&f->loop);
        feed(f, 1, "CUDA error: 1");
        feed(f, 0, "CUDA error: 2");
        assert_int_equal(f->verdicts, 1);
        assert_int_equal(f->v.local_rank, 1);

        hp_rulewatch__suspend(&f->w);
        hp_rulewatch__clear(&f->w);
        feed(f, 0, "CUDA error: 3"); /* not running: ignored */
        hp_rulewatch__tick(&f->w, t0 + 1000);
        assert_int_equal(f->verdicts, 1);

        hp_rulewatch__resume(&f->w, 0);
        feed(f, 0, "CUDA error: 4");
        assert_int_equal(f->verdicts, 2);
        assert_int_equal(f->v.local_rank, 0);
        assert_int_equal(f->v.rank, 0);
        assert_string_equal(f->v.line, "CUDA error: 4");
        assert_int_equal(hp_rulewatch__lines_skipped(&f->w), 0);
        stop(f);
        free(f);
}

/* The timer: armed at the earliest deadline, it reads the pipes (the
 * read_now callback) before it judges. A 0 s cut-off is due 1 ms after
 * the start, so the loop runs for about that long. */
static void test_watch_timer(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));

        (void)state;
        assert_non_null(f);
        start(f,
              "[{\"name\": \"Start\", \"logPattern\": \"ready\", "
              "\"expectedStartCutOffInSeconds\": 0}]",
              (bool[NPROC]){ false, false, true, false });
        /* The timer is the only handle that keeps the loop alive; once
         * the rule is HANGING no deadline is left and it stops. */
        assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
        assert_int_equal(f->reads, 1);
        assert_int_equal(f->verdicts, 1);
        assert_int_equal(f->v.state, LOGMON_HANGING);
        assert_int_equal(f->v.local_rank, 2);
        assert_int_equal(f->v.rank, BASE_RANK + 2);
        assert_true(f->v.seen_ms >= f->v.deadline_ms);
        assert_int_equal(f->v.latency_ms, f->v.seen_ms - f->v.deadline_ms);
        stop(f);
        free(f);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_verdict_reason),
                cmocka_unit_test(test_verdict_describe),
                cmocka_unit_test(test_watch_verdicts),
                cmocka_unit_test(test_watch_ranks),
                cmocka_unit_test(test_watch_attempts),
                cmocka_unit_test(test_watch_timer),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
