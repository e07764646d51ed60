/* SPDX-License-Identifier: Apache-2.0 */
/* hp_spawn__start on real processes, with clone's CLONE_PIDFD allowed and
 * refused. The refusal is real: a seccomp filter makes clone with the flag
 * fail with EINVAL, as a kernel or sandbox that does not know it does (and
 * as qemu-user before 8.0 does, where the aarch64 build runs in CI). Each
 * case runs in a child process of its own, since a seccomp filter cannot
 * be removed and the spawn code remembers a refusal. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <valgrind/valgrind.h>

#include "supervise-private.h"

#include "table.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

/* clone(2) with CLONE_PIDFD in its flags (the first argument's low word
 * on the little-endian machines this runs on) fails with EINVAL. */
static int refuse_clone_pidfd(void)
{
        struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                         offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                         offsetof(struct seccomp_data, args[0])),
                BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_PIDFD, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {
                .len = sizeof(filter) / sizeof(filter[0]),
                .filter = filter,
        };

        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
                return -errno;
        return 0;
}

static const struct {
        const char *why;
        bool refused;
        const char *script; /* NULL: a program that does not exist */
        int start;          /* hp_spawn__start's result */
        int exit_code;      /* when it started */
} cases[] = {
        { "clone takes CLONE_PIDFD: the worker's exit code comes through "
          "its pidfd",
          false, "exit 7", 0, 7 },
        { "clone refuses CLONE_PIDFD: a plain clone and pidfd_open give "
          "the same",
          true, "exit 7", 0, 7 },
        { "refused: a worker that exits at once is still watched", true,
          "exit 0", 0, 0 },
        { "allowed: a missing program is ENOENT, from the child's exec",
          false, NULL, -ENOENT, 0 },
        { "refused: a missing program is ENOENT too", true, NULL, -ENOENT,
          0 },
};

/* In the case's own process: 0 when hp_spawn__start did what the case
 * says, twice (the second start after a refusal skips the flag), else
 * a line on stderr and 1. */
static int run_case(size_t i)
{
        char *argv[] = { "sh", "-c", (char *)cases[i].script, NULL };
        char *missing[] = { "hyperpodrun-no-such-program", NULL };
        extern char **environ;
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        struct hp_spawn_options opts = {
                .file = cases[i].script ? "/bin/sh" : missing[0],
                .argv = cases[i].script ? argv : missing,
                .envp = environ,
                .stdout_fd = devnull,
                .stderr_fd = devnull,
                .cgroup_fd = -1,
        };

        int want_start = cases[i].start, want_code = cases[i].exit_code;

        /* Under valgrind (as under qemu-user) clone(CLONE_VM |
         * CLONE_VFORK) is a fork: the child's failed exec cannot reach the
         * parent's memory, so the start succeeds and the worker exits 127,
         * as a shell says of a missing program. */
        if (want_start == -ENOENT && RUNNING_ON_VALGRIND) {
                want_start = 0;
                want_code = 127;
        }
        if (devnull <= STDERR_FILENO) {
                fprintf(stderr, "/dev/null opened as fd %d\n", devnull);
                return 1;
        }
        if (cases[i].refused && refuse_clone_pidfd() < 0) {
                fprintf(stderr, "seccomp: %s\n", strerror(errno));
                return 1;
        }
        for (int round = 0; round < 2; round++) {
                struct pollfd p = { .events = POLLIN };
                int64_t code = -1;
                int sig = -1, pidfd = -1, r;
                pid_t pid = 0;

                r = hp_spawn__start(&opts, &pid, &pidfd);
                if (r != want_start) {
                        fprintf(stderr,
                                "round %d: start gave %d (%s), "
                                "want %d\n",
                                round, r, strerror(-r), want_start);
                        return 1;
                }
                if (r < 0)
                        continue;
                p.fd = pidfd;
                /* Generous: a loaded machine, or valgrind. */
                if (poll(&p, 1, 60000) != 1 ||
                    hp_spawn__reap(pidfd, &code, &sig) != 1 ||
                    code != want_code || sig != 0) {
                        fprintf(stderr,
                                "round %d: pid %d ended with code "
                                "%lld signal %d, want code %d\n",
                                round, (int)pid, (long long)code, sig,
                                want_code);
                        return 1;
                }
                close(pidfd);
        }
        close(devnull);
        return 0;
}

static void test_spawn_with_and_without_clone_pidfd(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int status = 0;
                pid_t pid;

                /* Valgrind 3.19 has no pidfd_open (it says "unhandled
                 * syscall 434"): the refused path runs natively only. */
                if (cases[i].refused && RUNNING_ON_VALGRIND) {
                        print_message("skipped under valgrind: %s\n",
                                      cases[i].why);
                        continue;
                }
                pid = fork();

                assert_true(pid >= 0);
                if (pid == 0)
                        _exit(run_case(i));
                assert_int_equal(waitpid(pid, &status, 0), pid);
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        CASE_FAILED(failures, "%s: status %#x", cases[i].why,
                                    status);
        }
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_spawn_with_and_without_clone_pidfd),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
