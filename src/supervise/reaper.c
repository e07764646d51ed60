/* PID-1 and subreaper duties: reaping orphans that the groups do not own,
 * and killing what escaped the workers' process groups. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

int hp_reaper_sweep(bool (*is_managed)(pid_t pid, void *ctx), void *ctx)
{
        int reaped = 0;

        /*
         * The groups reap their own workers through their pidfds. A plain
         * waitpid(-1) here would steal their statuses, so each zombie is
         * first looked at with WNOWAIT: a worker is left alone (its group's
         * exit callback then calls this sweep again), anything else is an
         * orphan reparented to us, and is reaped.
         */
        for (;;) {
                siginfo_t info;

                memset(&info, 0, sizeof(info));
                if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0)
                        break; /* ECHILD: no children at all */
                if (info.si_pid == 0)
                        break; /* children, but none exited */
                if (is_managed && is_managed(info.si_pid, ctx))
                        break;
                if (waitpid(info.si_pid, NULL, WNOHANG) > 0) {
                        reaped++;
                        hp_log_debug("reaped orphan pid %d", (int)info.si_pid);
                }
        }
        return reaped;
}

/* Parent pid from /proc/PID/stat: the field after the ")" that closes the
 * command name, which may itself hold spaces and parentheses. */
static pid_t read_ppid(const char *pid_text)
{
        char path[64], buf[512];
        ssize_t n;
        char *close_paren;
        int fd, ppid;
        char state;

        snprintf(path, sizeof(path), "/proc/%s/stat", pid_text);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = '\0';
        close_paren = strrchr(buf, ')');
        if (close_paren == NULL ||
            sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2)
                return -1;
        if (state == 'Z')
                return -1; /* already dead, only needs reaping */
        return ppid;
}

#define MAX_PROCS 65536

int hp_reaper_kill_descendants(int sig)
{
        pid_t *pids, *ppids;
        size_t n = 0;
        bool *mine;
        int killed = 0;
        DIR *proc;
        struct dirent *de;
        bool grew;

        pids = calloc(MAX_PROCS, sizeof(*pids));
        ppids = calloc(MAX_PROCS, sizeof(*ppids));
        mine = calloc(MAX_PROCS, sizeof(*mine));
        proc = opendir("/proc");
        if (pids == NULL || ppids == NULL || mine == NULL || proc == NULL) {
                free(pids);
                free(ppids);
                free(mine);
                if (proc)
                        closedir(proc);
                return -ENOMEM;
        }
        while ((de = readdir(proc)) != NULL && n < MAX_PROCS) {
                pid_t ppid;
                if (!isdigit((unsigned char)de->d_name[0]))
                        continue;
                ppid = read_ppid(de->d_name);
                if (ppid < 0)
                        continue;
                pids[n] = (pid_t)atoi(de->d_name);
                ppids[n] = ppid;
                n++;
        }
        closedir(proc);

        /* Transitive closure of "parent is us or one of ours". */
        do {
                grew = false;
                for (size_t i = 0; i < n; i++) {
                        if (mine[i])
                                continue;
                        if (ppids[i] == getpid()) {
                                mine[i] = true;
                                grew = true;
                                continue;
                        }
                        for (size_t j = 0; j < n; j++) {
                                if (mine[j] && pids[j] == ppids[i]) {
                                        mine[i] = true;
                                        grew = true;
                                        break;
                                }
                        }
                }
        } while (grew);

        for (size_t i = 0; i < n; i++) {
                if (mine[i] && kill(pids[i], sig) == 0) {
                        killed++;
                        hp_log_warn("killed leftover process %d with %s",
                                    (int)pids[i], hp_signal_name(sig));
                }
        }
        free(pids);
        free(ppids);
        free(mine);
        return killed;
}
