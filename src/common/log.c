/* SPDX-License-Identifier: Apache-2.0 */
/* Agent diagnostics on stderr, with a level from LOGLEVEL. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyperpod/common.h"

/* The level is the one piece of process-wide state besides what the OS
 * imposes: every module logs, and threading a context into each call for a
 * single integer would buy nothing. It is set once, before the loop runs. */
static enum hp_log_level log_level = HP_LOG_INFO;
/* The same holds for where messages go (set while the consoles run), and
 * for the descriptor and count of the fallback below. */
static _Atomic(hp_log_sink_fn) log_sink;
static void *_Atomic log_sink_ctx;
static _Atomic int nonblock_fd = -2; /* -2: not opened yet, -1: fd 2 */
static _Atomic uint64_t log_dropped;

void hp_log_set_sink(hp_log_sink_fn sink, void *ctx)
{
        atomic_store(&log_sink_ctx, ctx);
        atomic_store(&log_sink, sink);
}

uint64_t hp_log_dropped(void)
{
        return atomic_load(&log_dropped);
}

/* A descriptor for stderr on which a write never blocks. A pipe or a
 * terminal is opened again through /proc: that makes a file description
 * of our own, whose O_NONBLOCK no other holder of the pipe sees. A
 * regular file cannot block for long and keeps fd 2 (opening it again
 * would lose its offset); so does anything that cannot be opened again,
 * a socket for one (sent to with MSG_DONTWAIT instead). */
static int stderr_nonblocking(void)
{
        int fd = atomic_load(&nonblock_fd), expected = -2;
        struct stat st;

        if (fd != -2)
                return fd;
        fd = -1;
        if (fstat(STDERR_FILENO, &st) == 0 &&
            (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)))
                fd = open("/proc/self/fd/2",
                          O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                fd = -1;
        if (!atomic_compare_exchange_strong(&nonblock_fd, &expected, fd)) {
                if (fd >= 0)
                        close(fd);
                fd = expected;
        }
        return fd;
}

/* One write, never blocking: a message is at most PIPE_BUF-sized pieces
 * of a pipe, so it goes in whole or not at all, and a stderr nobody
 * reads costs a dropped message, counted, never a stalled agent. */
static void write_nonblocking(const char *line, size_t n)
{
        int fd = stderr_nonblocking();
        ssize_t w;

        do {
                if (fd >= 0)
                        w = write(fd, line, n);
                else
                        w = send(STDERR_FILENO, line, n,
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
                if (w < 0 && errno == ENOTSOCK)
                        w = write(STDERR_FILENO, line, n);
        } while (w < 0 && errno == EINTR);
        if (w != (ssize_t)n)
                atomic_fetch_add(&log_dropped, 1);
}

void hp_log_set_level(enum hp_log_level level)
{
        log_level = level;
}

enum hp_log_level hp_log_get_level(void)
{
        return log_level;
}

int hp_log_level_parse(const char *text, enum hp_log_level *out)
{
        static const struct {
                const char *name;
                enum hp_log_level level;
        } names[] = {
                { "error", HP_LOG_ERROR },     { "critical", HP_LOG_ERROR },
                { "warning", HP_LOG_WARNING }, { "warn", HP_LOG_WARNING },
                { "info", HP_LOG_INFO },       { "debug", HP_LOG_DEBUG },
                { "trace", HP_LOG_DEBUG },
        };

        for (size_t i = 0; i < HP_ARRAY_SIZE(names); i++) {
                if (strcasecmp(text, names[i].name) == 0) {
                        *out = names[i].level;
                        return 0;
                }
        }
        return HP_ECONFIG;
}

void hp_log(enum hp_log_level level, const char *fmt, ...)
{
        static const char *const tags[] = { "error", "warning", "info",
                                            "debug" };
        char line[4096];
        int saved_errno = errno;
        hp_log_sink_fn sink;
        va_list ap;
        int n;

        if (level > log_level)
                return;
        n = snprintf(line, sizeof(line),
                     "hyperpodrun[%d]: %s: ", (int)getpid(), tags[level]);
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof(line) - 2)
                n = (int)sizeof(line) - 2;
        line[n++] = '\n';
        sink = atomic_load(&log_sink);
        if (sink != NULL)
                sink(atomic_load(&log_sink_ctx), line, (size_t)n);
        else
                write_nonblocking(line, (size_t)n);
        errno = saved_errno;
}

void hp_log_write(const char *text, size_t len)
{
        hp_log_sink_fn sink = atomic_load(&log_sink);
        int saved_errno = errno;

        if (sink != NULL)
                sink(atomic_load(&log_sink_ctx), text, len);
        else
                write_nonblocking(text, len);
        errno = saved_errno;
}
