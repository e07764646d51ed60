/* SPDX-License-Identifier: Apache-2.0 */
/* The watcher: what kills the job when the agent itself is killed.
 *
 * Workers get PR_SET_PDEATHSIG SIGKILL, but what they start does not, and
 * a SIGKILLed agent stops nothing. The watcher is a small process forked
 * before any thread exists, in a session of its own (so that a signal to
 * the agent's process group does not reach it), ignoring the stop
 * signals. It is forked twice, before the agent becomes a subreaper, so
 * that it is not the agent's child: "the agent has no child left" then
 * tells in one waitid that nothing of the job is left (scope.c). It
 * reads a pipe whose only writer is the agent: end of file
 * without a "quit" first means the agent is gone. It then writes
 * cgroup.kill in the agent's cgroup directory, which kills everything
 * every group started wherever it went, removes the directories, and
 * SIGKILLs each worker process group the agent told it of (the only
 * reach there is without a cgroup: a process that left its group with
 * setsid then survives), and exits.
 *
 * As PID 1 of a PID namespace (a container's entry point) the agent needs
 * none: the kernel kills the namespace when its init dies.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

enum watch_op {
        WATCH_ADD = 1, /* a worker's process group */
        WATCH_FORGET,  /* the group is over */
        WATCH_QUIT,    /* the agent exits normally */
};

/* Smaller than PIPE_BUF: each write is whole. */
struct watch_msg {
        int32_t op;
        int32_t pid;
};

/* How long the watcher waits for the cgroup to empty before removing it. */
#define WATCH_EMPTY_WAIT_MS 5000

static bool cgroup_populated(int events_fd)
{
        char buf[256];
        ssize_t n = pread(events_fd, buf, sizeof(buf) - 1, 0);

        if (n <= 0)
                return false;
        buf[n] = '\0';
        return strstr(buf, "populated 1") != NULL;
}

/* Kills everything under the agent's cgroup directory, waits until it is
 * empty, and removes it. */
static void kill_cgroup_tree(const char *path)
{
        char file[PATH_MAX + 32];
        struct timespec start, now;
        struct dirent *de;
        DIR *dir;
        int fd;

        snprintf(file, sizeof(file), "%s/cgroup.kill", path);
        fd = open(file, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return; /* gone: the agent removed it */
        (void)!write(fd, "1", 1);
        close(fd);

        /* cgroup.events changes (POLLPRI) when the last process is gone. */
        snprintf(file, sizeof(file), "%s/cgroup.events", path);
        fd = open(file, O_RDONLY | O_CLOEXEC);
        clock_gettime(CLOCK_MONOTONIC, &start);
        while (fd >= 0 && cgroup_populated(fd)) {
                struct pollfd pfd = { .fd = fd, .events = POLLPRI };
                long ms;

                clock_gettime(CLOCK_MONOTONIC, &now);
                ms = (now.tv_sec - start.tv_sec) * 1000 +
                     (now.tv_nsec - start.tv_nsec) / 1000000;
                if (ms >= WATCH_EMPTY_WAIT_MS)
                        break;
                (void)poll(&pfd, 1, (int)(WATCH_EMPTY_WAIT_MS - ms));
        }
        if (fd >= 0)
                close(fd);

        dir = opendir(path);
        if (dir != NULL) {
                while ((de = readdir(dir)) != NULL)
                        if (de->d_type == DT_DIR && de->d_name[0] != '.')
                                (void)unlinkat(dirfd(dir), de->d_name,
                                               AT_REMOVEDIR);
                closedir(dir);
        }
        (void)rmdir(path);
}

__attribute__((noreturn)) static void watcher_main(int fd, pid_t agent,
                                                   const char *cgroup_path)
{
        static const int ignored[] = { SIGHUP,  SIGINT,  SIGQUIT, SIGTERM,
                                       SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP,
                                       SIGTTIN, SIGTTOU, SIGALRM };
        static pid_t pgids[HP_MAX_NPROC];
        size_t count = 0;
        bool closed = false;
        sigset_t none;
        int null;

        (void)setsid();
        (void)prctl(PR_SET_NAME, "hyperpodrun-w");
        for (size_t i = 0; i < HP_ARRAY_SIZE(ignored); i++)
                signal(ignored[i], SIG_IGN);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* Nothing of the agent's stays open here but stderr, for the one
         * message: a reader of the agent's stdout sees EOF when the agent
         * ends, not when the watcher does. */
        null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
                dup2(null, STDIN_FILENO);
                dup2(null, STDOUT_FILENO);
        }
        if (fd != 3) {
                dup2(fd, 3);
                fd = 3;
        }
#ifdef SYS_close_range
        closed = syscall(SYS_close_range, 4U, ~0U, 0U) == 0;
#endif
        for (int i = 4; !closed && i < 1024; i++)
                close(i);

        for (;;) {
                /* Whole messages: every write is a multiple of one. */
                struct watch_msg msgs[64];
                ssize_t n = read(fd, msgs, sizeof(msgs));

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break; /* EOF: the agent is gone */
                for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++) {
                        if (msgs[i].op == WATCH_QUIT)
                                _exit(0);
                        if (msgs[i].op == WATCH_FORGET)
                                count = 0;
                        else if (msgs[i].op == WATCH_ADD &&
                                 count < HP_ARRAY_SIZE(pgids))
                                pgids[count++] = msgs[i].pid;
                }
        }

        if (cgroup_path[0] != '\0')
                kill_cgroup_tree(cgroup_path);
        for (size_t i = 0; i < count; i++)
                (void)kill(-pgids[i], SIGKILL);
        if (count > 0 || cgroup_path[0] != '\0')
                hp_log_warn("agent pid %d ended without stopping its "
                            "workers: killed %s%s%zu worker process group%s",
                            (int)agent,
                            cgroup_path[0] ? "the cgroups under " : "",
                            cgroup_path[0] ? cgroup_path : "", count,
                            count == 1 ? "" : "s");
        _exit(0);
}

int hp_watcher__start(struct hp_watcher *w, const char *cgroup_path)
{
        pid_t agent = getpid();
        int fds[2], ids[2] = { -1, -1 }, err = 0;
        pid_t pid, watcher = 0;

        w->pid = 0;
        w->fd = -1;
        w->pidfd = -1;
        if (agent == 1) {
                hp_log_debug("PID 1: no watcher, the kernel kills the PID "
                             "namespace if the agent dies");
                return 0;
        }
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(ids, O_CLOEXEC) < 0) {
                err = -errno;
                goto out;
        }
        pid = fork();
        if (pid < 0) {
                err = -errno;
                goto out;
        }
        if (pid == 0) {
                /* The middle process: tells the watcher's pid and goes. */
                pid_t child = fork();

                if (child == 0) {
                        close(fds[1]);
                        close(ids[0]);
                        close(ids[1]);
                        watcher_main(fds[0], agent, cgroup_path);
                }
                (void)!write(ids[1], &child, sizeof(child));
                _exit(child < 0 ? 1 : 0);
        }
        close(ids[1]);
        ids[1] = -1;
        if (read(ids[0], &watcher, sizeof(watcher)) != sizeof(watcher) ||
            watcher <= 0)
                err = -EAGAIN;
        (void)waitpid(pid, NULL, 0);
        if (err < 0)
                goto out;
                /* For the wait at exit: it exits only on our word or our death,
         * so its pid is still its own here. */
#ifdef SYS_pidfd_open
        w->pidfd = (int)syscall(SYS_pidfd_open, watcher, 0);
#endif
        /* The agent never waits for the watcher: a message that does not
         * fit is dropped (and the watcher only matters if the agent
         * dies). */
        (void)fcntl(fds[1], F_SETFL, O_NONBLOCK);
        w->pid = watcher;
        w->fd = fds[1];
        fds[1] = -1;
        hp_log_debug("watcher started as pid %d", (int)watcher);
out:
        close(fds[0]);
        if (fds[1] >= 0)
                close(fds[1]);
        if (ids[0] >= 0)
                close(ids[0]);
        if (ids[1] >= 0)
                close(ids[1]);
        return err;
}

static void send_msgs(struct hp_watcher *w, const struct watch_msg *msgs,
                      size_t count)
{
        size_t len = count * sizeof(*msgs);

        if (w->fd >= 0 && write(w->fd, msgs, len) != (ssize_t)len)
                hp_log_debug("watcher (pid %d): %s", (int)w->pid,
                             strerror(errno));
}

static void send_msg(struct hp_watcher *w, enum watch_op op, pid_t pid)
{
        struct watch_msg msg = { .op = op, .pid = pid };

        send_msgs(w, &msg, 1);
}

void hp_watcher__add(struct hp_watcher *w, const pid_t *pgids, size_t count)
{
        /* A write up to PIPE_BUF is whole; one wakes the watcher once. */
        struct watch_msg msgs[PIPE_BUF / sizeof(struct watch_msg)];
        size_t n = 0;

        for (size_t i = 0; i < count; i++) {
                msgs[n++] = (struct watch_msg){ .op = WATCH_ADD,
                                                .pid = pgids[i] };
                if (n == HP_ARRAY_SIZE(msgs) || i + 1 == count) {
                        send_msgs(w, msgs, n);
                        n = 0;
                }
        }
}

void hp_watcher__forget(struct hp_watcher *w)
{
        send_msg(w, WATCH_FORGET, 0);
}

void hp_watcher__stop(struct hp_watcher *w)
{
        if (w->fd < 0)
                return;
        send_msg(w, WATCH_QUIT, 0);
        close(w->fd);
        w->fd = -1;
        /* It exits at once, so that nothing of the agent's outlives it;
         * bounded all the same. */
        if (w->pidfd >= 0) {
                struct pollfd pfd = { .fd = w->pidfd, .events = POLLIN };

                if (poll(&pfd, 1, 1000) == 0)
                        hp_log_debug("watcher (pid %d) did not exit",
                                     (int)w->pid);
                close(w->pidfd);
                w->pidfd = -1;
        }
        w->pid = 0;
}
