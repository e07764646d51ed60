/* A worker pipe feeding a file, the console and a line listener. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/stream.h"

static void on_line(void *ctx, const char *line, size_t len,
                    enum hp_line_end end)
{
        struct hp_stream *s = ctx;

        s->stats.lines++;
        if (end == HP_LINE_CAPPED)
                s->stats.lines_capped++;
        if (s->console != NULL &&
            !hp_console_put_line(s->console, s->prefix, s->prefix_len, line,
                                 len, end))
                s->stats.console_dropped++;
        if (s->listener != NULL)
                s->listener(s->listener_ctx, line, len, end);
}

/* Every byte goes to the file first, exactly as the worker wrote it, then
 * through the splitter. */
static void consume(struct hp_stream *s, const char *data, size_t n)
{
        s->stats.bytes += n;
        if (s->file_fd >= 0) {
                int r = hp_write_all(s->file_fd, data, n);
                if (r < 0 && s->error == 0) {
                        s->error = r;
                        hp_log_error("writing worker output to its log file "
                                     "failed: %s; the console still gets it",
                                     hp_strerror(r));
                }
        }
        hp_linesplit_feed(&s->split, data, n, on_line, s);
        if (s->console != NULL)
                hp_console_commit(s->console);
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
        struct hp_stream *s = hp_container_of(handle, struct hp_stream, pipe);

        /* One fixed buffer per stream: read_cb consumes it synchronously
         * before the next read, so there is nothing to allocate. */
        buf->base = s->chunk;
        buf->len = sizeof(s->chunk);
}

static void close_cb(uv_handle_t *handle)
{
        struct hp_stream *s = hp_container_of(handle, struct hp_stream, pipe);

        s->open = false;
        if (s->closed_cb)
                s->closed_cb(s);
}

static void finish(struct hp_stream *s)
{
        hp_linesplit_finish(&s->split, on_line, s);
        if (s->console != NULL)
                hp_console_commit(s->console);
        if (s->reading)
                uv_read_stop((uv_stream_t *)&s->pipe);
        s->reading = false;
        if (!uv_is_closing((uv_handle_t *)&s->pipe))
                uv_close((uv_handle_t *)&s->pipe, close_cb);
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
        struct hp_stream *s = hp_container_of(stream, struct hp_stream, pipe);

        if (nread > 0) {
                consume(s, buf->base, (size_t)nread);
                return;
        }
        if (nread == 0) /* EAGAIN: nothing to do */
                return;
        if (nread != UV_EOF && s->error == 0)
                s->error = (int)nread;
        finish(s);
}

int hp_stream_init(struct hp_stream *s, uv_loop_t *loop)
{
        int r = uv_pipe_init(loop, &s->pipe, 0);

        if (r < 0)
                return r;
        s->open = true;
        s->reading = false;
        s->error = 0;
        memset(&s->stats, 0, sizeof(s->stats));
        hp_linesplit_init(&s->split, s->line, sizeof(s->line));
        return 0;
}

int hp_stream_start(struct hp_stream *s)
{
        int r = uv_read_start((uv_stream_t *)&s->pipe, alloc_cb, read_cb);

        if (r == 0)
                s->reading = true;
        return r;
}

bool hp_stream_drain_and_close(struct hp_stream *s)
{
        bool eof = false;
        uv_os_fd_t fd;

        if (!s->open || uv_is_closing((uv_handle_t *)&s->pipe))
                return true;
        /* libuv keeps the fd non-blocking, so this loop ends at EAGAIN
         * even though the writer end is still open somewhere. */
        if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0) {
                for (;;) {
                        ssize_t n = read(fd, s->chunk, sizeof(s->chunk));
                        if (n > 0) {
                                consume(s, s->chunk, (size_t)n);
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
