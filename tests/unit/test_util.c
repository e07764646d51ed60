/* Unit tests for helpers of src/common/util.c: hp_read_file, the one
 * whole-file reader with a ceiling (real files, a directory and a FIFO
 * in a fresh temporary directory), hp_write_file_atomic, the one atomic
 * writer (a file made, one replaced, paths it must refuse), hp_env_get,
 * and hp_format_double. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
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

/* What is at the path before hp_write_file_atomic() is called. */
enum before {
        BEFORE_NOTHING,
        BEFORE_FILE,    /* a file holding OLD_TEXT */
        BEFORE_DIR,
};

#define OLD_TEXT "the old content, longer than the new\n"

struct write_case {
        const char *name;
        const char *path;       /* under the test's directory */
        enum before before;
        const char *data;
        unsigned flags;
        int result;
};

static const struct write_case write_cases[] = {
        { "a new file", "new", BEFORE_NOTHING, "{\"a\": 1}\n", 0, 0 },
        { "a new file, synced", "synced", BEFORE_NOTHING, "{}",
          HP_WRITE_FSYNC, 0 },
        { "an empty file", "empty", BEFORE_NOTHING, "", 0, 0 },
        { "a file replaced", "old", BEFORE_FILE, "new\n", 0, 0 },
        { "a file replaced, synced", "old-synced", BEFORE_FILE, "new\n",
          HP_WRITE_FSYNC, 0 },
        { "a missing directory", "missing/file", BEFORE_NOTHING, "x", 0,
          -ENOENT },
        /* A read-only directory stops no one when the tests run as root;
         * a regular file on the way refuses everyone. */
        { "under a regular file", "plain/file", BEFORE_NOTHING, "x", 0,
          -ENOTDIR },
        { "a directory at the path", "dir", BEFORE_DIR, "x", 0, -EISDIR },
};

static char write_dir[] = "/tmp/hp-writefile-XXXXXX";

static int entries_in(const char *path)
{
        struct dirent *de;
        DIR *d = opendir(path);
        int n = 0;

        assert_non_null(d);
        while ((de = readdir(d)) != NULL)
                if (strcmp(de->d_name, ".") != 0 &&
                    strcmp(de->d_name, "..") != 0)
                        n++;
        closedir(d);
        return n;
}

/* Whether path holds exactly text. */
static bool holds(const char *path, const char *text)
{
        char *out;
        size_t len;
        bool same;

        if (hp_read_file(path, 1 << 20, &out, &len) < 0)
                return false;
        same = len == strlen(text) && memcmp(out, text, len) == 0;
        free(out);
        return same;
}

static void test_write_file_atomic(void **state)
{
        char plain[PATH_MAX], tmp[PATH_MAX + 8];
        mode_t old_umask = umask(022);
        int failures = 0, fd;

        (void)state;
        assert_non_null(mkdtemp(write_dir));
        snprintf(plain, sizeof(plain), "%s/plain", write_dir);
        fd = open(plain, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
        for (size_t i = 0; i < sizeof(write_cases) / sizeof(write_cases[0]);
             i++) {
                const struct write_case *c = &write_cases[i];
                char path[PATH_MAX], why[160] = "";
                int old_fd = -1, entries, r;
                struct stat st = { 0 };

                snprintf(path, sizeof(path), "%s/%s", write_dir, c->path);
                snprintf(tmp, sizeof(tmp), "%s.tmp", path);
                if (c->before == BEFORE_FILE) {
                        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                        assert_true(fd >= 0);
                        assert_int_equal(hp_write_all(fd, OLD_TEXT,
                                                      strlen(OLD_TEXT)), 0);
                        close(fd);
                        /* A reader that has the old file open. */
                        old_fd = open(path, O_RDONLY | O_CLOEXEC);
                        assert_true(old_fd >= 0);
                } else if (c->before == BEFORE_DIR) {
                        assert_int_equal(mkdir(path, 0700), 0);
                }
                entries = entries_in(write_dir);
                r = hp_write_file_atomic(path, c->data, strlen(c->data), 0640,
                                         c->flags);
                if (r != c->result) {
                        snprintf(why, sizeof(why), "got %d (%s)", r,
                                 hp_strerror(r));
                } else if (r == 0 && !holds(path, c->data)) {
                        snprintf(why, sizeof(why), "wrong content");
                } else if (r == 0 && c->before == BEFORE_NOTHING &&
                           (stat(path, &st) < 0 ||
                            (st.st_mode & 07777) != 0640)) {
                        snprintf(why, sizeof(why), "mode %o, want 640",
                                 (unsigned)(st.st_mode & 07777));
                } else if (r < 0 && c->before == BEFORE_DIR &&
                           (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))) {
                        snprintf(why, sizeof(why), "the directory is gone");
                } else if (access(tmp, F_OK) == 0) {
                        snprintf(why, sizeof(why), "%s.tmp is left", c->path);
                } else if (entries_in(write_dir) !=
                           entries + (r == 0 && c->before == BEFORE_NOTHING)) {
                        snprintf(why, sizeof(why), "%d entries, had %d",
                                 entries_in(write_dir), entries);
                }
                if (old_fd >= 0) {
                        char buf[sizeof(OLD_TEXT)] = "";

                        /* Replaced, not rewritten: the old file is intact
                         * for whoever still reads it. */
                        if (why[0] == '\0' &&
                            (pread(old_fd, buf, sizeof(buf) - 1, 0) !=
                                     (ssize_t)strlen(OLD_TEXT) ||
                             strcmp(buf, OLD_TEXT) != 0))
                                snprintf(why, sizeof(why),
                                         "the old file was written over");
                        close(old_fd);
                }
                if (why[0] != '\0')
                        CASE_FAILED(failures, "%s: %s; want %d", c->name, why,
                                    c->result);
        }
        {
                /* A name that leaves no room for ".tmp". */
                char *name = malloc(PATH_MAX);

                assert_non_null(name);
                memset(name, 'a', PATH_MAX - 3);
                name[0] = '/';
                name[PATH_MAX - 3] = '\0';
                assert_int_equal(hp_write_file_atomic(name, "x", 1, 0644, 0),
                                 -ENAMETOOLONG);
                free(name);
        }
        umask(old_umask);
        assert_int_equal(hp_remove_tree(write_dir), 0);
        assert_int_equal(failures, 0);
}

/* The shortest text that reads back as the same double. */
static void test_format_double(void **state)
{
        static const struct {
                double v;
                const char *text;
        } doubles[] = {
                { 15.96, "15.96" },
                { 217.77, "217.77" },
                { 0.1, "0.1" },
                { 0.1 + 0.2, "0.30000000000000004" },
                { 1.0 / 3.0, "0.3333333333333333" },
                { 5.0, "5" },
                { -0.0, "-0" },
                { 50.0, "50" },
                { 1e21, "1e+21" },
                { 123456789012345678.0, "1.2345678901234568e+17" },
                { 5e-324, "5e-324" },
                { 2.5e-320, "2.5e-320" },
                { 1.7976931348623157e308, "1.7976931348623157e+308" },
                { INFINITY, "inf" },
                { -INFINITY, "-inf" },
                { NAN, "nan" },
        };
        char buf[HP_DOUBLE_LEN];

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(doubles); i++) {
                const char *got = hp_format_double(doubles[i].v, buf);

                if (strcmp(got, doubles[i].text) != 0)
                        fail_msg("case %zu: '%s', expected '%s'", i, got,
                                 doubles[i].text);
                if (isfinite(doubles[i].v) && strtod(got, NULL) != doubles[i].v)
                        fail_msg("case %zu: '%s' does not read back", i, got);
        }
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
                cmocka_unit_test(test_write_file_atomic),
                cmocka_unit_test(test_env_get),
                cmocka_unit_test(test_format_double),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
