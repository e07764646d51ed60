/* Unit tests for helpers of src/common/util.c: hp_read_file, the one
 * whole-file reader with a ceiling (real files, a directory and a FIFO
 * in a fresh temporary directory), and hp_env_get. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "table.h"

enum kind {
        KIND_FILE,      /* a regular file holding size bytes */
        KIND_DIR,
        KIND_FIFO,
        KIND_MISSING,
};

struct read_case {
        const char *name;
        enum kind kind;
        size_t size;
        size_t max;
        int result;
};

static const struct read_case cases[] = {
        { "a file", KIND_FILE, 100, 1024, 0 },
        { "an empty file", KIND_FILE, 0, 1024, 0 },
        { "exactly the ceiling", KIND_FILE, 1024, 1024, 0 },
        { "one byte over the ceiling", KIND_FILE, 1025, 1024, -EFBIG },
        { "far over the ceiling", KIND_FILE, 70000, 1024, -EFBIG },
        { "larger than the first guess", KIND_FILE, 70000, 1 << 20, 0 },
        { "a directory", KIND_DIR, 0, 1024, -EISDIR },
        { "a FIFO", KIND_FIFO, 0, 1024, -ENODEV },
        { "a missing path", KIND_MISSING, 0, 1024, -ENOENT },
};

static char dir[] = "/tmp/hp-readfile-XXXXXX";

static void make(const struct read_case *c, const char *path)
{
        char *data;
        int fd;

        switch (c->kind) {
        case KIND_FILE:
                data = malloc(c->size + 1);
                assert_non_null(data);
                for (size_t i = 0; i < c->size; i++)
                        data[i] = (char)('a' + i % 26);
                fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                          0600);
                assert_true(fd >= 0);
                assert_int_equal(hp_write_all(fd, data, c->size), 0);
                close(fd);
                free(data);
                break;
        case KIND_DIR:
                assert_int_equal(mkdir(path, 0700), 0);
                break;
        case KIND_FIFO:
                assert_int_equal(mkfifo(path, 0600), 0);
                break;
        case KIND_MISSING:
                break;
        }
}

static void test_read_file(void **state)
{
        int failures = 0;

        (void)state;
        assert_non_null(mkdtemp(dir));
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const struct read_case *c = &cases[i];
                char path[PATH_MAX], *out = (char *)&failures;
                size_t len = 12345;
                bool bytes_ok = true;
                int r;

                snprintf(path, sizeof(path), "%s/%zu", dir, i);
                make(c, path);
                r = hp_read_file(path, c->max, &out, &len);
                if (r == 0) {
                        bytes_ok = len == c->size && out[len] == '\0';
                        for (size_t k = 0; bytes_ok && k < len; k++)
                                bytes_ok = out[k] == (char)('a' + k % 26);
                } else {
                        bytes_ok = out == NULL && len == 0;
                }
                if (r != c->result || !bytes_ok)
                        CASE_FAILED(failures, "%s: got %d (%s), %zu bytes%s;"
                                    " want %d", c->name, r, hp_strerror(r),
                                    len, bytes_ok ? "" : ", wrong bytes",
                                    c->result);
                free(r == 0 ? out : NULL);
        }
        assert_int_equal(hp_remove_tree(dir), 0);
        assert_int_equal(failures, 0);
}

static void test_env_get(void **state)
{
        static char *const envp[] = { "A=1", "AB=2", "C=", "D", "E==x",
                                      NULL };
        static const struct {
                const char *name;
                const char *value; /* NULL: not set */
        } env_cases[] = {
                { "A", "1" },  { "AB", "2" }, { "C", "" }, { "D", NULL },
                { "E", "=x" }, { "B", NULL }, { "", NULL },
        };
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(env_cases) / sizeof(env_cases[0]); i++) {
                const char *got = hp_env_get(envp, env_cases[i].name);

                if ((got == NULL) != (env_cases[i].value == NULL) ||
                    (got != NULL && strcmp(got, env_cases[i].value) != 0))
                        CASE_FAILED(failures, "%s: got %s, want %s",
                                    env_cases[i].name, got ? got : "(unset)",
                                    env_cases[i].value ? env_cases[i].value
                                                   : "(unset)");
        }
        assert_null(hp_env_get(NULL, "A"));
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_read_file),
                cmocka_unit_test(test_env_get),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
