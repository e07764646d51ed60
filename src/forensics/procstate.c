/* SPDX-License-Identifier: Apache-2.0 */
/* What /proc says about a process and its threads: the fields of its stat
 * line, and each thread's state, wait channel and kernel stack. These
 * files never wait on the process they describe, unlike cmdline or
 * environ, which take its memory lock, so they are read on the loop. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "hyperpod/forensics.h"

#include "forensics-private.h"

/* Bounds on what one process's entry in a report holds. */
#define MAX_THREADS_PER_PROC 512

/* Reads a small /proc file into buf, NUL-terminated, without its final
 * newline. Returns the length or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n, got = 0;

        if (fd < 0)
                return -errno;
        while ((size_t)got < len - 1) {
                n = read(fd, buf + got, len - 1 - (size_t)got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                got += n;
        }
        close(fd);
        while (got > 0 && buf[got - 1] == '\n')
                got--;
        buf[got] = '\0';
        return got;
}

/* The stat file at path, of a process or a thread: 0, -ESRCH when it is
 * gone, -EINVAL when the line does not parse. */
static int read_stat(const char *path, pid_t pid, struct hp_proc *p)
{
        char buf[512];
        const char *open_paren, *close_paren;
        int fd, ppid, pgid;
        size_t comm_len;
        ssize_t n;
        char state;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -ESRCH;
        buf[n] = '\0';
        /* The command name may itself hold spaces and parentheses: the
         * fields start after the last ")". */
        open_paren = strchr(buf, '(');
        close_paren = strrchr(buf, ')');
        if (open_paren == NULL || close_paren == NULL ||
            close_paren < open_paren ||
            sscanf(close_paren + 1, " %c %d %d", &state, &ppid, &pgid) != 3)
                return -EINVAL;
        comm_len = (size_t)(close_paren - open_paren - 1);
        if (comm_len >= sizeof(p->comm))
                comm_len = sizeof(p->comm) - 1;
        memcpy(p->comm, open_paren + 1, comm_len);
        p->comm[comm_len] = '\0';
        p->pid = pid;
        p->ppid = ppid;
        p->pgid = pgid;
        p->state = state;
        return 0;
}

int hp_proc_read(pid_t pid, struct hp_proc *p)
{
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        return read_stat(path, pid, p);
}

bool hp_proc_live(const struct hp_proc *p)
{
        return p->state != 'Z' && p->state != 'X' && p->state != 'x';
}

cJSON *hp_proc__threads(pid_t pid, bool kernel_stacks)
{
        cJSON *threads = cJSON_CreateArray();
        char path[128], buf[4096];
        struct dirent *de;
        DIR *dir;
        int count = 0;

        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        dir = opendir(path);
        if (dir == NULL || threads == NULL) {
                if (dir != NULL)
                        closedir(dir);
                return threads;
        }
        while ((de = readdir(dir)) != NULL && count < MAX_THREADS_PER_PROC) {
                struct hp_proc th;
                int tid = atoi(de->d_name);
                cJSON *t;

                if (tid <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%d/stat",
                         (int)pid, tid);
                if (read_stat(path, tid, &th) < 0)
                        continue;
                t = cJSON_CreateObject();
                if (t == NULL)
                        break;
                cJSON_AddNumberToObject(t, "tid", tid);
                cJSON_AddStringToObject(t, "comm", th.comm);
                buf[0] = th.state;
                buf[1] = '\0';
                cJSON_AddStringToObject(t, "state", buf);
                snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan",
                         (int)pid, tid);
                if (read_small(path, buf, sizeof(buf)) < 0 ||
                    strcmp(buf, "0") == 0)
                        buf[0] = '\0';
                cJSON_AddStringToObject(t, "wchan", buf);
                if (kernel_stacks) {
                        snprintf(path, sizeof(path), "/proc/%d/task/%d/stack",
                                 (int)pid, tid);
                        if (read_small(path, buf, sizeof(buf)) >= 0)
                                cJSON_AddStringToObject(t, "kernel_stack",
                                                        buf);
                }
                cJSON_AddItemToArray(threads, t);
                count++;
        }
        closedir(dir);
        return threads;
}

/* The mask on a "Sig...:" line of a status file, or 0. */
static uint64_t status_mask(const char *status, const char *field)
{
        const char *p = strstr(status, field);

        return p != NULL ? strtoull(p + strlen(field), NULL, 16) : 0;
}

/* Whether thread tid of pid waits in sigwait (rt_sigtimedwait) for the
 * signal: while it waits, the kernel takes the waited signals out of its
 * blocked mask (SigBlk), so the set is read from the call's first
 * argument, through /proc/PID/mem (which a parent may read). */
static bool waits_for(pid_t pid, int tid, uint64_t bit)
{
        char path[128], buf[256];
        unsigned long long set_addr;
        uint64_t set = 0;
        long nr;
        int fd;
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid,
                 tid);
        if (read_small(path, buf, sizeof(buf)) < 0 ||
            sscanf(buf, "%ld %llx", &nr, &set_addr) != 2 ||
            nr != SYS_rt_sigtimedwait)
                return false;
        snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        n = pread(fd, &set, sizeof(set), (off_t)set_addr);
        close(fd);
        return n == (ssize_t)sizeof(set) && (set & bit);
}

/* Whether every thread of pid (at least one seen) keeps the signal from
 * its default action: blocked, or waited for in sigwait. */
static bool blocked_by_every_thread(pid_t pid, uint64_t bit)
{
        char path[128], buf[2048];
        struct dirent *de;
        DIR *dir;
        int seen = 0;
        bool all = true;

        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        dir = opendir(path);
        if (dir == NULL)
                return false;
        while (all && (de = readdir(dir)) != NULL) {
                int tid = atoi(de->d_name);

                if (tid <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%d/status",
                         (int)pid, tid);
                if (read_small(path, buf, sizeof(buf)) < 0)
                        continue; /* gone */
                seen++;
                if (!(status_mask(buf, "\nSigBlk:") & bit) &&
                    !waits_for(pid, tid, bit))
                        all = false;
        }
        closedir(dir);
        return all && seen > 0;
}

bool hp_proc_takes_signal(pid_t pid, int sig)
{
        char path[64], buf[2048];
        uint64_t bit;

        if (sig < 1 || sig > 64)
                return false;
        bit = UINT64_C(1) << (sig - 1);
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        if (read_small(path, buf, sizeof(buf)) < 0)
                return false;
        if (status_mask(buf, "\nSigCgt:") & bit)
                return true;
        if (status_mask(buf, "\nSigIgn:") & bit)
                return false; /* it would do nothing */
        /* The default action, unless every thread blocks it, to take it
         * with a signalfd or sigwait. */
        return blocked_by_every_thread(pid, bit);
}
