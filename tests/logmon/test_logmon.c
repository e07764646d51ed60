/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the parts of src/logmon around the engine: rule files
 * (JSON, job.yaml), several streams on one ruleset, replay and --expect.
 * argv[1] is the directory of data files. The engine's behaviour itself
 * is covered by the data-driven cases (test_cases.c). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/logmon.h"

/* LOGMON_MATCH_STREAK, for the test of the guess it drives. */
#include "logmon-private.h"

static const char *data_dir;

static char *data_path(const char *name)
{
        static char path[4096];

        snprintf(path, sizeof(path), "%s/%s", data_dir, name);
        return path;
}

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

/* ---------------------------------------------------------------------
 * Rule files
 */

struct load_case {
        const char *file;
        int result;
        const char *error; /* failure: exact errbuf, after the data dir */
        size_t rules;      /* success: how many */
};

static const struct load_case load_cases[] = {
        { "rules.json", 0, NULL, 2 },
        { "config-object.json", 0, NULL, 1 },
        { "job.yaml", 0, NULL, 4 },
        { "bad.json", HP_ECONFIG, "bad.json:3:50: invalid JSON", 0 },
        { "bad.yaml", HP_ECONFIG,
          "bad.yaml:7:1: found unexpected end of stream while scanning a "
          "quoted scalar",
          0 },
        { "norules.yaml", HP_ECONFIG,
          "norules.yaml: no document has spec.runPolicy."
          "logMonitoringConfiguration",
          0 },
        { "notlist.json", HP_ECONFIG,
          "notlist.json: logMonitoringConfiguration: expected a list of "
          "rules",
          0 },
        { "missing.json", -ENOENT, "missing.json: No such file or directory",
          0 },
};

static void test_config_load(void **state)
{
        size_t i;

        for (i = 0; i < HP_ARRAY_SIZE(load_cases); i++) {
                const struct load_case *c = &load_cases[i];
                cJSON *sentinel = (cJSON *)0xad, *out = sentinel;
                char errbuf[512], want[1024];
                int err;

                err = logmon_config_load(data_path(c->file), &out, errbuf,
                                         sizeof(errbuf));
                if (err != c->result)
                        fail_msg("%s: expected %d, got %d (%s)", c->file,
                                 c->result, err, errbuf);
                if (err != 0) {
                        assert_ptr_equal(out, sentinel);
                        snprintf(want, sizeof(want), "%s/%s", data_dir,
                                 c->error);
                        if (strcmp(errbuf, want) != 0)
                                fail_msg("%s:\n  expected: %s\n  got:      "
                                         "%s",
                                         c->file, want, errbuf);
                        continue;
                }
                assert_true(cJSON_IsArray(out));
                assert_int_equal(cJSON_GetArraySize(out), c->rules);
                cJSON_Delete(out);
        }
}

/* Plain YAML scalars become numbers and booleans, quoted ones strings,
 * as kubectl would send them. */
static void test_config_yaml_types(void **state)
{
        struct logmon_ruleset *rs;
        cJSON *rules, *q;
        char errbuf[512];

        assert_int_equal(logmon_config_load(data_path("job.yaml"), &rules,
                                            errbuf, sizeof(errbuf)),
                         0);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(rules, 0),
                                                "name")
                                    ->valuestring,
                            "JobStart");
        assert_true(cJSON_IsNumber(
                cJSON_GetObjectItem(cJSON_GetArrayItem(rules, 2),
                                    "metricThreshold")));
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(rules, 2),
                                                "logPattern")
                                    ->valuestring,
                            ".*\\[Epoch 0 Batch \\d+.*'samples\\/sec': "
                            "(\\d+(\\.\\d+)?).*");
        q = cJSON_GetArrayItem(rules, 3);
        assert_true(
                cJSON_IsString(cJSON_GetObjectItem(q, "metricThreshold")));
        assert_true(cJSON_IsString(cJSON_GetObjectItem(q, "faultOnMatch")));
        assert_true(cJSON_IsNumber(
                cJSON_GetObjectItem(q,
                                    "expectedRecurringFrequencyInSeconds")));
        assert_true(cJSON_IsNull(cJSON_GetObjectItem(q, "stopPattern")));
        assert_int_equal(logmon_ruleset_new(rules, NULL, &rs, errbuf,
                                            sizeof(errbuf)),
                         0);
        assert_int_equal(logmon_ruleset_count(rs), 4);
        assert_string_equal(logmon_ruleset_warnings(rs), "");
        logmon_ruleset_unref(rs);
        cJSON_Delete(rules);
}

static void test_config_parse_buffer(void **state)
{
        static const struct {
                const char *text;
                int result;
                const char *error;
        } cases[] = {
                { "- name: A\n  logPattern: a\n", 0, NULL },
                { "[{\"name\": \"A\", \"logPattern\": \"a\"}]", 0, NULL },
                { "", HP_ECONFIG, "mem: empty file" },
                { "just a string\n", HP_ECONFIG,
                  "mem: no document has "
                  "spec.runPolicy.logMonitoringConfiguration" },
                { "a: [1, 2\n", HP_ECONFIG,
                  "mem:2:1: did not find expected "
                  "',' or ']' while parsing a flow sequence" },
                { "[1,\n 2,\n x]", HP_ECONFIG, "mem:3:2: invalid JSON" },
                /* Aliases that would expand into billions of nodes. */
                { "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                  "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                  "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                  "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                  "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                  "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
                  HP_ETOOBIG,
                  "mem:6:12: expands to more than 16777216 bytes "
                  "(aliases included)" },
        };
        size_t i;

        for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                cJSON *out = NULL;
                char errbuf[512] = "";
                int err;

                err = logmon_config_parse("mem", cases[i].text,
                                          strlen(cases[i].text), &out, errbuf,
                                          sizeof(errbuf));
                if (err != cases[i].result)
                        fail_msg("case %zu: expected %d, got %d (%s)", i,
                                 cases[i].result, err, errbuf);
                if (err == 0) {
                        assert_int_equal(cJSON_GetArraySize(out), 1);
                        cJSON_Delete(out);
                } else if (strcmp(errbuf, cases[i].error) != 0) {
                        fail_msg("case %zu:\n  expected: %s\n  got:      %s",
                                 i, cases[i].error, errbuf);
                }
        }
}

/* ---- hostile rule files, generated ---- */

struct text {
        char *data;
        size_t len;
        size_t cap;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t,
                                                      const char *fmt, ...)
{
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        assert_true(n >= 0);
        while (t->len + (size_t)n + 1 > t->cap) {
                t->cap = t->cap ? t->cap * 2 : 4096;
                t->data = realloc(t->data, t->cap);
                assert_non_null(t->data);
        }
        va_start(ap, fmt);
        vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        t->len += (size_t)n;
}

static void put_repeat(struct text *t, const char *s, size_t times)
{
        while (times-- > 0)
                put(t, "%s", s);
}

/* One 100 KB string anchored once and aliased 90,000 times: 460 KB of
 * YAML that would expand to 9 GB. */
static void gen_alias_bomb(struct text *t)
{
        put(t, "a: &a \"");
        put_repeat(t, "x", 100000);
        put(t, "\"\nlogMonitoringConfiguration: [");
        put_repeat(t, "*a, ", 90000);
        put(t, "]\n");
}

/* Ten levels of ten aliases each: 10^10 nodes from 700 bytes. */
static void gen_billion_laughs(struct text *t)
{
        put(t,
            "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for (int i = 1; i < 10; i++) {
                put(t, "l%d: &l%d [", i, i);
                for (int j = 0; j < 10; j++)
                        put(t, "*l%d%s", i - 1, j < 9 ? ", " : "]\n");
        }
}

static void gen_yaml_flow_deep(struct text *t)
{
        put(t, "logMonitoringConfiguration: ");
        put_repeat(t, "[", 20000);
}

static void gen_json_deep(struct text *t)
{
        put_repeat(t, "[", 20000);
        put_repeat(t, "]", 20000);
}

/* Block style, one key per level. */
static void gen_yaml_block_deep(struct text *t)
{
        for (int i = 0; i < 200; i++) {
                put(t, "%*s", i, "");
                put(t, "k:\n");
        }
}

/* A shallow anchor aliased where the nesting is already deep. */
static void gen_alias_deep(struct text *t)
{
        put(t, "a: &a ");
        put_repeat(t, "[", 40);
        put_repeat(t, "]", 40);
        put(t, "\nb: ");
        put_repeat(t, "[", 30);
        put(t, "*a");
        put_repeat(t, "]", 30);
        put(t, "\n");
}

static void gen_oversize(struct text *t)
{
        put(t, "# ");
        put_repeat(t, "0123456789abcdef", 65536);
        put(t, "\n");
}

static void gen_many_anchors(struct text *t)
{
        for (int i = 0; i <= 1024; i++)
                put(t, "- &a%d x\n", i);
}

static void gen_self_alias(struct text *t)
{
        put(t, "a: &a [x, *a]\n");
}

static void gen_complex_key(struct text *t)
{
        put(t, "? [a, b]\n: c\n");
}

struct hostile_case {
        const char *what;
        void (*gen)(struct text *t);
        int result;
        const char *error; /* the whole message */
};

static const struct hostile_case hostile_cases[] = {
        { "alias bomb", gen_alias_bomb, HP_ETOOBIG,
          "mem:2:694: expands to more than 16777216 bytes (aliases "
          "included)" },
        { "billion laughs", gen_billion_laughs, HP_ETOOBIG,
          "mem:6:15: expands to more than 16777216 bytes (aliases "
          "included)" },
        { "20,000 nested [ in YAML", gen_yaml_flow_deep, HP_ETOOBIG,
          "mem:1:92: nested deeper than 64 levels" },
        { "20,000 nested [ in JSON", gen_json_deep, HP_ETOOBIG,
          "mem:1:65: nested deeper than 64 levels" },
        { "200 nested block mappings", gen_yaml_block_deep, HP_ETOOBIG,
          "mem:65:65: nested deeper than 64 levels" },
        { "an alias too deep where it is used", gen_alias_deep, HP_ETOOBIG,
          "mem:2:34: nested deeper than 64 levels" },
        { "over the byte limit", gen_oversize, HP_ETOOBIG,
          "mem: larger than 1048576 bytes" },
        { "1025 anchors", gen_many_anchors, HP_ETOOBIG,
          "mem:1025:3: more than 1024 anchors" },
        { "an alias to its own node", gen_self_alias, HP_ECONFIG,
          "mem:1:11: alias *a has no anchor before it" },
        { "a list as a key", gen_complex_key, HP_ECONFIG,
          "mem:1:3: a mapping key must be a scalar" },
};

static long max_rss_kib(void)
{
        struct rusage ru;

        assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
        return ru.ru_maxrss;
}

/* Each hostile file is refused with the limit it broke, before the memory
 * it asks for is spent: the peak RSS grows by far less than the 9 GB the
 * alias bomb would take. */
static void test_config_hostile(void **state)
{
        size_t i;

        for (i = 0; i < HP_ARRAY_SIZE(hostile_cases); i++) {
                const struct hostile_case *c = &hostile_cases[i];
                struct text t = { 0 };
                cJSON *out = NULL;
                char errbuf[512] = "";
                long rss = max_rss_kib();
                int err;

                c->gen(&t);
                err = logmon_config_parse("mem", t.data, t.len, &out, errbuf,
                                          sizeof(errbuf));
                free(t.data);
                if (err != c->result)
                        fail_msg("%s: expected %d, got %d (%s)", c->what,
                                 c->result, err, errbuf);
                assert_null(out);
                if (strcmp(errbuf, c->error) != 0)
                        fail_msg("%s:\n  expected: %s\n  got:      %s",
                                 c->what, c->error, errbuf);
                if (max_rss_kib() - rss > 256 * 1024)
                        fail_msg("%s: the peak RSS grew by %ld KiB", c->what,
                                 max_rss_kib() - rss);
        }
}

/* Anchors and aliases that stay within the limits work as YAML says,
 * keys included; the limits are inclusive. */
static void test_config_aliases_within_limits(void **state)
{
        static const char yaml[] = "x-rule: &rule {name: A, logPattern: a}\n"
                                   "x-key: &key name\n"
                                   "logMonitoringConfiguration:\n"
                                   "  - *rule\n"
                                   "  - {*key : B, logPattern: !!str 80}\n";
        struct text deep = { 0 };
        cJSON *out = NULL;
        char errbuf[512] = "";

        assert_int_equal(logmon_config_parse("mem", yaml, strlen(yaml), &out,
                                             errbuf, sizeof(errbuf)),
                         0);
        assert_int_equal(cJSON_GetArraySize(out), 2);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 0),
                                                "name")
                                    ->valuestring,
                            "A");
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 1),
                                                "name")
                                    ->valuestring,
                            "B");
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 1),
                                                "logPattern")
                                    ->valuestring,
                            "80");
        cJSON_Delete(out);

        /* 64 levels: the object, its list, and 62 lists inside. */
        put(&deep, "logMonitoringConfiguration: [");
        put_repeat(&deep, "[", 62);
        put_repeat(&deep, "]", 62);
        put(&deep, "]\n");
        out = NULL;
        assert_int_equal(logmon_config_parse("mem", deep.data, deep.len, &out,
                                             errbuf, sizeof(errbuf)),
                         0);
        cJSON_Delete(out);
        free(deep.data);
}

/* The byte limit holds for files, and the message names the file. */
static void test_config_file_too_large(void **state)
{
        char path[] = "/tmp/hyperpodrun-rules-XXXXXX";
        struct text t = { 0 };
        cJSON *out = NULL;
        char errbuf[512], want[600];
        int fd = mkstemp(path);

        assert_true(fd >= 0);
        gen_oversize(&t);
        assert_int_equal(write(fd, t.data, t.len), (ssize_t)t.len);
        close(fd);
        free(t.data);
        assert_int_equal(logmon_config_load(path, &out, errbuf,
                                            sizeof(errbuf)),
                         HP_ETOOBIG);
        assert_null(out);
        snprintf(want, sizeof(want), "%s: larger than 1048576 bytes", path);
        assert_string_equal(errbuf, want);
        unlink(path);
}

static void test_config_load_ruleset(void **state)
{
        struct logmon_ruleset *rs = NULL;
        char errbuf[512], want[1024];

        assert_int_equal(logmon_config_load_ruleset(data_path("job.yaml"),
                                                    NULL, &rs, errbuf,
                                                    sizeof(errbuf)),
                         0);
        assert_int_equal(logmon_ruleset_find(rs, "LowThroughputDetection"),
                         2);
        logmon_ruleset_unref(rs);

        rs = NULL;
        assert_int_equal(logmon_config_load_ruleset(data_path("badrule.yaml"),
                                                    NULL, &rs, errbuf,
                                                    sizeof(errbuf)),
                         HP_ECONFIG);
        assert_null(rs);
        snprintf(want, sizeof(want),
                 "%s/badrule.yaml: rule 0 (JobStart): "
                 "logPattern: missing closing parenthesis at offset 29 in "
                 "\".*(Experiment configuration.*\"",
                 data_dir);
        assert_string_equal(errbuf, want);
}

/* ---------------------------------------------------------------------
 * Streams
 */

static void test_streams_share_rules(void **state)
{
        struct logmon_ruleset *rs = ruleset(
                "[{\"name\": \"Beat\", \"logPattern\": \"beat\","
                "  \"expectedRecurringFrequencyInSeconds\": 1}]");
        struct logmon_stream *a = logmon_stream_new(rs);
        struct logmon_stream *b = logmon_stream_new(rs);
        struct logmon_events ev;
        struct logmon_rule_info info;

        /* The streams hold their own references. */
        logmon_ruleset_unref(rs);
        assert_non_null(a);
        assert_non_null(b);
        logmon_stream_start(a, 0);
        logmon_stream_start(b, 0);
        logmon_stream_feed(a, "beat", 4, 10, &ev);
        assert_int_equal(ev.n, 1);
        assert_true(ev.stream_changed);
        assert_int_equal(ev.stream_from, LOGMON_WAITING);
        assert_int_equal(ev.stream_to, LOGMON_HEALTHY);
        logmon_stream_feed(b, "beat", 4, 500, &ev);
        assert_int_equal(logmon_stream_next_deadline(a), 1011);
        assert_int_equal(logmon_stream_next_deadline(b), 1501);
        logmon_stream_tick(a, 1011, &ev);
        logmon_stream_tick(b, 1011, NULL);
        assert_int_equal(logmon_stream_state(a), LOGMON_HANGING);
        assert_string_equal(logmon_stream_reason(a), "LogHang_Beat");
        assert_int_equal(logmon_stream_reason_rule(a), 0);
        assert_int_equal(logmon_stream_state(b), LOGMON_HEALTHY);
        assert_string_equal(logmon_stream_reason(b), "");
        assert_int_equal(logmon_stream_reason_rule(b), -1);

        assert_int_equal(logmon_stream_rule_info(b, 0, &info), 0);
        assert_int_equal(info.matches, 1);
        assert_int_equal(info.last_line_len, 4);
        assert_memory_equal(info.last_line, "beat", 4);
        assert_int_equal(logmon_stream_rule_info(b, 1, &info), -EINVAL);

        logmon_stream_suspend(b, 2000);
        assert_false(logmon_stream_running(b));
        logmon_stream_feed(b, "beat", 4, 2100, &ev);
        assert_int_equal(ev.n, 0);
        assert_int_equal(logmon_stream_lines_ignored(b), 1);
        assert_int_equal(logmon_stream_next_deadline(b), UINT64_MAX);
        logmon_stream_free(a);
        logmon_stream_free(b);
}

/* Streams of one rule set on two threads at once, as the agent's rule
 * threads run them: each must read its own lines' numbers. With one JIT
 * stack for the set, the two threads' matches shared their frames and a
 * capture could come back from the other thread's line. */
struct flood {
        struct logmon_stream *s;
        const char *rate;
        enum logmon_state want;
        long wrong;
};

static void *flood_main(void *arg)
{
        struct flood *f = arg;
        char line[160];
        int len;

        for (long i = 0; i < 200000; i++) {
                len = snprintf(line, sizeof(line),
                               "[Epoch 0 Batch %ld] {'training_loss_step': "
                               "1.5, 'samples/sec': %s, 'lr': 0.0003}",
                               i, f->rate);
                logmon_stream_feed(f->s, line, (size_t)len, 1, NULL);
                if (logmon_stream_state(f->s) != f->want)
                        f->wrong++;
        }
        return NULL;
}

static void test_streams_on_two_threads(void **state)
{
        struct logmon_ruleset *rs = ruleset(
                "[{\"name\": \"Tput\", \"logPattern\": "
                "\".*\\\\[Epoch 0 Batch \\\\d+.*'samples\\\\/sec': "
                "(\\\\d+(\\\\.\\\\d+)?).*\", \"metricThreshold\": 80, "
                "\"operator\": \"lteq\", \"metricEvaluationDataPoints\": 1}]");
        struct flood f[2] = {
                { .rate = "120", .want = LOGMON_HEALTHY },
                { .rate = "7.25", .want = LOGMON_SLOW },
        };
        pthread_t t[2];
        int i;

        (void)state;
        for (i = 0; i < 2; i++) {
                f[i].s = logmon_stream_new(rs);
                assert_non_null(f[i].s);
                logmon_stream_start(f[i].s, 0);
        }
        for (i = 0; i < 2; i++)
                assert_int_equal(pthread_create(&t[i], NULL, flood_main,
                                                &f[i]),
                                 0);
        for (i = 0; i < 2; i++)
                assert_int_equal(pthread_join(t[i], NULL), 0);
        for (i = 0; i < 2; i++) {
                assert_int_equal(f[i].wrong, 0);
                logmon_stream_free(f[i].s);
        }
        logmon_ruleset_unref(rs);
}

/* The last matched line is copied, capped at LOGMON_LAST_LINE_MAX. */
static void test_last_line_capped(void **state)
{
        struct logmon_ruleset *rs = ruleset(
                "[{\"name\": \"X\", \"logPattern\": \"x\"}]");
        struct logmon_stream *s = logmon_stream_new(rs);
        struct logmon_rule_info info;
        static char line[3 * LOGMON_LAST_LINE_MAX];

        memset(line, 'x', sizeof(line));
        logmon_stream_start(s, 0);
        logmon_stream_feed(s, line, sizeof(line), 1, NULL);
        logmon_stream_rule_info(s, 0, &info);
        assert_int_equal(info.last_line_len, LOGMON_LAST_LINE_MAX);
        assert_true(info.last_line_capped);
        logmon_stream_free(s);
        logmon_ruleset_unref(rs);
}

/* After a run of matches a rule stops looking for its literal before
 * the pattern runs (LOGMON_MATCH_STREAK), but looks for it before it
 * counts a limit: a line without the literal is a plain "no", whatever
 * came before it. The long line makes the pattern hit a low match limit
 * when it runs (a limit hit here without that search); a stream that
 * sees it first never runs it. */
static void test_limit_after_a_run_of_matches(void **state)
{
        static const struct logmon_ruleset_opts opts = { .match_limit = 30 };
        cJSON *rules = cJSON_Parse(
                "[{\"name\": \"R\", \"logPattern\": \".*(a+)+cd.*\"}]");
        struct logmon_ruleset *rs = NULL;
        struct logmon_stream *after_run, *alone;
        struct logmon_rule_info info;
        char errbuf[256], line[160];
        int i;

        assert_non_null(rules);
        assert_int_equal(logmon_ruleset_new(rules, &opts, &rs, errbuf,
                                            sizeof(errbuf)),
                         0);
        cJSON_Delete(rules);
        /* "cd" nowhere, though both letters occur: the nested "+" tries
         * every way to split the a's before it gives up. */
        for (i = 0; i < 60; i++)
                memcpy(line + 2 * i, "aa", 2);
        memcpy(line + 120, " d c", 4);
        after_run = logmon_stream_new(rs);
        alone = logmon_stream_new(rs);
        logmon_stream_start(after_run, 0);
        logmon_stream_start(alone, 0);
        for (i = 0; i < 2 * LOGMON_MATCH_STREAK; i++)
                logmon_stream_feed(after_run, "aacd", 4, 1, NULL);
        logmon_stream_feed(after_run, line, 124, 2, NULL);
        logmon_stream_feed(alone, line, 124, 2, NULL);

        logmon_stream_rule_info(after_run, 0, &info);
        assert_int_equal(info.matches, 2 * LOGMON_MATCH_STREAK);
        assert_int_equal(info.limit_hits, 0);
        logmon_stream_rule_info(alone, 0, &info);
        assert_int_equal(info.matches, 0);
        assert_int_equal(info.limit_hits, 0);
        logmon_stream_free(after_run);
        logmon_stream_free(alone);
        logmon_ruleset_unref(rs);
}

static void test_state_names(void **state)
{
        static const enum logmon_state all[] = {
                LOGMON_WAITING, LOGMON_HEALTHY, LOGMON_SLOW,
                LOGMON_HANGING, LOGMON_FAULTED,
        };
        enum logmon_state parsed;
        size_t i, j;

        for (i = 0; i < HP_ARRAY_SIZE(all); i++) {
                assert_int_equal(logmon_state_parse(logmon_state_name(all[i]),
                                                    &parsed),
                                 0);
                assert_int_equal(parsed, all[i]);
                for (j = 0; j < HP_ARRAY_SIZE(all); j++) {
                        bool want = i != j && all[i] != LOGMON_FAULTED &&
                                    all[j] != LOGMON_WAITING;

                        assert_int_equal(logmon_state_transition_allowed(
                                                 all[i], all[j]),
                                         want);
                }
        }
        assert_string_equal(logmon_state_name((enum logmon_state)99), "?");
        assert_int_equal(logmon_state_parse("healthy", &parsed), HP_ECONFIG);
}

/* On failure nothing is handed out. */
static void test_ruleset_untouched_on_failure(void **state)
{
        struct logmon_ruleset *sentinel = (struct logmon_ruleset *)0xad;
        struct logmon_ruleset *rs = sentinel;
        cJSON *rules = cJSON_Parse(
                "[{\"name\": \"A\", \"logPattern\": \"a\"},"
                " {\"name\": \"B\", \"logPattern\": \"(\"}]");
        char errbuf[256];

        assert_int_equal(logmon_ruleset_new(rules, NULL, &rs, errbuf,
                                            sizeof(errbuf)),
                         HP_ECONFIG);
        assert_ptr_equal(rs, sentinel);
        /* A short errbuf is cut, never overrun. */
        memset(errbuf, 0xad, sizeof(errbuf));
        assert_int_equal(logmon_ruleset_new(rules, NULL, &rs, errbuf, 8),
                         HP_ECONFIG);
        assert_string_equal(errbuf, "rule 1 ");
        assert_int_equal((unsigned char)errbuf[8], 0xad);
        cJSON_Delete(rules);
}

/* ---------------------------------------------------------------------
 * Replay and --expect
 */

static const char replay_rules[] =
        "[{\"name\": \"Start\", \"logPattern\": \".*Experiment config.*\","
        "  \"expectedStartCutOffInSeconds\": 60},"
        " {\"name\": \"Beat\", \"logPattern\": \".*loss (\\\\S+)\","
        "  \"expectedRecurringFrequencyInSeconds\": 30,"
        "  \"metricThreshold\": 5, \"operator\": \"gt\"}]";

struct replay_out {
        char *text;
        size_t len;
        struct logmon_replay *r;
};

static void run_replay(const char *rules, const char *log,
                       const struct logmon_replay_opts *opts,
                       struct replay_out *out)
{
        struct logmon_ruleset *rs = ruleset(rules);
        FILE *f = open_memstream(&out->text, &out->len);

        assert_non_null(f);
        assert_int_equal(logmon_replay_buffer(rs, log, strlen(log), opts, f,
                                              &out->r),
                         0);
        fclose(f);
        logmon_ruleset_unref(rs);
}

/* Every output line is one JSON object; returns the n-th (from 0). */
static cJSON *output_line(const struct replay_out *o, int n)
{
        const char *p = o->text;
        cJSON *json;
        int i;

        for (i = 0; i < n; i++) {
                p = strchr(p, '\n');
                assert_non_null(p);
                p++;
        }
        json = cJSON_ParseWithOpts(p, NULL, false);
        assert_non_null(json);
        return json;
}

static size_t output_lines(const struct replay_out *o)
{
        size_t n = 0;
        const char *p;

        for (p = o->text; *p; p++)
                n += *p == '\n';
        return n;
}

static void test_replay_asctime(void **state)
{
        static const char log[] =
                "2025-06-17 05:51:00,000 INFO booting\n"
                "2025-06-17 05:51:29,300 INFO Experiment config: x\r\n"
                "2025-06-17 05:51:30,000 INFO loss 1.5\n"
                "  a traceback line without a timestamp\n"
                "2025-06-17 05:52:10,500 INFO loss 7\r"
                "2025-06-17 05:52:11,000 INFO loss \xff\n";
        struct replay_out o = { 0 };
        cJSON *j;

        run_replay(replay_rules, log, NULL, &o);
        /* Start healthy, Beat healthy, its value 1.5, Beat hanging at
         * 30 s + 30.001 s, Beat slow, its value 7, Beat nonnumeric,
         * summary. */
        assert_int_equal(output_lines(&o), 8);
        j = output_line(&o, 0);
        assert_string_equal(cJSON_GetObjectItem(j, "rule")->valuestring,
                            "Start");
        assert_string_equal(cJSON_GetObjectItem(j, "state")->valuestring,
                            "HEALTHY");
        assert_string_equal(cJSON_GetObjectItem(j, "from")->valuestring,
                            "WAITING");
        assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "stream")));
        assert_int_equal(cJSON_GetObjectItem(j, "line_no")->valueint, 2);
        assert_float_equal(cJSON_GetObjectItem(j, "time")->valuedouble, 29.3,
                           1e-9);
        cJSON_Delete(j);
        j = output_line(&o, 2);
        assert_string_equal(cJSON_GetObjectItem(j, "event")->valuestring,
                            "value");
        assert_float_equal(cJSON_GetObjectItem(j, "value")->valuedouble, 1.5,
                           1e-12);
        cJSON_Delete(j);
        j = output_line(&o, 3);
        assert_string_equal(cJSON_GetObjectItem(j, "state")->valuestring,
                            "HANGING");
        assert_float_equal(cJSON_GetObjectItem(j, "time")->valuedouble,
                           60.001, 1e-9);
        assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "line_no")));
        cJSON_Delete(j);
        j = output_line(&o, 4);
        assert_string_equal(cJSON_GetObjectItem(j, "state")->valuestring,
                            "SLOW");
        assert_int_equal(cJSON_GetObjectItem(j, "line_no")->valueint, 5);
        cJSON_Delete(j);
        j = output_line(&o, 6);
        assert_string_equal(cJSON_GetObjectItem(j, "event")->valuestring,
                            "nonnumeric");
        /* Invalid UTF-8 comes out as U+FFFD: the output is valid JSON. */
        assert_string_equal(cJSON_GetObjectItem(j, "line")->valuestring,
                            "2025-06-17 05:52:11,000 INFO loss \xef\xbf\xbd");
        cJSON_Delete(j);
        j = output_line(&o, 7);
        assert_string_equal(
                cJSON_GetObjectItem(cJSON_GetObjectItem(j, "summary"),
                                    "state")
                        ->valuestring,
                "SLOW");
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j,
                                                                 "summary"),
                                             "lines")
                                 ->valueint,
                         6);
        cJSON_Delete(j);
        assert_int_equal(logmon_replay_state(o.r), LOGMON_SLOW);
        logmon_replay_free(o.r);
        free(o.text);
}

/* Timestamps in the forms the replay recognises all give the same time
 * differences. */
static void test_replay_timestamp_forms(void **state)
{
        static const char *const logs[] = {
                "2025-06-17T05:51:00Z go\n2025-06-17T05:51:45.5Z x\n",
                "2025-06-17T07:51:00+02:00 go\n2025-06-17T05:51:45,5Z x\n",
                "[2025-06-17 05:51:00] go\n[2025-06-17 05:51:45.500] x\n",
                "1750139460 go\n1750139505.5 x\n",
                "[default0]:1750139460.000 go\n[default0]:1750139505.500 x\n",
        };
        static const char rules[] =
                "[{\"name\": \"S\", \"logPattern\": \"never\","
                "  \"expectedStartCutOffInSeconds\": 45}]";
        size_t i;

        for (i = 0; i < HP_ARRAY_SIZE(logs); i++) {
                struct replay_out o = { 0 };
                cJSON *j;

                run_replay(rules, logs[i], NULL, &o);
                assert_int_equal(output_lines(&o), 2);
                j = output_line(&o, 0);
                if (cJSON_GetObjectItem(j, "time")->valuedouble != 45.001)
                        fail_msg("log %zu: %s", i, o.text);
                cJSON_Delete(j);
                logmon_replay_free(o.r);
                free(o.text);
        }
}

static void test_replay_rate_and_streams(void **state)
{
        static const char log[] = "[default0]:Experiment config\n"
                                  "[default1]:nothing\n"
                                  "[default0]:loss 9\n"
                                  "[default1]:loss 1\n";
        struct logmon_replay_opts opts = { .rate = 2, .tail_ms = 60000 };
        struct replay_out o = { 0 };
        char errbuf[256];
        cJSON *expect, *j;
        char *diff = NULL;
        size_t dlen;
        FILE *f;

        run_replay(replay_rules, log, &opts, &o);
        j = output_line(&o, 0);
        assert_string_equal(cJSON_GetObjectItem(j, "stream")->valuestring,
                            "default0");
        assert_string_equal(cJSON_GetObjectItem(j, "line")->valuestring,
                            "Experiment config");
        cJSON_Delete(j);

        /* default1 never started the job: its cut-off runs out at 60 s.
         * Both go HANGING on Beat 30 s after their last loss line. */
        expect = cJSON_Parse(
                "{\"final\": {\"Start\": \"HEALTHY\", \"Beat\": \"HANGING\"},"
                " \"stream\": \"default0\", \"state\": \"HANGING\","
                " \"transitions\": ["
                "  {\"rule\": \"Start\", \"state\": \"HEALTHY\", \"line_n"
                "o\": 1,"
                "   \"time\": 0},"
                "  {\"rule\": \"Beat\", \"state\": \"SLOW\", \"line_no\": 3,"
                "   \"time\": 1.0, \"stream\": \"default0\"},"
                "  {\"rule\": \"Beat\", \"state\": \"HANGING\","
                "   \"line_no\": null, \"time\": 31.001}]}");
        assert_int_equal(logmon_expect_check(o.r, expect, NULL, errbuf,
                                             sizeof(errbuf)),
                         0);
        cJSON_Delete(expect);

        /* Wrong on purpose: a readable diff, one difference per item. */
        expect = cJSON_Parse(
                "{\"final\": {\"Start\": \"HEALTHY\"},"
                " \"transitions\": ["
                "  {\"rule\": \"Start\", \"state\": \"HEALTHY\"},"
                "  {\"rule\": \"Beat\", \"state\": \"HEALTHY\"}]}");
        f = open_memstream(&diff, &dlen);
        /* Aligned as diff does: Beat's HEALTHY on default1 is the
         * expected second transition, the others are extra. */
        assert_int_equal(logmon_expect_check(o.r, expect, f, errbuf,
                                             sizeof(errbuf)),
                         5);
        fclose(f);
        assert_string_equal(
                diff,
                "final state of rule Start on default1: expected HEALTHY, "
                "got HANGING\n"
                "transitions (- expected, + got):\n"
                "+ got #2:      Beat WAITING -> SLOW on default0 at t=1.000 "
                "(line 3)\n"
                "+ got #4:      Beat SLOW -> HANGING on default0 at "
                "t=31.001 (deadline)\n"
                "+ got #5:      Beat HEALTHY -> HANGING on default1 at "
                "t=31.501 (deadline)\n"
                "+ got #6:      Start WAITING -> HANGING on default1 at "
                "t=60.001 (deadline)\n");
        free(diff);
        cJSON_Delete(expect);
        logmon_replay_free(o.r);
        free(o.text);
}

static void test_expect_malformed(void **state)
{
        static const struct {
                const char *json;
                const char *error;
        } cases[] = {
                { "[]", "expect: expected a JSON object" },
                { "{\"finale\": {}}", "expect: unknown key \"finale\"" },
                { "{\"final\": {\"Nope\": \"HEALTHY\"}}",
                  "expect: final: no rule named \"Nope\"" },
                { "{\"final\": {\"Start\": \"OK\"}}",
                  "expect: final: Start: expected a state name" },
                { "{\"state\": 3}", "expect: state: expected a state name" },
                { "{\"stream\": 3}", "expect: stream: expected a string" },
                { "{\"transitions\": {}}",
                  "expect: transitions: expected a list" },
                { "{\"transitions\": [{\"rule\": \"Start\"}]}",
                  "expect: transitions[0]: expected {\"rule\": NAME, "
                  "\"state\": STATE, ...}" },
                { "{\"transitions\": [{\"rule\": \"X\", \"state\": "
                  "\"SLOW\"}]}",
                  "expect: transitions[0]: no rule named \"X\"" },
                { "{\"transitions\": [{\"rule\": \"Start\", \"state\": "
                  "\"SLOW\", \"time\": \"1\"}]}",
                  "expect: transitions[0]: line_no and time are numbers, "
                  "stream a string" },
        };
        struct replay_out o = { 0 };
        size_t i;

        run_replay(replay_rules, "", NULL, &o);
        for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                cJSON *expect = cJSON_Parse(cases[i].json);
                char errbuf[256] = "";

                assert_non_null(expect);
                assert_int_equal(logmon_expect_check(o.r, expect, NULL,
                                                     errbuf, sizeof(errbuf)),
                                 HP_ECONFIG);
                assert_string_equal(errbuf, cases[i].error);
                cJSON_Delete(expect);
        }
        logmon_replay_free(o.r);
        free(o.text);
}

/* An empty log still has a stream, on which a start cut-off expires when
 * the clock runs on past the end. */
static void test_replay_empty_with_tail(void **state)
{
        struct logmon_replay_opts opts = { .tail_ms = 61000 };
        struct replay_out o = { 0 };
        cJSON *expect;
        char errbuf[256];

        run_replay(replay_rules, "", &opts, &o);
        assert_int_equal(logmon_replay_state(o.r), LOGMON_HANGING);
        expect = cJSON_Parse("{\"final\": {\"Start\": \"HANGING\","
                             " \"Beat\": \"WAITING\"}, \"transitions\": "
                             "[{\"rule\": \"Start\", \"state\": \"HANGING\","
                             "  \"time\": 60.001, \"stream\": null}]}");
        assert_int_equal(logmon_expect_check(o.r, expect, NULL, errbuf,
                                             sizeof(errbuf)),
                         0);
        cJSON_Delete(expect);
        logmon_replay_free(o.r);
        free(o.text);
}

static void test_replay_file(void **state)
{
        struct logmon_ruleset *rs = ruleset(replay_rules);
        struct logmon_replay *r = NULL;
        cJSON *expect;
        char errbuf[256];
        FILE *in = tmpfile();
        int i;

        assert_non_null(in);
        /* More than one read chunk, and a final line with no newline. */
        for (i = 0; i < 20000; i++)
                fprintf(in, "%d INFO loss %d\n", 1750000000 + i, i % 3);
        fputs("1750020000 INFO Experiment config", in);
        rewind(in);
        assert_int_equal(logmon_replay_run(rs, in, NULL, NULL, &r), 0);
        fclose(in);
        expect = cJSON_Parse("{\"final\": {\"Start\": \"HEALTHY\","
                             " \"Beat\": \"HEALTHY\"}, \"transitions\": ["
                             " {\"rule\": \"Beat\", \"state\": \"HEALTHY\","
                             "  \"line_no\": 1},"
                             " {\"rule\": \"Start\", \"state\": \"HANGING\","
                             "  \"time\": 60.001},"
                             " {\"rule\": \"Start\", \"state\": \"HEALTHY\","
                             "  \"line_no\": 20001, \"time\": 20000}]}");
        assert_int_equal(logmon_expect_check(r, expect, stderr, errbuf,
                                             sizeof(errbuf)),
                         0);
        cJSON_Delete(expect);
        logmon_replay_free(r);
        logmon_ruleset_unref(rs);
}

int main(int argc, char **argv)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_config_load),
                cmocka_unit_test(test_config_yaml_types),
                cmocka_unit_test(test_config_parse_buffer),
                cmocka_unit_test(test_config_hostile),
                cmocka_unit_test(test_config_aliases_within_limits),
                cmocka_unit_test(test_config_file_too_large),
                cmocka_unit_test(test_config_load_ruleset),
                cmocka_unit_test(test_streams_share_rules),
                cmocka_unit_test(test_streams_on_two_threads),
                cmocka_unit_test(test_last_line_capped),
                cmocka_unit_test(test_limit_after_a_run_of_matches),
                cmocka_unit_test(test_state_names),
                cmocka_unit_test(test_ruleset_untouched_on_failure),
                cmocka_unit_test(test_replay_asctime),
                cmocka_unit_test(test_replay_timestamp_forms),
                cmocka_unit_test(test_replay_rate_and_streams),
                cmocka_unit_test(test_expect_malformed),
                cmocka_unit_test(test_replay_empty_with_tail),
                cmocka_unit_test(test_replay_file),
        };

        if (argc != 2) {
                fprintf(stderr, "usage: %s DATA-DIRECTORY\n", argv[0]);
                return 2;
        }
        data_dir = argv[1];
        return cmocka_run_group_tests(tests, NULL, NULL);
}
