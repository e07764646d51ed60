/* SPDX-License-Identifier: Apache-2.0 */
/* The rule examples users copy (examples/rules, argv[1]) are kept true:
 * rules.json and job.yaml give the same six rules, and each rule's
 * directory holds a one-rule file identical to its entry in rules.json,
 * a healthy and a failing sample log, and an expectation for each. Every
 * sample is replayed (with JIT and with the interpreter) against its own
 * rule and must meet its expectation exactly; the failing sample must
 * not meet the healthy expectation, nor the healthy sample the failing
 * one. Each sample is also replayed against all six rules: a rule's
 * state does not depend on the other rules, so its final state must be
 * the same there. examples/rules/README.md describes the layout. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/logmon.h"

/* The seed rules of the AWS documentation, in configuration order. */
#define SEED_RULES(X)                                                        \
        X(JobStart)                                                          \
        X(JobHangingDetection)                                               \
        X(NoS3CheckpointingDetection)                                        \
        X(LowThroughputDetection)                                            \
        X(LossSpikeDetection)                                                \
        X(TFLOPs)

#define RULE_NAME(name) #name,
static const char *const rule_names[] = { SEED_RULES(RULE_NAME) };

static const char *examples_dir;

static const char *path_of(const char *a, const char *b)
{
        static char path[4096];

        if (b == NULL)
                snprintf(path, sizeof(path), "%s/%s", examples_dir, a);
        else
                snprintf(path, sizeof(path), "%s/%s/%s", examples_dir, a, b);
        return path;
}

static cJSON *load_rules(const char *path)
{
        cJSON *rules = NULL;
        char errbuf[512];

        if (logmon_config_load(path, &rules, errbuf, sizeof(errbuf)) != 0)
                fail_msg("%s", errbuf);
        return rules;
}

static struct logmon_ruleset *compile(const cJSON *rules, bool no_jit,
                                      const char *what)
{
        struct logmon_ruleset_opts opts = { .no_jit = no_jit };
        struct logmon_ruleset *rs = NULL;
        char errbuf[512];

        if (logmon_ruleset_new(rules, &opts, &rs, errbuf, sizeof(errbuf)))
                fail_msg("%s: %s", what, errbuf);
        /* The examples are meant to be copied: no doubtful field. */
        if (strcmp(logmon_ruleset_warnings(rs), "") != 0)
                fail_msg("%s: warnings: %s", what,
                         logmon_ruleset_warnings(rs));
        return rs;
}

static cJSON *load_expect(const char *rule, const char *file)
{
        cJSON *expect = NULL;
        char errbuf[512];

        if (logmon_expect_load(path_of(rule, file), &expect, errbuf,
                               sizeof(errbuf)) != 0)
                fail_msg("%s", errbuf);
        return expect;
}

/* Replays one sample log from its file, with the defaults a user gets:
 * time from the asctime stamps, no tail after the last line. */
static struct logmon_replay *replay(struct logmon_ruleset *rs,
                                    const char *rule, const char *file)
{
        struct logmon_replay *r = NULL;
        const char *path = path_of(rule, file);
        FILE *in = fopen(path, "r");
        int err;

        if (in == NULL)
                fail_msg("%s: %s", path, strerror(errno));
        err = logmon_replay_run(rs, in, NULL, NULL, &r);
        fclose(in);
        if (err != 0)
                fail_msg("%s: replay: %s", path, strerror(-err));
        return r;
}

/* The number of differences; a malformed expectation fails the test. */
static int differences(const struct logmon_replay *r, const cJSON *expect,
                       const char *what, bool show)
{
        char errbuf[512];
        int n;

        if (show)
                fprintf(stderr, "%s:\n", what);
        n = logmon_expect_check(r, expect, show ? stderr : NULL, errbuf,
                                sizeof(errbuf));
        if (n < 0)
                fail_msg("%s: %s", what, errbuf);
        return n;
}

static void expect_met(const struct logmon_replay *r, const cJSON *expect,
                       const char *what)
{
        if (differences(r, expect, what, false) != 0) {
                differences(r, expect, what, true);
                fail_msg("%s: expectation not met (differences above)", what);
        }
}

static void expect_not_met(const struct logmon_replay *r, const cJSON *expect,
                           const char *what)
{
        if (differences(r, expect, what, false) == 0)
                fail_msg("%s: met an expectation it must not meet", what);
}

/* The rule's expected final state in an expectation file. */
static enum logmon_state final_state(const cJSON *expect, const char *rule,
                                     const char *what)
{
        const cJSON *final = cJSON_GetObjectItemCaseSensitive(expect,
                                                              "final");
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(final, rule);
        enum logmon_state state = LOGMON_WAITING;

        if (!cJSON_IsString(item) ||
            logmon_state_parse(item->valuestring, &state) != 0)
                fail_msg("%s: no final state for rule %s", what, rule);
        return state;
}

/* ---------------------------------------------------------------------
 * The rule files
 */

/* rules.json and job.yaml hold the same six rules, field for field (a
 * plain YAML scalar is a number, as kubectl would send it). */
static void test_rule_files_agree(void **state)
{
        cJSON *json = load_rules(path_of("rules.json", NULL));
        cJSON *yaml = load_rules(path_of("job.yaml", NULL));
        struct logmon_ruleset *a, *b;
        size_t i;

        assert_int_equal(cJSON_GetArraySize(json), HP_ARRAY_SIZE(rule_names));
        assert_int_equal(cJSON_GetArraySize(yaml), HP_ARRAY_SIZE(rule_names));
        a = compile(json, false, "rules.json");
        b = compile(yaml, false, "job.yaml");
        for (i = 0; i < HP_ARRAY_SIZE(rule_names); i++) {
                assert_string_equal(logmon_ruleset_rule_name(a, i),
                                    rule_names[i]);
                assert_string_equal(logmon_ruleset_rule_name(b, i),
                                    rule_names[i]);
                if (!cJSON_Compare(cJSON_GetArrayItem(json, (int)i),
                                   cJSON_GetArrayItem(yaml, (int)i), true))
                        fail_msg("rule %s differs between rules.json and "
                                 "job.yaml",
                                 rule_names[i]);
        }
        logmon_ruleset_unref(a);
        logmon_ruleset_unref(b);
        cJSON_Delete(json);
        cJSON_Delete(yaml);
}

/* Every directory is a rule's, so that no sample goes unchecked. */
static void test_no_stray_directory(void **state)
{
        DIR *d = opendir(examples_dir);
        struct dirent *e;
        struct stat st;
        size_t i, dirs = 0;

        assert_non_null(d);
        while ((e = readdir(d)) != NULL) {
                if (e->d_name[0] == '.' ||
                    stat(path_of(e->d_name, NULL), &st) != 0 ||
                    !S_ISDIR(st.st_mode))
                        continue;
                dirs++;
                for (i = 0; i < HP_ARRAY_SIZE(rule_names); i++)
                        if (strcmp(e->d_name, rule_names[i]) == 0)
                                break;
                if (i == HP_ARRAY_SIZE(rule_names))
                        fail_msg("%s: a directory for no rule of rules.json",
                                 path_of(e->d_name, NULL));
        }
        closedir(d);
        assert_int_equal(dirs, HP_ARRAY_SIZE(rule_names));
}

/* ---------------------------------------------------------------------
 * One rule's samples
 */

static void check_samples(const char *rule, const cJSON *one,
                          const cJSON *all, bool no_jit)
{
        static const char *const logs[] = { "healthy.log", "failing.log" };
        static const char *const expects[] = { "healthy.expect.json",
                                               "failing.expect.json" };
        struct logmon_ruleset *rs = compile(one, no_jit, rule);
        struct logmon_ruleset *six = compile(all, no_jit, "rules.json");
        cJSON *expect[2], *final_only;
        char what[512];
        size_t i;

        for (i = 0; i < 2; i++)
                expect[i] = load_expect(rule, expects[i]);
        /* The expectations themselves: healthy is HEALTHY, failing is a
         * verdict the agent acts on. */
        if (final_state(expect[0], rule, expects[0]) != LOGMON_HEALTHY)
                fail_msg("%s/%s: the final state must be HEALTHY", rule,
                         expects[0]);
        if (final_state(expect[1], rule, expects[1]) < LOGMON_SLOW)
                fail_msg("%s/%s: the final state must be SLOW, HANGING or "
                         "FAULTED",
                         rule, expects[1]);

        for (i = 0; i < 2; i++) {
                struct logmon_replay *r = replay(rs, rule, logs[i]);

                snprintf(what, sizeof(what), "%s/%s vs %s%s", rule, logs[i],
                         expects[i], no_jit ? " (no JIT)" : "");
                expect_met(r, expect[i], what);
                snprintf(what, sizeof(what), "%s/%s vs %s%s", rule, logs[i],
                         expects[1 - i], no_jit ? " (no JIT)" : "");
                expect_not_met(r, expect[1 - i], what);
                assert_int_equal(logmon_replay_state(r),
                                 final_state(expect[i], rule, expects[i]));
                logmon_replay_free(r);

                /* Among all six rules, the transitions and the stream's
                 * state differ, the rule's final state does not. */
                r = replay(six, rule, logs[i]);
                final_only = cJSON_CreateObject();
                assert_non_null(final_only);
                cJSON_AddItemReferenceToObject(
                        final_only, "final",
                        cJSON_GetObjectItemCaseSensitive(expect[i], "final"));
                snprintf(what, sizeof(what),
                         "%s/%s with all rules vs the "
                         "final states of %s%s",
                         rule, logs[i], expects[i],
                         no_jit ? " (no JIT)" : "");
                expect_met(r, final_only, what);
                cJSON_Delete(final_only);
                logmon_replay_free(r);
        }
        for (i = 0; i < 2; i++)
                cJSON_Delete(expect[i]);
        logmon_ruleset_unref(six);
        logmon_ruleset_unref(rs);
}

static void test_rule(void **state)
{
        const char *rule = *state;
        cJSON *all = load_rules(path_of("rules.json", NULL));
        cJSON *one = load_rules(path_of(rule, "rule.json"));
        const cJSON *entry = NULL, *item;

        /* The one-rule file is the rule of rules.json, not a variant. */
        cJSON_ArrayForEach (item, all) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(item,
                                                                     "name");

                if (cJSON_IsString(name) &&
                    strcmp(name->valuestring, rule) == 0)
                        entry = item;
        }
        if (entry == NULL)
                fail_msg("rules.json has no rule %s", rule);
        assert_int_equal(cJSON_GetArraySize(one), 1);
        if (!cJSON_Compare(cJSON_GetArrayItem(one, 0), entry, true))
                fail_msg("%s/rule.json differs from %s in rules.json", rule,
                         rule);

        check_samples(rule, one, all, false);
        check_samples(rule, one, all, true);
        cJSON_Delete(one);
        cJSON_Delete(all);
}

/* One test per rule, named after it. */
#define RULE_TEST(name) { #name, test_rule, NULL, NULL, (void *)#name },

int main(int argc, char **argv)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rule_files_agree),
                cmocka_unit_test(test_no_stray_directory),
                SEED_RULES(RULE_TEST)
        };

        if (argc != 2) {
                fprintf(stderr, "usage: %s EXAMPLES-RULES-DIRECTORY\n",
                        argv[0]);
                return 2;
        }
        examples_dir = argv[1];
        return cmocka_run_group_tests(tests, NULL, NULL);
}
