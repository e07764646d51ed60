/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for helpers of src/common/util.c: hp_read_file, the one
 * whole-file reader with a ceiling (real files, a directory and a FIFO
 * in a fresh temporary directory), hp_write_file_atomic, the one atomic
 * writer (a file made, one replaced, paths it must refuse, links planted
 * at its names), hp_remove_tree (links planted in the tree, a directory
 * renamed and replaced by a link, a tree deeper than PATH_MAX),
 * hp_dir_open_trusted (owners and modes on the way to a log root),
 * hp_env_get, hp_format_double, and hp_json_exact_numbers. */
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

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "hyperpod/common.h"
#include "table.h"

enum kind {
        KIND_FILE, /* a regular file holding size bytes */
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
                        CASE_FAILED(failures,
                                    "%s: got %d (%s), %zu bytes%s;"
                                    " want %d",
                                    c->name, r, hp_strerror(r), len,
                                    bytes_ok ? "" : ", wrong bytes",
                                    c->result);
                free(r == 0 ? out : NULL);
        }
        assert_int_equal(hp_remove_tree(dir), 0);
        assert_int_equal(failures, 0);
}

/* What is at the path before hp_write_file_atomic() is called. */
enum before {
        BEFORE_NOTHING,
        BEFORE_FILE, /* a file holding OLD_TEXT */
        BEFORE_DIR,
};

#define OLD_TEXT "the old content, longer than the new\n"

struct write_case {
        const char *name;
        const char *path; /* under the test's directory */
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
                                                      strlen(OLD_TEXT)),
                                         0);
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
                           entries +
                                   (r == 0 && c->before == BEFORE_NOTHING)) {
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
                if (isfinite(doubles[i].v) &&
                    strtod(got, NULL) != doubles[i].v)
                        fail_msg("case %zu: '%s' does not read back", i, got);
        }
}

/* Numbers inside the chosen member print as written; those outside stay
 * cJSON's doubles; numbers JSON does not allow are refused where they
 * start. */
static void test_json_exact_numbers(void **state)
{
        static const struct {
                const char *in;
                const char *out; /* NULL: refused */
                size_t bad_at;
        } numbers[] = {
                { "{\"n\":1.0,\"w\":[1.0,-0.0,12345678901234567890]}",
                  "{\"n\":1,\"w\":[1.0,-0.0,12345678901234567890]}", 0 },
                { "{\"w\":{\"s\":\"-1 \\\" 2\",\"k\":[true,1E+2,0.10]},"
                  "\"n\":-0.0}",
                  "{\"w\":{\"s\":\"-1 \\\" 2\",\"k\":[true,1E+2,0.10]},"
                  "\"n\":-0}",
                  0 },
                { "{\"w\":1e400}", "{\"w\":1e400}", 0 },
                { "{\"w\":[01]}", NULL, 6 },
                { "{\"n\":1.,\"w\":2}", NULL, 5 },
                { "{\"w\":-01.5}", NULL, 5 },
                { "{\"w\":1.e5}", NULL, 5 },
        };

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(numbers); i++) {
                const char *in = numbers[i].in;
                cJSON *doc = cJSON_Parse(in);
                size_t bad_at = 0;
                char *text;
                int r;

                if (doc == NULL)
                        fail_msg("case %zu: cJSON refuses %s", i, in);
                r = hp_json_exact_numbers(
                        doc, cJSON_GetObjectItemCaseSensitive(doc, "w"), in,
                        strlen(in), &bad_at);
                if (numbers[i].out == NULL) {
                        if (r != -EINVAL || bad_at != numbers[i].bad_at)
                                fail_msg("case %zu: %d at %zu, expected "
                                         "-EINVAL at %zu",
                                         i, r, bad_at, numbers[i].bad_at);
                        cJSON_Delete(doc);
                        continue;
                }
                assert_int_equal(r, 0);
                text = cJSON_PrintUnformatted(doc);
                if (strcmp(text, numbers[i].out) != 0)
                        fail_msg("case %zu: %s, expected %s", i, text,
                                 numbers[i].out);
                cJSON_free(text);
                cJSON_Delete(doc);
        }
}

#define VICTIM_TEXT "root's own file, which no one may overwrite\n"

/* A file outside the tree that a planted link points to. */
static void make_victim(const char *path)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

        assert_true(fd >= 0);
        assert_int_equal(hp_write_all(fd, VICTIM_TEXT, strlen(VICTIM_TEXT)),
                         0);
        close(fd);
}

static void test_write_file_atomic_links(void **state)
{
        char links_dir[] = "/tmp/hp-writelink-XXXXXX";
        char victim[PATH_MAX], path[PATH_MAX], link[PATH_MAX + 8];
        struct stat st;

        (void)state;
        assert_non_null(mkdtemp(links_dir));
        snprintf(victim, sizeof(victim), "%s/victim", links_dir);
        make_victim(victim);
        /* The old temporary name, planted as a link: neither followed
         * nor truncated through. */
        snprintf(path, sizeof(path), "%s/stacks-report-1.json", links_dir);
        snprintf(link, sizeof(link), "%s.tmp", path);
        assert_int_equal(symlink(victim, link), 0);
        assert_int_equal(hp_write_file_atomic(path, "{}\n", 3, 0600, 0), 0);
        assert_true(holds(victim, VICTIM_TEXT));
        assert_true(holds(path, "{}\n"));
        assert_int_equal(lstat(link, &st), 0);
        assert_true(S_ISLNK(st.st_mode));
        /* A link at the name itself is replaced, not written through. */
        snprintf(path, sizeof(path), "%s/hang-report.json", links_dir);
        assert_int_equal(symlink(victim, path), 0);
        assert_int_equal(hp_write_file_atomic(path, "{}\n", 3, 0600, 0), 0);
        assert_true(holds(victim, VICTIM_TEXT));
        assert_int_equal(lstat(path, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0600);
        /* The report, a victim, a link, a report: no temporary left. */
        assert_int_equal(entries_in(links_dir), 4);
        assert_int_equal(hp_remove_tree(links_dir), 0);
}

static void make_dir(const char *base, const char *name)
{
        char path[PATH_MAX];

        snprintf(path, sizeof(path), "%s/%s", base, name);
        assert_int_equal(mkdir(path, 0700), 0);
}

static void make_file(const char *base, const char *name)
{
        char path[PATH_MAX];

        snprintf(path, sizeof(path), "%s/%s", base, name);
        make_victim(path);
}

static bool exists(const char *base, const char *name)
{
        char path[PATH_MAX];
        struct stat st;

        snprintf(path, sizeof(path), "%s/%s", base, name);
        return lstat(path, &st) == 0;
}

static void test_remove_tree_links(void **state)
{
        char base[] = "/tmp/hp-rmtree-XXXXXX";
        char path[PATH_MAX], target[PATH_MAX], name[201];
        int run_fd, fd;

        (void)state;
        assert_non_null(mkdtemp(base));
        make_dir(base, "victim");
        make_file(base, "victim/precious");

        /* Links inside the tree go; what they point to stays. */
        make_dir(base, "tree");
        make_dir(base, "tree/a");
        make_file(base, "tree/a/file");
        snprintf(target, sizeof(target), "%s/victim", base);
        snprintf(path, sizeof(path), "%s/tree/a/dir-link", base);
        assert_int_equal(symlink(target, path), 0);
        snprintf(target, sizeof(target), "%s/victim/precious", base);
        snprintf(path, sizeof(path), "%s/tree/file-link", base);
        assert_int_equal(symlink(target, path), 0);
        snprintf(path, sizeof(path), "%s/tree", base);
        assert_int_equal(hp_remove_tree(path), 0);
        assert_false(exists(base, "tree"));
        assert_true(exists(base, "victim/precious"));

        /* A link given as the tree: the link goes. */
        snprintf(target, sizeof(target), "%s/victim", base);
        snprintf(path, sizeof(path), "%s/top-link", base);
        assert_int_equal(symlink(target, path), 0);
        assert_int_equal(hp_remove_tree(path), 0);
        assert_false(exists(base, "top-link"));
        assert_true(exists(base, "victim/precious"));

        /* The attack on an attempt directory: the run directory is
         * renamed and a link to a victim directory put in its place
         * before the attempt is cleared. By the run directory's fd, the
         * moved directory is cleared; a path would lead to the victim. */
        make_dir(base, "run");
        make_dir(base, "run/attempt_1");
        make_file(base, "run/attempt_1/stdout.log");
        make_dir(base, "victim/attempt_1");
        make_file(base, "victim/attempt_1/keep");
        snprintf(path, sizeof(path), "%s/run", base);
        run_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(run_fd >= 0);
        snprintf(target, sizeof(target), "%s/run.moved", base);
        assert_int_equal(rename(path, target), 0);
        assert_int_equal(symlink("victim", path), 0);
        assert_int_equal(hp_remove_tree_at(run_fd, "attempt_1"), 0);
        close(run_fd);
        assert_false(exists(base, "run.moved/attempt_1"));
        assert_true(exists(base, "victim/attempt_1/keep"));

        /* Deeper than PATH_MAX, which no path-based walk can name. */
        memset(name, 'd', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        make_dir(base, "deep");
        snprintf(path, sizeof(path), "%s/deep", base);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        for (int i = 0; i < 2 * PATH_MAX / (int)sizeof(name); i++) {
                int next;

                assert_int_equal(mkdirat(fd, name, 0700), 0);
                next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                assert_true(next >= 0);
                close(fd);
                fd = next;
        }
        close(fd);
        assert_int_equal(hp_remove_tree(path), 0);
        assert_false(exists(base, "deep"));

        /* Missing: nothing to do. */
        assert_int_equal(hp_remove_tree(path), 0);
        assert_int_equal(hp_remove_tree(base), 0);
}

/* A directory on the way to a log root, as the case sets it up under the
 * test's directory: its mode and owner; a symlink when link is set. */
struct trust_step {
        const char *name;
        unsigned mode;
        unsigned uid;
        const char *link; /* a symlink to this instead of a directory */
};

struct trust_case {
        const char *name;
        struct trust_step steps[3];
        unsigned flags;
        bool trusted;
        const char *says; /* in errbuf when refused */
        bool root_only;   /* needs another uid's files: chown */
};

#define OTHER_UID 65534u

static const struct trust_case trust_cases[] = {
        { "our 0755 directory",
          { { "a", 0755, 0, NULL } },
          0,
          true,
          NULL,
          false },
        { "our 0700 directory",
          { { "a", 0700, 0, NULL } },
          0,
          true,
          NULL,
          false },
        { "writable by others",
          { { "a", 0777, 0, NULL } },
          0,
          false,
          "is writable by every user (mode 0777",
          false },
        { "writable by its group",
          { { "a", 0775, 0, NULL } },
          0,
          false,
          "is writable by its group (mode 0775",
          false },
        { "sticky, as the root itself",
          { { "a", 01777, 0, NULL } },
          0,
          false,
          "mode 1777",
          false },
        { "sticky, as a parent for private directories",
          { { "a", 01777, 0, NULL } },
          HP_DIR_STICKY_OK,
          true,
          NULL,
          false },
        { "under a sticky directory",
          { { "a", 01777, 0, NULL }, { "a/b", 0755, 0, NULL } },
          0,
          true,
          NULL,
          false },
        { "under a directory writable by others",
          { { "a", 0777, 0, NULL }, { "a/b", 0755, 0, NULL } },
          0,
          false,
          "without the sticky bit",
          false },
        { "made where missing, under ours",
          { { "a", 0755, 0, NULL }, { "a/b", 0, 0, NULL } },
          HP_DIR_CREATE,
          true,
          NULL,
          false },
        { "our symlink to ours",
          { { "a", 0755, 0, NULL }, { "l", 0, 0, "a" } },
          0,
          true,
          NULL,
          false },
        { "another uid's directory",
          { { "a", 0755, OTHER_UID, NULL } },
          0,
          false,
          "is owned by uid 65534 (mode 0755), not by root",
          true },
        { "under another uid's directory",
          { { "a", 0755, OTHER_UID, NULL }, { "a/b", 0755, 0, NULL } },
          0,
          false,
          "is owned by uid 65534",
          true },
        { "another uid's symlink in a sticky directory",
          { { "a", 01777, 0, NULL },
            { "b", 0755, 0, NULL },
            { "a/l", 0, OTHER_UID, "../b" } },
          0,
          false,
          "the symlink",
          true },
};

static void test_dir_open_trusted(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(trust_cases) / sizeof(trust_cases[0]);
             i++) {
                const struct trust_case *c = &trust_cases[i];
                char base[] = "/tmp/hp-trust-XXXXXX";
                char path[PATH_MAX] = "", err[PATH_MAX + 256] = "";
                int fd;

                if (c->root_only && geteuid() != 0) {
                        print_message("skipped (needs root): %s\n", c->name);
                        continue;
                }
                assert_non_null(mkdtemp(base));
                assert_int_equal(chmod(base, 0755), 0);
                for (size_t k = 0; k < 3 && c->steps[k].name; k++) {
                        const struct trust_step *t = &c->steps[k];

                        snprintf(path, sizeof(path), "%s/%s", base, t->name);
                        if (t->link != NULL) {
                                assert_int_equal(symlink(t->link, path), 0);
                                assert_int_equal(lchown(path, t->uid, 0), 0);
                                continue;
                        }
                        if (t->mode == 0)
                                continue; /* to be made */
                        assert_int_equal(mkdir(path, 0700), 0);
                        assert_int_equal(chmod(path, t->mode), 0);
                        if (t->uid != 0)
                                assert_int_equal(chown(path, t->uid, 0), 0);
                }
                fd = hp_dir_open_trusted(path, c->flags, err, sizeof(err));
                if (c->trusted && fd < 0)
                        CASE_FAILED(failures, "%s: refused (%d): %s", c->name,
                                    fd, err);
                else if (!c->trusted && fd >= 0)
                        CASE_FAILED(failures, "%s: trusted", c->name);
                else if (!c->trusted &&
                         (fd != HP_ECONFIG || strstr(err, c->says) == NULL))
                        CASE_FAILED(failures, "%s: got %d, '%s', want '%s'",
                                    c->name, fd, err, c->says);
                if (fd >= 0)
                        close(fd);
                assert_int_equal(hp_remove_tree(base), 0);
        }
        assert_int_equal(failures, 0);
}

static void test_env_get(void **state)
{
        static char *const envp[] = {
                "A=1", "AB=2", "C=", "D", "E==x", NULL
        };
        static const struct {
                const char *name;
                const char *value; /* NULL: not set */
        } env_cases[] = {
                { "A", "1" },  { "AB", "2" }, { "C", "" },  { "D", NULL },
                { "E", "=x" }, { "B", NULL }, { "", NULL },
        };
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(env_cases) / sizeof(env_cases[0]);
             i++) {
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
                cmocka_unit_test(test_write_file_atomic_links),
                cmocka_unit_test(test_remove_tree_links),
                cmocka_unit_test(test_dir_open_trusted),
                cmocka_unit_test(test_env_get),
                cmocka_unit_test(test_format_double),
                cmocka_unit_test(test_json_exact_numbers),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
