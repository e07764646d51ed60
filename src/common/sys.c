/* SPDX-License-Identifier: Apache-2.0 */
/* The start-up check that the kernel has what hp-sys.h calls, and the
 * descriptor limit the agent runs with. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "hp-sys.h"
#include "hyperpod/common.h"

int hp_sys_check_kernel(char *errbuf, size_t errlen)
{
        siginfo_t info;
        struct utsname u;
        const char *missing = NULL;
        int fd, r;

        fd = hp_pidfd_open(getpid(), 0);
        if (fd < 0 && errno == ENOSYS) {
                missing = "pidfd_open";
        } else if (fd >= 0) {
                /* On our own pidfd a kernel that knows P_PIDFD says ECHILD
                 * (not our child); one that does not says EINVAL. */
                memset(&info, 0, sizeof(info));
                r = waitid(P_PIDFD, (id_t)fd, &info, WEXITED | WNOHANG);
                if (r < 0 && errno == EINVAL)
                        missing = "waitid(P_PIDFD)";
                close(fd);
        }
        /* Any other failure (EMFILE, a seccomp EPERM) is not the kernel's
         * age: the calls that need the pidfds report it themselves. */
        if (missing == NULL)
                return 0;
        if (uname(&u) < 0)
                snprintf(u.release, sizeof(u.release), "unknown");
        snprintf(errbuf, errlen,
                 "this kernel (Linux %s) lacks %s: hyperpodrun needs Linux "
                 "%s or newer",
                 u.release, missing, HP_MIN_KERNEL);
        return -ENOSYS;
}

/* The most descriptors a process may have whatever its hard limit says:
 * /proc/sys/fs/nr_open, or the kernel's default when it cannot be read. */
static rlim_t nr_open(void)
{
        char text[32];
        unsigned long long n;
        char *end;
        FILE *f = fopen("/proc/sys/fs/nr_open", "re");
        size_t len = 0;

        if (f != NULL) {
                len = fread(text, 1, sizeof(text) - 1, f);
                fclose(f);
        }
        text[len] = '\0';
        errno = 0;
        n = strtoull(text, &end, 10);
        if (len == 0 || end == text || errno != 0 || n == 0)
                return 1048576;
        return (rlim_t)n;
}

int hp_nofile_raise(struct rlimit *before, rlim_t *now)
{
        struct rlimit want;

        if (getrlimit(RLIMIT_NOFILE, before) < 0)
                return -errno;
        *now = before->rlim_cur;
        want = *before;
        want.rlim_cur = before->rlim_max;
        if (want.rlim_cur == RLIM_INFINITY || want.rlim_cur > nr_open())
                want.rlim_cur = nr_open();
        if (want.rlim_cur <= before->rlim_cur)
                return 0;
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
                *now = want.rlim_cur;
        return 0;
}
