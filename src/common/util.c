/* Small helpers: strict number parsing, random names, whole-file reads,
 * file-system walks. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <ftw.h>
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
        if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0 ||
            v > 1e9)
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
        static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
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
                                bytes[got] = (unsigned char)((uintptr_t)&bytes[got] >> 3);
                        break;
                }
                got += (size_t)n;
        }
        for (size_t i = 0; i < len; i++)
                buf[i] = alphabet[bytes[i] % (sizeof(alphabet) - 1)];
}

static void answered_signals(sigset_t *set)
{
        static const int answered[] = { SIGTERM, SIGINT,  SIGHUP,  SIGQUIT,
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

int hp_write_file_atomic(const char *path, const void *data, size_t len,
                         unsigned mode, unsigned flags)
{
        char tmp[PATH_MAX];
        int fd, r;

        if (hp_snprintf(tmp, sizeof(tmp), "%s.tmp", path) < 0)
                return -ENAMETOOLONG;
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)mode);
        if (fd < 0)
                return -errno;
        r = hp_write_all(fd, data, len);
        if (r == 0 && (flags & HP_WRITE_FSYNC) && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                unlink(tmp);
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

static int remove_entry_cb(const char *path, const struct stat *st, int type,
                           struct FTW *ftw)
{
        if (remove(path) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

int hp_remove_tree(const char *path)
{
        int r = nftw(path, remove_entry_cb, 16, FTW_DEPTH | FTW_PHYS);

        if (r < 0)
                return errno == ENOENT ? 0 : -errno;
        return r;
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
