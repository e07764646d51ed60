/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the worker streams and their hub (src/stream/stream.c):
 * pipes as group.c makes them (and socket pairs, which the hub reads
 * as well), a real loop, real files.
 *
 * A writer thread plays the workers: it cuts each stream's lines into
 * writes of random sizes, mostly small pieces (a steady job, which the hub
 * reads paced) with now and then a burst larger than a read chunk (a fast
 * writer, which ends the pacing and fills the file buffer), interleaved
 * across the streams. Whatever the timing, every byte must reach each
 * stream's file in order, and every line its console whole, in order per
 * stream, and the listener. No test sleeps or measures time.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/stream.h"
#include "stream-private.h"

#define MAX_STREAMS 8
#define FLUSH_TIMEOUT_MS 10000

/* ---- Expected output ---- */

/* Stream k's bytes: lines "s<k> <n> <payload>\n" with payload lengths
 * from a fixed pseudo-random sequence, so each case is reproducible. */
static uint32_t next_rand(uint32_t *state)
{
        *state = *state * 1103515245u + 12345u;
        return *state >> 8;
}

static char *make_data(int k, size_t lines, size_t *len)
{
        uint32_t rng = 1000u + (uint32_t)k;
        size_t cap = lines * 400 + 64, n = 0;
        char *data = test_malloc(cap);

        assert_non_null(data);
        for (size_t i = 0; i < lines; i++) {
                size_t payload = next_rand(&rng) % 300;

                n += (size_t)snprintf(data + n, cap - n, "s%d %06zu ", k, i);
                for (size_t j = 0; j < payload; j++)
                        data[n++] = (char)('a' + (i + j) % 26);
                data[n++] = '\n';
        }
        *len = n;
        return data;
}

/* ---- The workers: one thread writing every stream ---- */

struct writer {
        int count;
        int fds[MAX_STREAMS];
        const char *data[MAX_STREAMS];
        size_t len[MAX_STREAMS];
        size_t burst; /* every 50th write is this large (0: none) */
};

static void write_fully(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);

                if (w < 0 && errno == EINTR)
                        continue;
                assert_true(w > 0);
                p += w;
                n -= (size_t)w;
        }
}

static void writer_main(void *arg)
{
        struct writer *wr = arg;
        size_t done[MAX_STREAMS] = { 0 };
        uint32_t rng = 7;
        int left = wr->count;
        unsigned writes = 0;

        while (left > 0) {
                int k = (int)(next_rand(&rng) % (uint32_t)wr->count);
                size_t n = 1 + next_rand(&rng) % 400;

                if (done[k] == wr->len[k])
                        continue;
                if (wr->burst > 0 && ++writes % 50 == 0)
                        n = wr->burst;
                if (n > wr->len[k] - done[k])
                        n = wr->len[k] - done[k];
                write_fully(wr->fds[k], wr->data[k] + done[k], n);
                done[k] += n;
                if (done[k] == wr->len[k]) {
                        /* EOF for this stream while others go on. */
                        assert_int_equal(close(wr->fds[k]), 0);
                        left--;
                }
        }
}

/* ---- The agent's side ---- */

struct listener {
        int stream;
        size_t lines; /* seen so far, each checked against the data */
        const char *data;
        size_t pos;
        bool mismatch;
};

static void listener_cb(void *ctx, const char *line, size_t len,
                        enum hp_line_end end)
{
        struct listener *l = ctx;

        if (end != HP_LINE_EOL || memcmp(l->data + l->pos, line, len) != 0 ||
            l->data[l->pos + len] != '\n')
                l->mismatch = true;
        l->pos += len + 1;
        l->lines++;
}

struct fixture {
        uv_loop_t loop;
        struct hp_console con;
        struct hp_stream_hub hub;
        struct hp_stream *streams[MAX_STREAMS];
        struct listener listeners[MAX_STREAMS];
        char paths[MAX_STREAMS][64];
        int count;
        int closed;
};

static void closed_cb(struct hp_stream *s)
{
        struct fixture *f = s->data;

        assert_int_equal(close(s->file_fd), 0);
        s->file_fd = -1;
        if (++f->closed == f->count)
                hp_stream_hub_close(&f->hub);
}

/* Stream k reads rfd into paths[k], echoes to the console with the prefix
 * "[s<k>]:" and feeds its listener. */
static void stream_setup(struct fixture *f, int k, int rfd, const char *data)
{
        struct hp_stream *s = test_calloc(1, sizeof(*s));

        assert_non_null(s);
        f->streams[k] = s;
        char prefix[16];
        int fd, n;

        assert_int_equal(hp_stream_init(s, &f->hub,
                                        &(struct hp_stream_opts){
                                                .closed_cb = closed_cb,
                                                .data = f,
                                                .rank = k }),
                         0);
        assert_int_equal(uv_pipe_open(&s->pipe, rfd), 0);
        snprintf(f->paths[k], sizeof(f->paths[k]),
                 "/tmp/hp-test-stream-%d-%d", (int)getpid(), k);
        fd = open(f->paths[k],
                  O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        f->listeners[k] = (struct listener){ .stream = k, .data = data };
        hp_stream_set_output(s, &(struct hp_stream_output){
                                        .file_fd = fd,
                                        .file_path = f->paths[k],
                                        .console = &f->con,
                                        .prefixed = true,
                                        .listener = listener_cb,
                                        .listener_ctx = &f->listeners[k] });
        n = snprintf(prefix, sizeof(prefix), "[s%d]:", k);
        hp_stream_set_prefix(s, prefix, (size_t)n, -1);
}

static char *read_file(const char *path, size_t *len)
{
        struct stat st;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        char *buf;
        size_t got = 0;

        assert_true(fd >= 0);
        assert_int_equal(fstat(fd, &st), 0);
        buf = test_malloc((size_t)st.st_size + 1);
        while (got < (size_t)st.st_size) {
                ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

                assert_true(r > 0);
                got += (size_t)r;
        }
        assert_int_equal(close(fd), 0);
        buf[got] = '\0';
        *len = got;
        return buf;
}

/* Every console line is one whole line of one stream, with its prefix,
 * and each stream's lines come in order and all of them. */
static void check_console(const char *out, size_t len, int count,
                          char *const *data, const size_t *data_len)
{
        size_t pos[MAX_STREAMS] = { 0 };
        const char *p = out, *end = out + len;

        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                int k;
                size_t line_len;

                assert_non_null(nl);
                /* "[s<k>]:" with one digit: count is at most 8. */
                if (nl - p < 5 || memcmp(p, "[s", 2) != 0 || p[2] < '0' ||
                    p[2] >= '0' + count || memcmp(p + 3, "]:", 2) != 0)
                        fail_msg("console line without a known prefix: "
                                 "%.*s",
                                 (int)(nl - p < 60 ? nl - p : 60), p);
                k = p[2] - '0';
                p += 5;
                line_len = (size_t)(nl - p) + 1;
                if (pos[k] + line_len > data_len[k] ||
                    memcmp(data[k] + pos[k], p, line_len) != 0)
                        fail_msg("stream %d: console line at byte %zu is "
                                 "not the next line: %.*s",
                                 k, pos[k], (int)(nl - p < 60 ? nl - p : 60),
                                 p);
                pos[k] += line_len;
                p = nl + 1;
        }
        for (int k = 0; k < count; k++)
                if (pos[k] != data_len[k])
                        fail_msg("stream %d: console has %zu of %zu bytes", k,
                                 pos[k], data_len[k]);
}

/* ---- Many streams, any timing: nothing lost, reordered or mixed ---- */

struct stream_case {
        const char *name;
        int streams;
        size_t lines;
        size_t burst;
        bool threaded_console; /* a pipe (writer thread), or a file */
};

static const struct stream_case stream_cases[] = {
        { "one stream, small pieces", 1, 2000, 0, false },
        { "eight streams, small pieces", 8, 600, 0, false },
        { "eight streams with bursts past a read chunk", 8, 1500,
          3 * HP_READ_CHUNK + 17, false },
        { "bursts to a threaded console", 4, 1500, HP_STREAM_BUFFER + 5,
          true },
};

struct console_reader {
        int fd;
        char *out;
        size_t len;
};

static void console_reader_main(void *arg)
{
        struct console_reader *cr = arg;
        size_t cap = 1 << 20;

        cr->out = malloc(cap);
        assert_non_null(cr->out);
        for (;;) {
                ssize_t r;

                if (cr->len == cap) {
                        cap *= 2;
                        cr->out = realloc(cr->out, cap);
                        assert_non_null(cr->out);
                }
                r = read(cr->fd, cr->out + cr->len, cap - cr->len);
                if (r < 0 && errno == EINTR)
                        continue;
                assert_true(r >= 0);
                if (r == 0)
                        break;
                cr->len += (size_t)r;
        }
}

/* A worker's output channel: [0] ours, [1] the writer's. A pipe of the
 * default size, which never holds a whole read chunk of small writes,
 * or a socket pair. */
static void make_channel(bool pipes, int fds[2])
{
        if (pipes)
                assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
        else
                assert_int_equal(socketpair(AF_UNIX,
                                            SOCK_STREAM | SOCK_CLOEXEC, 0,
                                            fds),
                                 0);
}

static void run_stream_case(const struct stream_case *c, bool pipes)
{
        struct fixture *f = test_calloc(1, sizeof(*f));
        struct writer wr = { .count = c->streams, .burst = c->burst };
        struct console_reader cr = { .fd = -1 };
        char *data[MAX_STREAMS];
        size_t data_len[MAX_STREAMS];
        char con_path[64];
        uv_thread_t writer, reader;
        int con_fd, con_pipe[2];

        assert_non_null(f);
        f->count = c->streams;
        assert_int_equal(uv_loop_init(&f->loop), 0);
        if (c->threaded_console) {
                assert_int_equal(pipe2(con_pipe, O_CLOEXEC), 0);
                con_fd = con_pipe[1];
                cr.fd = con_pipe[0];
                assert_int_equal(uv_thread_create(&reader,
                                                  console_reader_main, &cr),
                                 0);
        } else {
                snprintf(con_path, sizeof(con_path),
                         "/tmp/hp-test-stream-%d-console", (int)getpid());
                con_fd = open(con_path,
                              O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                assert_true(con_fd >= 0);
        }
        assert_int_equal(hp_console_init(&f->con, con_fd, HP_CONSOLE_RING),
                         0);
        assert_int_equal(f->con.direct, !c->threaded_console);
        {
                struct hp_console *const cons[] = { &f->con };
                assert_int_equal(hp_stream_hub_init(&f->hub, &f->loop, cons,
                                                    1),
                                 0);
        }
        for (int k = 0; k < c->streams; k++) {
                int sv[2];

                data[k] = make_data(k, c->lines, &data_len[k]);
                make_channel(pipes, sv);
                stream_setup(f, k, sv[0], data[k]);
                wr.fds[k] = sv[1];
                wr.data[k] = data[k];
                wr.len[k] = data_len[k];
                assert_int_equal(hp_stream_start(f->streams[k]), 0);
        }
        assert_int_equal(uv_thread_create(&writer, writer_main, &wr), 0);
        assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
        assert_int_equal(uv_thread_join(&writer), 0);
        assert_int_equal(f->closed, c->streams);
        hp_console_close(&f->con, FLUSH_TIMEOUT_MS);
        assert_int_equal(f->con.lines_dropped, 0);
        assert_int_equal(uv_loop_close(&f->loop), 0);

        for (int k = 0; k < c->streams; k++) {
                size_t len;
                char *file = read_file(f->paths[k], &len);

                if (len != data_len[k] || memcmp(file, data[k], len) != 0)
                        fail_msg("%s: stream %d's file differs (%zu of %zu "
                                 "bytes)",
                                 c->name, k, len, data_len[k]);
                test_free(file);
                assert_int_equal(f->streams[k]->stats.bytes, data_len[k]);
                assert_int_equal(f->streams[k]->error, 0);
                assert_false(f->listeners[k].mismatch);
                assert_int_equal(f->listeners[k].lines, c->lines);
                assert_int_equal(f->listeners[k].pos, data_len[k]);
                unlink(f->paths[k]);
        }
        if (c->threaded_console) {
                assert_int_equal(close(con_fd), 0);
                assert_int_equal(uv_thread_join(&reader), 0);
                assert_int_equal(close(cr.fd), 0);
                check_console(cr.out, cr.len, c->streams, data, data_len);
                free(cr.out);
        } else {
                size_t len;
                char *out;

                assert_int_equal(close(con_fd), 0);
                out = read_file(con_path, &len);
                check_console(out, len, c->streams, data, data_len);
                test_free(out);
                unlink(con_path);
        }
        for (int k = 0; k < c->streams; k++) {
                test_free(data[k]);
                test_free(f->streams[k]);
        }
        test_free(f);
}

static void test_streams_lose_and_mix_nothing(void **state)
{
        (void)state;
        for (int pipes = 0; pipes < 2; pipes++) {
                for (size_t i = 0; i < HP_ARRAY_SIZE(stream_cases); i++) {
                        print_message("case: %s, %s\n", stream_cases[i].name,
                                      pipes ? "pipes" : "socket pairs");
                        run_stream_case(&stream_cases[i], pipes);
                }
        }
}

/* ---- One stream, driven by hand ---- */

/* One stream on a pipe, a direct console in a file named after what,
 * the hub; *writer is the worker's end of the pipe. */
static struct fixture *one_stream_open(const char *what, const char *data,
                                       int *writer, char *con_path,
                                       size_t path_len, int *con_fd)
{
        struct fixture *f = test_calloc(1, sizeof(*f));
        struct hp_console *cons[1];
        int sv[2];

        assert_non_null(f);
        f->count = 1;
        assert_int_equal(uv_loop_init(&f->loop), 0);
        snprintf(con_path, path_len, "/tmp/hp-test-%s-%d", what,
                 (int)getpid());
        *con_fd = open(con_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                       0600);
        assert_true(*con_fd >= 0);
        assert_int_equal(hp_console_init(&f->con, *con_fd, 4096), 0);
        cons[0] = &f->con;
        assert_int_equal(hp_stream_hub_init(&f->hub, &f->loop, cons, 1), 0);
        make_channel(true, sv);
        stream_setup(f, 0, sv[0], data);
        *writer = sv[1];
        return f;
}

/* Runs the loop until the stream has closed. */
static void one_stream_run(struct fixture *f)
{
        assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
        assert_int_equal(f->closed, 1);
}

/* Frees what one_stream_open made; writer -1 when closed already. */
static void one_stream_close(struct fixture *f, int writer,
                             const char *con_path, int con_fd)
{
        hp_console_close(&f->con, FLUSH_TIMEOUT_MS);
        assert_int_equal(uv_loop_close(&f->loop), 0);
        if (writer >= 0)
                assert_int_equal(close(writer), 0);
        assert_int_equal(close(con_fd), 0);
        unlink(f->paths[0]);
        unlink(con_path);
        test_free(f->streams[0]);
        test_free(f);
}

/* ---- Draining a stream whose writer is still there ---- */

/* What was read and not yet written to the file (the hub holds file bytes
 * up to HP_FILE_DELAY_MS) and the partial last line are written by
 * hp_stream_drain_and_close itself, before it returns. */
static void test_drain_and_close_writes_everything_read(void **state)
{
        static const char data[] = "first line\nsecond line\npartial";
        struct fixture *f;
        char con_path[64];
        char *out;
        size_t len;
        int writer, con_fd;

        (void)state;
        f = one_stream_open("drain", data, &writer, con_path,
                            sizeof(con_path), &con_fd);
        f->streams[0]->listener = NULL;
        assert_int_equal(hp_stream_start(f->streams[0]), 0);
        write_fully(writer, data, sizeof(data) - 1);

        /* The writer end stays open: no EOF, only what is there. */
        assert_false(hp_stream_drain_and_close(f->streams[0]));
        out = read_file(f->paths[0], &len);
        assert_int_equal(len, sizeof(data) - 1);
        assert_memory_equal(out, data, len);
        test_free(out);
        hp_console_flush(&f->con, FLUSH_TIMEOUT_MS);
        out = read_file(con_path, &len);
        assert_string_equal(out, "[s0]:first line\n[s0]:second line\n"
                                 "[s0]:partial\n");
        test_free(out);
        one_stream_run(f);
        one_stream_close(f, writer, con_path, con_fd);
}

/* ---- Reading on demand ---- */

/* Before a log rule's deadline is judged, the agent reads what the pipes
 * hold, paced or not: hp_stream_hub_read_now reads it then and there,
 * without the loop running. */
static void test_read_now_reads_what_the_pipes_hold(void **state)
{
        static const char data[] = "one\ntwo\nthree\n";
        struct fixture *f;
        char con_path[64];
        int writer, con_fd;

        (void)state;
        f = one_stream_open("readnow", data, &writer, con_path,
                            sizeof(con_path), &con_fd);
        assert_int_equal(hp_stream_start(f->streams[0]), 0);

        hp_stream_hub_read_now(&f->hub);
        assert_int_equal(f->listeners[0].lines, 0);
        write_fully(writer, data, 8);
        hp_stream_hub_read_now(&f->hub);
        assert_int_equal(f->listeners[0].lines, 2);
        write_fully(writer, data + 8, sizeof(data) - 1 - 8);
        hp_stream_hub_read_now(&f->hub);
        assert_int_equal(f->listeners[0].lines, 3);
        assert_false(f->listeners[0].mismatch);

        /* EOF: the loop closes the stream, with no line more. */
        assert_int_equal(close(writer), 0);
        one_stream_run(f);
        assert_int_equal(f->listeners[0].lines, 3);
        one_stream_close(f, -1, con_path, con_fd);
}

/* ---- Duplicate filters (dup.c) ---- */

struct dup_case {
        const char *name;
        const char *needles[4]; /* NULL ends them */
        const char *lines[6];   /* prefix "[r]:" each; NULL ends them */
        const char *file;       /* what filtered_*.log holds */
};

static const struct dup_case dup_cases[] = {
        { "one needle",
          { "loss" },
          { "step 1 loss=2", "step 1 acc=1" },
          "[r]:step 1 loss=2\n" },
        { "any of several",
          { "loss", "NCCL" },
          { "NCCL WARN x", "plain", "loss" },
          "[r]:NCCL WARN x\n[r]:loss\n" },
        { "a comma inside a needle",
          { "a,b" },
          { "a,b", "a b", "xa,by" },
          "[r]:a,b\n[r]:xa,by\n" },
        { "the empty needle is in every line",
          { "" },
          { "x", "" },
          "[r]:x\n[r]:\n" },
        { "no line matches", { "zzz" }, { "a", "b" }, "" },
};

static void test_dup_copies_matching_lines(void **state)
{
        char dir[] = "/tmp/hp-dup-XXXXXX";

        (void)state;
        assert_non_null(mkdtemp(dir));
        for (size_t i = 0; i < HP_ARRAY_SIZE(dup_cases); i++) {
                const struct dup_case *c = &dup_cases[i];
                struct hp_dup *d = calloc(1, sizeof(*d));
                size_t lens[4];
                int n = 0, dir_fd = open(dir, O_DIRECTORY | O_RDONLY);
                char got[256] = "", path[64];
                ssize_t r;
                int fd;

                assert_non_null(d);
                assert_true(dir_fd >= 0);
                while (n < 4 && c->needles[n] != NULL) {
                        lens[n] = strlen(c->needles[n]);
                        n++;
                }
                assert_int_equal(hp_dup_open(d, dir_fd, dir, "f.log",
                                             c->needles, lens, n),
                                 0);
                for (int k = 0; k < 6 && c->lines[k] != NULL; k++)
                        hp_dup_line(d, "[r]:", 4, c->lines[k],
                                    strlen(c->lines[k]));
                hp_dup_close(d);
                snprintf(path, sizeof(path), "%s/f.log", dir);
                fd = open(path, O_RDONLY);
                assert_true(fd >= 0);
                r = read(fd, got, sizeof(got) - 1);
                assert_true(r >= 0);
                got[r] = '\0';
                if (strcmp(got, c->file) != 0)
                        fail_msg("%s: the file holds '%s', expected '%s'",
                                 c->name, got, c->file);
                close(fd);
                assert_int_equal(unlink(path), 0);
                close(dir_fd);
                free(d);
        }
        assert_int_equal(rmdir(dir), 0);
}

static void test_dup_refuses_a_link(void **state)
{
        char dir[] = "/tmp/hp-dup-XXXXXX", link[64];
        const char *needle = "x";
        size_t len = 1;
        struct hp_dup *d = calloc(1, sizeof(*d));
        int dir_fd;

        (void)state;
        assert_non_null(d);
        assert_non_null(mkdtemp(dir));
        snprintf(link, sizeof(link), "%s/f.log", dir);
        assert_int_equal(symlink("/dev/null", link), 0);
        dir_fd = open(dir, O_DIRECTORY | O_RDONLY);
        assert_true(dir_fd >= 0);
        assert_int_equal(hp_dup_open(d, dir_fd, dir, "f.log", &needle, &len,
                                     1),
                         -ELOOP);
        hp_dup_close(d); /* nothing to close */
        close(dir_fd);
        assert_int_equal(unlink(link), 0);
        assert_int_equal(rmdir(dir), 0);
        free(d);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_dup_copies_matching_lines),
                cmocka_unit_test(test_dup_refuses_a_link),
                cmocka_unit_test(test_streams_lose_and_mix_nothing),
                cmocka_unit_test(test_drain_and_close_writes_everything_read),
                cmocka_unit_test(test_read_now_reads_what_the_pipes_hold),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
