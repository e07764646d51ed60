/* SPDX-License-Identifier: Apache-2.0 */
/* Starting a worker: clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD), the way
 * glibc's posix_spawn starts a process, plus the parent-death signal that
 * posix_spawn cannot set, and, where the group has a cgroup of its own,
 * clone3 with CLONE_INTO_CGROUP so that the worker starts in it.
 *
 * Not libuv's uv_spawn, which forks: a fork copies the agent's page tables
 * and write-protects its memory, and the child's exec then tears the copy
 * down while uv_spawn waits for it, a cost that grows with the agent and
 * is paid once a worker (BENCHMARKS.md). The child made here shares the
 * agent's memory until its exec, so its cost does not grow with the
 * agent; the agent's loop thread is suspended meanwhile, as in uv_spawn.
 * The process is watched through its pidfd (group.c), not through libuv,
 * which never learns of it and so never reaps it. Where clone refuses
 * CLONE_PIDFD, the pidfd comes from pidfd_open after a plain clone.
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
         * parent reads them after clone returns, when the child is gone. */
        volatile int error;
        volatile bool at_exec;
};

/* clone3's arguments up to the cgroup (CLONE_ARGS_SIZE_VER2), spelt out
 * so that older kernel headers build too. */
struct spawn_clone_args {
        uint64_t flags;
        uint64_t pidfd;
        uint64_t child_tid;
        uint64_t parent_tid;
        uint64_t exit_signal;
        uint64_t stack;
        uint64_t stack_size;
        uint64_t tls;
        uint64_t set_tid;
        uint64_t set_tid_size;
        uint64_t cgroup;
};

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

#if defined(__x86_64__)
/*
 * clone3 with the child running fn(arg) on the stack the arguments give,
 * then exiting: what glibc's clone() does for clone(2), which glibc does
 * not offer for clone3 (its own __clone3 is internal). It returns the
 * child's pid or -errno in the parent. syscall(2) cannot do it: the child
 * would return from it on a new stack that holds no frame to return to.
 * The syscall keeps rdx (fn) and r8 (arg); the child aligns its stack,
 * calls fn and exits with its result. Elsewhere than on x86-64 groups
 * have no cgroup (scope.c).
 */
long hp__clone3_vm(struct spawn_clone_args *args, size_t size,
                   int (*fn)(void *), void *arg);
__asm__(".pushsection .text\n"
        ".globl hp__clone3_vm\n"
        ".hidden hp__clone3_vm\n"
        ".type hp__clone3_vm, @function\n"
        "hp__clone3_vm:\n"
        "        mov %rcx, %r8\n"
        "        mov $435, %eax\n" /* SYS_clone3 */
        "        syscall\n"
        "        test %rax, %rax\n"
        "        jz 1f\n"
        "        ret\n"
        "1:      xor %ebp, %ebp\n"
        "        and $-16, %rsp\n"
        "        mov %r8, %rdi\n"
        "        call *%rdx\n"
        "        mov %eax, %edi\n"
        "        mov $60, %eax\n" /* SYS_exit */
        "        syscall\n"
        "        hlt\n"
        ".size hp__clone3_vm, .-hp__clone3_vm\n"
        ".popsection\n");
#define HAVE_CLONE3_VM 1
#else
#define HAVE_CLONE3_VM 0
#endif

/* Set when clone refused CLONE_PIDFD with EINVAL: a kernel or seccomp
 * policy that does not know the flag, or qemu-user before 8.0 (the aarch64
 * build run on an x86-64 machine). Every later start goes straight to the
 * plain clone. Only the loop thread starts workers. */
static bool clone_pidfd_refused;

static int child_main(void *arg);

/* clone(CLONE_VM | CLONE_VFORK) with CLONE_PIDFD, or, where that is
 * refused, without it and then pidfd_open on the new pid: the process
 * cannot have been reaped in between, since only this thread waits for
 * the agent's children and it is here. Returns the pid or -errno. */
static pid_t clone_vm_pidfd(struct spawn_child *child, void *stack_top,
                            int *pidfd)
{
        pid_t pid;
        int err;

        if (!clone_pidfd_refused) {
                pid = clone(child_main, stack_top,
                            CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD,
                            child, pidfd);
                if (pid >= 0)
                        return pid;
                if (errno != EINVAL)
                        return -errno;
                clone_pidfd_refused = true;
        }
        pid = clone(child_main, stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD,
                    child);
        if (pid < 0)
                return -errno;
        *pidfd = hp_pidfd_open(pid, 0);
        if (*pidfd >= 0)
                return pid;
        /* No way to watch it: it must not run unwatched. */
        err = -errno;
        (void)kill(pid, SIGKILL);
        (void)waitpid(pid, NULL, 0);
        return err;
}

bool hp_spawn__can_join_cgroup(void)
{
        return HAVE_CLONE3_VM;
}

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

        /* The limit the agent was started with, not the one it raised
         * for itself: lowering a soft limit cannot fail. */
        if (o->nofile != NULL)
                (void)setrlimit(RLIMIT_NOFILE, o->nofile);

        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);

        c->at_exec = true;
        /* PATH is searched in the agent's environment, which is what the
         * worker's starts from (env.c): setting environ here would set the
         * agent's. */
        execvpe(o->file, o->argv, o->envp);
        child_fail(c, errno);
        return 127;
}

int hp_spawn__start(const struct hp_spawn_options *opts, pid_t *pid_out,
                    int *pidfd_out)
{
        struct spawn_child child = {
                .opts = opts,
                .parent = getpid(),
                .error = 0,
                .at_exec = false,
        };
        sigset_t all, saved;
        int pidfd = -1, clone_errno;
        size_t argc = 0, stack_size;
        char *stack;
        pid_t pid;

        *pid_out = 0;
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
        if (opts->cgroup_fd >= 0) {
#if HAVE_CLONE3_VM
                struct spawn_clone_args args = {
                        .flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD |
                                 CLONE_INTO_CGROUP,
                        .pidfd = (uintptr_t)&pidfd,
                        .exit_signal = SIGCHLD,
                        .stack = (uintptr_t)stack,
                        .stack_size = stack_size,
                        .cgroup = (uint64_t)opts->cgroup_fd,
                };
                long r = hp__clone3_vm(&args, sizeof(args), child_main,
                                       &child);

                pid = r < 0 ? -1 : (pid_t)r;
                clone_errno = r < 0 ? (int)-r : 0;
#else
                pid = -1;
                clone_errno = ENOSYS;
#endif
        } else {
                pid = clone_vm_pidfd(&child,
                                     (void *)(((uintptr_t)stack +
                                               stack_size) &
                                              ~(uintptr_t)15),
                                     &pidfd);
                clone_errno = pid < 0 ? -pid : 0;
        }
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
                if (child.at_exec)
                        *pid_out = pid;
                return -child.error;
        }
        *pid_out = pid;
        *pidfd_out = pidfd;
        return 0;
}

#if HAVE_CLONE3_VM
__attribute__((no_sanitize_address)) static int probe_main(void *arg)
{
        (void)arg;
        return 0;
}
#endif

int hp_spawn__probe(int cgroup_fd)
{
#if HAVE_CLONE3_VM
        /* Room for the child's one call, with a sanitizer's frames. */
        size_t stack_size = 16 * 1024;
        char *stack = malloc(stack_size);
        struct spawn_clone_args args = {
                .flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP,
                .exit_signal = SIGCHLD,
                .stack = (uintptr_t)stack,
                .stack_size = stack_size,
                .cgroup = (uint64_t)cgroup_fd,
        };
        sigset_t all, saved;
        long pid;
        int status = 0;

        if (stack == NULL)
                return -ENOMEM;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
        pid = hp__clone3_vm(&args, sizeof(args), probe_main, NULL);
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        free(stack);
        if (pid < 0)
                return (int)pid;
        if (waitpid((pid_t)pid, &status, 0) < 0)
                return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EINVAL;
#else
        (void)cgroup_fd;
        return -ENOSYS;
#endif
}

int hp_spawn__reap(int pidfd, int64_t *exit_status, int *term_signal)
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
