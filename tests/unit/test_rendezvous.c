/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the rendezvous module (src/rendezvous/rendezvous.c): the
 * endpoint parser, the backends that need no network peer, and the
 * keep-alive's judge. */
#include <ctype.h>
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
#include "hyperpod/rendezvous.h"
#include "rendezvous-private.h"
#include "table.h"

extern char **environ;

/* ---- Endpoints ---- */

struct endpoint_case {
        const char *text;
        size_t host_len; /* 0: a roomy buffer */
        int result;
        const char *host; /* on success */
        int port;         /* on success */
};

#define DEFAULT_PORT 29400

static const struct endpoint_case endpoint_cases[] = {
        { "node-1", 0, 0, "node-1", DEFAULT_PORT },
        { "node-1:1234", 0, 0, "node-1", 1234 },
        { "10.0.0.1:29500", 0, 0, "10.0.0.1", 29500 },
        { "h:1", 0, 0, "h", 1 },
        { "h:65535", 0, 0, "h", 65535 },
        { "[::1]:29401", 0, 0, "::1", 29401 },
        { "[::1]", 0, 0, "::1", DEFAULT_PORT },
        { "[fe80::1:2]:7", 0, 0, "fe80::1:2", 7 },
        { "::1", 0, 0, "::1", DEFAULT_PORT }, /* bare IPv6: no port */
        { "fe80::1:2", 0, 0, "fe80::1:2", DEFAULT_PORT },
        { "abcd", 5, 0, "abcd", DEFAULT_PORT }, /* exactly fits */

        { ":", 0, HP_ECONFIG, NULL, 0 },
        { "", 0, HP_ECONFIG, NULL, 0 },
        { ":29400", 0, HP_ECONFIG, NULL, 0 },
        { "[::1", 0, HP_ECONFIG, NULL, 0 },
        { "[]:1", 0, HP_ECONFIG, NULL, 0 },
        { "[::1]x", 0, HP_ECONFIG, NULL, 0 },
        { "[::1]:", 0, HP_ECONFIG, NULL, 0 },
        { "[::1]:0", 0, HP_ECONFIG, NULL, 0 },
        { "h:0", 0, HP_ECONFIG, NULL, 0 },
        { "h:99999", 0, HP_ECONFIG, NULL, 0 },
        { "h:65536", 0, HP_ECONFIG, NULL, 0 },
        { "h:", 0, HP_ECONFIG, NULL, 0 },
        { "h:-1", 0, HP_ECONFIG, NULL, 0 },
        { "h:+1", 0, HP_ECONFIG, NULL, 0 },
        { "h:12ab", 0, HP_ECONFIG, NULL, 0 },
        { "abcde", 5, HP_ECONFIG, NULL, 0 }, /* one byte too long */
};

static void test_parse_endpoint(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(endpoint_cases); k++) {
                const struct endpoint_case *c = &endpoint_cases[k];
                char host[256] = "";
                size_t host_len = c->host_len ? c->host_len : sizeof(host);
                int port = -1;
                int r = hp_rdzv_parse_endpoint(c->text, host, host_len,
                                               DEFAULT_PORT, &port);

                if (r != c->result)
                        fail_msg("'%s': returned %d, expected %d", c->text, r,
                                 c->result);
                if (r != 0)
                        continue;
                if (strcmp(host, c->host) != 0 || port != c->port)
                        fail_msg("'%s': gave '%s' port %d, expected '%s' "
                                 "port %d",
                                 c->text, host, port, c->host, c->port);
        }
}

/* ---- Rounds ---- */

static void clear_config_env(void)
{
        char *names[256];
        size_t n = 0;

        for (char **e = environ; *e != NULL && n < HP_ARRAY_SIZE(names);
             e++) {
                const char *eq = strchr(*e, '=');

                if (strncmp(*e, "PET_", 4) != 0 || eq == NULL)
                        continue;
                names[n] = strndup(*e, (size_t)(eq - *e));
                assert_non_null(names[n]);
                n++;
        }
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(unsetenv(names[i]), 0);
                free(names[i]);
        }
}

/* A config from a table argv, as main would build it. The struct is big,
 * so it lives on the heap; the caller frees it. */
static struct hp_config *parse_config(const char *const *args, size_t max)
{
        struct hp_config *cfg = test_calloc(1, sizeof(*cfg));
        char *argv[32], errbuf[256] = "";
        int argc = 0, r;

        assert_non_null(cfg);
        assert_true(max < HP_ARRAY_SIZE(argv));
        while ((size_t)argc < max && args[argc] != NULL) {
                argv[argc] = (char *)args[argc];
                argc++;
        }
        argv[argc] = NULL;
        clear_config_env();
        r = hp_config_parse(cfg, argc, argv, errbuf, sizeof(errbuf));
        if (r != 0)
                fail_msg("the test's command line was refused: %s", errbuf);
        return cfg;
}

struct static_case {
        const char *name;
        const char *argv[20];
        const char *run_id;
        struct hp_rdzv_info expect;
};

static const struct static_case static_cases[] = {
        {
                .name = "node 2 of 4 with 8 workers each",
                .argv = { "hyperpodrun", "--rdzv-backend", "static",
                          "--nnodes", "4", "--node-rank", "2",
                          "--nproc-per-node", "8", "--master-addr",
                          "10.1.1.1", "--master-port", "1234", "t.py" },
                .run_id = "none",
                .expect = { .nnodes = 4,
                            .node_rank = 2,
                            .nproc = 8,
                            .world_size = 32,
                            .group_world_size = 4,
                            .base_rank = 16,
                            .master_addr = "10.1.1.1",
                            .master_port = 1234 },
        },
        {
                .name = "a single static node with the defaults",
                .argv = { "hyperpodrun", "--rdzv-backend", "static",
                          "--rdzv-id", "job-9", "t.py" },
                .run_id = "job-9",
                .expect = { .nnodes = 1,
                            .node_rank = 0,
                            .nproc = 1,
                            .world_size = 1,
                            .group_world_size = 1,
                            .base_rank = 0,
                            .master_addr = "127.0.0.1",
                            .master_port = 29500 },
        },
        {
                .name = "the endpoint gives the master",
                .argv = { "hyperpodrun", "--rdzv-backend", "static",
                          "--nnodes", "2", "--node-rank", "1",
                          "--nproc-per-node", "2", "--master-addr", "ignored",
                          "--master-port", "1111", "--rdzv-endpoint",
                          "head:29400", "t.py" },
                .run_id = "none",
                .expect = { .nnodes = 2,
                            .node_rank = 1,
                            .nproc = 2,
                            .world_size = 4,
                            .group_world_size = 2,
                            .base_rank = 2,
                            .master_addr = "head",
                            .master_port = 29400 },
        },
        {
                .name = "an endpoint without a port keeps the master port",
                .argv = { "hyperpodrun", "--rdzv-backend", "static",
                          "--master-port", "2222", "--rdzv-endpoint", "head",
                          "t.py" },
                .run_id = "none",
                .expect = { .nnodes = 1,
                            .node_rank = 0,
                            .nproc = 1,
                            .world_size = 1,
                            .group_world_size = 1,
                            .base_rank = 0,
                            .master_addr = "head",
                            .master_port = 2222 },
        },
        {
                .name = "an IPv6 endpoint",
                .argv = { "hyperpodrun", "--rdzv-backend", "static",
                          "--rdzv-endpoint", "[fd00::5]:555", "t.py" },
                .run_id = "none",
                .expect = { .nnodes = 1,
                            .node_rank = 0,
                            .nproc = 1,
                            .world_size = 1,
                            .group_world_size = 1,
                            .base_rank = 0,
                            .master_addr = "fd00::5",
                            .master_port = 555 },
        },
};

static void check_info(const char *name, const struct hp_rdzv_info *got,
                       const struct hp_rdzv_info *want)
{
#define CHECK_FIELD(f)                                                       \
        do {                                                                 \
                if (got->f != want->f)                                       \
                        fail_msg("%s: " #f " is %d, expected %d", name,      \
                                 got->f, want->f);                           \
        } while (0)
        CHECK_FIELD(nnodes);
        CHECK_FIELD(node_rank);
        CHECK_FIELD(nproc);
        CHECK_FIELD(world_size);
        CHECK_FIELD(group_world_size);
        CHECK_FIELD(base_rank);
        CHECK_FIELD(master_port);
#undef CHECK_FIELD
        if (strcmp(got->master_addr, want->master_addr) != 0)
                fail_msg("%s: master_addr is '%s', expected '%s'", name,
                         got->master_addr, want->master_addr);
}

static void test_static_backend(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(static_cases); k++) {
                const struct static_case *c = &static_cases[k];
                struct hp_config *cfg = parse_config(c->argv,
                                                     HP_ARRAY_SIZE(c->argv));
                struct hp_rdzv rdzv;
                struct hp_rdzv_info info;
                char errbuf[256] = "";

                assert_int_equal(hp_rdzv_init(&rdzv, cfg, errbuf,
                                              sizeof(errbuf)),
                                 0);
                assert_string_equal(rdzv.run_id, c->run_id);
                /* Static rounds are all the same. */
                for (int round = 0; round < 2; round++) {
                        int r = hp_rdzv_next(&rdzv, &info, errbuf,
                                             sizeof(errbuf));

                        if (r != 0)
                                fail_msg("%s: round %d failed: %s", c->name,
                                         round, errbuf);
                        check_info(c->name, &info, &c->expect);
                }
                test_free(cfg);
        }
        clear_config_env();
}

static void test_static_backend_refuses_a_bad_endpoint(void **state)
{
        static const char *const argv[] = { "hyperpodrun", "--rdzv-backend",
                                            "static",      "--rdzv-endpoint",
                                            "head:0",      "t.py",
                                            NULL };
        struct hp_config *cfg = parse_config(argv, HP_ARRAY_SIZE(argv));
        struct hp_rdzv rdzv;
        struct hp_rdzv_info info;
        char errbuf[256] = "";

        (void)state;
        assert_int_equal(hp_rdzv_init(&rdzv, cfg, errbuf, sizeof(errbuf)), 0);
        assert_int_equal(hp_rdzv_next(&rdzv, &info, errbuf, sizeof(errbuf)),
                         HP_ECONFIG);
        assert_non_null(strstr(errbuf, "head:0"));
        assert_non_null(strstr(errbuf, "--rdzv-endpoint"));
        test_free(cfg);
        clear_config_env();
}

/* A random UUID as Python's str(uuid.uuid4()) writes it. */
static bool looks_like_uuid4(const char *s)
{
        if (strlen(s) != 36)
                return false;
        for (int i = 0; i < 36; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;

                if (dash ? s[i] != '-'
                         : !isxdigit((unsigned char)s[i]) ||
                                    isupper((unsigned char)s[i]))
                        return false;
        }
        return s[14] == '4' && strchr("89ab", s[19]) != NULL;
}

static void test_uuid_check_is_strict(void **state)
{
        static const struct {
                const char *text;
                bool uuid4;
        } cases[] = {
                { "2f1c4a8e-3b7d-4c2e-9f10-6a5b4c3d2e1f", true },
                { "2f1c4a8e-3b7d-4c2e-8f10-6a5b4c3d2e1f", true },
                { "2f1c4a8e-3b7d-1c2e-9f10-6a5b4c3d2e1f", false }, /* v1 */
                { "2f1c4a8e-3b7d-4c2e-cf10-6a5b4c3d2e1f", false }, /* var */
                { "2F1C4A8E-3B7D-4C2E-9F10-6A5B4C3D2E1F", false }, /* case */
                { "2f1c4a8e3b7d4c2e9f106a5b4c3d2e1f", false },
                { "none", false },
        };

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(cases); k++)
                if (looks_like_uuid4(cases[k].text) != cases[k].uuid4)
                        fail_msg("'%s' misjudged", cases[k].text);
}

static void test_standalone_backend(void **state)
{
        static const char *const argv[] = { "hyperpodrun",
                                            "--standalone",
                                            "--rdzv-id",
                                            "ignored",
                                            "--nproc-per-node",
                                            "3",
                                            "t.py",
                                            NULL };
        static const struct hp_rdzv_info want = {
                .nnodes = 1,
                .node_rank = 0,
                .nproc = 3,
                .world_size = 3,
                .group_world_size = 1,
                .base_rank = 0,
                .master_addr = "127.0.0.1",
        };
        struct hp_config *cfg = parse_config(argv, HP_ARRAY_SIZE(argv));
        struct hp_rdzv rdzv, other;
        struct hp_rdzv_info info;
        char errbuf[256] = "", run_id[sizeof(rdzv.run_id)];

        (void)state;
        assert_int_equal(hp_rdzv_init(&rdzv, cfg, errbuf, sizeof(errbuf)), 0);
        if (!looks_like_uuid4(rdzv.run_id))
                fail_msg("run id '%s' is not a UUID4", rdzv.run_id);
        memcpy(run_id, rdzv.run_id, sizeof(run_id));

        for (int round = 0; round < 2; round++) {
                struct hp_rdzv_info expect = want;

                assert_int_equal(hp_rdzv_next(&rdzv, &info, errbuf,
                                              sizeof(errbuf)),
                                 0);
                assert_in_range(info.master_port, 1, 65535);
                expect.master_port = info.master_port;
                check_info("standalone", &info, &expect);
                /* The run id is the agent's, fixed across rounds. */
                assert_string_equal(rdzv.run_id, run_id);
        }

        /* Another agent gets another id. */
        assert_int_equal(hp_rdzv_init(&other, cfg, errbuf, sizeof(errbuf)),
                         0);
        assert_true(looks_like_uuid4(other.run_id));
        assert_string_not_equal(other.run_id, run_id);
        test_free(cfg);
        clear_config_env();
}

struct unavailable_case {
        const char *backend; /* NULL: the default */
        const char *mention;
};

static const struct unavailable_case unavailable_cases[] = {
        { NULL, "hyperpod" },
        { "hyperpod", "hyperpod" },
};

static void test_backends_not_available_say_so(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(unavailable_cases); k++) {
                const struct unavailable_case *c = &unavailable_cases[k];
                const char *argv[] = { "hyperpodrun", "--rdzv-backend",
                                       c->backend, "t.py", NULL };
                const char *plain[] = { "hyperpodrun", "t.py", NULL };
                struct hp_config *cfg =
                        c->backend
                                ? parse_config(argv, HP_ARRAY_SIZE(argv))
                                : parse_config(plain, HP_ARRAY_SIZE(plain));
                struct hp_rdzv rdzv;
                struct hp_rdzv_info info;
                char errbuf[512] = "";
                int r;

                assert_int_equal(hp_rdzv_init(&rdzv, cfg, errbuf,
                                              sizeof(errbuf)),
                                 0);
                assert_string_equal(rdzv.run_id, "none");
                r = hp_rdzv_next(&rdzv, &info, errbuf, sizeof(errbuf));
                if (r != HP_ENOTSUP)
                        fail_msg("%s: returned %d, expected HP_ENOTSUP",
                                 c->mention, r);
                if (strstr(errbuf, c->mention) == NULL)
                        fail_msg("%s: the message '%s' does not name it",
                                 c->mention, errbuf);
                test_free(cfg);
        }
        clear_config_env();
}

static void test_run_id_too_long(void **state)
{
        char id[200];
        const char *argv[] = { "hyperpodrun",
                               "--rdzv-backend",
                               "static",
                               "--rdzv-id",
                               id,
                               "t.py",
                               NULL };
        struct hp_config *cfg;
        struct hp_rdzv rdzv;
        char errbuf[512] = "";

        (void)state;
        memset(id, 'x', sizeof(id) - 1);
        id[sizeof(id) - 1] = '\0';
        cfg = parse_config(argv, HP_ARRAY_SIZE(argv));
        assert_int_equal(hp_rdzv_init(&rdzv, cfg, errbuf, sizeof(errbuf)),
                         HP_ECONFIG);
        assert_non_null(strstr(errbuf, "--rdzv-id"));
        test_free(cfg);
        clear_config_env();
}

/* ---- The keep-alive's judge ----
 *
 * Three nodes, this one node 1, a window of 1000 ms: each step reads the
 * counts at now and expects the node judged lost, or -1. */

#define DONE HP_RDZV_BEAT_DONE

struct beat_step {
        uint64_t now;
        int64_t counts[3];
        int lost;
};

struct beat_case {
        const char *what;
        struct beat_step steps[6];
        size_t nsteps;
};

static const struct beat_case beat_cases[] = {
        { "everyone beats",
          {
                  { 0, { -1, -1, -1 }, -1 },
                  { 400, { 1, 1, 1 }, -1 },
                  { 1300, { 2, 1, 2 }, -1 },
                  { 2200, { 3, 1, 3 }, -1 },
          },
          4 },
        { "node 2 stops: lost a window after its last change",
          {
                  { 0, { 1, 1, 1 }, -1 },
                  { 500, { 2, 1, 1 }, -1 },
                  { 999, { 3, 1, 1 }, -1 },
                  { 1000, { 4, 1, 1 }, 2 },
          },
          4 },
        { "a node that never beat is lost a window after the start",
          {
                  { 100, { -1, 1, 1 }, -1 },
                  { 900, { -1, 1, 2 }, -1 },
                  { 1100, { -1, 1, 3 }, 0 },
          },
          3 },
        { "this node's own count is never judged",
          {
                  { 0, { 1, 1, 1 }, -1 },
                  { 5000, { 2, 1, 2 }, -1 },
          },
          2 },
        { "a late reader sees counts moved and judges nobody",
          {
                  { 0, { 1, 1, 1 }, -1 },
                  { 60000, { 90, 1, 80 }, -1 },
                  { 60200, { 91, 1, 81 }, -1 },
          },
          3 },
        { "a node that finished is never lost",
          {
                  { 0, { 1, 1, 1 }, -1 },
                  { 500, { DONE, 1, 2 }, -1 },
                  { 9000, { DONE, 1, 3 }, -1 },
          },
          3 },
        { "the first of two silent nodes is named",
          {
                  { 0, { 1, 1, 1 }, -1 },
                  { 1000, { 1, 1, 1 }, 0 },
          },
          2 },
};

static void test_keep_alive_judge(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(beat_cases); i++) {
                const struct beat_case *c = &beat_cases[i];
                struct hp_rdzv_beats b;

                assert_int_equal(hp_rdzv__beats_init(&b, 3, 1, 1000,
                                                     c->steps[0].now),
                                 0);
                for (size_t k = 0; k < c->nsteps; k++) {
                        const struct beat_step *s = &c->steps[k];
                        int got = hp_rdzv__beats_update(&b, s->counts,
                                                        s->now);

                        if (got != s->lost)
                                CASE_FAILED(failures,
                                            "%s: step %zu at %llu ms: "
                                            "lost %d, expected %d",
                                            c->what, k,
                                            (unsigned long long)s->now, got,
                                            s->lost);
                }
                hp_rdzv__beats_free(&b);
        }
        assert_int_equal(failures, 0);
}

static void test_keep_alive_judge_refuses_a_bad_round(void **state)
{
        struct hp_rdzv_beats b;

        (void)state;
        assert_int_equal(hp_rdzv__beats_init(&b, 0, 0, 1000, 0), -EINVAL);
        assert_int_equal(hp_rdzv__beats_init(&b, 2, 2, 1000, 0), -EINVAL);
        assert_int_equal(hp_rdzv__beats_init(&b, 2, -1, 1000, 0), -EINVAL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_endpoint),
                cmocka_unit_test(test_static_backend),
                cmocka_unit_test(test_static_backend_refuses_a_bad_endpoint),
                cmocka_unit_test(test_uuid_check_is_strict),
                cmocka_unit_test(test_standalone_backend),
                cmocka_unit_test(test_backends_not_available_say_so),
                cmocka_unit_test(test_run_id_too_long),
                cmocka_unit_test(test_keep_alive_judge),
                cmocka_unit_test(test_keep_alive_judge_refuses_a_bad_round),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
