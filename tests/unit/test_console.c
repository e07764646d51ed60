/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the console writer (src/stream/console.c), on real pipes.
 *
 * A pipe nobody reads is made deterministic by filling it before the
 * console starts: the writer thread then blocks in its first write(), and
 * the ring holds exactly what was queued until the test drains the pipe.
 * No test sleeps; waits are hp_console_flush/close with bounded timeouts.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
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
#include "hyperpod/stream.h"
#include "stream-private.h"

/* Generous: these only bound a test that is already failing. */
#define FLUSH_TIMEOUT_MS 10000

#define DROP_MARKER "[hyperpodrun]: "

/* ---- Helpers ---- */

static void make_pipe(int fds[2])
{
        assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
}

/* Fills the pipe until a write would block, and returns how many bytes it
 * took, so that the console writer blocks on its first write(). */
static size_t fill_pipe(int fd)
{
        static const char block[4096];
        size_t filled = 0;
        int flags = fcntl(fd, F_GETFL);

        assert_true(flags >= 0);
        assert_int_equal(fcntl(fd, F_SETFL, flags | O_NONBLOCK), 0);
        for (;;) {
                ssize_t n = write(fd, block, sizeof(block));

                if (n < 0) {
                        assert_int_equal(errno, EAGAIN);
                        break;
                }
                filled += (size_t)n;
        }
        /* Any room smaller than a block is closed with single bytes. */
        while (write(fd, block, 1) == 1)
                filled++;
        assert_int_equal(errno, EAGAIN);
        assert_int_equal(fcntl(fd, F_SETFL, flags), 0);
        return filled;
}

/* Reads and discards exactly n bytes: the filler, never the console's. */
static void drain_exactly(int fd, size_t n)
{
        char buf[4096];

        while (n > 0) {
                ssize_t r = read(fd, buf, n < sizeof(buf) ? n : sizeof(buf));

                if (r < 0 && errno == EINTR)
                        continue;
                assert_true(r > 0);
                n -= (size_t)r;
        }
}

/* Everything that comes out of fd until EOF, NUL-terminated for printing.
 * The caller frees it. */
static char *read_to_eof(int fd, size_t *out_len)
{
        size_t len = 0, cap = 4096;
        char *buf = test_malloc(cap + 1);

        assert_non_null(buf);
        for (;;) {
                ssize_t r;

                if (len == cap) {
                        cap *= 2;
                        buf = test_realloc(buf, cap + 1);
                        assert_non_null(buf);
                }
                r = read(fd, buf + len, cap - len);
                if (r < 0 && errno == EINTR)
                        continue;
                assert_true(r >= 0);
                if (r == 0)
                        break;
                len += (size_t)r;
        }
        buf[len] = '\0';
        *out_len = len;
        return buf;
}

/* The next line of out (without its newline), or NULL at the end. A final
 * fragment with no newline is returned too, so that a cut line shows. */
static const char *next_line(const char *out, size_t len, size_t *pos,
                             size_t *line_len)
{
        const char *start = out + *pos;
        const char *nl;

        if (*pos >= len)
                return NULL;
        nl = memchr(start, '\n', len - *pos);
        *line_len = nl ? (size_t)(nl - start) : len - *pos;
        *pos += *line_len + (nl ? 1 : 0);
        return start;
}

static uint64_t queued_bytes(struct hp_console *con)
{
        uint64_t n;

        uv_mutex_lock(&con->lock);
        n = con->head - con->tail;
        uv_mutex_unlock(&con->lock);
        return n;
}

/* ---- Lines come out whole, with their prefix ---- */

struct put_case {
        const char *name;
        const char *prefix;
        const char *line;
        size_t len;
        enum hp_line_end end;
        bool capped_marker; /* a marker between the line and the newline */
};

#define BYTES(s) s, sizeof(s) - 1

static const struct put_case put_cases[] = {
        { "a prefixed line", "[default0]:", BYTES("hello"), HP_LINE_EOL,
          false },
        { "no prefix", "", BYTES("raw output"), HP_LINE_EOL, false },
        { "an empty line keeps its prefix", "[default1]:", BYTES(""),
          HP_LINE_EOL, false },
        { "a final line without newline still gets one",
          "[default0]:", BYTES("tail"), HP_LINE_EOF, false },
        { "NUL bytes and invalid UTF-8 are kept",
          "[p]:", BYTES("a\0b\xff\xfe"), HP_LINE_EOL, false },
        { "a capped line gets the marker",
          "[default0]:", BYTES("first piece"), HP_LINE_CAPPED, true },
        { "the rest of a capped line is a normal line",
          "[default0]:", BYTES("rest"), HP_LINE_EOL, false },
};

static void test_lines_are_written_whole_with_prefix(void **state)
{
        struct hp_console con;
        int fds[2];
        size_t len, pos = 0;
        char *out;

        (void)state;
        make_pipe(fds);
        assert_int_equal(hp_console_init(&con, fds[1], 4096), 0);
        for (size_t k = 0; k < HP_ARRAY_SIZE(put_cases); k++) {
                const struct put_case *c = &put_cases[k];

                if (!hp_console_put_line(&con, c->prefix, strlen(c->prefix),
                                         c->line, c->len, c->end))
                        fail_msg("%s: the line was dropped", c->name);
        }
        hp_console_flush(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(queued_bytes(&con), 0);
        assert_int_equal(con.lines_queued, HP_ARRAY_SIZE(put_cases));
        assert_int_equal(con.lines_dropped, 0);
        assert_int_equal(con.write_error, 0);
        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_null(con.ring);
        assert_int_equal(close(fds[1]), 0);

        out = read_to_eof(fds[0], &len);
        for (size_t k = 0; k < HP_ARRAY_SIZE(put_cases); k++) {
                const struct put_case *c = &put_cases[k];
                size_t prefix_len = strlen(c->prefix), line_len = 0;
                const char *line = next_line(out, len, &pos, &line_len);
                const char *rest;

                if (line == NULL)
                        fail_msg("%s: missing from the output", c->name);
                if (line_len < prefix_len + c->len ||
                    memcmp(line, c->prefix, prefix_len) != 0 ||
                    memcmp(line + prefix_len, c->line, c->len) != 0)
                        fail_msg("%s: got '%.*s'", c->name, (int)line_len,
                                 line);
                rest = line + prefix_len + c->len;
                line_len -= prefix_len + c->len;
                if (!c->capped_marker && line_len != 0)
                        fail_msg("%s: unexpected '%.*s' after the line",
                                 c->name, (int)line_len, rest);
                if (c->capped_marker &&
                    (line_len == 0 || rest[0] != ' ' ||
                     memmem(rest, line_len, "line longer than", 16) == NULL))
                        fail_msg("%s: no cut-line marker in '%.*s'", c->name,
                                 (int)line_len, rest);
        }
        assert_int_equal(pos, len);
        assert_int_equal(out[len - 1], '\n');
        test_free(out);
        assert_int_equal(close(fds[0]), 0);
}

/* ---- A console nobody reads drops whole lines and says so ---- */

static void test_full_ring_drops_lines_and_reports_them(void **state)
{
        enum { RING = 256, LINES = 100 };
        static const char prefix[] = "[0]: ";
        const size_t line_bytes = sizeof(prefix) - 1 + 8 + 1;
        const size_t fit = RING / line_bytes; /* whole lines that fit */
        struct hp_console con;
        bool queued[LINES];
        char payload[16], want[128];
        size_t filler, len, pos = 0, line_len = 0, accepted = 0;
        const char *line;
        int fds[2];
        char *out;

        (void)state;
        make_pipe(fds);
        filler = fill_pipe(fds[1]);
        assert_int_equal(hp_console_init(&con, fds[1], RING), 0);

        /* Nobody reads: after the ring is full every put fails, and the
         * ring never takes part of a line. */
        for (int i = 0; i < LINES; i++) {
                snprintf(payload, sizeof(payload), "line %03d", i);
                queued[i] = hp_console_put_line(&con, prefix,
                                                sizeof(prefix) - 1, payload,
                                                strlen(payload), HP_LINE_EOL);
                if (queued[i])
                        accepted++;
                if (queued[i] && i > 0 && !queued[i - 1])
                        fail_msg("line %d was queued after line %d was "
                                 "dropped, with nobody reading",
                                 i, i - 1);
        }
        assert_int_equal(accepted, fit);
        assert_int_equal(con.lines_queued, fit);
        assert_int_equal(con.lines_dropped, LINES - fit);
        assert_int_equal(con.bytes_dropped, (LINES - fit) * line_bytes);
        assert_int_equal(con.dropped_unreported, LINES - fit);
        assert_int_equal(queued_bytes(&con), fit * line_bytes);

        /* Now the pipe is read, the ring drains, and the next line is
         * preceded by the note about what was lost. */
        drain_exactly(fds[0], filler);
        hp_console_flush(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(queued_bytes(&con), 0);
        assert_true(hp_console_put_line(&con, prefix, sizeof(prefix) - 1,
                                        "after", 5, HP_LINE_EOL));
        assert_int_equal(con.dropped_unreported, 0);
        assert_int_equal(con.lines_dropped, LINES - fit);
        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_null(con.ring);
        assert_int_equal(close(fds[1]), 0);

        out = read_to_eof(fds[0], &len);
        for (size_t i = 0; i < fit; i++) {
                snprintf(want, sizeof(want), "%sline %03zu", prefix, i);
                line = next_line(out, len, &pos, &line_len);
                if (line == NULL || line_len != strlen(want) ||
                    memcmp(line, want, line_len) != 0)
                        fail_msg("output line %zu is '%.*s', expected '%s'",
                                 i, line ? (int)line_len : 0,
                                 line ? line : "", want);
        }
        snprintf(want, sizeof(want), DROP_MARKER "%zu console lines dropped ",
                 LINES - fit);
        line = next_line(out, len, &pos, &line_len);
        if (line == NULL || line_len < strlen(want) ||
            memcmp(line, want, strlen(want)) != 0)
                fail_msg("expected the note '%s...', got '%.*s'", want,
                         line ? (int)line_len : 0, line ? line : "");
        line = next_line(out, len, &pos, &line_len);
        if (line == NULL || line_len != 10 || memcmp(line, "[0]: after", 10))
                fail_msg("expected '[0]: after' after the note, got '%.*s'",
                         line ? (int)line_len : 0, line ? line : "");
        assert_int_equal(pos, len);
        test_free(out);
        assert_int_equal(close(fds[0]), 0);
}

/* ---- Many lines through a small ring, read concurrently ---- */

enum { STRESS_LINES = 3000, STRESS_RING = 1000 };

/* Line i of the stress test: its number, then a length and a letter that
 * depend on i, so that a cut, a merge or a mix-up shows. */
static size_t stress_payload(int i, char *buf, size_t len)
{
        size_t n = (size_t)snprintf(buf, len, "%05d:", i);
        size_t fill = (size_t)(i * 37) % 200;

        assert_true(n + fill < len);
        memset(buf + n, 'a' + i % 26, fill);
        return n + fill;
}

struct pipe_reader {
        int fd;
        char *out;
        size_t len;
};

static void reader_main(void *arg)
{
        struct pipe_reader *rd = arg;

        rd->out = read_to_eof(rd->fd, &rd->len);
}

static void test_no_line_is_split_or_mixed_through_a_small_ring(void **state)
{
        static const char prefix[] = "[stress3]: ";
        struct pipe_reader rd;
        struct hp_console con;
        uv_thread_t reader;
        bool *queued = test_calloc(STRESS_LINES, sizeof(bool));
        char payload[256];
        size_t pos = 0, line_len, accepted = 0, seen = 0;
        uint64_t reported = 0;
        const char *line;
        int fds[2], next = 0;

        (void)state;
        assert_non_null(queued);
        make_pipe(fds);
        rd = (struct pipe_reader){ .fd = fds[0] };
        assert_int_equal(uv_thread_create(&reader, reader_main, &rd), 0);
        assert_int_equal(hp_console_init(&con, fds[1], STRESS_RING), 0);
        for (int i = 0; i < STRESS_LINES; i++) {
                size_t n = stress_payload(i, payload, sizeof(payload));

                queued[i] = hp_console_put_line(&con, prefix,
                                                sizeof(prefix) - 1, payload,
                                                n, HP_LINE_EOL);
                accepted += queued[i];
        }
        hp_console_flush(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(queued_bytes(&con), 0);
        assert_int_equal(con.lines_queued, accepted);
        assert_int_equal(con.lines_dropped, STRESS_LINES - accepted);
        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_null(con.ring);
        assert_int_equal(close(fds[1]), 0);
        assert_int_equal(uv_thread_join(&reader), 0);

        /* Every output line is a whole queued line, in order, or a note
         * that counts exactly the lines missing before the next one. */
        while ((line = next_line(rd.out, rd.len, &pos, &line_len)) != NULL) {
                size_t want_len;

                if (line_len >= strlen(DROP_MARKER) &&
                    memcmp(line, DROP_MARKER, strlen(DROP_MARKER)) == 0) {
                        unsigned long long n = strtoull(
                                line + strlen(DROP_MARKER), NULL, 10);

                        for (unsigned long long j = 0; j < n; j++, next++)
                                if (next >= STRESS_LINES || queued[next])
                                        fail_msg("a note says %llu lines "
                                                 "were dropped before line "
                                                 "%d, but line %d was not",
                                                 n, next, next);
                        reported += n;
                        continue;
                }
                while (next < STRESS_LINES && !queued[next])
                        next++;
                if (next == STRESS_LINES)
                        fail_msg("more lines came out than were queued: "
                                 "'%.*s'",
                                 (int)line_len, line);
                want_len = stress_payload(next, payload, sizeof(payload));
                if (line_len != sizeof(prefix) - 1 + want_len ||
                    memcmp(line, prefix, sizeof(prefix) - 1) != 0 ||
                    memcmp(line + sizeof(prefix) - 1, payload, want_len) != 0)
                        fail_msg("expected line %d, got '%.*s'", next,
                                 (int)line_len, line);
                next++;
                seen++;
        }
        assert_int_equal(seen, accepted);
        assert_int_equal(reported + con.dropped_unreported,
                         con.lines_dropped);
        assert_int_equal(rd.out[rd.len - 1], '\n');
        test_free(rd.out);
        test_free(queued);
        assert_int_equal(close(fds[0]), 0);
}

/* ---- Regular files and /dev/null are written directly ---- */

struct direct_case {
        const char *name;
        const char *path; /* NULL: a pipe */
        bool direct;
};

static const struct direct_case direct_cases[] = {
        { "a regular file", "@file", true },
        { "/dev/null", "/dev/null", true },
        { "a pipe", NULL, false },
};

/* Opens the fd a case names; a pipe's read end goes to *other. */
static int open_case_fd(const struct direct_case *c, char *file, int *other)
{
        int fds[2];

        *other = -1;
        if (c->path == NULL) {
                make_pipe(fds);
                *other = fds[0];
                return fds[1];
        }
        if (strcmp(c->path, "@file") == 0) {
                int fd = mkostemp(file, O_CLOEXEC);

                /* Open is all the console needs; the name can go now. */
                assert_true(fd >= 0);
                assert_int_equal(unlink(file), 0);
                return fd;
        }
        return open(c->path, O_WRONLY | O_CLOEXEC);
}

static void test_files_and_dev_null_are_direct(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(direct_cases); k++) {
                const struct direct_case *c = &direct_cases[k];
                char file[] = "/tmp/hp-test-console-XXXXXX";
                struct hp_console con;
                int fd, other;

                fd = open_case_fd(c, file, &other);
                assert_true(fd >= 0);
                assert_int_equal(hp_console_init(&con, fd, 4096), 0);
                if (con.direct != c->direct)
                        fail_msg("%s: direct is %d, expected %d", c->name,
                                 con.direct, c->direct);
                assert_true(hp_console_put_line(&con, "[0]:", 4, "x", 1,
                                                HP_LINE_EOL));
                hp_console_commit(&con);
                hp_console_close(&con, FLUSH_TIMEOUT_MS);
                assert_null(con.ring);
                assert_int_equal(con.lines_queued, 1);
                assert_int_equal(con.write_error, 0);
                assert_int_equal(close(fd), 0);
                if (other >= 0)
                        assert_int_equal(close(other), 0);
        }
}

/* What a file holds now, from its start, read with pread so that the
 * console's file offset does not move. The caller frees it. */
static char *file_contents(int fd, size_t *out_len)
{
        struct stat st;
        size_t len = 0;
        char *buf;

        assert_int_equal(fstat(fd, &st), 0);
        buf = test_malloc((size_t)st.st_size + 1);
        while (len < (size_t)st.st_size) {
                ssize_t r = pread(fd, buf + len, (size_t)st.st_size - len,
                                  (off_t)len);

                if (r < 0 && errno == EINTR)
                        continue;
                assert_true(r > 0);
                len += (size_t)r;
        }
        buf[len] = '\0';
        *out_len = len;
        return buf;
}

/* A direct console of cap bytes on an unlinked temporary file; returns
 * the file's fd, for the caller to read back and close. */
static int open_direct_console(struct hp_console *con, size_t cap)
{
        char file[] = "/tmp/hp-test-console-XXXXXX";
        int fd = mkostemp(file, O_CLOEXEC);

        assert_true(fd >= 0);
        assert_int_equal(unlink(file), 0);
        assert_int_equal(hp_console_init(con, fd, cap), 0);
        assert_true(con->direct);
        return fd;
}

/* Until a direct console's flood thread has written every buffer handed
 * to it. */
static void wait_flood_write(struct hp_console *con)
{
        uv_mutex_lock(&con->lock);
        while (con->queued > 0)
                uv_cond_wait(&con->drained, &con->lock);
        uv_mutex_unlock(&con->lock);
}

/* In direct mode the ring is a buffer written out when a line does not
 * fit and at each commit: nothing is dropped, lines stay whole, and the
 * order is kept across write-outs. */
static void test_direct_console_buffers_until_commit(void **state)
{
        enum { RING = 64 * HP_CONSOLE_BUFFERS }; /* buffers of 64 bytes */
        static const char *const lines[] = {
                "first", "second line",
                "",      "a longer line of text here",
                "x",     "a line that with its prefix fills most of the rin",
                "after",
        };
        struct hp_console con;
        char want[1024];
        size_t want_len = 0, len;
        char *out;
        int fd;

        (void)state;
        fd = open_direct_console(&con, RING);

        /* One line stays in the buffer until the batch ends. */
        assert_true(hp_console_put_line(&con, "[1]:", 4, lines[0],
                                        strlen(lines[0]), HP_LINE_EOL));
        out = file_contents(fd, &len);
        assert_int_equal(len, 0);
        test_free(out);
        hp_console_commit(&con);
        out = file_contents(fd, &len);
        assert_int_equal(len, 10);
        assert_memory_equal(out, "[1]:first\n", 10);
        test_free(out);
        want_len = (size_t)snprintf(want, sizeof(want), "[1]:first\n");

        /* More than the buffer holds goes out in whole lines. */
        for (size_t i = 1; i < HP_ARRAY_SIZE(lines); i++) {
                assert_true(hp_console_put_line(&con, "[1]:", 4, lines[i],
                                                strlen(lines[i]),
                                                HP_LINE_EOL));
                want_len += (size_t)snprintf(want + want_len,
                                             sizeof(want) - want_len,
                                             "[1]:%s\n", lines[i]);
                wait_flood_write(&con);
                out = file_contents(fd, &len);
                /* Whatever reached the file ends at a line boundary. */
                if (len > 0 && out[len - 1] != '\n')
                        fail_msg("after line %zu the file ends mid-line", i);
                assert_true(len <= want_len);
                assert_memory_equal(out, want, len);
                test_free(out);
        }
        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_null(con.ring);
        assert_int_equal(con.lines_queued, HP_ARRAY_SIZE(lines));
        assert_int_equal(con.lines_dropped, 0);

        out = file_contents(fd, &len);
        assert_int_equal(len, want_len);
        assert_memory_equal(out, want, want_len);
        test_free(out);
        assert_int_equal(close(fd), 0);
}

/* A flood through a direct console: the first full buffer starts the
 * thread that writes the buffers handed to it, in order, while lines go
 * into a free one; with buffers of 4 KiB that is hundreds of hand-overs,
 * often with several buffers queued. Nothing
 * is dropped or reordered, an ordered commit leaves every line queued so
 * far in the file, and close writes the rest. */
static const char file_filler[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

static void flood_through_direct_console(size_t ring)
{
        enum { LINES = 20000, ORDERED_AT = 12345 };
        struct hp_console con;
        char line[200], *want, *out;
        size_t want_len = 0, len, cap = (size_t)LINES * 220;
        int fd;

        fd = open_direct_console(&con, ring);
        want = test_malloc(cap);
        for (int i = 0; i < LINES; i++) {
                int n = snprintf(line, sizeof(line), "line %d %.*s", i,
                                 (i * 7919) % 150, file_filler);

                assert_true(hp_console_put_line(&con, "[3]:", 4, line,
                                                (size_t)n, HP_LINE_EOL));
                want_len += (size_t)snprintf(want + want_len, cap - want_len,
                                             "[3]:%s\n", line);
                if (i == ORDERED_AT) {
                        assert_true(con.direct_thread);
                        hp_console_commit_ordered(&con);
                        out = file_contents(fd, &len);
                        assert_int_equal(len, want_len);
                        assert_memory_equal(out, want, want_len);
                        test_free(out);
                }
        }
        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(con.lines_queued, LINES);
        assert_int_equal(con.lines_dropped, 0);
        assert_int_equal(con.write_error, 0);
        out = file_contents(fd, &len);
        assert_int_equal(len, want_len);
        assert_memory_equal(out, want, want_len);
        test_free(out);
        test_free(want);
        assert_int_equal(close(fd), 0);
}

static void test_direct_console_flood_writes_on_its_thread(void **state)
{
        (void)state;
        flood_through_direct_console(4096 * HP_CONSOLE_BUFFERS);
}

/* A buffer larger than HP_CONSOLE_WRITE_MAX goes out in several writes,
 * the last one short: the file still holds every byte once, in order. */
static void test_direct_console_writes_a_large_buffer_in_pieces(void **state)
{
        (void)state;
        flood_through_direct_console((2 * HP_CONSOLE_WRITE_MAX + 4096) *
                                     HP_CONSOLE_BUFFERS);
}

/* A threaded console's writer is woken by the commit that ends a batch
 * (not by each line), or early once a quarter of the ring waits: either
 * way the lines reach the fd with no flush. A reader that times out here
 * means the writer slept through a commit or a full batch. */
static void read_exactly_or_fail(int fd, const char *want, size_t len)
{
        char buf[8192];
        size_t got = 0;

        assert_true(len <= sizeof(buf));
        while (got < len) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                ssize_t r;

                if (poll(&pfd, 1, FLUSH_TIMEOUT_MS) == 0)
                        fail_msg("the writer was not woken: %zu of %zu "
                                 "bytes arrived",
                                 got, len);
                r = read(fd, buf + got, len - got);
                if (r < 0 && errno == EINTR)
                        continue;
                assert_true(r > 0);
                got += (size_t)r;
        }
        assert_memory_equal(buf, want, len);
}

static void
test_threaded_console_writes_at_commit_and_in_batches(void **state)
{
        enum { RING = 4096 };
        struct hp_console con;
        char want[RING];
        size_t want_len = 0;
        int fds[2];

        (void)state;
        make_pipe(fds);
        assert_int_equal(hp_console_init(&con, fds[1], RING), 0);
        assert_false(con.direct);

        /* A small batch: written once committed. */
        for (int i = 0; i < 3; i++) {
                assert_true(hp_console_put_line(&con, "[0]:", 4, "small", 5,
                                                HP_LINE_EOL));
                want_len += (size_t)snprintf(want + want_len,
                                             sizeof(want) - want_len,
                                             "[0]:small\n");
        }
        hp_console_commit(&con);
        read_exactly_or_fail(fds[0], want, want_len);

        /* A batch past a quarter of the ring wakes the writer by itself. */
        want_len = 0;
        while (want_len < RING / 4) {
                assert_true(hp_console_put_line(&con, "[1]:", 4,
                                                "a line in a large batch", 23,
                                                HP_LINE_EOL));
                want_len += 28;
        }
        for (size_t i = 0; i < want_len; i += 28)
                memcpy(want + i, "[1]:a line in a large batch\n", 28);
        read_exactly_or_fail(fds[0], want, want_len);

        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(con.lines_dropped, 0);
        assert_int_equal(close(fds[1]), 0);
        assert_int_equal(close(fds[0]), 0);
}

/* A line longer than a direct console's whole buffer cannot be queued:
 * the put says so, and the counters agree with it. */
/* A file console never drops: a line larger than its whole buffer (only
 * possible with a buffer below HP_LINE_MAX) is written through in pieces
 * and still arrives as one line, in order after what was buffered. */
static void test_direct_console_writes_a_line_it_cannot_hold(void **state)
{
        enum { RING = 16 * HP_CONSOLE_BUFFERS }; /* buffers of 16 bytes */
        static const char line[] = "this line is longer than the buffer";
        static const char expected[] = "[0]:ab\n[0]:this line is longer "
                                       "than the buffer\n";
        char path[] = "/tmp/hp-console-direct-XXXXXX";
        char got[256];
        struct hp_console con;
        ssize_t n;
        int fd = mkstemp(path);

        (void)state;
        assert_true(fd >= 0);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(hp_console_init(&con, fd, RING), 0);
        assert_true(con.direct);
        assert_true(
                hp_console_put_line(&con, "[0]:", 4, "ab", 2, HP_LINE_EOL));
        assert_true(hp_console_put_line(&con, "[0]:", 4, line,
                                        sizeof(line) - 1, HP_LINE_EOL));
        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(con.lines_queued, 2);
        assert_int_equal(con.lines_dropped, 0);
        n = pread(fd, got, sizeof(got), 0);
        assert_int_equal(n, sizeof(expected) - 1);
        assert_memory_equal(got, expected, sizeof(expected) - 1);
        assert_int_equal(close(fd), 0);
}

/* ---- A dead or stuck reader never keeps the agent waiting ---- */

static void test_closed_pipe_does_not_hang_close(void **state)
{
        struct hp_console con;
        int fds[2];

        (void)state;
        assert_true(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
        make_pipe(fds);
        assert_int_equal(close(fds[0]), 0);
        assert_int_equal(hp_console_init(&con, fds[1], 4096), 0);
        for (int i = 0; i < 10; i++)
                assert_true(hp_console_put_line(&con, "[0]:", 4, "lost", 4,
                                                HP_LINE_EOL));
        hp_console_flush(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(queued_bytes(&con), 0);
        assert_int_equal(con.write_error, -EPIPE);

        /* After the error the console keeps taking lines and throwing
         * them away, so the producer never notices. */
        assert_true(
                hp_console_put_line(&con, "[0]:", 4, "more", 4, HP_LINE_EOL));
        hp_console_flush(&con, FLUSH_TIMEOUT_MS);
        assert_int_equal(queued_bytes(&con), 0);

        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        /* The ring is freed only when the writer thread was joined. */
        assert_null(con.ring);
        assert_int_equal(close(fds[1]), 0);
}

/*
 * A reader that never reads: flush and close give up after their timeout.
 * The writer thread stays blocked in write() for the rest of the process,
 * so the console and its pipe are static and stay open: freeing them
 * under a thread that may still wake up would be the bug.
 */
static struct hp_console stuck_console;
static int stuck_fds[2] = { -1, -1 };

static void test_stuck_reader_times_out_and_counts_lines(void **state)
{
        static const char line[] = "never read";
        const uint64_t timeout_ms = 100;
        struct hp_console *con = &stuck_console;
        uint64_t start, elapsed_ms;

        (void)state;
        make_pipe(stuck_fds);
        (void)fill_pipe(stuck_fds[1]);
        assert_int_equal(hp_console_init(con, stuck_fds[1], 4096), 0);
        for (int i = 0; i < 3; i++)
                assert_true(hp_console_put_line(con, "[0]:", 4, line,
                                                sizeof(line) - 1,
                                                HP_LINE_EOL));

        start = uv_hrtime();
        hp_console_flush(con, timeout_ms);
        elapsed_ms = (uv_hrtime() - start) / 1000000;
        assert_true(elapsed_ms >= timeout_ms);
        assert_true(elapsed_ms < FLUSH_TIMEOUT_MS);
        assert_int_equal(queued_bytes(con), 3 * (4 + sizeof(line)));

        /* The reader made no progress since: one stuck console costs one
         * timeout, so close does not wait a second time. */
        start = uv_hrtime();
        hp_console_close(con, timeout_ms);
        elapsed_ms = (uv_hrtime() - start) / 1000000;
        assert_true(elapsed_ms < timeout_ms);
        /* The thread could not be joined, so the ring is left to it. */
        assert_non_null(con->ring);
        assert_int_equal(con->bytes_dropped, 3 * (4 + sizeof(line)));
        /* "Lines still queued after the timeout are counted as dropped":
         * all three of them. */
        assert_int_equal(con->lines_dropped, 3);
}

/* ---- The agent's own messages ---- */

static void test_messages_never_block_and_last_drops_are_told(void **state)
{
        enum { RING = 256, MESSAGES = 20 };
        static const char msg[] = "hyperpodrun[1]: warning: message\n";
        const size_t fit = RING / (sizeof(msg) - 1);
        struct hp_console con;
        size_t filler, len, pos = 0, line_len = 0;
        const char *line;
        char want[128];
        int fds[2];
        char *out;

        (void)state;
        make_pipe(fds);
        filler = fill_pipe(fds[1]);
        assert_int_equal(hp_console_init(&con, fds[1], RING), 0);

        /* Nobody reads: the messages that fit are queued whole, the rest
         * dropped and counted, and none of the calls waits. */
        for (int i = 0; i < MESSAGES; i++)
                hp_console_put_message(&con, msg, sizeof(msg) - 1);
        assert_int_equal(con.lines_queued, fit);
        assert_int_equal(con.messages_dropped, MESSAGES - fit);
        assert_int_equal(con.lines_dropped, MESSAGES - fit);
        assert_int_equal(con.dropped_unreported, MESSAGES - fit);

        /* No later line brings the marker out: closing must. */
        drain_exactly(fds[0], filler);
        hp_console_close(&con, FLUSH_TIMEOUT_MS);
        assert_null(con.ring);
        assert_int_equal(close(fds[1]), 0);
        out = read_to_eof(fds[0], &len);
        for (size_t i = 0; i < fit; i++) {
                line = next_line(out, len, &pos, &line_len);
                if (line == NULL || line_len != sizeof(msg) - 2 ||
                    memcmp(line, msg, line_len) != 0)
                        fail_msg("output line %zu is '%.*s'", i,
                                 line ? (int)line_len : 0, line ? line : "");
        }
        snprintf(want, sizeof(want), DROP_MARKER "%zu console lines dropped ",
                 MESSAGES - fit);
        line = next_line(out, len, &pos, &line_len);
        if (line == NULL || line_len < strlen(want) ||
            memcmp(line, want, strlen(want)) != 0)
                fail_msg("expected the note '%s...' at the end, got '%.*s'",
                         want, line ? (int)line_len : 0, line ? line : "");
        assert_int_equal(pos, len);
        test_free(out);
        assert_int_equal(close(fds[0]), 0);
}

/* A console whose writes fail counts the lines they lost, with the
 * error, whether a thread or the loop writes it. */
struct failed_case {
        const char *name;
        const char *path;
        int error;
};

static const struct failed_case failed_cases[] = {
        { "threaded, /dev/full", "/dev/full", -ENOSPC },
};

static void test_failed_writes_are_counted_as_lost_lines(void **state)
{
        (void)state;
        for (size_t c = 0; c < HP_ARRAY_SIZE(failed_cases); c++) {
                const struct failed_case *fc = &failed_cases[c];
                struct hp_console con;
                int fd = open(fc->path, O_WRONLY | O_CLOEXEC), error;

                assert_true(fd >= 0);
                assert_int_equal(hp_console_init(&con, fd, 4096), 0);
                for (int i = 0; i < 3; i++)
                        assert_true(hp_console_put_line(&con, "p: ", 3, "x",
                                                        1, HP_LINE_EOL));
                hp_console_commit(&con);
                hp_console_flush(&con, FLUSH_TIMEOUT_MS);
                if (hp_console_lost_lines(&con, &error) != 3 ||
                    error != fc->error)
                        fail_msg("%s: %llu lines lost, error %d", fc->name,
                                 (unsigned long long)
                                         hp_console_lost_lines(&con, &error),
                                 error);
                hp_console_close(&con, FLUSH_TIMEOUT_MS);
                assert_int_equal(close(fd), 0);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_lines_are_written_whole_with_prefix),
                cmocka_unit_test(test_full_ring_drops_lines_and_reports_them),
                cmocka_unit_test(
                        test_no_line_is_split_or_mixed_through_a_small_ring),
                cmocka_unit_test(test_files_and_dev_null_are_direct),
                cmocka_unit_test(test_direct_console_buffers_until_commit),
                cmocka_unit_test(
                        test_direct_console_flood_writes_on_its_thread),
                cmocka_unit_test(
                        test_direct_console_writes_a_large_buffer_in_pieces),
                cmocka_unit_test(
                        test_threaded_console_writes_at_commit_and_in_batches),
                cmocka_unit_test(
                        test_direct_console_writes_a_line_it_cannot_hold),
                cmocka_unit_test(test_closed_pipe_does_not_hang_close),
                cmocka_unit_test(
                        test_messages_never_block_and_last_drops_are_told),
                cmocka_unit_test(
                        test_failed_writes_are_counted_as_lost_lines),
                /* Last: it leaves a writer thread blocked until exit. */
                cmocka_unit_test(
                        test_stuck_reader_times_out_and_counts_lines),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
