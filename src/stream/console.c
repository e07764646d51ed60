/* SPDX-License-Identifier: Apache-2.0 */
/* The console writer: a fixed ring drained by one thread per output fd. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/stream.h"

#include "stream-private.h"

static const char capped_marker[] = " [hyperpodrun: line longer than 65536 "
                                    "bytes, continued on the next line]";

/* Writes n bytes to the console in pieces of at most HP_CONSOLE_WRITE_MAX
 * (see there); 0 or a negative errno. */
static int console_write(struct hp_console *con, const char *buf, size_t n)
{
        int r = 0;

        for (size_t off = 0; r == 0 && off < n; off += HP_CONSOLE_WRITE_MAX)
                r = hp_write_all(con->fd, buf + off,
                                 n - off < HP_CONSOLE_WRITE_MAX
                                         ? n - off
                                         : HP_CONSOLE_WRITE_MAX);
        return r;
}

/* The lines in n bytes of queued output, which a failed write lost. */
static uint64_t count_lines(const char *buf, size_t n)
{
        uint64_t lines = 0;
        const char *end = buf + n;

        while ((buf = memchr(buf, '\n', (size_t)(end - buf))) != NULL) {
                lines++;
                buf++;
        }
        return lines;
}

static void writer_main(void *arg)
{
        struct hp_console *con = arg;

        uv_mutex_lock(&con->lock);
        for (;;) {
                size_t off, n;
                int r;

                while (con->head == con->tail && !con->stopping)
                        uv_cond_wait(&con->wake, &con->lock);
                if (con->head == con->tail)
                        break;
                /* Write the longest contiguous run; the lock is not held
                 * during write(), so producers are never blocked by it. */
                off = (size_t)(con->tail % con->cap);
                n = (size_t)(con->head - con->tail);
                if (n > con->cap - off)
                        n = con->cap - off;
                uv_mutex_unlock(&con->lock);
                r = con->write_error ? con->write_error
                                     : console_write(con, con->ring + off, n);
                uv_mutex_lock(&con->lock);
                if (r < 0) {
                        con->write_error = r;
                        con->lines_failed += count_lines(con->ring + off, n);
                        con->bytes_dropped += n;
                }
                con->tail += n;
                uv_cond_signal(&con->drained);
        }
        uv_cond_signal(&con->drained);
        uv_mutex_unlock(&con->lock);
}

int hp_console_init(struct hp_console *con, int fd, size_t cap)
{
        int r;

        struct stat st;

        memset(con, 0, sizeof(*con));
        con->fd = fd;
        con->owner = uv_thread_self();
        con->direct = fstat(fd, &st) == 0 &&
                      (S_ISREG(st.st_mode) ||
                       (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)));
        con->cap = con->direct && cap >= HP_CONSOLE_BUFFERS
                           ? cap / HP_CONSOLE_BUFFERS
                           : cap;
        /* A small ring (in tests) must not fill before the writer wakes. */
        con->wake_at = cap / 4 < HP_CONSOLE_BATCH ? cap / 4
                                                  : HP_CONSOLE_BATCH;
        con->ring = malloc(con->cap);
        if (con->ring == NULL)
                return -ENOMEM;
        r = uv_mutex_init(&con->lock);
        if (r < 0)
                goto err_ring;
        r = uv_cond_init(&con->wake);
        if (r < 0)
                goto err_lock;
        r = uv_cond_init(&con->drained);
        if (r < 0)
                goto err_wake;
        if (con->direct)
                return 0;
        r = uv_thread_create(&con->thread, writer_main, con);
        if (r < 0)
                goto err_drained;
        return 0;

err_drained:
        uv_cond_destroy(&con->drained);
err_wake:
        uv_cond_destroy(&con->wake);
err_lock:
        uv_mutex_destroy(&con->lock);
err_ring:
        free(con->ring);
        con->ring = NULL;
        return r;
}

/* Copies into the ring at head; the caller checked the room. */
static void ring_copy(struct hp_console *con, const char *data, size_t n)
{
        size_t off = (size_t)(con->head % con->cap);
        size_t first = n < con->cap - off ? n : con->cap - off;

        memcpy(con->ring + off, data, first);
        memcpy(con->ring, data + first, n - first);
        con->head += n;
}

static bool ring_put(struct hp_console *con, const char *prefix,
                     size_t prefix_len, const char *line, size_t len,
                     const char *marker, size_t marker_len)
{
        size_t need = prefix_len + len + marker_len + 1;

        if (con->cap - (size_t)(con->head - con->tail) < need)
                return false;
        ring_copy(con, prefix, prefix_len);
        ring_copy(con, line, len);
        ring_copy(con, marker, marker_len);
        ring_copy(con, "\n", 1);
        return true;
}

/* With the lock held: queues the marker for lines dropped since the
 * last one, if there is room; true if none is left unreported. */
static bool put_drop_note(struct hp_console *con)
{
        char note[128];
        int n;

        if (con->dropped_unreported == 0)
                return true;
        n = snprintf(note, sizeof(note),
                     "[hyperpodrun]: %llu console lines dropped (console "
                     "too slow); the log files have them",
                     (unsigned long long)con->dropped_unreported);
        if (!ring_put(con, "", 0, note, (size_t)n, "", 0))
                return false;
        con->dropped_unreported = 0;
        return true;
}

/* Direct mode: the ring is a linear buffer written out when full and at
 * each commit. The loop thread is the only user, so no lock.
 *
 * Appends one line to a direct console's buffer, which the caller made
 * room in. head never wraps here (each write-out starts the buffer over),
 * so this is four plain copies, with none of the ring's index arithmetic:
 * it runs once per line. */
static void linear_put(struct hp_console *con, const char *prefix,
                       size_t prefix_len, const char *line, size_t len,
                       const char *marker, size_t marker_len)
{
        char *p = con->ring + con->head;

        memcpy(p, prefix, prefix_len);
        p += prefix_len;
        memcpy(p, line, len);
        p += len;
        memcpy(p, marker, marker_len);
        p += marker_len;
        *p++ = '\n';
        con->head = (uint64_t)(p - con->ring);
}

/* A direct console's flood thread: writes the buffers the loop hands
 * over, in order, and gives each back to the free ones. */
static void direct_writer_main(void *arg)
{
        struct hp_console *con = arg;

        uv_mutex_lock(&con->lock);
        for (;;) {
                struct hp_console_buffer out;
                int r;

                while (con->queued == 0 && !con->stopping)
                        uv_cond_wait(&con->wake, &con->lock);
                if (con->queued == 0)
                        break;
                /* It stays queued while it is written: an ordered write
                 * waits for it. */
                out = con->queue[con->queue_head];
                r = con->write_error;
                uv_mutex_unlock(&con->lock);
                if (r == 0)
                        r = console_write(con, out.data, out.len);
                uv_mutex_lock(&con->lock);
                if (r < 0) {
                        if (con->write_error == 0)
                                con->write_error = r;
                        con->bytes_dropped += out.len;
                        con->lines_failed += count_lines(out.data, out.len);
                }
                con->free_buffers[con->free_count++] = out.data;
                con->queue_head = (con->queue_head + 1) % HP_CONSOLE_BUFFERS;
                con->queued--;
                uv_cond_signal(&con->drained);
        }
        uv_mutex_unlock(&con->lock);
}

static void free_buffers(struct hp_console *con)
{
        while (con->free_count > 0)
                free(con->free_buffers[--con->free_count]);
}

/* Starts the flood thread, once: a buffer that fills means more output
 * than a commit period holds, and writing it on the loop thread would
 * hold up the reads, which every other part of a flood waits for. A steady
 * job never fills it and never starts a thread. */
static bool direct_thread_start(struct hp_console *con)
{
        if (con->direct_thread)
                return true;
        for (unsigned i = 1; i < HP_CONSOLE_BUFFERS; i++) {
                char *buf = malloc(con->cap);

                if (buf == NULL) {
                        free_buffers(con);
                        return false;
                }
                con->free_buffers[con->free_count++] = buf;
        }
        if (uv_thread_create(&con->thread, direct_writer_main, con) < 0) {
                free_buffers(con);
                return false;
        }
        con->direct_thread = true;
        return true;
}

/* Writes the buffer out: handed to the flood thread when async (starting
 * it if need be) or when it runs already and ordered is not asked for;
 * else written here, after every buffer queued before it. */
static void direct_write_out(struct hp_console *con, bool async, bool ordered)
{
        size_t n = (size_t)(con->head - con->tail);
        int r;

        if (n == 0 && !(ordered && con->direct_thread))
                return;
        if (async && !con->direct_thread)
                async = direct_thread_start(con);
        if (con->direct_thread) {
                uv_mutex_lock(&con->lock);
                if (n > 0 && (async || !ordered)) {
                        while (con->free_count == 0)
                                uv_cond_wait(&con->drained, &con->lock);
                        con->queue[(con->queue_head + con->queued) %
                                   HP_CONSOLE_BUFFERS] =
                                (struct hp_console_buffer){ con->ring, n };
                        con->queued++;
                        con->ring = con->free_buffers[--con->free_count];
                        uv_cond_signal(&con->wake);
                        uv_mutex_unlock(&con->lock);
                        con->head = con->tail = 0;
                        return;
                }
                while (con->queued > 0)
                        uv_cond_wait(&con->drained, &con->lock);
                uv_mutex_unlock(&con->lock);
                if (n == 0)
                        return;
        }
        r = con->write_error ? con->write_error
                             : console_write(con, con->ring, n);
        if (r < 0) {
                uint64_t lines = count_lines(con->ring, n);

                if (con->direct_thread)
                        uv_mutex_lock(&con->lock);
                con->write_error = r;
                con->bytes_dropped += n;
                con->lines_failed += lines;
                if (con->direct_thread)
                        uv_mutex_unlock(&con->lock);
        }
        con->head = con->tail = 0;
}

uint64_t hp_console_lost_lines(struct hp_console *con, int *error)
{
        uint64_t n;

        /* Closed: its thread is gone, and so is the lock. */
        if (con->ring == NULL) {
                *error = con->write_error;
                return con->lines_dropped + con->lines_failed;
        }
        uv_mutex_lock(&con->lock);
        n = con->lines_dropped + con->lines_failed;
        *error = con->write_error;
        uv_mutex_unlock(&con->lock);
        return n;
}

void hp_console_commit(struct hp_console *con)
{
        if (con->direct) {
                direct_write_out(con, false, false);
                return;
        }
        uv_mutex_lock(&con->lock);
        if (con->pending)
                uv_cond_signal(&con->wake);
        con->pending = false;
        uv_mutex_unlock(&con->lock);
}

void hp_console_commit_ordered(struct hp_console *con)
{
        if (con->direct)
                direct_write_out(con, false, true);
        else
                hp_console_commit(con);
}

bool hp_console_put_line(struct hp_console *con, const char *prefix,
                         size_t prefix_len, const char *line, size_t len,
                         enum hp_line_end end)
{
        const char *marker = end == HP_LINE_CAPPED ? capped_marker : "";
        size_t marker_len = end == HP_LINE_CAPPED ? sizeof(capped_marker) - 1
                                                  : 0;
        bool queued;

        if (con->direct) {
                size_t need = prefix_len + len + marker_len + 1;

                if (con->cap - (size_t)con->head < need)
                        direct_write_out(con, true, false);
                queued = con->cap - (size_t)con->head >= need;
                if (queued) {
                        linear_put(con, prefix, prefix_len, line, len, marker,
                                   marker_len);
                } else {
                        direct_write_out(con, false, true);
                        /* Larger than the whole buffer (only with a buffer
                         * smaller than HP_LINE_MAX): a file can take it
                         * as it is, in pieces, still one line. */
                        const struct iovec parts[] = {
                                { (void *)prefix, prefix_len },
                                { (void *)line, len },
                                { (void *)marker, marker_len },
                                { (void *)"\n", 1 },
                        };
                        for (size_t i = 0; i < HP_ARRAY_SIZE(parts); i++)
                                if (con->write_error == 0)
                                        con->write_error = hp_write_all(
                                                con->fd, parts[i].iov_base,
                                                parts[i].iov_len);
                        queued = con->write_error == 0;
                }
                if (queued)
                        con->lines_queued++;
                else
                        con->lines_dropped++;
                return queued;
        }
        uv_mutex_lock(&con->lock);
        queued = put_drop_note(con) && ring_put(con, prefix, prefix_len, line,
                                                len, marker, marker_len);
        if (queued) {
                con->lines_queued++;
                /* The writer is woken by the commit that ends the batch,
                 * or now if the batch is large: one wakeup and one write
                 * for many lines. */
                con->pending = true;
                if (con->head - con->tail >= con->wake_at) {
                        uv_cond_signal(&con->wake);
                        con->pending = false;
                }
        } else {
                con->lines_dropped++;
                con->bytes_dropped += prefix_len + len + marker_len + 1;
                con->dropped_unreported++;
        }
        uv_mutex_unlock(&con->lock);
        return queued;
}

void hp_console_put_message(struct hp_console *con, const char *msg,
                            size_t len)
{
        /* Queued as a line, which gets its newline back. */
        if (len > 0 && msg[len - 1] == '\n')
                len--;
        if (con->direct) {
                /* A file: written at once, after the lines queued before
                 * it, from the loop thread that owns the buffer. */
                uv_thread_t self = uv_thread_self();

                if (uv_thread_equal(&self, &con->owner)) {
                        (void)hp_console_put_line(con, "", 0, msg, len,
                                                  HP_LINE_EOL);
                        direct_write_out(con, false, true);
                } else {
                        const struct iovec parts[] = {
                                { (void *)msg, len },
                                { (void *)"\n", 1 },
                        };

                        ssize_t n = writev(con->fd, parts, 2);

                        /* Counted as the writer thread counts its own
                         * failed writes; the lock orders it with them. */
                        if (n < (ssize_t)(len + 1)) {
                                uv_mutex_lock(&con->lock);
                                con->lines_failed++;
                                uv_mutex_unlock(&con->lock);
                        }
                }
                return;
        }
        uv_mutex_lock(&con->lock);
        if (put_drop_note(con) && ring_put(con, "", 0, msg, len, "", 0)) {
                con->lines_queued++;
                uv_cond_signal(&con->wake);
                con->pending = false;
        } else {
                con->lines_dropped++;
                con->messages_dropped++;
                con->bytes_dropped += len;
                con->dropped_unreported++;
        }
        uv_mutex_unlock(&con->lock);
}

/* With the lock held: wait for the writer, bounded by the deadline, so
 * that a console nobody reads cannot keep the agent from going on. */
static void wait_drained(struct hp_console *con, uint64_t timeout_ms)
{
        uint64_t deadline = uv_hrtime() + timeout_ms * 1000000ull;

        /* Lines queued since the last commit have not woken the writer. */
        uv_cond_signal(&con->wake);
        con->pending = false;

        /* A reader that made no progress since the last timed-out wait is
         * not waited for again: one stuck console costs one timeout. */
        if (con->stalled && con->tail == con->stalled_tail)
                return;
        con->stalled = false;
        while (con->head != con->tail) {
                uint64_t now = uv_hrtime();
                if (now >= deadline)
                        break;
                (void)uv_cond_timedwait(&con->drained, &con->lock,
                                        deadline - now);
        }
        if (con->head != con->tail) {
                con->stalled = true;
                con->stalled_tail = con->tail;
        }
}

void hp_console_flush(struct hp_console *con, uint64_t timeout_ms)
{
        if (con->ring == NULL)
                return;
        if (con->direct) {
                direct_write_out(con, false, true);
                return;
        }
        uv_mutex_lock(&con->lock);
        wait_drained(con, timeout_ms);
        uv_mutex_unlock(&con->lock);
}

/* Tells the writer thread to end and waits for it. Called with the lock
 * held; returns with it released. */
static void join_writer(struct hp_console *con)
{
        con->stopping = true;
        uv_cond_signal(&con->wake);
        uv_mutex_unlock(&con->lock);
        uv_thread_join(&con->thread);
}

static void free_ring(struct hp_console *con)
{
        uv_cond_destroy(&con->drained);
        uv_cond_destroy(&con->wake);
        uv_mutex_destroy(&con->lock);
        free(con->ring);
        con->ring = NULL;
}

int hp_console_new(struct hp_console **out, int fd, size_t cap)
{
        struct hp_console *con = malloc(sizeof(*con));
        int r;

        if (con == NULL)
                return -ENOMEM;
        r = hp_console_init(con, fd, cap);
        if (r < 0) {
                free(con);
                return r;
        }
        *out = con;
        return 0;
}

void hp_console_free(struct hp_console *con)
{
        /* A writer stuck in write() still reads it: left to exit. */
        if (con != NULL && !con->abandoned)
                free(con);
}

void hp_console_close(struct hp_console *con, uint64_t timeout_ms)
{
        if (con->ring == NULL)
                return;
        if (con->direct) {
                direct_write_out(con, false, true);
                if (con->direct_thread) {
                        uv_mutex_lock(&con->lock);
                        join_writer(con);
                        free_buffers(con);
                        con->direct_thread = false;
                }
                free_ring(con);
                return;
        }
        uv_mutex_lock(&con->lock);
        wait_drained(con, timeout_ms);
        /* The marker for the last lines dropped, which no later line
         * brought out: it is written too, within the same deadline. */
        if (con->head == con->tail && con->dropped_unreported > 0 &&
            put_drop_note(con)) {
                con->stalled = false;
                wait_drained(con, timeout_ms);
        }
        if (con->head != con->tail) {
                /* The writer is stuck in write(): what is left is lost to
                 * the console (never to the files). Count it and move on;
                 * every queued line ends with its newline. */
                for (uint64_t i = con->tail; i != con->head; i++)
                        if (con->ring[i % con->cap] == '\n')
                                con->lines_dropped++;
                con->bytes_dropped += con->head - con->tail;
                uv_mutex_unlock(&con->lock);
                hp_log_warn("console: %llu bytes still queued after %llu ms, "
                            "given up (the log files are complete)",
                            (unsigned long long)con->bytes_dropped,
                            (unsigned long long)timeout_ms);
                /* The thread cannot be joined while it blocks in write().
                 * Leave it, and the ring it reads, to process exit. */
                con->abandoned = true;
                return;
        }
        join_writer(con);
        free_ring(con);
}
