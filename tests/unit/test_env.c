/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the worker environment and argv (src/supervise/env.c):
 * the contract a training script sees, checked without spawning it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "hyperpod/supervise.h"

/* Table loops (table.h) fail once at the end, after freeing what the
 * code under test allocated: a failed check then leaves no leak behind to
 * blur the valgrind run. */
#include "table.h"

/* ---- The environment ---- */

struct env_pair {
        const char *name; /* NULL ends the list */
        const char *value;
};

struct env_case {
        const char *name;
        struct hp_env_params params;
        const char *inherited[8];   /* NULL-terminated */
        struct env_pair expect[24]; /* exactly once, with this value */
        const char *absent[4];      /* names that must not be there */
        size_t total;               /* entries in the built envp */
};

/* A node of a two-node job, its second worker, after two restarts. */
#define WORKER_PARAMS                                                        \
        {                                                                    \
                .local_rank = 1, .rank = 5, .group_rank = 1,                 \
                .local_world_size = 4, .world_size = 8,                      \
                .group_world_size = 2, .role = "trainer",                    \
                .master_addr = "10.0.0.1", .master_port = 29501,             \
                .restart_count = 2, .max_restarts = 3, .run_id = "job-7",    \
                .error_file = "/tmp/logs/attempt_2/1/error.json",            \
                .ipc_path = "/tmp/hyperpod_elastic_agent_7.sock",            \
        }

/* What WORKER_PARAMS must turn into, except the two inherited ones. */
#define WORKER_CONTRACT                                                      \
        { "LOCAL_RANK", "1" }, { "RANK", "5" }, { "GROUP_RANK", "1" },       \
                { "ROLE_RANK", "5" }, { "ROLE_NAME", "trainer" },            \
                { "LOCAL_WORLD_SIZE", "4" }, { "WORLD_SIZE", "8" },          \
                { "GROUP_WORLD_SIZE", "2" }, { "ROLE_WORLD_SIZE", "8" },     \
                { "MASTER_ADDR", "10.0.0.1" }, { "MASTER_PORT", "29501" },   \
                { "TORCHELASTIC_RESTART_COUNT", "2" },                       \
                { "JOB_RESTART_COUNT", "2" },                                \
                { "TORCHELASTIC_MAX_RESTARTS", "3" },                        \
                { "TORCHELASTIC_RUN_ID", "job-7" },                          \
                { "TORCHELASTIC_USE_AGENT_STORE", "False" },                 \
                { "TORCHELASTIC_ERROR_FILE",                                 \
                  "/tmp/logs/attempt_2/1/error.json" },                      \
        {                                                                    \
                "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH",                  \
                        "/tmp/hyperpod_elastic_agent_7.sock"                 \
        }

/* The number of variables hyperpodrun sets. */
#define CONTRACT_VARS 20

static const struct env_case env_cases[] = {
        {
                .name = "a clean environment gets the whole contract",
                .params = WORKER_PARAMS,
                .inherited = { "PATH=/usr/bin:/bin", "HOME=/root" },
                .expect = { WORKER_CONTRACT,
                            { "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1" },
                            { "HYPERPOD_SIGNAL_COORDINATION", "disabled" },
                            { "PATH", "/usr/bin:/bin" },
                            { "HOME", "/root" } },
                .total = 2 + CONTRACT_VARS,
        },
        {
                .name = "stale values from an outer launcher are replaced",
                .params = WORKER_PARAMS,
                .inherited = { "RANK=99", "LOCAL_RANK=7", "WORLD_SIZE=1",
                               "MASTER_ADDR=old-host", "JOB_RESTART_COUNT=9",
                               "TORCHELASTIC_ERROR_FILE=/old",
                               "KEEP=me" },
                .expect = { WORKER_CONTRACT,
                            { "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1" },
                            { "HYPERPOD_SIGNAL_COORDINATION", "disabled" },
                            { "KEEP", "me" } },
                .total = 1 + CONTRACT_VARS,
        },
        {
                .name = "NCCL error handling and signal coordination are "
                        "inherited when set",
                .params = WORKER_PARAMS,
                .inherited = { "TORCH_NCCL_ASYNC_ERROR_HANDLING=0",
                               "HYPERPOD_SIGNAL_COORDINATION=enabled" },
                .expect = { WORKER_CONTRACT,
                            { "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0" },
                            { "HYPERPOD_SIGNAL_COORDINATION", "enabled" } },
                .total = CONTRACT_VARS,
        },
        {
                .name = "names that only start like ours are not ours",
                .params = WORKER_PARAMS,
                .inherited = { "RANKING=3", "RANK_TABLE=x",
                               "MASTER_ADDRESS=y", "LOCAL_RANKS=z" },
                .expect = { WORKER_CONTRACT,
                            { "RANKING", "3" },
                            { "RANK_TABLE", "x" },
                            { "MASTER_ADDRESS", "y" },
                            { "LOCAL_RANKS", "z" } },
                .total = 4 + CONTRACT_VARS,
        },
        {
                .name = "an empty inherited environment",
                .params = WORKER_PARAMS,
                .inherited = { NULL },
                .expect = { WORKER_CONTRACT },
                .absent = { "PATH", "HOME" },
                .total = CONTRACT_VARS,
        },
        {
                /* The user's ring size is kept (NULL), the pipe and dump
                 * prefixes are set as given. */
                .name = "--hang-dump full: torch's flight recorder",
                .params = {
                        .local_rank = 0, .rank = 4, .group_rank = 1,
                        .local_world_size = 4, .world_size = 8,
                        .group_world_size = 2, .role = "default",
                        .master_addr = "127.0.0.1", .master_port = 29500,
                        .restart_count = 0, .max_restarts = 0,
                        .run_id = "none", .error_file = "",
                        .fr_pipe_file = "/tmp/py/nccl-fr-",
                        .fr_dump_file = "/logs/attempt_0/fr-rank-",
                },
                .inherited = { "TORCH_NCCL_TRACE_BUFFER_SIZE=7",
                               "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/old-" },
                .expect = { { "RANK", "4" },
                            { "TORCH_NCCL_TRACE_BUFFER_SIZE", "7" },
                            { "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
                              "/tmp/py/nccl-fr-" },
                            { "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                              "/logs/attempt_0/fr-rank-" },
                            { "TORCH_FR_DUMP_TEMP_FILE",
                              "/logs/attempt_0/fr-rank-" } },
                .absent = { "TORCH_FR_BUFFER_SIZE" },
                .total = CONTRACT_VARS + 4,
        },
        {
                /* No ring size of the user's: ours, under both names. */
                .name = "--hang-dump full: both names of each variable",
                .params = {
                        .local_rank = 0, .rank = 0, .group_rank = 0,
                        .local_world_size = 1, .world_size = 1,
                        .group_world_size = 1, .role = "default",
                        .master_addr = "127.0.0.1", .master_port = 29500,
                        .restart_count = 0, .max_restarts = 0,
                        .run_id = "none", .error_file = "",
                        .fr_buffer_size = "2000",
                        .fr_pipe_file = "/tmp/py/nccl-fr-",
                        .fr_dump_file = "/logs/attempt_0/fr-rank-",
                },
                .inherited = { NULL },
                .expect = { { "TORCH_FR_BUFFER_SIZE", "2000" },
                            { "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000" },
                            { "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
                              "/tmp/py/nccl-fr-" },
                            { "TORCH_FR_DUMP_TEMP_FILE",
                              "/logs/attempt_0/fr-rank-" },
                            { "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                              "/logs/attempt_0/fr-rank-" } },
                .total = CONTRACT_VARS + 5,
        },
        {
                .name = "rank 0 of a single node without log files",
                .params = {
                        .local_rank = 0, .rank = 0, .group_rank = 0,
                        .local_world_size = 1, .world_size = 1,
                        .group_world_size = 1, .role = "default",
                        .master_addr = "127.0.0.1", .master_port = 29500,
                        .restart_count = 0, .max_restarts = 0,
                        .run_id = "none", .error_file = "",
                },
                .inherited = { "RANK=3" },
                .expect = { { "LOCAL_RANK", "0" },
                            { "RANK", "0" },
                            { "ROLE_RANK", "0" },
                            { "ROLE_NAME", "default" },
                            { "WORLD_SIZE", "1" },
                            { "ROLE_WORLD_SIZE", "1" },
                            { "MASTER_PORT", "29500" },
                            { "TORCHELASTIC_RUN_ID", "none" },
                            { "TORCHELASTIC_ERROR_FILE", "" } },
                .total = CONTRACT_VARS,
        },
};

/* How many entries of envp define name, and the value of the last one. */
static int count_defined(char *const *envp, const char *name,
                         const char **value)
{
        size_t len = strlen(name);
        int n = 0;

        for (; *envp != NULL; envp++) {
                if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=') {
                        *value = *envp + len + 1;
                        n++;
                }
        }
        return n;
}

/* Checks one built environment against its case; returns the number of
 * failed checks. */
static int check_env(const struct env_case *c, char *const *envp)
{
        size_t total = 0;
        int failures = 0;

        for (size_t i = 0; i < HP_ARRAY_SIZE(c->expect); i++) {
                const struct env_pair *e = &c->expect[i];
                const char *value = NULL;
                int n;

                if (e->name == NULL)
                        break;
                n = count_defined(envp, e->name, &value);
                if (n != 1) {
                        CASE_FAILED(failures, "%s: %s is defined %d times",
                                    c->name, e->name, n);
                        continue;
                }
                if (strcmp(value, e->value) != 0)
                        CASE_FAILED(failures, "%s: %s is '%s', expected '%s'",
                                    c->name, e->name, value, e->value);
                /* hp_env_get reads the same envp the same way. */
                if (hp_env_get(envp, e->name) != value)
                        CASE_FAILED(failures, "%s: hp_env_get(%s) disagrees",
                                    c->name, e->name);
        }
        for (size_t i = 0; i < HP_ARRAY_SIZE(c->absent); i++) {
                const char *value = NULL;

                if (c->absent[i] == NULL)
                        break;
                if (count_defined(envp, c->absent[i], &value) != 0)
                        CASE_FAILED(failures, "%s: %s is defined", c->name,
                                    c->absent[i]);
        }
        while (envp[total] != NULL)
                total++;
        if (total != c->total)
                CASE_FAILED(failures, "%s: %zu variables, expected %zu",
                            c->name, total, c->total);
        /* Every entry is NAME=VALUE, and no name is there twice. */
        for (size_t i = 0; i < total; i++) {
                const char *eq = strchr(envp[i], '=');

                if (eq == NULL) {
                        CASE_FAILED(failures, "%s: '%s' has no '='", c->name,
                                    envp[i]);
                        continue;
                }
                for (size_t j = i + 1; j < total; j++)
                        if (strncmp(envp[i], envp[j],
                                    (size_t)(eq - envp[i]) + 1) == 0)
                                CASE_FAILED(failures, "%s: '%s' and '%s'",
                                            c->name, envp[i], envp[j]);
        }
        return failures;
}

static void test_env_build(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(env_cases); k++) {
                const struct env_case *c = &env_cases[k];
                struct hp_envbuf env = { NULL, NULL };

                assert_int_equal(hp_env_build(&c->params,
                                              (char *const *)c->inherited,
                                              &env),
                                 0);
                assert_non_null(env.envp);
                failures += check_env(c, env.envp);
                hp_env_free(&env);
                assert_null(env.envp);
                assert_null(env.strings);
        }
        assert_int_equal(failures, 0);
}

struct env_get_case {
        const char *name;
        const char *value; /* NULL: not found */
};

static void test_env_get(void **state)
{
        static char *const envp[] = {
                "RANKING=1", "RANK=2", "EMPTY=", "A=b=c", "RANK=3", NULL,
        };
        static const struct env_get_case cases[] = {
                { "RANK", "2" }, /* the first definition wins */
                { "RANKING", "1" },
                { "RAN", NULL }, /* a prefix of a name is not a name */
                { "EMPTY", "" },
                { "A", "b=c" }, /* the value may hold '=' */
                { "MISSING", NULL },
        };

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(cases); k++) {
                const char *got = hp_env_get(envp, cases[k].name);

                if (cases[k].value == NULL
                            ? got != NULL
                            : got == NULL || strcmp(got, cases[k].value))
                        fail_msg("%s is '%s', expected '%s'", cases[k].name,
                                 got ? got : "(null)",
                                 cases[k].value ? cases[k].value : "(null)");
        }
}

/* ---- The worker's argv ---- */

enum launch_mode {
        LAUNCH_SCRIPT = 0,
        LAUNCH_MODULE,
        LAUNCH_NO_PYTHON,
};

struct argv_case {
        const char *name;
        enum launch_mode mode;
        const char *python; /* NULL: python3 */
        const char *script;
        const char *args[8]; /* NULL-terminated */
        int local_rank;
        const char *expect[12]; /* NULL-terminated */
};

static const struct argv_case argv_cases[] = {
        { "a python script",
          LAUNCH_SCRIPT,
          NULL,
          "train.py",
          { "--lr", "3" },
          0,
          { "python3", "-u", "train.py", "--lr", "3" } },
        { "no script arguments",
          LAUNCH_SCRIPT,
          NULL,
          "train.py",
          { NULL },
          0,
          { "python3", "-u", "train.py" } },
        { "PYTHON_EXEC",
          LAUNCH_SCRIPT,
          "/opt/py/bin/python",
          "train.py",
          { NULL },
          0,
          { "/opt/py/bin/python", "-u", "train.py" } },
        { "a module",
          LAUNCH_MODULE,
          NULL,
          "pkg.train",
          { "--x" },
          0,
          { "python3", "-u", "-m", "pkg.train", "--x" } },
        { "no python",
          LAUNCH_NO_PYTHON,
          NULL,
          "./run.sh",
          { "a", "b" },
          0,
          { "./run.sh", "a", "b" } },
        { "no python, no arguments",
          LAUNCH_NO_PYTHON,
          NULL,
          "/bin/prog",
          { NULL },
          0,
          { "/bin/prog" } },
        { "${local_rank} as a whole argument",
          LAUNCH_SCRIPT,
          NULL,
          "train.py",
          { "--local-rank", "${local_rank}" },
          3,
          { "python3", "-u", "train.py", "--local-rank", "3" } },
        { "${local_rank} inside a longer argument",
          LAUNCH_SCRIPT,
          NULL,
          "train.py",
          { "--out=/x/${local_rank}.log" },
          5,
          { "python3", "-u", "train.py", "--out=/x/5.log" } },
        { "${local_rank} several times in one argument",
          LAUNCH_SCRIPT,
          NULL,
          "train.py",
          { "${local_rank}${local_rank}", "a${local_rank}b${local_rank}c" },
          2,
          { "python3", "-u", "train.py", "22", "a2b2c" } },
        { "a local rank longer than one digit",
          LAUNCH_SCRIPT,
          NULL,
          "train.py",
          { "r${local_rank}", "${local_rank}${local_rank}" },
          1023,
          { "python3", "-u", "train.py", "r1023", "10231023" } },
        { "${local_rank} after a module",
          LAUNCH_MODULE,
          NULL,
          "pkg.train",
          { "--rank=${local_rank}" },
          4,
          { "python3", "-u", "-m", "pkg.train", "--rank=4" } },
        { "${local_rank} for a program without python",
          LAUNCH_NO_PYTHON,
          NULL,
          "./run.sh",
          { "${local_rank}" },
          6,
          { "./run.sh", "6" } },
        { "the script path is taken literally",
          LAUNCH_SCRIPT,
          NULL,
          "/data/${local_rank}/train.py",
          { "${local_rank}" },
          1,
          { "python3", "-u", "/data/${local_rank}/train.py", "1" } },
        { "the program path is taken literally",
          LAUNCH_NO_PYTHON,
          NULL,
          "./${local_rank}.sh",
          { NULL },
          1,
          { "./${local_rank}.sh" } },
        { "the module name is taken literally",
          LAUNCH_MODULE,
          NULL,
          "m${local_rank}",
          { NULL },
          1,
          { "python3", "-u", "-m", "m${local_rank}" } },
        { "the interpreter is taken literally",
          LAUNCH_SCRIPT,
          "/py/${local_rank}/python",
          "t.py",
          { NULL },
          1,
          { "/py/${local_rank}/python", "-u", "t.py" } },
        { "near misses are not the macro",
          LAUNCH_SCRIPT,
          NULL,
          "t.py",
          { "$local_rank", "${local_rank", "${LOCAL_RANK}", "{local_rank}" },
          9,
          { "python3", "-u", "t.py", "$local_rank", "${local_rank",
            "${LOCAL_RANK}", "{local_rank}" } },
        { "an empty argument is kept",
          LAUNCH_SCRIPT,
          NULL,
          "t.py",
          { "", "x" },
          0,
          { "python3", "-u", "t.py", "", "x" } },
};

static size_t count_strings(const char *const *list, size_t max)
{
        size_t n = 0;

        while (n < max && list[n] != NULL)
                n++;
        return n;
}

/* Compares a built argv with the expected strings; returns the number of
 * failed checks. */
static int check_argv(const char *name, const struct hp_argv *a,
                      const char *const *expect, size_t max)
{
        size_t want = count_strings(expect, max);
        int failures = 0;

        if (a->argc < 0 || (size_t)a->argc != want) {
                CASE_FAILED(failures, "%s: argc %d, expected %zu", name,
                            a->argc, want);
                return failures;
        }
        for (size_t i = 0; i < want; i++)
                if (strcmp(a->argv[i], expect[i]) != 0)
                        CASE_FAILED(failures,
                                    "%s: argv[%zu] is '%s', expected '%s'",
                                    name, i, a->argv[i], expect[i]);
        if (a->argv[want] != NULL)
                CASE_FAILED(failures, "%s: argv is not NULL-terminated",
                            name);
        return failures;
}

static void test_argv_build_worker(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(argv_cases); k++) {
                const struct argv_case *c = &argv_cases[k];
                struct hp_config *cfg = test_calloc(1, sizeof(*cfg));
                struct hp_argv a = { NULL, 0, NULL };

                assert_non_null(cfg);
                cfg->python_exec = c->python ? c->python : "python3";
                cfg->script = c->script;
                cfg->module = c->mode == LAUNCH_MODULE;
                cfg->no_python = c->mode == LAUNCH_NO_PYTHON;
                cfg->script_args = (char *const *)c->args;
                cfg->script_argc = (int)count_strings(c->args,
                                                      HP_ARRAY_SIZE(c->args));
                assert_int_equal(hp_argv_build_worker(cfg, c->local_rank, &a),
                                 0);
                failures += check_argv(c->name, &a, c->expect,
                                       HP_ARRAY_SIZE(c->expect));
                hp_argv_free(&a);
                assert_null(a.argv);
                assert_null(a.strings);
                test_free(cfg);
        }
        assert_int_equal(failures, 0);
}

/* The argv of a parsed command line, end to end. */
static void test_argv_from_a_parsed_command_line(void **state)
{
        static const char *const want[] = { "python3", "-u", "train.py",
                                            "--lr",    "3",  "--rank=1",
                                            NULL };
        char *argv[] = { "hyperpodrun",
                         "--nproc-per-node",
                         "2",
                         "train.py",
                         "--lr",
                         "3",
                         "--rank=${local_rank}",
                         NULL };
        struct hp_config *cfg = test_calloc(1, sizeof(*cfg));
        struct hp_argv a = { NULL, 0, NULL };
        char errbuf[256] = "";
        int failures;

        (void)state;
        assert_non_null(cfg);
        assert_int_equal(unsetenv("PYTHON_EXEC"), 0);
        assert_int_equal(unsetenv("PET_MODULE"), 0);
        assert_int_equal(unsetenv("PET_NO_PYTHON"), 0);
        assert_int_equal(hp_config_parse(cfg, (int)HP_ARRAY_SIZE(argv) - 1,
                                         argv, errbuf, sizeof(errbuf)),
                         0);
        assert_int_equal(hp_argv_build_worker(cfg, 1, &a), 0);
        failures = check_argv("parsed", &a, want, HP_ARRAY_SIZE(want));
        hp_argv_free(&a);
        test_free(cfg);
        assert_int_equal(failures, 0);
        /* argv itself is borrowed, never rewritten. */
        assert_string_equal(argv[6], "--rank=${local_rank}");
}

struct hook_case {
        const char *name;
        const char *script;
        const char *args;
        const char *expect[4];
};

static const struct hook_case hook_cases[] = {
        { "a hook without arguments",
          "/opt/hooks/pre.sh",
          NULL,
          { "/opt/hooks/pre.sh" } },
        { "a hook's arguments are one opaque argument",
          "/opt/hooks/pre.sh",
          "--bucket s3://b --note 'a b'",
          { "/opt/hooks/pre.sh", "--bucket s3://b --note 'a b'" } },
        { "an empty argument given is still an argument",
          "./post.sh",
          "",
          { "./post.sh", "" } },
};

static void test_argv_build_hook(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(hook_cases); k++) {
                const struct hook_case *c = &hook_cases[k];
                struct hp_argv a = { NULL, 0, NULL };

                assert_int_equal(hp_argv_build_hook(c->script, c->args, &a),
                                 0);
                failures += check_argv(c->name, &a, c->expect,
                                       HP_ARRAY_SIZE(c->expect));
                hp_argv_free(&a);
        }
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_env_build),
                cmocka_unit_test(test_env_get),
                cmocka_unit_test(test_argv_build_worker),
                cmocka_unit_test(test_argv_from_a_parsed_command_line),
                cmocka_unit_test(test_argv_build_hook),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
