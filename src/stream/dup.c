/* SPDX-License-Identifier: Apache-2.0 */
/* torchrun's duplicate filters: matching lines copied into one file. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/stream.h"

int hp_dup_open(struct hp_dup *d, int dir_fd, const char *dir,
                const char *name, const char *const *needles,
                const size_t *lens, int count)
{
        struct stat st;

        d->fd = -1;
        d->count = 0;
        d->error = 0;
        d->lines = d->lines_lost = 0;
        d->used = 0;
        if (count < 0 || count > HP_DUP_NEEDLES)
                return -EINVAL;
        if (hp_snprintf(d->path, sizeof(d->path), "%s/%s", dir, name) < 0)
                return -ENAMETOOLONG;
        d->fd = openat(dir_fd, name,
                       O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND |
                               O_NOFOLLOW | O_NONBLOCK,
                       0600);
        if (d->fd < 0)
                return -errno;
        /* Not a FIFO someone put there: a write must never block. */
        if (fstat(d->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(d->fd);
                d->fd = -1;
                return -EPERM;
        }
        for (int i = 0; i < count; i++) {
                d->needle[i] = needles[i];
                d->needle_len[i] = lens[i];
        }
        d->count = count;
        return 0;
}

static bool matches(const struct hp_dup *d, const char *line, size_t len)
{
        for (int i = 0; i < d->count; i++)
                if (d->needle_len[i] == 0 ||
                    memmem(line, len, d->needle[i], d->needle_len[i]) != NULL)
                        return true;
        return false;
}

/* The first failure ends the file's writes, as a rank's log file's: a
 * copy with a gap is worse than one that stops. */
static void give_up(struct hp_dup *d, int err, uint64_t lines)
{
        if (d->error == 0)
                hp_log_error("%s: cannot write: %s; no more lines are copied "
                             "there",
                             d->path, hp_strerror(err));
        d->error = err;
        d->lines_lost += lines;
}

static void write_all(struct hp_dup *d, struct iovec *iov, int n,
                      uint64_t lines)
{
        while (n > 0) {
                ssize_t w = writev(d->fd, iov, n);

                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0) {
                        give_up(d, w < 0 ? -errno : -EIO, lines);
                        return;
                }
                while (n > 0 && (size_t)w >= iov->iov_len) {
                        w -= (ssize_t)iov->iov_len;
                        iov++;
                        n--;
                }
                if (n > 0) {
                        iov->iov_base = (char *)iov->iov_base + w;
                        iov->iov_len -= (size_t)w;
                }
        }
}

static uint64_t pending_lines(const struct hp_dup *d)
{
        uint64_t n = 0;

        for (size_t i = 0; i < d->used; i++)
                n += d->buf[i] == '\n';
        return n;
}

void hp_dup_flush(struct hp_dup *d)
{
        struct iovec iov = { d->buf, d->used };

        if (d->used == 0)
                return;
        if (d->fd >= 0 && d->error == 0)
                write_all(d, &iov, 1, pending_lines(d));
        d->used = 0;
}

void hp_dup_line(struct hp_dup *d, const char *prefix, size_t prefix_len,
                 const char *line, size_t len)
{
        size_t need = prefix_len + len + 1;

        if (d->fd < 0 || !matches(d, line, len))
                return;
        if (d->error != 0) {
                d->lines_lost++;
                return;
        }
        d->lines++;
        if (need > sizeof(d->buf) - d->used)
                hp_dup_flush(d);
        if (need > sizeof(d->buf)) {
                /* Cannot happen with HP_LINE_MAX lines and a 256-byte
                 * prefix; written straight through all the same. */
                struct iovec iov[3] = { { (void *)prefix, prefix_len },
                                        { (void *)line, len },
                                        { "\n", 1 } };
                write_all(d, iov, 3, 1);
                return;
        }
        memcpy(d->buf + d->used, prefix, prefix_len);
        memcpy(d->buf + d->used + prefix_len, line, len);
        d->buf[d->used + prefix_len + len] = '\n';
        d->used += need;
}

void hp_dup_close(struct hp_dup *d)
{
        if (d->fd < 0)
                return;
        hp_dup_flush(d);
        if (d->lines_lost > 0)
                hp_log_error("%s misses %llu of the %llu lines it should "
                             "hold",
                             d->path, (unsigned long long)d->lines_lost,
                             (unsigned long long)(d->lines + d->lines_lost));
        close(d->fd);
        d->fd = -1;
}
