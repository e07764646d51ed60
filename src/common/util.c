/* SPDX-License-Identifier: Apache-2.0 */
/* Small helpers: strict number parsing, random names, whole-file reads,
 * file-system walks. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyperpod/common.h"

int hp_parse_u64(const char *text, uint64_t max, uint64_t *out)
{
        unsigned long long v;
        char *end;

        if (text == NULL || *text < '0' || *text > '9')
                return HP_ECONFIG;
        errno = 0;
        v = strtoull(text, &end, 10);
        if (errno != 0 || *end != '\0' || v > max)
                return HP_ECONFIG;
        *out = v;
        return 0;
}

int hp_parse_int(const char *text, int min, int max, int *out)
{
        long v;
        char *end;

        if (text == NULL || *text == '\0' || *text == ' ' || *text == '+')
                return HP_ECONFIG;
        errno = 0;
        v = strtol(text, &end, 10);
        if (errno != 0 || *end != '\0' || v < min || v > max)
                return HP_ECONFIG;
        *out = (int)v;
        return 0;
}

const char *hp_format_double(double v, char *buf)
{
        /* For a normal double a 15-digit form that reads back is the
         * shortest one: a shorter decimal that reads back lies within half
         * an ulp, well inside the 15-digit rounding step, so %.15g gives
         * it. A subnormal has fewer digits of precision: tried from 1.
         * 17 digits always read back. */
        int first = v != 0 && fabs(v) < DBL_MIN ? 1 : 15;

        for (int digits = first; digits <= 17; digits++) {
                snprintf(buf, HP_DOUBLE_LEN, "%.*g", digits, v);
                if (!isfinite(v) || strtod(buf, NULL) == v)
                        break;
        }
        return buf;
}

int hp_parse_seconds_ms(const char *text, uint64_t *out_ms)
{
        double v;
        char *end;

        if (text == NULL || *text < '0' || *text > '9')
                return HP_ECONFIG;
        errno = 0;
        v = strtod(text, &end);
        if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0 || v > 1e9)
                return HP_ECONFIG;
        *out_ms = (uint64_t)llround(v * 1000.0);
        return 0;
}

int hp_snprintf(char *buf, size_t len, const char *fmt, ...)
{
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(buf, len, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -errno;
        if ((size_t)n >= len)
                return HP_ETOOBIG;
        return 0;
}

void hp_random_name(char *buf, size_t len)
{
        static const char alphabet[] =
                "abcdefghijklmnopqrstuvwxyz0123456789_";
        unsigned char bytes[64];
        size_t got = 0;

        if (len > sizeof(bytes))
                len = sizeof(bytes);
        while (got < len) {
                ssize_t n = getrandom(bytes + got, len - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        /* getrandom cannot fail on Linux >= 3.17 with a
                         * small buffer; fall back to the address space
                         * layout rather than abort. */
                        for (; got < len; got++)
                                bytes[got] = (unsigned char)((uintptr_t)&bytes
                                                                     [got] >>
                                                             3);
                        break;
                }
                got += (size_t)n;
        }
        for (size_t i = 0; i < len; i++)
                buf[i] = alphabet[bytes[i] % (sizeof(alphabet) - 1)];
}

static void answered_signals(sigset_t *set)
{
        static const int answered[] = { SIGTERM, SIGINT,  SIGHUP, SIGQUIT,
                                        SIGUSR1, SIGUSR2, SIGCHLD };

        sigemptyset(set);
        for (size_t i = 0; i < HP_ARRAY_SIZE(answered); i++)
                sigaddset(set, answered[i]);
}

void hp_signals_hold(void)
{
        struct sigaction dfl;
        sigset_t held;

        answered_signals(&held);
        (void)sigprocmask(SIG_SETMASK, &held, NULL);
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; sig++) {
                struct sigaction old;

                if (sig == SIGKILL || sig == SIGSTOP ||
                    sigaction(sig, NULL, &old) < 0)
                        continue; /* and glibc's own, which it refuses */
                if (old.sa_handler == SIG_IGN)
                        (void)sigaction(sig, &dfl, NULL);
        }
}

int hp_signals_release(void)
{
        static const int stops[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT };
        sigset_t held, pending;
        int first = 0;

        if (sigpending(&pending) == 0)
                for (size_t i = 0; i < HP_ARRAY_SIZE(stops) && !first; i++)
                        if (sigismember(&pending, stops[i]) == 1)
                                first = stops[i];
        answered_signals(&held);
        (void)sigprocmask(SIG_UNBLOCK, &held, NULL);
        return first;
}

int hp_std_fds_open(void)
{
        for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
                int null_fd;

                if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
                        continue;
                /* The lowest free number: this one, as the lower ones are
                 * open by now. */
                null_fd = open("/dev/null", O_RDWR);
                if (null_fd < 0)
                        return -errno;
                if (null_fd != fd) {
                        close(null_fd);
                        return -EBADF;
                }
        }
        return 0;
}

int hp_write_all(int fd, const void *buf, size_t len)
{
        const char *p = buf;

        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

const char *hp_env_get(char *const *envp, const char *name)
{
        size_t len = strlen(name);

        for (char *const *e = envp; e != NULL && *e != NULL; e++)
                if (strncmp(*e, name, len) == 0 && (*e)[len] == '=')
                        return *e + len + 1;
        return NULL;
}

int hp_read_file(const char *path, size_t max, char **out, size_t *len)
{
        struct stat st;
        size_t used = 0, cap, grown;
        char *buf, *more;
        ssize_t got;
        int fd, r = 0;

        *out = NULL;
        *len = 0;
        /* O_NONBLOCK: a FIFO must not hang the open; it is refused below
         * with everything else that is not a regular file. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                goto out_close;
        }
        if (!S_ISREG(st.st_mode)) {
                r = S_ISDIR(st.st_mode) ? -EISDIR : -ENODEV;
                goto out_close;
        }
        if ((uint64_t)st.st_size > max) {
                r = -EFBIG;
                goto out_close;
        }
        /* Room for one byte more than the size says, so that a file that
         * grew (or a /proc file, whose size is 0) is read to its end and
         * still cut off past max. */
        cap = (size_t)st.st_size + 1;
        buf = malloc(cap + 1);
        if (buf == NULL) {
                r = -ENOMEM;
                goto out_close;
        }
        for (;;) {
                if (used == cap) {
                        if (cap > max) {
                                r = -EFBIG;
                                break;
                        }
                        grown = cap > max / 2 ? max + 1 : 2 * cap;
                        more = realloc(buf, grown + 1);
                        if (more == NULL) {
                                r = -ENOMEM;
                                break;
                        }
                        buf = more;
                        cap = grown;
                }
                got = read(fd, buf + used, cap - used);
                if (got < 0 && errno == EINTR)
                        continue;
                if (got < 0) {
                        r = -errno;
                        break;
                }
                if (got == 0)
                        break;
                used += (size_t)got;
        }
        if (r == 0 && used > max)
                r = -EFBIG;
        if (r != 0) {
                free(buf);
                goto out_close;
        }
        buf[used] = '\0';
        *out = buf;
        *len = used;
out_close:
        close(fd);
        return r;
}

int hp_write_file_atomic_at(int dirfd, const char *name, const void *data,
                            size_t len, unsigned mode, unsigned flags)
{
        char tmp[NAME_MAX + 1];
        int fd = -1, r;

        if (name[0] == '\0' || strchr(name, '/') != NULL)
                return -EINVAL;
        /* A new name each time, made exclusively: whatever sits at a
         * name we might use (a link planted there) makes us pick
         * another, and nothing is opened through a link. */
        for (int tries = 0; fd < 0; tries++) {
                char rand[7];

                if (tries == 100)
                        return -EEXIST;
                hp_random_name(rand, 6);
                rand[6] = '\0';
                if (hp_snprintf(tmp, sizeof(tmp), "%s.tmp.%s", name, rand) <
                    0)
                        return -ENAMETOOLONG;
                fd = openat(dirfd, tmp,
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                                    O_CLOEXEC,
                            (mode_t)mode);
                if (fd < 0 && errno != EEXIST)
                        return -errno;
        }
        r = hp_write_all(fd, data, len);
        if (r == 0 && (flags & HP_WRITE_FSYNC) && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        /* rename replaces a link at name; it never follows it. */
        if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
                r = -errno;
        if (r < 0)
                unlinkat(dirfd, tmp, 0);
        return r;
}

int hp_write_file_atomic(const char *path, const void *data, size_t len,
                         unsigned mode, unsigned flags)
{
        const char *slash = strrchr(path, '/');
        char dir[PATH_MAX];
        size_t dir_len;
        int dirfd, r;

        if (slash == NULL)
                return hp_write_file_atomic_at(AT_FDCWD, path, data, len,
                                               mode, flags);
        if (slash[1] == '\0')
                return -EISDIR;
        dir_len = slash == path ? 1 : (size_t)(slash - path);
        if (dir_len >= sizeof(dir))
                return -ENAMETOOLONG;
        memcpy(dir, path, dir_len);
        dir[dir_len] = '\0';
        dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                return -errno;
        r = hp_write_file_atomic_at(dirfd, slash + 1, data, len, mode, flags);
        close(dirfd);
        return r;
}

int hp_mkdir_p(const char *path, unsigned mode)
{
        char tmp[PATH_MAX];
        size_t len = strlen(path);

        if (len == 0)
                return -ENOENT;
        if (len >= sizeof(tmp))
                return -ENAMETOOLONG;
        memcpy(tmp, path, len + 1);
        for (char *p = tmp + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(tmp, mode) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(tmp, mode) < 0) {
                struct stat st;
                if (errno != EEXIST)
                        return -errno;
                if (stat(tmp, &st) < 0)
                        return -errno;
                if (!S_ISDIR(st.st_mode))
                        return -ENOTDIR;
        }
        return 0;
}

int hp_mkdir_private_at(int dirfd, const char *name)
{
        struct stat st;
        int fd;

        if (mkdirat(dirfd, name, 0700) < 0)
                return -errno;
        fd = openat(dirfd, name,
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        /* The one we made (only someone who can write dirfd could have
         * swapped it), and 0700 whatever the umask. */
        if (fstat(fd, &st) < 0 || st.st_uid != geteuid() ||
            fchmod(fd, 0700) < 0) {
                close(fd);
                return -EPERM;
        }
        return fd;
}

/* Deeper than this, a tree is not one we made: it is left, and said. */
#define REMOVE_DEPTH_MAX 128
/* Passes over a directory whose entries change while it is read. */
#define REMOVE_PASSES 8

static int remove_at(int dirfd, const char *name, int depth)
{
        DIR *d;
        int fd, r = 0;

        /* Anything but a directory, a link included, goes with its name. */
        if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
                return 0;
        if (errno != EISDIR && errno != EPERM)
                return -errno;
        if (depth >= REMOVE_DEPTH_MAX)
                return -ELOOP;
        fd = openat(dirfd, name,
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC |
                            O_NONBLOCK);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        d = fdopendir(fd);
        if (d == NULL) {
                r = -errno;
                close(fd);
                return r;
        }
        for (int pass = 0;; pass++) {
                bool removed = false;
                struct dirent *de;

                r = 0;
                rewinddir(d);
                while ((de = readdir(d)) != NULL) {
                        int e;

                        if (strcmp(de->d_name, ".") == 0 ||
                            strcmp(de->d_name, "..") == 0)
                                continue;
                        e = remove_at(fd, de->d_name, depth + 1);
                        if (e == 0)
                                removed = true;
                        else if (r == 0)
                                r = e;
                }
                if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 ||
                    errno == ENOENT) {
                        r = 0;
                        break;
                }
                if (errno != ENOTEMPTY && errno != EEXIST) {
                        r = -errno;
                        break;
                }
                /* Emptied while we read it, or still being filled. */
                if (!removed || pass + 1 == REMOVE_PASSES) {
                        if (r == 0)
                                r = -ENOTEMPTY;
                        break;
                }
        }
        closedir(d);
        return r;
}

int hp_remove_tree_at(int dirfd, const char *name)
{
        return remove_at(dirfd, name, 0);
}

int hp_remove_tree(const char *path)
{
        return remove_at(AT_FDCWD, path, 0);
}

bool hp_pid_is_other_agent(long pid)
{
        char path[64], comm[32] = "";
        struct stat self, other;
        ssize_t n;
        int fd;

        if (pid <= 0 || pid > INT32_MAX || (pid_t)pid == getpid())
                return false;
        if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
                return false;
        snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno != ENOENT; /* gone meanwhile: not alive */
        n = read(fd, comm, sizeof(comm) - 1);
        close(fd);
        if (n > 0 && strcmp(comm, "hyperpodrun\n") == 0)
                return true;
        /* Installed under another name (a torchrun link): the same
         * program file. */
        snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
        if (stat("/proc/self/exe", &self) < 0 || stat(path, &other) < 0)
                return errno != ENOENT;
        return self.st_dev == other.st_dev && self.st_ino == other.st_ino;
}

/* HP_ECONFIG, said in errbuf, when st (path's) may be changed by someone
 * who is neither root nor the agent's user; last: the directory itself. */
static int check_trusted(const char *path, const struct stat *st, bool last,
                         unsigned flags, char *errbuf, size_t len)
{
        uid_t euid = geteuid();
        unsigned mode = (unsigned)st->st_mode & 07777;
        bool link = S_ISLNK(st->st_mode);
        bool sticky = (st->st_mode & S_ISVTX) != 0;

        if (st->st_uid != 0 && st->st_uid != euid) {
                snprintf(errbuf, len,
                         "%s'%s' is owned by uid %u (mode %04o), not by root "
                         "or uid %u (the agent's)",
                         link ? "the symlink " : "", path,
                         (unsigned)st->st_uid, mode, (unsigned)euid);
                return HP_ECONFIG;
        }
        if (link || (st->st_mode & (S_IWGRP | S_IWOTH)) == 0)
                return 0;
        if (sticky && (!last || (flags & HP_DIR_STICKY_OK)))
                return 0;
        snprintf(errbuf, len,
                 "'%s' is writable by %s (mode %04o, owner uid %u, group "
                 "gid %u)%s",
                 path, (st->st_mode & S_IWOTH) ? "every user" : "its group",
                 mode, (unsigned)st->st_uid, (unsigned)st->st_gid,
                 last ? "" : " without the sticky bit");
        return HP_ECONFIG;
}

/* done (a directory's path) with name appended, or done's parent for
 * "..": into out. */
static int walk_join(const char *done, const char *name, char *out,
                     size_t len)
{
        if (strcmp(name, "..") == 0) {
                const char *slash = strrchr(done, '/');
                size_t n = slash == NULL || slash == done
                                   ? 1
                                   : (size_t)(slash - done);

                if (n >= len)
                        return -ENAMETOOLONG;
                memcpy(out, done, n);
                out[n] = '\0';
                return 0;
        }
        return hp_snprintf(out, len, "%s%s%s", done,
                           strcmp(done, "/") == 0 ? "" : "/", name) < 0
                       ? -ENAMETOOLONG
                       : 0;
}

/* The symlink name in dirfd (at path): checked, and its target put in
 * front of rest, which becomes todo. Returns 1 for an absolute target. */
static int walk_link(int dirfd, const char *name, const char *path,
                     const char *rest, char *todo, size_t todo_len,
                     char *errbuf, size_t len)
{
        char target[PATH_MAX], joined[2 * PATH_MAX];
        struct stat st;
        ssize_t n;
        int r;

        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISLNK(st.st_mode))
                return -ENOTDIR;
        r = check_trusted(path, &st, false, 0, errbuf, len);
        if (r < 0)
                return r;
        n = readlinkat(dirfd, name, target, sizeof(target) - 1);
        if (n < 0)
                return -errno;
        target[n] = '\0';
        if (hp_snprintf(joined, sizeof(joined), "%s/%s", target, rest) < 0 ||
            hp_snprintf(todo, todo_len, "%s", joined) < 0)
                return -ENAMETOOLONG;
        return target[0] == '/';
}

int hp_dir_open_trusted(const char *path, unsigned flags, char *errbuf,
                        size_t len)
{
        const int open_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                               O_CLOEXEC;
        char todo[2 * PATH_MAX], done[PATH_MAX], next_done[PATH_MAX];
        char cwd[PATH_MAX];
        struct stat st;
        int fd, links = 0, r = 0;
        char *p;

        snprintf(errbuf, len, "'%s'", path);
        if (path[0] == '\0')
                return -ENOENT;
        if (path[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL)
                return -errno;
        if (hp_snprintf(todo, sizeof(todo), "%s%s%s",
                        path[0] == '/' ? "" : cwd, path[0] == '/' ? "" : "/",
                        path) < 0)
                return -ENAMETOOLONG;
        fd = open("/", open_flags);
        if (fd < 0)
                return -errno;
        snprintf(done, sizeof(done), "/");
        if (fstat(fd, &st) < 0)
                r = -errno;
        else
                r = check_trusted(done, &st, false, 0, errbuf, len);
        p = todo;
        while (r == 0) {
                char *name = p, *rest;
                int next;

                while (*name == '/')
                        name++;
                if (*name == '\0')
                        break;
                rest = strchr(name, '/');
                if (rest != NULL)
                        *rest++ = '\0';
                else
                        rest = name + strlen(name);
                p = rest;
                if (strcmp(name, ".") == 0)
                        continue;
                r = walk_join(done, name, next_done, sizeof(next_done));
                if (r < 0) {
                        snprintf(errbuf, len, "'%s'", path);
                        break;
                }
                next = openat(fd, name, open_flags);
                if (next < 0 && errno == ENOENT && (flags & HP_DIR_CREATE)) {
                        if (mkdirat(fd, name, 0755) < 0 && errno != EEXIST) {
                                r = -errno;
                                snprintf(errbuf, len, "'%s'", next_done);
                                break;
                        }
                        next = openat(fd, name, open_flags);
                }
                if (next < 0 && (errno == ELOOP || errno == ENOTDIR)) {
                        /* A symlink on the way: its owner is checked, then
                         * its target walked, from / or from here. */
                        char left[2 * PATH_MAX];

                        snprintf(left, sizeof(left), "%s", rest);
                        if (++links > 40) {
                                r = -ELOOP;
                        } else {
                                r = walk_link(fd, name, next_done, left, todo,
                                              sizeof(todo), errbuf, len);
                        }
                        if (r == 1) {
                                close(fd);
                                fd = open("/", open_flags);
                                if (fd < 0) {
                                        r = -errno;
                                        break;
                                }
                                snprintf(done, sizeof(done), "/");
                        }
                        if (r == -ENOTDIR || r == -ELOOP ||
                            r == -ENAMETOOLONG)
                                snprintf(errbuf, len, "'%s'", next_done);
                        if (r < 0)
                                break;
                        r = 0;
                        p = todo;
                        continue;
                }
                if (next < 0) {
                        r = -errno;
                        snprintf(errbuf, len, "'%s'", next_done);
                        break;
                }
                close(fd);
                fd = next;
                memcpy(done, next_done, sizeof(done));
                if (fstat(fd, &st) < 0)
                        r = -errno;
                else
                        r = check_trusted(done, &st, false, 0, errbuf, len);
        }
        if (r == 0) {
                if (fstat(fd, &st) < 0)
                        r = -errno;
                else
                        r = check_trusted(done, &st, true, flags, errbuf,
                                          len);
        }
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

const char *hp_signal_name(int signum)
{
        static const struct {
                int num;
                const char *name;
        } names[] = {
                { SIGHUP, "SIGHUP" },   { SIGINT, "SIGINT" },
                { SIGQUIT, "SIGQUIT" }, { SIGILL, "SIGILL" },
                { SIGTRAP, "SIGTRAP" }, { SIGABRT, "SIGABRT" },
                { SIGBUS, "SIGBUS" },   { SIGFPE, "SIGFPE" },
                { SIGKILL, "SIGKILL" }, { SIGUSR1, "SIGUSR1" },
                { SIGSEGV, "SIGSEGV" }, { SIGUSR2, "SIGUSR2" },
                { SIGPIPE, "SIGPIPE" }, { SIGALRM, "SIGALRM" },
                { SIGTERM, "SIGTERM" }, { SIGCHLD, "SIGCHLD" },
                { SIGCONT, "SIGCONT" }, { SIGSTOP, "SIGSTOP" },
                { SIGTSTP, "SIGTSTP" }, { SIGXCPU, "SIGXCPU" },
                { SIGXFSZ, "SIGXFSZ" }, { SIGSYS, "SIGSYS" },
        };

        for (size_t i = 0; i < HP_ARRAY_SIZE(names); i++)
                if (names[i].num == signum)
                        return names[i].name;
        return NULL;
}

bool hp_utf8_valid(const char *s, size_t n)
{
        const unsigned char *p = (const unsigned char *)s;

        while (n > 0) {
                size_t k = hp_utf8_seq_len(p, n);
                if (k == 0)
                        return false;
                p += k;
                n -= k;
        }
        return true;
}

/* The bytes one U+FFFD stands for at an invalid sequence: its maximal
 * valid prefix, or one byte (Unicode's "maximal subpart", as Python's
 * decoder replaces). */
static size_t invalid_run(const unsigned char *s, size_t n)
{
        unsigned c = s[0];
        unsigned lo = 0x80, hi = 0xbf;
        size_t len, i;

        if (c >= 0xc2 && c <= 0xdf)
                len = 2;
        else if (c >= 0xe0 && c <= 0xef)
                len = 3;
        else if (c >= 0xf0 && c <= 0xf4)
                len = 4;
        else
                return 1;
        if (c == 0xe0)
                lo = 0xa0;
        else if (c == 0xed)
                hi = 0x9f;
        else if (c == 0xf0)
                lo = 0x90;
        else if (c == 0xf4)
                hi = 0x8f;
        for (i = 1; i < len && i < n; i++) {
                unsigned b = s[i];
                if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
                        break;
        }
        return i;
}

size_t hp_utf8_repair(const char *src, char *out, size_t len)
{
        static const char replacement[] = "\xef\xbf\xbd";
        const unsigned char *p = (const unsigned char *)src;
        size_t n = strlen(src), used = 0;

        if (len == 0)
                return 0;
        while (n > 0) {
                size_t k = hp_utf8_seq_len(p, n);
                const void *from = k ? (const void *)p : replacement;
                size_t want = k ? k : 3;

                if (used + want >= len)
                        break;
                memcpy(out + used, from, want);
                used += want;
                if (k == 0)
                        k = invalid_run(p, n);
                p += k;
                n -= k;
        }
        out[used] = '\0';
        return used;
}

static void put_digits(char *p, unsigned v, int n)
{
        while (n-- > 0) {
                p[n] = (char)('0' + v % 10);
                v /= 10;
        }
}

/* civil_from_days (Howard Hinnant's), so that no time zone or libc
 * state is involved; written digit by digit, as it stamps console lines. */
void hp_iso8601_ms(int64_t ms, char *buf)
{
        int64_t days = (ms >= 0 ? ms : ms - 86399999) / 86400000;
        int64_t rem = ms - days * 86400000, z = days + 719468, era, y;
        unsigned doe, yoe, doy, mp, d, m;

        era = (z >= 0 ? z : z - 146096) / 146097;
        doe = (unsigned)(z - era * 146097);
        yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        y = (int64_t)yoe + era * 400;
        doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        mp = (5 * doy + 2) / 153;
        d = doy - (153 * mp + 2) / 5 + 1;
        m = mp < 10 ? mp + 3 : mp - 9;
        y += m <= 2;
        memcpy(buf, "0000-00-00T00:00:00.000Z", HP_ISO8601_MS_LEN + 1);
        put_digits(buf, (unsigned)(y < 0 ? 0 : y > 9999 ? 9999 : y), 4);
        put_digits(buf + 5, m, 2);
        put_digits(buf + 8, d, 2);
        put_digits(buf + 11, (unsigned)(rem / 3600000), 2);
        put_digits(buf + 14, (unsigned)(rem / 60000 % 60), 2);
        put_digits(buf + 17, (unsigned)(rem / 1000 % 60), 2);
        put_digits(buf + 20, (unsigned)(rem % 1000), 3);
}
