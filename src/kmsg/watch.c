/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading a kernel log on the agent's loop. /dev/kmsg gives one record per
 * read(2); a FIFO or a file given with --kmsg gives a byte stream, split
 * here on newlines. The descriptor is non-blocking and each loop turn reads
 * at most KMSG_WATCH_RECORDS_PER_TURN records, so a burst of kernel noise
 * is spread over turns and never holds up the workers' pipes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/kmsg.h"

/* A regular file at its end is looked at again this often for growth. */
#define TAIL_MS 200
#define CHUNK 4096

uint64_t kmsg_boottime_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_BOOTTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

struct feed_ctx {
        struct kmsg_watch *w;
        size_t config;
};

static void hit_cb(void *ctx, const struct kmsg_hit *hit)
{
        struct feed_ctx *f = ctx;

        if (f->w->hit_cb != NULL)
                f->w->hit_cb(f->w, f->config, hit);
}

static void dispatch(struct kmsg_watch *w, const struct kmsg_record *rec)
{
        w->records++;
        for (size_t i = 0; i < w->nconfigs && w->active; i++) {
                struct feed_ctx f = { w, i };
                if (kmsg_matcher_feed(w->matchers[i], rec, hit_cb, &f) ==
                    -ENOMEM)
                        hp_log_warn("kernel log: out of memory matching a "
                                    "record");
        }
}

/* A record whose header is broken is never matched: its time cannot be
 * placed before or after the start, and taking it as logged now would
 * turn an old fault into a new one. Counted; the first one is logged. */
static void broken_record(struct kmsg_watch *w, const char *line, size_t len)
{
        w->malformed++;
        if (w->warned_broken)
                return;
        w->warned_broken = true;
        if (len > 0 && line[len - 1] == '\n')
                len--;
        hp_log_warn(
                "kernel log '%s': ignoring a record whose sequence number "
                "or timestamp is not a decimal number: '%.*s' (further "
                "ones are counted in /metrics as malformed)",
                w->path, (int)(len > 200 ? 200 : len), line);
}

/* A line of a byte stream: a record, or a plain line taken as a message
 * logged now. */
static void stream_line(struct kmsg_watch *w, const char *line, size_t len)
{
        struct kmsg_record rec;
        int r;

        if (len == 0 || line[0] == ' ')
                return;
        r = kmsg_record_parse(line, len, &rec);
        if (r == -EPROTO) {
                broken_record(w, line, len);
                return;
        }
        if (r < 0) {
                w->malformed++;
                rec.prio = 6;
                rec.seq = 0;
                rec.usec = kmsg_boottime_us();
                rec.msg = line;
                rec.msg_len = len;
        }
        dispatch(w, &rec);
}

static void stop_reading(struct kmsg_watch *w, const char *why)
{
        if (w->polling) {
                uv_poll_stop(&w->poll);
        }
        if (w->timing)
                uv_timer_stop(&w->timer);
        if (why != NULL)
                hp_log_warn("kernel log '%s': %s; node faults are no longer "
                            "detected from it",
                            w->path, why);
}

/* Returns the number of records read this turn, or -1 when reading
 * stopped for good. */
static int read_device(struct kmsg_watch *w)
{
        char buf[8192];
        int n = 0, r;

        while (n < KMSG_WATCH_RECORDS_PER_TURN && w->active) {
                struct kmsg_record rec;
                ssize_t got = read(w->fd, buf, sizeof(buf));

                if (got < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return n;
                        if (errno == EPIPE) {
                                /* The ring wrapped over unread records:
                                 * the next read gives the oldest left. */
                                w->overwritten++;
                                continue;
                        }
                        stop_reading(w, strerror(errno));
                        return -1;
                }
                if (got == 0) {
                        stop_reading(w, "end of file");
                        return -1;
                }
                n++;
                r = kmsg_record_parse(buf, (size_t)got, &rec);
                if (r == -EPROTO) {
                        broken_record(w, buf, (size_t)got);
                        continue;
                }
                if (r < 0) {
                        w->malformed++;
                        continue;
                }
                dispatch(w, &rec);
        }
        return n;
}

static void stream_bytes(struct kmsg_watch *w, const char *p, size_t len,
                         int *lines)
{
        while (len > 0) {
                const char *nl = memchr(p, '\n', len);
                size_t take = nl != NULL ? (size_t)(nl - p) : len;
                size_t room = sizeof(w->line) - w->line_len;

                if (take > room) {
                        if (!w->line_overflow)
                                w->truncated++;
                        w->line_overflow = true;
                }
                if (!w->line_overflow) {
                        memcpy(w->line + w->line_len, p, take);
                        w->line_len += take;
                } else if (room > 0) {
                        size_t n = take < room ? take : room;
                        memcpy(w->line + w->line_len, p, n);
                        w->line_len += n;
                }
                if (nl == NULL)
                        return;
                stream_line(w, w->line, w->line_len);
                (*lines)++;
                w->line_len = 0;
                w->line_overflow = false;
                p = nl + 1;
                len -= take + 1;
        }
}

/* Returns the number of lines read this turn, 0 at the end for now, or -1
 * when reading stopped for good. */
static int read_stream(struct kmsg_watch *w)
{
        char buf[CHUNK];
        int lines = 0;

        while (lines < KMSG_WATCH_RECORDS_PER_TURN && w->active) {
                ssize_t got = read(w->fd, buf, sizeof(buf));

                if (got < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return lines;
                        stop_reading(w, strerror(errno));
                        return -1;
                }
                if (got == 0) {
                        w->eof = true;
                        return lines;
                }
                w->eof = false;
                stream_bytes(w, buf, (size_t)got, &lines);
        }
        return lines;
}

static void poll_cb(uv_poll_t *handle, int status, int events)
{
        struct kmsg_watch *w = handle->data;

        if (status < 0) {
                stop_reading(w, uv_strerror(status));
                return;
        }
        if (w->is_device)
                (void)read_device(w);
        else
                (void)read_stream(w);
}

static void timer_cb(uv_timer_t *handle)
{
        struct kmsg_watch *w = handle->data;
        int n = read_stream(w);

        if (n < 0)
                return;
        /* More may be waiting: the next turn reads on, after the loop has
         * served everything else. */
        uv_timer_start(&w->timer, timer_cb, w->eof ? TAIL_MS : 0, 0);
}

static int open_error(const char *path, int err, char *errbuf, size_t len)
{
        if (err == EACCES || err == EPERM)
                snprintf(
                        errbuf, len,
                        "cannot read the kernel log '%s': %s; in a container "
                        "mount /dev/kmsg and grant CAP_SYSLOG (or run "
                        "privileged), and check kernel.dmesg_restrict",
                        path, strerror(err));
        else if (err == ENOENT)
                snprintf(
                        errbuf, len,
                        "cannot read the kernel log '%s': %s; in a container "
                        "mount the host's /dev/kmsg (docker --device "
                        "/dev/kmsg, or a hostPath volume)",
                        path, strerror(err));
        else
                snprintf(errbuf, len, "cannot read the kernel log '%s': %s",
                         path, strerror(err));
        return -err;
}

int kmsg_watch_start(struct kmsg_watch *w, uv_loop_t *loop, const char *path,
                     struct kmsg_rules **rules, size_t nconfigs,
                     uint64_t start_us, kmsg_watch_hit_cb cb, char *errbuf,
                     size_t errlen)
{
        uint64_t lookback = 0;
        struct stat st;
        int r;

        memset(w, 0, sizeof(*w));
        w->fd = -1;
        w->hold_fd = -1;
        w->loop = loop;
        w->hit_cb = cb;
        w->start_us = start_us;
        snprintf(w->path, sizeof(w->path), "%s", path);
        if (nconfigs > KMSG_WATCH_MAX_CONFIGS) {
                for (size_t i = 0; i < nconfigs; i++)
                        kmsg_rules_free(rules[i]);
                snprintf(errbuf, errlen, "at most %d node problem configs",
                         KMSG_WATCH_MAX_CONFIGS);
                return HP_ECONFIG;
        }
        for (size_t i = 0; i < nconfigs; i++) {
                w->rules[i] = rules[i];
                rules[i] = NULL;
        }
        w->nconfigs = nconfigs;
        for (size_t i = 0; i < nconfigs; i++) {
                w->matchers[i] = kmsg_matcher_new(w->rules[i], start_us);
                if (w->matchers[i] == NULL) {
                        r = -ENOMEM;
                        snprintf(errbuf, errlen, "out of memory");
                        goto fail;
                }
                if (kmsg_rules_lookback_us(w->rules[i]) > lookback)
                        lookback = kmsg_rules_lookback_us(w->rules[i]);
        }
        w->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (w->fd < 0) {
                r = open_error(path, errno, errbuf, errlen);
                goto fail;
        }
        if (fstat(w->fd, &st) < 0) {
                r = open_error(path, errno, errbuf, errlen);
                goto fail;
        }
        w->active = true;
        if (S_ISCHR(st.st_mode)) {
                w->is_device = true;
                /* Without a lookback window nothing before the start
                 * counts: skip the ring's history. The records' times
                 * still decide. */
                if (lookback == 0)
                        (void)lseek(w->fd, 0, SEEK_END);
        } else if (S_ISFIFO(st.st_mode)) {
                /* Holding a write end keeps the FIFO from reporting end of
                 * file each time a writer closes it. */
                w->hold_fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        } else if (!S_ISREG(st.st_mode)) {
                snprintf(errbuf, errlen,
                         "the kernel log '%s' is not a character device, a "
                         "FIFO or a regular file",
                         path);
                r = HP_ECONFIG;
                goto fail;
        }
        if (S_ISREG(st.st_mode)) {
                uv_timer_init(loop, &w->timer);
                w->timer.data = w;
                w->timing = true;
                uv_timer_start(&w->timer, timer_cb, 0, 0);
                uv_unref((uv_handle_t *)&w->timer);
                return 0;
        }
        r = uv_poll_init(loop, &w->poll, w->fd);
        if (r < 0) {
                snprintf(errbuf, errlen,
                         "cannot watch the kernel log '%s': %s", path,
                         uv_strerror(r));
                goto fail;
        }
        w->poll.data = w;
        w->polling = true;
        uv_poll_start(&w->poll, UV_READABLE, poll_cb);
        /* The watcher never keeps the loop alive on its own. */
        uv_unref((uv_handle_t *)&w->poll);
        return 0;

fail:
        w->active = false;
        if (w->hold_fd >= 0)
                close(w->hold_fd);
        if (w->fd >= 0)
                close(w->fd);
        w->fd = w->hold_fd = -1;
        for (size_t i = 0; i < w->nconfigs; i++) {
                kmsg_matcher_free(w->matchers[i]);
                kmsg_rules_free(w->rules[i]);
                w->matchers[i] = NULL;
                w->rules[i] = NULL;
        }
        w->nconfigs = 0;
        return r;
}

static void closed_cb(uv_handle_t *handle)
{
        struct kmsg_watch *w = handle->data;

        if (w->fd >= 0)
                close(w->fd);
        w->fd = -1;
}

void kmsg_watch_close(struct kmsg_watch *w)
{
        w->active = false;
        if (w->polling) {
                /* The fd is closed once libuv has let go of it. */
                uv_close((uv_handle_t *)&w->poll, closed_cb);
                w->polling = false;
        } else if (w->timing) {
                uv_close((uv_handle_t *)&w->timer, closed_cb);
                w->timing = false;
        } else if (w->fd >= 0) {
                close(w->fd);
                w->fd = -1;
        }
        if (w->hold_fd >= 0)
                close(w->hold_fd);
        w->hold_fd = -1;
        for (size_t i = 0; i < w->nconfigs; i++) {
                kmsg_matcher_free(w->matchers[i]);
                kmsg_rules_free(w->rules[i]);
                w->matchers[i] = NULL;
                w->rules[i] = NULL;
        }
        w->nconfigs = 0;
}
