/* The start-up check that the kernel has what hp-sys.h calls. */
#include <errno.h>
#include <stdio.h>
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
