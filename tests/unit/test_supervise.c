/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for supervise's own state machines: the agent's lifecycle
 * (agent.c) and the kill phase a group's stop goes through (group.c),
 * both as pure transition tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "supervise-private.h"

#include "table.h"

enum {
        I = HP_AGENT_IDLE,
        P = HP_AGENT_PREFLIGHT,
        R = HP_AGENT_RUNNING,
        S = HP_AGENT_STOPPING,
        F = HP_AGENT_FINISHED
};

/* Every pair of states, and whether the lifecycle allows it. */
static const struct {
        const char *why;
        int from, to;
        bool allowed;
} lifecycle[] = {
        { "pre-flight before the first attempt", I, P, true },
        { "a stage starts", I, R, true },
        { "the operator's /shutdown with nothing running", I, F, true },
        { "IDLE stays IDLE between stages", I, I, false },
        { "a signal with no group ends at once, not via STOPPING", I, S,
          false },
        { "the pre-flight ended", P, I, true },
        { "the pre-flight failed for lack of libraries", P, F, true },
        { "workers wait for the pre-flight", P, R, false },
        { "no group to stop during the pre-flight", P, S, false },
        { "PREFLIGHT stays PREFLIGHT", P, P, false },
        { "the group ended", R, I, true },
        { "a signal stops the group", R, S, true },
        { "a node fault ends the agent while a group runs", R, F, true },
        { "a stage starts only from IDLE", R, R, false },
        { "no pre-flight while a group runs", R, P, false },
        { "the stopped group ended: the agent exits 128+N", S, F, true },
        { "a signal's stop is not undone", S, I, false },
        { "no new stage once a signal stops the agent", S, R, false },
        { "STOPPING is entered once", S, S, false },
        { "no pre-flight while stopping", S, P, false },
        { "finishing twice keeps the first state", F, F, true },
        { "nothing after FINISHED: idle", F, I, false },
        { "nothing after FINISHED: a stage", F, R, false },
        { "nothing after FINISHED: a stop", F, S, false },
        { "nothing after FINISHED: a pre-flight", F, P, false },
};

static void test_lifecycle_table(void **state)
{
        int failures = 0;
        bool seen[HP_AGENT_STATE_COUNT][HP_AGENT_STATE_COUNT] = { { false } };

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(lifecycle); k++) {
                bool got = hp_agent__state_allowed(lifecycle[k].from,
                                                   lifecycle[k].to);

                seen[lifecycle[k].from][lifecycle[k].to] = true;
                if (got != lifecycle[k].allowed)
                        CASE_FAILED(failures, "%s: %s → %s %s, expected %s",
                                    lifecycle[k].why,
                                    hp_agent_state_name(lifecycle[k].from),
                                    hp_agent_state_name(lifecycle[k].to),
                                    got ? "allowed" : "refused",
                                    lifecycle[k].allowed ? "allowed"
                                                         : "refused");
        }
        /* The table above names every pair. */
        for (int a = 0; a < HP_AGENT_STATE_COUNT; a++)
                for (int b = 0; b < HP_AGENT_STATE_COUNT; b++)
                        if (!seen[a][b])
                                CASE_FAILED(failures,
                                            "%s → %s is not in the "
                                            "table",
                                            hp_agent_state_name(a),
                                            hp_agent_state_name(b));
        /* Out of range is refused, not read past the table. */
        if (hp_agent__state_allowed(HP_AGENT_STATE_COUNT, HP_AGENT_IDLE) ||
            hp_agent__state_allowed(HP_AGENT_IDLE, HP_AGENT_STATE_COUNT))
                CASE_FAILED(failures, "a state out of range was allowed");
        assert_int_equal(failures, 0);
}

static void test_lifecycle_names(void **state)
{
        static const char *const names[] = { "IDLE", "PREFLIGHT", "RUNNING",
                                             "STOPPING", "FINISHED" };

        (void)state;
        for (int s = 0; s < HP_AGENT_STATE_COUNT; s++)
                assert_string_equal(hp_agent_state_name(s), names[s]);
        assert_string_equal(hp_agent_state_name(HP_AGENT_STATE_COUNT), "?");
}

/* A self-driven run through the lifecycle, each step checked against the
 * table as hp_agent__set_state does: the paths the agent really takes. */
static void test_lifecycle_paths(void **state)
{
        static const struct {
                const char *name;
                int path[8];
                int len;
        } paths[] = {
                { "three stages, then success",
                  { I, R, I, R, I, R, I, F },
                  8 },
                { "pre-flight, one stage", { I, P, I, R, I, F }, 6 },
                { "a signal during a stage", { I, R, S, F }, 4 },
                { "a node fault during the pre-flight", { I, P, I, F }, 4 },
                { "a failed attempt restarted", { I, R, I, R, I, F }, 6 },
        };
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(paths); k++)
                for (int i = 1; i < paths[k].len; i++)
                        if (!hp_agent__state_allowed(paths[k].path[i - 1],
                                                     paths[k].path[i]))
                                CASE_FAILED(failures,
                                            "%s: step %d, %s → %s "
                                            "refused",
                                            paths[k].name, i,
                                            hp_agent_state_name(
                                                    paths[k].path[i - 1]),
                                            hp_agent_state_name(
                                                    paths[k].path[i]));
        assert_int_equal(failures, 0);
}

/* hp_agent__set_state on an agent: each step from the state the last left,
 * FINISHED staying final. */
static void test_lifecycle_setter(void **state)
{
        static const struct {
                const char *name;
                int steps[6];
                int nsteps;
                int end;
        } runs[] = {
                { "a stage, then the next", { R, I, R, I }, 4, I },
                { "a signal, then the group's end", { R, S, F }, 3, F },
                { "a group ending after finish leaves it finished",
                  { R, F, I },
                  3,
                  F },
                { "a stage started after finish leaves it finished",
                  { F, R },
                  2,
                  F },
                { "the pre-flight, then a stage", { P, I, R }, 3, R },
        };
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(runs); k++) {
                struct hp_agent *a = hp_agent_new();

                assert_non_null(a);
                assert_int_equal(hp_agent_state(a), HP_AGENT_IDLE);
                for (int i = 0; i < runs[k].nsteps; i++)
                        hp_agent__set_state(a, runs[k].steps[i], "test");
                if ((int)hp_agent_state(a) != runs[k].end)
                        CASE_FAILED(failures, "%s: ended %s, expected %s",
                                    runs[k].name,
                                    hp_agent_state_name(hp_agent_state(a)),
                                    hp_agent_state_name(runs[k].end));
                hp_agent_free(a);
        }
        assert_int_equal(failures, 0);
}

/* A stop: each timeout takes the next step, and GAVE_UP is the last. */
static void test_kill_phase_sequence(void **state)
{
        static const struct {
                enum hp_kill_phase phase, after_timeout;
                const char *name;
        } steps[] = {
                { HP_KILL_NONE, HP_KILL_NONE, "NONE" },
                { HP_KILL_SIGNALLED, HP_KILL_KILLED, "SIGNALLED" },
                { HP_KILL_KILLED, HP_KILL_FORCED, "KILLED" },
                { HP_KILL_FORCED, HP_KILL_GAVE_UP, "FORCED" },
                { HP_KILL_GAVE_UP, HP_KILL_GAVE_UP, "GAVE_UP" },
        };
        enum hp_kill_phase p = HP_KILL_SIGNALLED;
        int n = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(steps); k++) {
                assert_int_equal(hp_group__phase_after_timeout(
                                         steps[k].phase),
                                 steps[k].after_timeout);
                assert_string_equal(hp_group__phase_name(steps[k].phase),
                                    steps[k].name);
        }
        /* From the stop signal, every stop ends in three timeouts. */
        while (p != HP_KILL_GAVE_UP && n < 10) {
                p = hp_group__phase_after_timeout(p);
                n++;
        }
        assert_int_equal(n, 3);
}

static void test_kill_phase_table(void **state)
{
        enum {
                N = HP_KILL_NONE,
                Sg = HP_KILL_SIGNALLED,
                K = HP_KILL_KILLED,
                Fo = HP_KILL_FORCED,
                G = HP_KILL_GAVE_UP
        };
        /* allowed[from][to] */
        static const bool allowed[5][5] = {
                /*            N     Sg     K      Fo     G */
                [N] = { true, true, false, false, false },
                [Sg] = { true, false, true, false, false },
                [K] = { true, false, false, true, false },
                [Fo] = { true, false, false, false, true },
                [G] = { true, false, false, false, false },
        };
        int failures = 0;

        (void)state;
        for (int a = 0; a < 5; a++)
                for (int b = 0; b < 5; b++) {
                        bool got = hp_group__phase_allowed(a, b);

                        if (got != allowed[a][b])
                                CASE_FAILED(failures, "%s → %s %s",
                                            hp_group__phase_name(a),
                                            hp_group__phase_name(b),
                                            got ? "allowed" : "refused");
                }
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_lifecycle_table),
                cmocka_unit_test(test_lifecycle_names),
                cmocka_unit_test(test_lifecycle_paths),
                cmocka_unit_test(test_lifecycle_setter),
                cmocka_unit_test(test_kill_phase_sequence),
                cmocka_unit_test(test_kill_phase_table),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
