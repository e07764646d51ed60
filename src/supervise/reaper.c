/* SPDX-License-Identifier: Apache-2.0 */
/* PID-1 and subreaper duties: reaping orphans that the groups do not own,
 * and finding (and killing) what escaped the workers' process groups. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

int hp_reaper__sweep(bool (*reap_managed)(pid_t pid, void *ctx), void *ctx)
{
        pid_t last = 0;
        int reaped = 0;

        /*
         * The groups reap their own workers through their pidfds. A plain
         * waitpid(-1) here would steal their statuses, so each zombie is
         * first looked at with WNOWAIT: a worker is handed to its group,
         * which reaps it now, and anything else is an orphan reparented
         * to us, and is reaped. A worker is not skipped: WNOWAIT shows the
         * same zombie until it is reaped, and the orphans behind it would
         * wait for the worker's own exit callback.
         */
        for (;;) {
                siginfo_t info;

                memset(&info, 0, sizeof(info));
                if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0)
                        break; /* ECHILD: no children at all */
                if (info.si_pid == 0)
                        break; /* children, but none exited */
                if (info.si_pid == last)
                        break; /* not reaped: never spin on it */
                last = info.si_pid;
                if (reap_managed && reap_managed(info.si_pid, ctx))
                        continue;
                if (waitpid(info.si_pid, NULL, WNOHANG) > 0) {
                        reaped++;
                        hp_log_debug("reaped orphan pid %d",
                                     (int)info.si_pid);
                }
        }
        return reaped;
}

int hp_procs__push(struct hp_procs *list, const struct hp_proc *p)
{
        if (list->count == list->cap) {
                size_t cap = list->cap ? list->cap * 2 : 64;
                struct hp_proc *items = realloc(list->items,
                                                cap * sizeof(*items));
                if (items == NULL)
                        return -ENOMEM;
                list->items = items;
                list->cap = cap;
        }
        list->items[list->count++] = *p;
        return 0;
}

void hp_procs__free(struct hp_procs *list)
{
        free(list->items);
        memset(list, 0, sizeof(*list));
}

/* 0 when this process has no child (the watcher is not one), 1 when
 * it has a live one, -1 when a zombie hides the answer. One waitid,
 * against a reading of all of /proc: every live process of the job has
 * a live parent below the agent, or the agent (the subreaper) itself. */
static int live_children(void)
{
        siginfo_t info;

        memset(&info, 0, sizeof(info));
        if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0)
                return errno == ECHILD ? 0 : -1;
        return info.si_pid == 0 ? 1 : -1;
}

static int by_ppid(const void *a, const void *b)
{
        const struct hp_proc *x = a, *y = b;

        return (x->ppid > y->ppid) - (x->ppid < y->ppid);
}

int hp_proc__descendants(struct hp_procs *out)
{
        struct hp_procs all = { 0 };
        pid_t root = getpid(), *queue = NULL;
        size_t queued = 1;
        struct dirent *de;
        DIR *proc;
        int r = 0;

        out->count = 0;
        if (live_children() == 0)
                return 0;
        proc = opendir("/proc");
        if (proc == NULL)
                return -errno;
        /* Zombies too: a zombie needs reaping, not killing, but its
         * children are still the job's. The leader of a multi-threaded
         * process that is dying shows as a zombie while its other threads
         * exit, and its children keep it as their parent until the last
         * one is gone: a walk that stopped at zombies would miss them. */
        while ((de = readdir(proc)) != NULL) {
                struct hp_proc p;

                if (!isdigit((unsigned char)de->d_name[0]) ||
                    hp_proc_read((pid_t)atoi(de->d_name), &p) < 0)
                        continue;
                r = hp_procs__push(&all, &p);
                if (r < 0)
                        break;
        }
        closedir(proc);
        if (r < 0)
                goto out;
        queue = malloc((all.count + 1) * sizeof(*queue));
        if (queue == NULL) {
                r = -ENOMEM;
                goto out;
        }
        queue[0] = root;

        /* Breadth first from root, each level found by a binary search
         * of the processes sorted by parent; only the live ones are
         * returned. */
        qsort(all.items, all.count, sizeof(*all.items), by_ppid);
        for (size_t next = 0; next < queued; next++) {
                pid_t parent = queue[next];
                size_t lo = 0, hi = all.count;

                while (lo < hi) {
                        size_t mid = lo + (hi - lo) / 2;
                        if (all.items[mid].ppid < parent)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                for (; lo < all.count && all.items[lo].ppid == parent; lo++) {
                        /* A pid seen twice (reused while /proc was read)
                         * would loop: each process is queued once. */
                        if (queued > all.count)
                                break;
                        queue[queued++] = all.items[lo].pid;
                        if (!hp_proc_live(&all.items[lo]))
                                continue;
                        r = hp_procs__push(out, &all.items[lo]);
                        if (r < 0)
                                goto out;
                }
        }
out:
        free(queue);
        hp_procs__free(&all);
        return r;
}

int hp_proc__pipe_holders(ino_t ino, pid_t *pids, size_t max)
{
        char want[64];
        DIR *proc = opendir("/proc");
        struct dirent *de;
        size_t found = 0;
        int len;

        if (proc == NULL)
                return -errno;
        len = snprintf(want, sizeof(want), "pipe:[%llu]",
                       (unsigned long long)ino);
        while (found < max && (de = readdir(proc)) != NULL) {
                char path[300];
                struct dirent *fde;
                DIR *fds;

                if (!isdigit((unsigned char)de->d_name[0]) ||
                    atoi(de->d_name) == (int)getpid())
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/fd", de->d_name);
                fds = opendir(path);
                if (fds == NULL)
                        continue;
                while ((fde = readdir(fds)) != NULL) {
                        char link[64];
                        ssize_t n;

                        if (fde->d_name[0] == '.')
                                continue;
                        n = readlinkat(dirfd(fds), fde->d_name, link,
                                       sizeof(link) - 1);
                        if (n == len &&
                            memcmp(link, want, (size_t)len) == 0) {
                                pids[found++] = (pid_t)atoi(de->d_name);
                                break;
                        }
                }
                closedir(fds);
        }
        closedir(proc);
        return (int)found;
}

int hp_proc__kill_descendants(int sig, bool warn)
{
        struct hp_procs procs = { 0 };
        int killed = 0;

        /* A process may fork between the reading and the kill: look
         * again until nothing is left, a few times at most. */
        for (int pass = 0; pass < 8; pass++) {
                int r = hp_proc__descendants(&procs);
                int now = 0;

                if (r < 0) {
                        if (pass == 0)
                                killed = r;
                        break;
                }
                for (size_t i = 0; i < procs.count; i++) {
                        if (kill(procs.items[i].pid, sig) == 0) {
                                now++;
                                if (warn)
                                        hp_log_warn("killed leftover process "
                                                    "%d (%s) with %s",
                                                    (int)procs.items[i].pid,
                                                    procs.items[i].comm,
                                                    hp_signal_name(sig));
                        }
                }
                killed += now;
                if (now == 0 || sig != SIGKILL)
                        break;
        }
        hp_procs__free(&procs);
        return killed;
}
