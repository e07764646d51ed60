/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: shared error codes, logging and small helpers. */
#ifndef HYPERPOD_COMMON_H
#define HYPERPOD_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Errors are 0 or a negative number: a negative errno (libuv results pass
 * through untouched) or one of the project codes below, which live in a
 * reserved block far away from any errno value.
 */
#define HP_ERRNO_MAP(XX)                                                     \
        XX(HP_ECONFIG, -5001, "invalid configuration")                       \
        XX(HP_EUSAGE, -5002, "invalid command line")                         \
        XX(HP_ENOTSUP, -5003, "not supported")                               \
        XX(HP_ERDZV, -5004, "rendezvous failed")                             \
        XX(HP_ESPAWN, -5005, "could not start a process")                    \
        XX(HP_ETOOBIG, -5006, "value too large")

enum hp_error {
#define XX(name, value, text) name = value,
        HP_ERRNO_MAP(XX)
#undef XX
};

/* Text for any error this project returns: project codes or -errno. */
const char *hp_strerror(int err);
/* The symbolic name ("HP_ECONFIG", "ENOENT") of an error. */
const char *hp_err_name(int err);

#define HP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define hp_container_of(ptr, type, member)                                   \
        ((type *)((char *)(ptr)-offsetof(type, member)))

/* Logging: one process-wide level, which the OS-level nature of stderr
 * forces on us anyway. Messages go to stderr as "hyperpodrun[pid]: ...". */
enum hp_log_level {
        HP_LOG_ERROR = 0,
        HP_LOG_WARNING = 1,
        HP_LOG_INFO = 2,
        HP_LOG_DEBUG = 3,
};

void hp_log_set_level(enum hp_log_level level);
enum hp_log_level hp_log_get_level(void);
/* Parses DEBUG/INFO/WARNING/ERROR (any case). Returns 0 or HP_ECONFIG. */
int hp_log_level_parse(const char *text, enum hp_log_level *out);
void hp_log(enum hp_log_level level, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Where messages go instead of fd 2 while one is set: a writer that
 * never blocks the caller and keeps each message whole (the agent's
 * stderr console). It takes msg (borrowed, ending in a newline) and may
 * drop it, counting it. NULL: back to fd 2, written without blocking
 * (a message that finds it full is dropped and counted). */
typedef void (*hp_log_sink_fn)(void *ctx, const char *msg, size_t len);
void hp_log_set_sink(hp_log_sink_fn sink, void *ctx);
/* Writes text (whole lines, borrowed) where the messages go, with no
 * prefix and whatever the level. */
void hp_log_write(const char *text, size_t len);
/* Messages dropped on the way to fd 2 (the sink counts its own). */
uint64_t hp_log_dropped(void);

#define hp_log_error(...) hp_log(HP_LOG_ERROR, __VA_ARGS__)
#define hp_log_warn(...) hp_log(HP_LOG_WARNING, __VA_ARGS__)
#define hp_log_info(...) hp_log(HP_LOG_INFO, __VA_ARGS__)
#define hp_log_debug(...)                                                    \
        do {                                                                 \
                if (hp_log_get_level() >= HP_LOG_DEBUG)                      \
                        hp_log(HP_LOG_DEBUG, __VA_ARGS__);                   \
        } while (0)

/*
 * Strict number parsing: the whole string must be the number, with no sign
 * where none is allowed and no overflow. Return 0 or HP_ECONFIG.
 */
int hp_parse_u64(const char *text, uint64_t max, uint64_t *out);
int hp_parse_int(const char *text, int min, int max, int *out);
/* Seconds as a decimal ("15", "0.5"), non-negative, to milliseconds. */
int hp_parse_seconds_ms(const char *text, uint64_t *out_ms);

/* The shortest decimal that reads back as v ("15.96", not
 * "15.960000000000001"), as Python's repr and JSON encoders print it;
 * "nan", "inf" and "-inf" for what JSON cannot hold. buf holds at least
 * HP_DOUBLE_LEN bytes. Returns buf. */
#define HP_DOUBLE_LEN 32
const char *hp_format_double(double v, char *buf);

struct cJSON;
/* JSON numbers as they were written. Checks that every number in text
 * (borrowed), which doc was parsed from, is one JSON allows (cJSON also
 * takes "01", "1." and "1.e5", which Python's json refuses), and turns
 * each number item of doc inside `within` (doc or an item below it; NULL
 * only checks) into a cJSON_Raw item holding its text, so that printing
 * gives back "1.0", "-0.0" and a 20-digit integer as sent instead of
 * cJSON's double ("1", "0", "1.2345678901234567e+19"). Returns 0,
 * -EINVAL with *bad_at (may be NULL) set to the offset of a number JSON
 * does not allow, or -ENOMEM. */
int hp_json_exact_numbers(struct cJSON *doc, const struct cJSON *within,
                          const char *text, size_t len, size_t *bad_at);

/* Epoch ms as "2025-06-17T05:51:29.300Z" (UTC, always this long for
 * years 0 to 9999) into buf, which holds HP_ISO8601_MS_LEN + 1 bytes. */
#define HP_ISO8601_MS_LEN 24
void hp_iso8601_ms(int64_t ms, char *buf);

/* snprintf that reports truncation as HP_ETOOBIG instead of silently
 * cutting the string. */
int hp_snprintf(char *buf, size_t len, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Fills buf with len random characters from [a-z0-9_], as Python's
 * tempfile does, from getrandom(). */
void hp_random_name(char *buf, size_t len);

/* Opens /dev/null on whichever of fds 0, 1 and 2 is closed, so that no
 * pipe or file of ours gets a standard stream's number (libuv aborts when
 * it closes one, and a worker's stdout would be lost on its exec). Returns
 * 0 or -errno. */
int hp_std_fds_open(void);

/* The signals the agent answers (those that stop it or that it forwards
 * to the workers, and SIGCHLD), from the first line of main until its
 * handlers are in place: hp_signals_hold() makes them the only blocked
 * signals and sets every ignored signal back to its default action (a
 * parent may exec us with SIGTERM blocked or SIGINT ignored, as tini
 * notes), so that one sent while the agent starts waits instead of
 * killing it; hp_signals_release() unblocks them once handled, and a
 * pending one is then answered like any other. */
void hp_signals_hold(void);
/* Returns the first stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) that
 * was pending, or 0: the caller knows a stop came before it started
 * anything, while the signal still reaches its handler. */
int hp_signals_release(void);

/* Writes all of buf to fd, retrying on EINTR and short writes. Returns 0
 * or -errno. Blocking: only for files and for the console writer thread. */
int hp_write_all(int fd, const void *buf, size_t len);

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when
 * the bytes there are not one: overlong forms, surrogates and code points
 * past U+10FFFF are invalid, as in Python's and JSON's decoders. Inline:
 * the log-rule engine calls it for each character of a line that is not
 * all ASCII. */
static inline size_t hp_utf8_seq_len(const unsigned char *s, size_t n)
{
        unsigned c;
        size_t len;
        uint32_t cp;

        if (n == 0)
                return 0;
        c = s[0];
        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf) {
                len = 2;
                cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
                len = 3;
                cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
                len = 4;
                cp = c & 0x07;
        } else {
                return 0;
        }
        if (n < len)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                return 0;
        return len;
}
/* Whether s[0..n) is valid UTF-8. */
bool hp_utf8_valid(const char *s, size_t n);
/* Copies src into out (len bytes with the NUL), each invalid byte
 * replaced by U+FFFD, as Python's errors="replace" does, and cut only
 * between characters. Returns the length written. */
size_t hp_utf8_repair(const char *src, char *out, size_t len);

/* The value of name in an environ-style array (borrowed, NULL-terminated;
 * NULL: an empty one), or NULL when it is not set. For a worker's or a
 * test's environment; the agent's own is getenv()'s. */
const char *hp_env_get(char *const *envp, const char *name);

/*
 * Reads the whole regular file at path, at most max bytes, into *out:
 * NUL-terminated, *len bytes before the NUL, ownership passes to the
 * caller. A FIFO cannot hang the open. Returns 0, -EISDIR for a
 * directory, -ENODEV for anything else that is not a regular file (a
 * FIFO, a device, a socket), -EFBIG when the file holds more than max
 * bytes, or another -errno (-ENOENT, -EACCES, -ENOMEM, a read's). *out
 * is NULL and *len 0 on every failure.
 */
int hp_read_file(const char *path, size_t max, char **out, size_t *len);

/* hp_write_file_atomic()'s flags. HP_WRITE_FSYNC: the data reaches the
 * disk before the rename, so that a crash leaves the old file or the new
 * one, never an empty one; it can wait on the disk, so a file written
 * from the loop while workers run goes without. */
#define HP_WRITE_FSYNC 1u

/*
 * Replaces the file at path with len bytes of data (borrowed), atomically:
 * written to a new file path.tmp.XXXXXX (random, created exclusively and
 * never through a symlink, with mode less the umask), then renamed over
 * path, so that a reader sees the old file or the new one, never a part,
 * and a link planted at path or at a temporary name is replaced or
 * refused, never written through. Returns 0 or -errno (-ENOENT for a
 * missing directory, -ENOTDIR, -EISDIR when path is a directory,
 * -ENAMETOOLONG, a write's); on failure path is untouched and the
 * temporary file is gone.
 */
int hp_write_file_atomic(const char *path, const void *data, size_t len,
                         unsigned mode, unsigned flags);
/* The same for name (one component) in the directory dirfd. */
int hp_write_file_atomic_at(int dirfd, const char *name, const void *data,
                            size_t len, unsigned mode, unsigned flags);

/* mkdir -p with the given mode. Returns 0 or -errno. */
int hp_mkdir_p(const char *path, unsigned mode);
/*
 * rm -rf that follows no symlink: the tree is walked by directory fds
 * (openat with O_NOFOLLOW, unlinkat), so a directory renamed or replaced
 * by a link while it is removed cannot lead it outside the tree; a link
 * is removed, never what it points to. A missing path is not an error.
 * hp_remove_tree_at() removes name (one component) in dirfd; the path
 * form resolves all of path but its last component as usual.
 */
int hp_remove_tree(const char *path);
int hp_remove_tree_at(int dirfd, const char *name);

/*
 * Makes name (one component) in dirfd a new directory of mode 0700,
 * exclusively (an existing name, even a symlink, is -EEXIST), and opens
 * it without following a link. Returns the directory's fd (close-on-exec)
 * or -errno.
 */
int hp_mkdir_private_at(int dirfd, const char *name);

/*
 * Whether pid, which a leftover file of ours is named after, may be a
 * live hyperpodrun other than this one: alive, and named hyperpodrun or
 * running this program. Unsure (another user's process whose executable
 * cannot be read) counts as yes: its files are left alone.
 */
bool hp_pid_is_other_agent(long pid);

/* hp_dir_open_trusted()'s flags. HP_DIR_CREATE: make missing directories
 * (mode 0755, less the umask), as mkdir -p. HP_DIR_STICKY_OK: the
 * directory itself may be writable by others when its sticky bit is set
 * (a parent for private directories, as /tmp is). */
#define HP_DIR_CREATE 1u
#define HP_DIR_STICKY_OK 2u

/*
 * Opens the directory at path (relative to the working directory when not
 * absolute) for the agent to write in, after checking that no user but
 * root and the agent's euid can change what is written there. Walking
 * from / with O_NOFOLLOW, every directory on the way and every symlink
 * followed must be owned by root or the euid; a directory on the way must
 * not be writable by its group or others unless its sticky bit is set
 * (then no one can rename what they do not own in it); the directory
 * itself must not be writable by its group or others (see
 * HP_DIR_STICKY_OK). Returns the directory's fd (O_DIRECTORY,
 * close-on-exec), HP_ECONFIG when a check fails, errbuf naming the path,
 * its owner and its mode, or -errno, errbuf naming the path.
 */
int hp_dir_open_trusted(const char *path, unsigned flags, char *errbuf,
                        size_t len);

/*
 * Python string.Template-style expansion of "${name}" and "$name" ("$$" is
 * a dollar sign) with a fixed table of variables. An unknown variable is an
 * error (HP_ECONFIG, its name in errbuf); so is an output longer than len.
 */
struct hp_template_var {
        const char *name;
        const char *value;
};
int hp_template_expand(const char *tmpl, const struct hp_template_var *vars,
                       size_t nvars, char *out, size_t len, size_t *out_len,
                       char *errbuf, size_t errlen);

/* Name of a signal ("SIGTERM"), or NULL when unknown. */
const char *hp_signal_name(int signum);

#endif
