/* Starting a worker: clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD), the way
 * glibc's posix_spawn starts a process, plus the parent-death signal that
 * posix_spawn cannot set.
 *
 * Not libuv's uv_spawn, which forks: a fork copies the agent's page tables
 * and write-protects its memory, and the child's exec then tears the copy
 * down while uv_spawn waits for it, a cost that grows with the agent and
 * is paid once a worker (BENCHMARKS.md). The child made here shares the
 * agent's memory until its exec, so its cost does not grow with the
 * agent; the agent's loop thread is suspended meanwhile, as in uv_spawn.
 * The process is watched through its pidfd (group.c), not through libuv,
 * which never learns of it and so never reaps it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervise-private.h"

/* The child's stack, sized as glibc's posix_spawn sizes it: execvpe needs
 * about PATH_MAX to search PATH, and room for the argument vector plus two
 * to run a script without #! through /bin/sh. A fixed 64 KiB is too small
 * for such a script with 20,000 arguments: the child would run past it over
 * the clone call's own frame, and the agent would die of SIGSEGV. */
#define SPAWN_STACK_BASE (32 * 1024)

struct spawn_child {
        const struct hp_spawn_options *opts;
        pid_t parent;
        /* Written by the child when it fails before or in its exec; the
         * parent reads it after clone returns, when the child is gone. */
        volatile int error;
};

static void child_fail(struct spawn_child *c, int err)
{
        c->error = err;
        _exit(127);
}

/* Runs in the child, in the agent's memory and on the parent thread's
 * thread-local storage: only async-signal-safe calls, no allocation,
 * nothing written but its own stack, c->error and the parent thread's
 * errno (read by the parent only when clone fails). AddressSanitizer
 * would poison this stack's frames in memory the parent owns. */
__attribute__((no_sanitize_address)) static int child_main(void *arg)
{
        struct spawn_child *c = arg;
        const struct hp_spawn_options *o = c->opts;
        struct sigaction dfl;
        sigset_t none;
        int flags;

        /* Every signal back to its default action, as libuv does: the
         * agent's handlers would write into its own signal pipe, and a
         * worker should not inherit the agent's ignored SIGPIPE. The
         * signals stay blocked (the parent blocked them all before clone)
         * until the handlers are gone. */
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < 32; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        (void)sigaction(sig, &dfl, NULL);

        /* SIGKILL when the agent dies, even by SIGKILL; kept across
         * execve unless the program is set-user-ID. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
                child_fail(c, errno);
        if (getppid() != c->parent)
                _exit(128 + SIGKILL); /* the agent died before we got here */

        /* Its own session and process group, so that a stop signal sent
         * to the group reaches its dataloaders and shells too. */
        if (setsid() < 0)
                child_fail(c, errno);

        /* Both are above 2: main() keeps the standard streams open. */
        if (dup2(o->stdout_fd, STDOUT_FILENO) < 0 ||
            dup2(o->stderr_fd, STDERR_FILENO) < 0)
                child_fail(c, errno);
        /* The inherited stdin, blocking and open across the exec, as libuv
         * leaves it. */
        (void)fcntl(STDIN_FILENO, F_SETFD, 0);
        flags = fcntl(STDIN_FILENO, F_GETFL);
        if (flags >= 0 && (flags & O_NONBLOCK))
                (void)fcntl(STDIN_FILENO, F_SETFL, flags & ~O_NONBLOCK);

        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);

        /* PATH is searched in the agent's environment, which is what the
         * worker's starts from (env.c): setting environ here would set the
         * agent's. */
        execvpe(o->file, o->argv, o->envp);
        child_fail(c, errno);
        return 127;
}

int hp_spawn(const struct hp_spawn_options *opts, pid_t *pid_out,
             int *pidfd_out)
{
        struct spawn_child child = {
                .opts = opts,
                .parent = getpid(),
                .error = 0,
        };
        sigset_t all, saved;
        int pidfd = -1, clone_errno;
        size_t argc = 0, stack_size;
        char *stack;
        pid_t pid;

        while (opts->argv[argc] != NULL)
                argc++;
        stack_size = SPAWN_STACK_BASE + (argc + 2) * sizeof(char *);
        stack = malloc(stack_size);
        if (stack == NULL)
                return -ENOMEM;

        /* No handler of the agent's may run in the child before it has
         * reset them: it would act on the agent's memory. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
        /* The top, where the stack starts, 16-byte aligned as the ABI
         * wants. */
        pid = clone(child_main,
                    (void *)(((uintptr_t)stack + stack_size) & ~(uintptr_t)15),
                    CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &child,
                    &pidfd);
        clone_errno = errno;
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        free(stack);
        if (pid < 0)
                return -clone_errno;
        if (child.error != 0) {
                siginfo_t info;

                /* The child has exited already: reap it here, where its
                 * failure is reported. */
                (void)waitid(P_PIDFD, (id_t)pidfd, &info, WEXITED);
                close(pidfd);
                return -child.error;
        }
        *pid_out = pid;
        *pidfd_out = pidfd;
        return 0;
}

int hp_spawn_reap(int pidfd, int64_t *exit_status, int *term_signal)
{
        siginfo_t info;

        memset(&info, 0, sizeof(info));
        if (waitid(P_PIDFD, (id_t)pidfd, &info, WEXITED | WNOHANG) < 0)
                return errno == EAGAIN ? 0 : -errno;
        if (info.si_pid == 0)
                return 0;
        if (info.si_code == CLD_EXITED) {
                *exit_status = info.si_status;
                *term_signal = 0;
        } else {
                *exit_status = 0;
                *term_signal = info.si_status;
        }
        return 1;
}
