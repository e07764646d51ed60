/* SPDX-License-Identifier: Apache-2.0 */
/* System calls newer than the oldest glibc hyperpodrun runs on, made
 * through syscall(2) by number: the glibc wrappers (pidfd_open is 2.36)
 * would make the binary refuse to start on Ubuntu 20.04 or 22.04, Amazon
 * Linux 2023 and the deep-learning images built on them. The numbers are
 * the same on every architecture since Linux 5.1 unified them. */
#ifndef HP_SYS_H
#define HP_SYS_H

#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
/* glibc before 2.36 lacks these two (spawn.c and group.c use them). */
#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

/* The oldest kernel with everything the agent uses: waitid(P_PIDFD). */
#define HP_MIN_KERNEL "5.4"

static inline int hp_pidfd_open(pid_t pid, unsigned int flags)
{
        return (int)syscall(__NR_pidfd_open, pid, flags);
}

#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif

static inline int hp_pidfd_send_signal(int pidfd, int sig)
{
        return (int)syscall(__NR_pidfd_send_signal, pidfd, sig, NULL, 0);
}

/* A signal to one thread of a process (glibc's tgkill() is 2.30). */
static inline int hp_tgkill(pid_t tgid, pid_t tid, int sig)
{
        return (int)syscall(SYS_tgkill, tgid, tid, sig);
}

/* 0 when this kernel has pidfds and waitid(P_PIDFD), else -ENOSYS with a
 * message naming the kernel in errbuf: on an older kernel clone ignores
 * CLONE_PIDFD, and the failure would otherwise show up later, as a worker
 * that cannot be waited for. */
int hp_sys_check_kernel(char *errbuf, size_t errlen);

/*
 * Raises the soft RLIMIT_NOFILE to the hard one (to the kernel's
 * fs.nr_open when the hard one is unlimited), as Go's runtime does at
 * start: a soft limit of 1,024 (Slurm, containerd 2) is below what the
 * worker socket and the workers' pipes may need. *before gets the limits
 * as they were, for the workers (spawn.c gives them back), *now the soft
 * limit in force. Returns 0, or -errno when the limits cannot be read;
 * a raise the kernel refuses leaves the soft limit as it was.
 */
int hp_nofile_raise(struct rlimit *before, rlim_t *now);

#endif
