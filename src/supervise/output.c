/* SPDX-License-Identifier: Apache-2.0 */
/* A worker's output: its log files, its console prefix and stream setup,
 * and the pipes it writes into. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

/* Workers write into pipes rather than the socket pairs libuv makes: a
 * socket allocates a buffer per write, which makes workers printing line
 * by line (PYTHONUNBUFFERED=1) cost several times the kernel time. A pipe
 * of 256 KiB lets a burst go out without waiting for us; one of 1 MiB
 * is slower in a flood of large writes. Together the
 * pipes of a group stay within HP_OUTPUT_PIPES_MAX (so 128 KiB each from
 * 33 ranks on, the default 64 KiB from 65), a quarter of the pipe memory
 * an unprivileged user may hold (/proc/sys/fs/pipe-user-pages-soft)
 * before Linux gives every new pipe of theirs two pages, the job's own
 * pipes included. Those limits do not apply to a process with
 * CAP_SYS_RESOURCE or CAP_SYS_ADMIN (root in most training containers):
 * its groups get HP_OUTPUT_PIPES_MAX_PRIVILEGED, 256 KiB each up to 128
 * ranks, so that flooding producers block half as often as with 128 KiB
 * (BENCHMARKS.md). A pipe's pages are allocated only while it holds
 * data. */
#define HP_OUTPUT_PIPE_MAX (256 * 1024)
#define HP_OUTPUT_PIPE_MIN (64 * 1024)
#define HP_OUTPUT_PIPES_MAX (16 * 1024 * 1024)
#define HP_OUTPUT_PIPES_MAX_PRIVILEGED (64 * 1024 * 1024)

/* " (rank 3)", or nothing while the global rank is not known (in-process
 * restart before /start). */
const char *hp_worker__rank_text(const struct hp_worker *w, char *buf,
                                 size_t len)
{
        buf[0] = '\0';
        if (w->rank >= 0)
                snprintf(buf, len, " (rank %d)", w->rank);
        return buf;
}

/* Opens name in the rank's directory (dir, open as dir_fd) for s, which
 * keeps the path for its messages: private to the agent's user (0600),
 * and never through a link, nor anything but a regular file. */
static int open_log_file(int dir_fd, const char *dir, const char *name,
                         char *path, size_t len)
{
        struct stat st;
        int fd;

        if (hp_snprintf(path, len, "%s/%s", dir, name) < 0)
                return -ENAMETOOLONG;
        fd = openat(dir_fd, name,
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND |
                            O_NOFOLLOW | O_NONBLOCK,
                    0600);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
            fcntl(fd, F_SETFL, O_APPEND) < 0) {
                close(fd);
                return -EPERM;
        }
        return fd;
}

void hp_worker__set_prefix(const struct hp_group_params *p,
                           struct hp_worker *w, struct hp_stream *s)
{
        char rank[16], local_rank[16], group_rank[16], restarts[16], pid[16];
        /* A hook's prefix names the stage instead of the role. */
        const char *role = p->stage == HP_STAGE_TRAIN
                                   ? p->cfg->role
                                   : hp_stage_name(p->stage);
        const struct hp_template_var vars[] = {
                { "role_name", role },
                { "rank", rank },
                { "local_rank", local_rank },
                { "group_rank", group_rank },
                { "restart_count", restarts },
                { "hostname", p->hostname },
                { "pid", pid },
                /* A placeholder as long as the time, stamped per line by
                 * the stream. */
                { "time",
                  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
                  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01" },
        };
        const char *tmpl = p->cfg->prefix_template
                                   ? p->cfg->prefix_template
                                   : "[${role_name}${local_rank}]:";
        char err[256], prefix[HP_STREAM_PREFIX_MAX] = "";
        size_t len = 0;
        const char *t;

        hp_stream_set_prefix(s, "", 0, -1);
        /* A stream that is neither tee'd nor redirected reaches the console
         * as torchrun's inherited fd would: without a prefix. */
        if (!s->prefixed)
                return;
        /* Ranks not known yet (in-process restart before /start): "?". */
        snprintf(rank, sizeof(rank), "?");
        if (w->rank >= 0)
                snprintf(rank, sizeof(rank), "%d", w->rank);
        snprintf(local_rank, sizeof(local_rank), "%d", w->local_rank);
        snprintf(group_rank, sizeof(group_rank), "?");
        if (p->round->node_rank >= 0)
                snprintf(group_rank, sizeof(group_rank), "%d",
                         p->round->node_rank);
        snprintf(restarts, sizeof(restarts), "%d", p->restart_count);
        snprintf(pid, sizeof(pid), "%d", (int)w->pid);
        if (hp_template_expand(tmpl, vars, HP_ARRAY_SIZE(vars), prefix,
                               sizeof(prefix), &len, err, sizeof(err)) < 0) {
                /* The template was checked at startup; only the length can
                 * fail here, with a very long hostname. Keep what fits. */
                len = strlen(prefix);
        }
        t = memchr(prefix, '\x01', len);
        hp_stream_set_prefix(s, prefix, len,
                             t != NULL && len - (size_t)(t - prefix) >=
                                                     HP_ISO8601_MS_LEN
                                     ? (int)(t - prefix)
                                     : -1);
}

/* Decides where one stream goes, per torchrun's -r/-t and the filter. */
int hp_worker__setup_stream(const struct hp_group_params *p,
                            struct hp_worker *w, struct hp_stream *s, int bit)
{
        const struct hp_config *cfg = p->cfg;
        int rank = hp_stage_local_rank(p->stage, w->local_rank);
        bool redirect = (cfg->redirects[rank] & bit) != 0;
        bool tee = (cfg->tee[rank] & bit) != 0;
        bool shown = !cfg->console_filter_set || cfg->console_shown[rank];
        char path[PATH_MAX] = "";
        struct hp_stream_output out = { .file_fd = -1, .prefixed = tee };

        /* As torchrun: the lines of the ranks tee'd to the console. */
        if (tee && shown && w->group->dups != NULL &&
            w->group->dups[bit - 1].fd >= 0)
                out.dup = &w->group->dups[bit - 1];
        if ((redirect || tee) && w->dir[0] != '\0') {
                out.file_fd = open_log_file(w->dir_fd, w->dir,
                                            bit == HP_STD_OUT ? "stdout.log"
                                                              : "stderr.log",
                                            path, sizeof(path));
                if (out.file_fd < 0)
                        return out.file_fd;
                out.file_path = path;
        }
        if (bit == HP_STD_OUT && p->listener_for != NULL)
                out.listener = p->listener_for(p->ctx, p->stage,
                                               w->local_rank,
                                               &out.listener_ctx);
        if (shown && (tee || !redirect))
                out.console = bit == HP_STD_OUT ? p->console_out
                                                : p->console_err;
        hp_stream_set_output(s, &out);
        return 0;
}

/* Whether Linux's limits on a user's pipe memory apply to us: not with
 * CAP_SYS_RESOURCE or CAP_SYS_ADMIN in the effective set (fs/pipe.c). */
bool hp_group__pipe_limits_apply(void)
{
        struct __user_cap_header_struct header = {
                .version = _LINUX_CAPABILITY_VERSION_3,
        };
        struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
        uint32_t wanted = (1u << CAP_SYS_RESOURCE) | (1u << CAP_SYS_ADMIN);

        if (syscall(SYS_capget, &header, data) < 0)
                return true;
        return (data[0].effective & wanted) == 0;
}

/* The worker's end of a new pipe for one of its outputs, in *child_fd;
 * ours goes to the stream. */
int hp_group__open_output_pipe(const struct hp_group *g, int ranks,
                               struct hp_stream *s, int *child_fd)
{
        int budget = g->pipe_limits ? HP_OUTPUT_PIPES_MAX
                                    : HP_OUTPUT_PIPES_MAX_PRIVILEGED;
        int share = budget / (2 * (ranks > 0 ? ranks : 1));
        int size = HP_OUTPUT_PIPE_MAX, fds[2], r;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        /* Linux rounds a size up to a power of two pages: halve down to
         * one within the share instead. */
        while (size > share && size > HP_OUTPUT_PIPE_MIN)
                size /= 2;
        /* Refused past the user's limits: the default size still works,
         * only with more waits for a fast writer. */
        if (size > HP_OUTPUT_PIPE_MIN)
                (void)fcntl(fds[0], F_SETPIPE_SZ, size);
        r = uv_pipe_open(&s->pipe, fds[0]);
        if (r < 0) {
                close(fds[0]);
                close(fds[1]);
                return r;
        }
        *child_fd = fds[1];
        return 0;
}
