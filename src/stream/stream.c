/* SPDX-License-Identifier: Apache-2.0 */
/* A worker pipe feeding a file, the console and a line listener, and the
 * hub that batches the writes of all streams on one loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/stream.h"

#include "stream-private.h"

/* ---- The hub ---- */

static void hub_timer_cb(uv_timer_t *timer);

/* Arms the timer for due if that is earlier than what it is armed for. */
static void hub_arm(struct hp_stream_hub *hub, uint64_t due)
{
        uint64_t now;

        if (due >= hub->armed_for)
                return;
        now = uv_now(hub->loop);
        hub->armed_for = due;
        uv_timer_start(&hub->timer, hub_timer_cb, due > now ? due - now : 0,
                       0);
}

static void dirty_remove(struct hp_stream *s)
{
        if (s->dirty_prev != NULL)
                s->dirty_prev->dirty_next = s->dirty_next;
        else if (s->hub->dirty == s)
                s->hub->dirty = s->dirty_next;
        if (s->dirty_next != NULL)
                s->dirty_next->dirty_prev = s->dirty_prev;
        s->dirty_prev = s->dirty_next = NULL;
}

/* A write to the log file failed after off bytes of buf went in. The
 * rule, GNU tee's: the file is not written again (a disk that frees up
 * later must not splice a gap into it without a trace), and it is cut
 * back to its last complete line, so that what it holds is exactly the
 * first lines the worker wrote. The console and the job go on; the bytes
 * the file misses are counted (stats.file_lost). */
static void file_give_up(struct hp_stream *s, const char *buf, size_t off,
                         int err)
{
        const char *nl = off > 0 ? memrchr(buf, '\n', off) : NULL;
        int r = 0;

        if (nl != NULL)
                s->file_line_end = s->file_kept + (uint64_t)(nl - buf) + 1;
        s->file_kept = s->file_line_end;
        if (ftruncate(s->file_fd, (off_t)s->file_kept) < 0)
                r = -errno;
        s->file_failed = true;
        s->stats.file_lost = s->stats.bytes - s->file_kept;
        if (s->error == 0)
                s->error = err;
        hp_log_error("local rank %d: writing its log file %s failed: %s; "
                     "the file keeps its first %llu bytes (whole lines%s) "
                     "and is not written again, the console still gets "
                     "the output",
                     s->rank,
                     s->file_path[0] != '\0' ? s->file_path : "(unnamed)",
                     hp_strerror(err), (unsigned long long)s->file_kept,
                     r < 0 ? "; cutting it there failed too" : "");
}

/* Writes what the stream's file has not got yet. */
static void file_write_out(struct hp_stream *s)
{
        size_t off = 0;

        if (s->unwritten == 0)
                return;
        while (off < s->unwritten) {
                ssize_t n = write(s->file_fd, s->buf + off,
                                  s->unwritten - off);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        file_give_up(s, s->buf, off, n < 0 ? -errno : -EIO);
                        break;
                }
                off += (size_t)n;
        }
        if (!s->file_failed) {
                const char *nl = memrchr(s->buf, '\n', s->unwritten);

                if (nl != NULL)
                        s->file_line_end = s->file_kept +
                                           (uint64_t)(nl - s->buf) + 1;
                s->file_kept += s->unwritten;
        }
        s->unwritten = 0;
        dirty_remove(s);
}

static void hub_commit_consoles(struct hp_stream_hub *hub)
{
        for (size_t i = 0; i < hub->console_count; i++)
                hp_console_commit(hub->consoles[i]);
        hub->console_due = UINT64_MAX;
}

static void hub_write_files(struct hp_stream_hub *hub)
{
        while (hub->dirty != NULL)
                file_write_out(hub->dirty);
        hub->files_due = UINT64_MAX;
}

static bool stream_read(struct hp_stream *s);
static void hub_pass(struct hp_stream_hub *hub);

static void hub_timer_cb(uv_timer_t *timer)
{
        struct hp_stream_hub *hub = hp_container_of(timer,
                                                    struct hp_stream_hub,
                                                    timer);
        uint64_t now = uv_now(hub->loop);

        hub->armed_for = UINT64_MAX;
        if (hub->read_due <= now)
                hub_pass(hub);
        if (hub->console_due <= now)
                hub_commit_consoles(hub);
        /* All files at once: a file that got its first byte later than the
         * others is written early, never late. */
        if (hub->files_due <= now)
                hub_write_files(hub);
        hub_arm(hub, hub->read_due);
        hub_arm(hub, hub->console_due);
        hub_arm(hub, hub->files_due);
}

static void hub_poll_cb(uv_poll_t *poll, int status, int events)
{
        struct hp_stream_hub *hub = hp_container_of(poll,
                                                    struct hp_stream_hub,
                                                    poll);

        (void)status; /* an epoll fd does not fail to poll */
        (void)events;
        hub_pass(hub);
}

/* Event mode: the loop wakes up as soon as any pipe has something. */
static void hub_watch(struct hp_stream_hub *hub)
{
        hub->paced = false;
        hub->read_due = UINT64_MAX;
        if (hub->watched > 0)
                uv_poll_start(&hub->poll, UV_READABLE, hub_poll_cb);
        else
                uv_poll_stop(&hub->poll);
}

/* Reads every pipe that has something, then decides when to look again.
 * After HP_READ_PACE_MS if small pieces keep coming sooner than that (a
 * steady job with several ranks); at the next event if nothing came (a
 * quiet job), if the last data came longer ago (one rank printing now and
 * then: pacing would only add a wakeup), or within HP_READ_UNPACED_MS of
 * a read that filled a whole chunk (a fast writer, which must not wait
 * for us). */
/* Reads every pipe that has something; true if any did. */
static bool hub_read_ready(struct hp_stream_hub *hub)
{
        struct epoll_event events[256];
        bool got_data = false, fast = false;
        int n;

        do
                n = epoll_wait(hub->epfd, events, HP_ARRAY_SIZE(events), 0);
        while (n < 0 && errno == EINTR);
        for (int i = 0; i < n; i++) {
                struct hp_stream *s = events[i].data.ptr;
                uint64_t before = s->stats.bytes;

                if (!s->reading)
                        continue; /* closed by a callback of this pass */
                fast |= stream_read(s);
                got_data |= s->stats.bytes != before;
        }
        /* A fast writer's reads come back short as long as we keep up with
         * it, so one large read suspends the pacing for a while: else each
         * paced tick would let it fill its pipe and wait for us. */
        if (fast)
                hub->pace_after = uv_now(hub->loop) + HP_READ_UNPACED_MS;
        return got_data;
}

void hp_stream_hub_read_now(struct hp_stream_hub *hub)
{
        if (hub->epfd >= 0 && hub_read_ready(hub))
                hub->last_data = uv_now(hub->loop);
}

static void hub_pass(struct hp_stream_hub *hub)
{
        bool got_data = hub_read_ready(hub), pace;
        uint64_t now = uv_now(hub->loop);

        pace = got_data && now >= hub->pace_after &&
               (hub->paced || now - hub->last_data < HP_READ_PACE_MS);
        if (got_data)
                hub->last_data = now;
        if (pace) {
                if (!hub->paced) {
                        hub->paced = true;
                        uv_poll_stop(&hub->poll);
                }
                hub->read_due = uv_now(hub->loop) + HP_READ_PACE_MS;
                hub_arm(hub, hub->read_due);
        } else if (hub->paced || !uv_is_active((uv_handle_t *)&hub->poll)) {
                hub_watch(hub);
        }
}

static void hub_closed(struct hp_stream_hub *hub)
{
        if (--hub->closing == 0 && hub->owned)
                free(hub);
}

static void hub_timer_close_cb(uv_handle_t *handle)
{
        hub_closed(hp_container_of(handle, struct hp_stream_hub, timer));
}

static void hub_poll_close_cb(uv_handle_t *handle)
{
        struct hp_stream_hub *hub = hp_container_of(handle,
                                                    struct hp_stream_hub,
                                                    poll);

        close(hub->epfd);
        hub->epfd = -1;
        hub_closed(hub);
}

int hp_stream_hub_init(struct hp_stream_hub *hub, uv_loop_t *loop,
                       struct hp_console *const *consoles, size_t count)
{
        int r;

        memset(hub, 0, sizeof(*hub));
        if (count > HP_ARRAY_SIZE(hub->consoles))
                return -EINVAL;
        hub->loop = loop;
        {
                struct timespec ts;

                clock_gettime(CLOCK_REALTIME, &ts);
                hub->wall_offset_ms = (int64_t)ts.tv_sec * 1000 +
                                      ts.tv_nsec / 1000000 -
                                      (int64_t)(uv_hrtime() / 1000000);
        }
        memcpy(hub->consoles, consoles, count * sizeof(*consoles));
        hub->console_count = count;
        hub->read_due = UINT64_MAX;
        hub->console_due = UINT64_MAX;
        hub->files_due = UINT64_MAX;
        hub->armed_for = UINT64_MAX;
        hub->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (hub->epfd < 0)
                return -errno;
        r = uv_poll_init(loop, &hub->poll, hub->epfd);
        if (r < 0) {
                close(hub->epfd);
                return r;
        }
        uv_timer_init(loop, &hub->timer); /* cannot fail */
        return 0;
}

int hp_stream_hub_new(struct hp_stream_hub **out, uv_loop_t *loop,
                      struct hp_console *const *consoles, size_t count)
{
        struct hp_stream_hub *hub = malloc(sizeof(*hub));
        int r;

        if (hub == NULL)
                return -ENOMEM;
        r = hp_stream_hub_init(hub, loop, consoles, count);
        if (r < 0) {
                free(hub);
                return r;
        }
        hub->owned = true;
        *out = hub;
        return 0;
}

int64_t hp_stream_hub_wall_offset_ms(const struct hp_stream_hub *hub)
{
        return hub->wall_offset_ms;
}

void hp_stream_hub_commit_ordered(struct hp_stream_hub *hub)
{
        for (size_t i = 0; i < hub->console_count; i++)
                hp_console_commit_ordered(hub->consoles[i]);
}

void hp_stream_hub_flush(struct hp_stream_hub *hub)
{
        hub_write_files(hub);
        hub_commit_consoles(hub);
}

void hp_stream_hub_close(struct hp_stream_hub *hub)
{
        hp_stream_hub_flush(hub);
        hub->closing = 2;
        uv_close((uv_handle_t *)&hub->timer, hub_timer_close_cb);
        uv_close((uv_handle_t *)&hub->poll, hub_poll_close_cb);
}

/* ---- One stream ---- */

static void on_line(void *ctx, const char *line, size_t len,
                    enum hp_line_end end)
{
        struct hp_stream *s = ctx;

        s->stats.lines++;
        if (end == HP_LINE_CAPPED)
                s->stats.lines_capped++;
        if (s->time_at >= 0 && uv_now(s->hub->loop) != s->time_stamped) {
                char iso[HP_ISO8601_MS_LEN + 1];

                s->time_stamped = uv_now(s->hub->loop);
                hp_iso8601_ms((int64_t)s->time_stamped +
                                      s->hub->wall_offset_ms,
                              iso);
                memcpy(s->prefix + s->time_at, iso, HP_ISO8601_MS_LEN);
        }
        if (s->console != NULL &&
            !hp_console_put_line(s->console, s->prefix, s->prefix_len, line,
                                 len, end))
                s->stats.console_dropped++;
        if (s->listener != NULL)
                s->listener(s->listener_ctx, line, len, end);
        if (s->dup != NULL)
                hp_dup_line(s->dup, s->prefix, s->prefix_len, line, len);
}

/* n bytes were read into buf after the unwritten ones. They go through the
 * splitter at once, so the rules see each line as soon as it is read;
 * the file gets them when the buffer has no room for another read, or
 * from the hub's timer. */
static void consume(struct hp_stream *s, size_t n)
{
        struct hp_stream_hub *hub = s->hub;
        const char *data = s->buf + s->unwritten;

        s->stats.bytes += n;
        s->last_read = uv_now(hub->loop);
        hp_linesplit_feed(&s->split, data, n, on_line, s);
        if (s->dup != NULL)
                hp_dup_flush(s->dup);
        if (s->console != NULL && hub->console_due == UINT64_MAX) {
                hub->console_due = uv_now(hub->loop) + HP_CONSOLE_DELAY_MS;
                hub_arm(hub, hub->console_due);
        }
        if (s->file_fd < 0 || s->file_failed) {
                if (s->file_failed)
                        s->stats.file_lost += n;
                return; /* nothing to keep: the next read starts over */
        }
        if (s->unwritten == 0) {
                s->dirty_next = hub->dirty;
                s->dirty_prev = NULL;
                if (hub->dirty != NULL)
                        hub->dirty->dirty_prev = s;
                hub->dirty = s;
                if (hub->files_due == UINT64_MAX) {
                        hub->files_due = uv_now(hub->loop) + HP_FILE_DELAY_MS;
                        hub_arm(hub, hub->files_due);
                }
        }
        s->unwritten += n;
        if (sizeof(s->buf) - s->unwritten < HP_READ_CHUNK)
                file_write_out(s);
}

static void close_cb(uv_handle_t *handle)
{
        struct hp_stream *s = hp_container_of(handle, struct hp_stream, pipe);

        s->open = false;
        if (s->closed_cb)
                s->closed_cb(s);
}

static void unwatch(struct hp_stream *s)
{
        struct hp_stream_hub *hub = s->hub;
        uv_os_fd_t fd;

        if (!s->reading)
                return;
        s->reading = false;
        /* Explicitly: a fork in progress may hold the fd open past our
         * close, and the set must not report a stream that is gone. */
        if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0)
                (void)epoll_ctl(hub->epfd, EPOLL_CTL_DEL, fd, NULL);
        if (--hub->watched == 0 && !hub->paced)
                uv_poll_stop(&hub->poll);
}

static void finish(struct hp_stream *s)
{
        if (s->file_fd >= 0)
                file_write_out(s);
        if (s->file_failed)
                hp_log_error("local rank %d: its log file %s misses the "
                             "last %llu of %llu bytes the worker wrote",
                             s->rank, s->file_path,
                             (unsigned long long)s->stats.file_lost,
                             (unsigned long long)s->stats.bytes);
        hp_linesplit_finish(&s->split, on_line, s);
        if (s->dup != NULL)
                hp_dup_flush(s->dup);
        if (s->console != NULL)
                hp_console_commit_ordered(s->console);
        unwatch(s);
        if (!uv_is_closing((uv_handle_t *)&s->pipe))
                uv_close((uv_handle_t *)&s->pipe, close_cb);
}

/* Reads what the pipe holds, up to 16 chunks (then the other pipes get
 * their turn), and finishes the stream at EOF or on an error. Returns
 * true if any read brought HP_READ_FAST bytes or more: the writer is
 * fast. */
static bool stream_read(struct hp_stream *s)
{
        uv_os_fd_t fd;
        bool fast = false;

        if (uv_fileno((uv_handle_t *)&s->pipe, &fd) < 0)
                return false;
        for (int i = 0; i < 16; i++) {
                ssize_t n = read(fd, s->buf + s->unwritten, HP_READ_CHUNK);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        if (n < 0 && s->error == 0)
                                s->error = -errno;
                        finish(s);
                        break;
                }
                consume(s, (size_t)n);
                if (n >= HP_READ_FAST)
                        fast = true;
                if (n < HP_READ_CHUNK)
                        break; /* the pipe is empty for now */
        }
        return fast;
}

int hp_stream_init(struct hp_stream *s, struct hp_stream_hub *hub,
                   const struct hp_stream_opts *opts)
{
        int r = uv_pipe_init(hub->loop, &s->pipe, 0);

        if (r < 0)
                return r;
        s->hub = hub;
        s->closed_cb = opts->closed_cb;
        s->data = opts->data;
        s->file_fd = -1;
        s->console = NULL;
        s->prefixed = false;
        s->prefix[0] = '\0';
        s->prefix_len = 0;
        s->time_stamped = UINT64_MAX;
        s->listener = NULL;
        s->listener_ctx = NULL;
        s->dup = NULL;
        s->time_at = -1;
        s->dirty_prev = s->dirty_next = NULL;
        s->unwritten = 0;
        s->open = true;
        s->reading = false;
        s->error = 0;
        s->file_failed = false;
        s->file_kept = s->file_line_end = 0;
        s->file_path[0] = '\0';
        s->rank = opts->rank;
        memset(&s->stats, 0, sizeof(s->stats));
        s->last_read = uv_now(hub->loop);
        hp_linesplit_init(&s->split, s->line, sizeof(s->line));
        return 0;
}

void hp_stream_set_output(struct hp_stream *s,
                          const struct hp_stream_output *out)
{
        s->file_fd = out->file_fd;
        snprintf(s->file_path, sizeof(s->file_path), "%s",
                 out->file_path != NULL ? out->file_path : "");
        s->console = out->console;
        s->prefixed = out->prefixed;
        s->listener = out->listener;
        s->listener_ctx = out->listener_ctx;
        s->dup = out->dup;
}

void hp_stream_set_prefix(struct hp_stream *s, const char *prefix, size_t len,
                          int time_at)
{
        if (len >= sizeof(s->prefix))
                len = sizeof(s->prefix) - 1;
        memcpy(s->prefix, prefix, len);
        s->prefix[len] = '\0';
        s->prefix_len = len;
        s->time_at = time_at >= 0 && (size_t)time_at < len ? time_at : -1;
        s->time_stamped = UINT64_MAX;
}

int hp_stream_start(struct hp_stream *s)
{
        struct hp_stream_hub *hub = s->hub;
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = s };
        uv_os_fd_t fd;
        int r = uv_fileno((uv_handle_t *)&s->pipe, &fd);

        if (r < 0)
                return r;
        if (epoll_ctl(hub->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
                return -errno;
        s->reading = true;
        if (hub->watched++ == 0 && !hub->paced)
                hub_watch(hub);
        return 0;
}

bool hp_stream_closed(const struct hp_stream *s)
{
        return !s->open || uv_is_closing((const uv_handle_t *)&s->pipe);
}

bool hp_stream_drain_and_close(struct hp_stream *s)
{
        bool eof = false;
        uv_os_fd_t fd;

        if (hp_stream_closed(s))
                return true;
        /* libuv keeps the fd non-blocking, so this loop ends at EAGAIN
         * even though the writer end is still open somewhere. */
        if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0) {
                for (;;) {
                        ssize_t n = read(fd, s->buf + s->unwritten,
                                         HP_READ_CHUNK);
                        if (n > 0) {
                                consume(s, (size_t)n);
                                continue;
                        }
                        if (n < 0 && errno == EINTR)
                                continue;
                        eof = n == 0;
                        break;
                }
        } else {
                eof = true; /* never connected */
        }
        finish(s);
        return eof;
}
