/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for etcd-v2's client (src/rendezvous/etcd.c, etcd_ops.c):
 * the percent-encoding of keys and values, the request bytes, the keys'
 * common directory and the lookup of a key in a (recursive) answer. The
 * exchanges themselves run against a real etcd in
 * tests/integration/test_etcd.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "etcd-private.h"
#include "table.h"

struct pct_case {
        const char *in;
        bool slash;
        const char *out;
};

static const struct pct_case pct_cases[] = {
        { "/hyperpodrun/rdzv/job7/0/joined", true,
          "/hyperpodrun/rdzv/job7/0/joined" },
        { "a b/c%d", true, "a%20b/c%25d" },
        { "/x=1&y?z#w+", false, "%2Fx%3D1%26y%3Fz%23w%2B" },
        { "-._~AZaz09", false, "-._~AZaz09" },
        { "\xc3\xa9", false, "%C3%A9" },
        { "127.0.0.1:40000", false, "127.0.0.1%3A40000" },
        { "", false, "" },
};

static void test_percent_encoding(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(pct_cases) / sizeof(pct_cases[0]);
             i++) {
                const struct pct_case *c = &pct_cases[i];
                char buf[128];
                size_t used = 0;

                hp_rdzv__etcd_pct(buf, &used, c->in, strlen(c->in), c->slash);
                if (strcmp(buf, c->out) != 0 || used != strlen(c->out))
                        CASE_FAILED(failures, "'%s': got '%s', want '%s'",
                                    c->in, buf, c->out);
        }
        assert_int_equal(failures, 0);
}

struct build_case {
        const char *method, *key, *query, *val;
        const char *out;
};

static const struct build_case build_cases[] = {
        { "GET", "/hyperpodrun/rdzv/j/0/closed", "", NULL,
          "GET /v2/keys/hyperpodrun/rdzv/j/0/closed HTTP/1.1\r\n"
          "Host: 127.0.0.1:2379\r\n\r\n" },
        { "GET", "/hyperpodrun/rdzv/j/0", "wait=true&waitIndex=8", NULL,
          "GET /v2/keys/hyperpodrun/rdzv/j/0?wait=true&waitIndex=8 "
          "HTTP/1.1\r\nHost: 127.0.0.1:2379\r\n\r\n" },
        { "PUT", "/hyperpodrun/rdzv/j/0/master", "prevExist=false",
          "10.0.0.5:41000",
          "PUT /v2/keys/hyperpodrun/rdzv/j/0/master?prevExist=false "
          "HTTP/1.1\r\nHost: 127.0.0.1:2379\r\nContent-Type: "
          "application/x-www-form-urlencoded\r\nContent-Length: 22\r\n\r\n"
          "value=10.0.0.5%3A41000" },
        { "PUT", "/hyperpodrun/rdzv/a b/0/end", "", "",
          "PUT /v2/keys/hyperpodrun/rdzv/a%20b/0/end HTTP/1.1\r\n"
          "Host: 127.0.0.1:2379\r\nContent-Type: "
          "application/x-www-form-urlencoded\r\nContent-Length: 6\r\n\r\n"
          "value=" },
        { "DELETE", "/hyperpodrun/rdzv/j", "recursive=true", NULL,
          "DELETE /v2/keys/hyperpodrun/rdzv/j?recursive=true HTTP/1.1\r\n"
          "Host: 127.0.0.1:2379\r\n\r\n" },
};

static void test_request_bytes(void **state)
{
        struct etcd_kv *e = calloc(1, sizeof(*e));
        int failures = 0;

        (void)state;
        assert_non_null(e);
        snprintf(e->host, sizeof(e->host), "127.0.0.1:2379");
        for (size_t i = 0; i < sizeof(build_cases) / sizeof(build_cases[0]);
             i++) {
                const struct build_case *c = &build_cases[i];
                int r = hp_rdzv__etcd_build(e, c->method, c->key, c->query,
                                            c->val,
                                            c->val ? strlen(c->val) : 0);

                if (r != 0 || strcmp(e->out, c->out) != 0)
                        CASE_FAILED(failures, "%s %s: got %d '%s'", c->method,
                                    c->key, r, e->out ? e->out : "(none)");
        }
        free(e->out);
        free(e);
        assert_int_equal(failures, 0);
}

struct dir_case {
        const char *keys[3];
        const char *dir;
};

static const struct dir_case dir_cases[] = {
        { { "/h/r/j/0/closed", "/h/r/j/0/master" }, "/h/r/j/0" },
        { { "/h/r/j/0/beat/0", "/h/r/j/0/beat/1", "/h/r/j/0/beat/10" },
          "/h/r/j/0/beat" },
        { { "/a/b", "/a/bc" }, "/a" },
        { { "/a/b", "/a/b/c" }, "/a" },
        { { "/x", "/y" }, "" },
};

static void test_common_directory(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(dir_cases) / sizeof(dir_cases[0]);
             i++) {
                const struct dir_case *c = &dir_cases[i];
                size_t n = c->keys[2] ? 3 : 2;
                char *dir = hp_rdzv__etcd_common_dir((char *const *)c->keys,
                                                     n);

                assert_non_null(dir);
                if (strcmp(dir, c->dir) != 0)
                        CASE_FAILED(failures, "%s, %s: got '%s', want '%s'",
                                    c->keys[0], c->keys[1], dir, c->dir);
                free(dir);
        }
        assert_int_equal(failures, 0);
}

/* A recursive GET of a round's directory, as etcd 3.4 answers it. */
static const char answer[] =
        "{\"action\":\"get\",\"node\":{\"key\":\"/h/j/0\",\"dir\":true,"
        "\"nodes\":[{\"key\":\"/h/j/0/joined\",\"value\":\"2\","
        "\"modifiedIndex\":9,\"createdIndex\":8},"
        "{\"key\":\"/h/j/0/beat\",\"dir\":true,\"nodes\":["
        "{\"key\":\"/h/j/0/beat/1\",\"value\":\"done\"},"
        "{\"key\":\"/h/j/0/beat/10\",\"value\":\"7\"}]},"
        "{\"key\":\"/h/j/0/master\",\"value\":\"[::1]:5\"}]}}";

struct lookup_case {
        const char *key;
        const char *value; /* NULL: absent */
};

static const struct lookup_case lookup_cases[] = {
        { "/h/j/0/joined", "2" },    { "/h/j/0/master", "[::1]:5" },
        { "/h/j/0/beat/1", "done" }, { "/h/j/0/beat/10", "7" },
        { "/h/j/0/beat", "" },       { "/h/j/0/beat/0", NULL },
        { "/h/j/0/closed", NULL },   { "/h/j/1/joined", NULL },
        { "/h/j/0/join", NULL },
};

static void test_lookup_in_an_answer(void **state)
{
        cJSON *root = cJSON_Parse(answer);
        int failures = 0;

        (void)state;
        assert_non_null(root);
        for (size_t i = 0; i < sizeof(lookup_cases) / sizeof(lookup_cases[0]);
             i++) {
                const struct lookup_case *c = &lookup_cases[i];
                const char *v = hp_rdzv__etcd_value(root, c->key);

                if ((v == NULL) != (c->value == NULL) ||
                    (v != NULL && strcmp(v, c->value) != 0))
                        CASE_FAILED(failures, "%s: got %s, want %s", c->key,
                                    v ? v : "(absent)",
                                    c->value ? c->value : "(absent)");
        }
        assert_null(hp_rdzv__etcd_value(NULL, "/h/j/0/joined"));
        cJSON_Delete(root);
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_percent_encoding),
                cmocka_unit_test(test_request_bytes),
                cmocka_unit_test(test_common_directory),
                cmocka_unit_test(test_lookup_in_an_answer),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
