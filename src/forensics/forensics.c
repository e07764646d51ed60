/* SPDX-License-Identifier: Apache-2.0 */
/* Hang forensics: on a rule verdict (or SIGUSR2), before the workers are
 * stopped, say which rank went silent first and where every process of the
 * attempt was: each thread's state and wait channel from /proc (and its
 * kernel stack with --hang-dump full), and the Python stack of every thread
 * of each Python worker, from faulthandler.
 *
 * The Python stacks need no change to the training script: the workers get
 * a PYTHONPATH entry holding our sitecustomize.py, which registers
 * faulthandler on a real-time signal with a memory file (memfd) as its
 * output, starts one thread of its own to take that signal, then runs the
 * sitecustomize it hides. The agent finds that file in /proc/PID/fd,
 * signals that thread (tgkill) only once the file says the handler is in
 * place and names the thread, and reads the dump from there: nothing
 * reaches the worker's stdout or stderr, so the console log stays a
 * faithful record for --replay.
 *
 * A report must not change what the worker does. A signal sent to the
 * process lands on any thread, and interrupts the call it is blocked in:
 * SA_RESTART does not restart poll, a recv under SO_RCVTIMEO or a
 * connect, and torch 1.13's TCPStore client took the EINTR for a failed
 * rendezvous (RuntimeError: Interrupted system call) and the worker
 * exited 1. Our thread waits in a pipe read, which the kernel restarts,
 * so no other thread ever sees the signal. It blocks every other signal:
 * a SIGTERM sent to the process could otherwise land on it, and the
 * worker's handler would wait until its main thread woke (a sleeping
 * time.sleep is not woken by a signal handled on another thread). And
 * the signal is ignored
 * before faulthandler registers, which is what faulthandler puts back as
 * the interpreter exits: a signal then (a report taken just as a worker
 * ends) is lost, where its default action would have killed the worker.
 *
 * Everything runs on the loop: the process and thread states come from
 * /proc files that never wait on the process they describe (procstate.c),
 * and so do the fd links where the stack file is found. The stacks are
 * waited for on a timer, at most --hang-dump-timeout.
 *
 * With --hang-dump full, two NCCL views join the report in the same
 * window: torch's NCCL flight recorder (nccl_fr.c) and the text report of
 * NCCL's RAS thread (nccl_ras.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "hyperpod/forensics.h"

#include "forensics-private.h"

/* How often the stack files are looked at; a dump is complete once it has
 * grown and then stayed the same for one period (faulthandler writes it
 * from the signal handler, in well under a millisecond). */
#define POLL_MS 20
/* Bounds on what one report holds. */
#define MAX_PROCS_PER_RANK 64
#define MAX_STACK_BYTES (256 * 1024)
#define MAX_PROC_FDS 4096

static const char memfd_name[] = "/memfd:hyperpodrun-stacks";
/* The first line of the memory file: the process that registered the
 * handler (a forked child shares the file, not the handler's thread) and
 * the thread to signal. */
static const char stacks_header[] = "hyperpodrun-stacks 2 pid=";
#define STACKS_HEADER_MAX 64
/* The frame of our own thread in a dump, which is left out of it. */
static const char stacks_thread_frame[] = " in _hp_stacks_wait\n";

struct hp_forensics_target {
        int local_rank;
        int rank;
        pid_t pid;
        const char *state;
        uint64_t last_ms;
        bool wrote;
        cJSON *processes;
        int stacks_fd; /* the worker's memfd, opened through /proc */
        pid_t stacks_pid;
        pid_t stacks_tid; /* the thread that takes the signal */
        off_t stacks_from;
        off_t stacks_seen;
        bool signalled;
        bool complete;
        struct hp_nccl_fr fr; /* torch's (--hang-dump full) */
};

static double wall_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void iso_time(double wall, char *buf, size_t len)
{
        time_t secs = (time_t)wall;
        struct tm tm;
        int ms = (int)((wall - (double)secs) * 1000.0);

        if (gmtime_r(&secs, &tm) == NULL) {
                snprintf(buf, len, "?");
                return;
        }
        (void)hp_snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                          tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                          tm.tm_hour, tm.tm_min, tm.tm_sec,
                          ms > 999 ? 999
                          : ms < 0 ? 0
                                   : ms);
}

/* Whether the file's first line is our header for pid: sets *tid. */
static bool stacks_header_of(int fd, pid_t pid, pid_t *tid)
{
        char head[STACKS_HEADER_MAX + 1];
        int hpid, htid, end = 0;
        ssize_t n = pread(fd, head, STACKS_HEADER_MAX, 0);

        if (n < (ssize_t)sizeof(stacks_header) - 1)
                return false;
        head[n] = '\0';
        if (memchr(head, '\n', (size_t)n) == NULL ||
            sscanf(head, "hyperpodrun-stacks 2 pid=%d tid=%d\n%n", &hpid,
                   &htid, &end) != 2 ||
            end == 0 || hpid != (int)pid || htid <= 0)
                return false;
        *tid = (pid_t)htid;
        return true;
}

/* Opens the stack file our sitecustomize made in pid, through /proc, once
 * it says faulthandler is registered and which thread takes the signal
 * (*tid). Returns the fd or -1. */
static int find_stacks_file(pid_t pid, pid_t *tid)
{
        char path[300], link[256];
        struct dirent *de;
        DIR *dir;
        int fd = -1, seen = 0;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        dir = opendir(path);
        if (dir == NULL)
                return -1;
        while (fd < 0 && (de = readdir(dir)) != NULL &&
               seen++ < MAX_PROC_FDS) {
                ssize_t n;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid,
                         de->d_name);
                n = readlink(path, link, sizeof(link) - 1);
                if (n < (ssize_t)sizeof(memfd_name) - 1 ||
                    memcmp(link, memfd_name, sizeof(memfd_name) - 1) != 0)
                        continue;
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                /* A forked child holds its parent's file: not its own. */
                if (!stacks_header_of(fd, pid, tid)) {
                        close(fd);
                        fd = -1;
                }
        }
        closedir(dir);
        return fd;
}

static off_t file_size(int fd)
{
        struct stat st;

        return fstat(fd, &st) == 0 ? st.st_size : -1;
}

/* One pass over /proc: every process in a worker's process group (each
 * worker leads its own) goes to that worker's list, with its threads;
 * the first one with our stack file is the one whose stacks we ask for. */
static void snapshot(struct hp_forensics *f, bool kernel_stacks, bool python)
{
        DIR *dir = opendir("/proc");
        struct dirent *de;

        if (dir == NULL) {
                hp_log_warn("hang report: cannot read /proc: %s",
                            strerror(errno));
                return;
        }
        while ((de = readdir(dir)) != NULL) {
                struct hp_forensics_target *t = NULL;
                struct hp_proc proc;
                int pid = atoi(de->d_name);
                cJSON *p;

                if (pid <= 0 || hp_proc_read(pid, &proc) < 0)
                        continue;
                for (int i = 0; i < f->count && t == NULL; i++)
                        if (f->targets[i].pid == proc.pgid)
                                t = &f->targets[i];
                if (t == NULL || t->processes == NULL ||
                    cJSON_GetArraySize(t->processes) >= MAX_PROCS_PER_RANK)
                        continue;
                p = cJSON_CreateObject();
                if (p == NULL)
                        continue;
                cJSON_AddNumberToObject(p, "pid", pid);
                cJSON_AddNumberToObject(p, "ppid", proc.ppid);
                cJSON_AddStringToObject(p, "comm", proc.comm);
                cJSON_AddItemToObject(p, "threads",
                                      hp_proc__threads(pid, kernel_stacks));
                /* The worker itself first. */
                if (pid == t->pid)
                        cJSON_InsertItemInArray(t->processes, 0, p);
                else
                        cJSON_AddItemToArray(t->processes, p);
                if (python && t->stacks_fd < 0) {
                        t->stacks_fd = find_stacks_file(pid, &t->stacks_tid);
                        t->stacks_pid = pid;
                }
        }
        closedir(dir);
}

/* Takes our sitecustomize's thread out of a dump: it is the one the
 * signal went to, and says only that it waits for the next. */
static void drop_own_thread(char *text)
{
        char *frame = strstr(text, stacks_thread_frame), *start, *end;

        if (frame == NULL)
                return;
        start = frame;
        while (start > text &&
               !(start[-1] == '\n' && start - 1 > text && start[-2] == '\n'))
                start--;
        end = strstr(frame, "\n\n");
        end = end != NULL ? end + 2 : frame + strlen(frame);
        /* The last block: the blank line before it goes too. */
        if (*end == '\0' && start > text)
                start--;
        memmove(start, end, strlen(end) + 1);
}

/* Reads what faulthandler appended since the signal, at most
 * MAX_STACK_BYTES. NULL when nothing came. */
static char *read_stacks(const struct hp_forensics_target *t)
{
        off_t size = file_size(t->stacks_fd);
        size_t len;
        ssize_t n;
        char *text;

        if (size <= t->stacks_from)
                return NULL;
        len = (size_t)(size - t->stacks_from);
        if (len > MAX_STACK_BYTES)
                len = MAX_STACK_BYTES;
        text = malloc(len + 1);
        if (text == NULL)
                return NULL;
        n = pread(t->stacks_fd, text, len, t->stacks_from);
        if (n <= 0) {
                free(text);
                return NULL;
        }
        text[n] = '\0';
        drop_own_thread(text);
        return text;
}

/* The innermost frame of the main thread (the one whose outermost frame
 * is a <module>), else of the first thread: "file.py:20 in f". */
static void innermost_frame(const char *stacks, char *buf, size_t len)
{
        const char *block = stacks, *chosen = NULL;

        buf[0] = '\0';
        while (block != NULL && *block != '\0') {
                const char *end = strstr(block, "\n\n");
                const char *module = strstr(block, " in <module>");
                if (chosen == NULL)
                        chosen = block;
                if (module != NULL && (end == NULL || module < end)) {
                        chosen = block;
                        break;
                }
                block = end ? end + 2 : NULL;
        }
        if (chosen != NULL) {
                const char *frame = strstr(chosen, "\n  File \"");
                const char *stop;
                if (frame == NULL)
                        return;
                frame += 3;
                stop = strchr(frame, '\n');
                snprintf(buf, len, "%.*s",
                         (int)(stop ? stop - frame : (long)strlen(frame)),
                         frame);
        }
}

/* "S hrtimer_nanosleep" for the worker's first thread. */
static void main_thread_state(const struct hp_forensics_target *t, char *buf,
                              size_t len)
{
        cJSON *p = cJSON_GetArrayItem(t->processes, 0);
        cJSON *threads = p ? cJSON_GetObjectItem(p, "threads") : NULL;
        cJSON *th = threads ? cJSON_GetArrayItem(threads, 0) : NULL;
        const char *state, *wchan;

        buf[0] = '\0';
        if (th == NULL)
                return;
        state = cJSON_GetStringValue(cJSON_GetObjectItem(th, "state"));
        wchan = cJSON_GetStringValue(cJSON_GetObjectItem(th, "wchan"));
        snprintf(buf, len, "%s%s%s", state ? state : "?",
                 wchan && *wchan ? " in " : "", wchan ? wchan : "");
}

/* Puts the RAS answer in doc (unless NULL) and lets the query go. */
static void ras_end(struct hp_forensics *f, cJSON *doc)
{
        struct hp_nccl_ras *q = f->ras;

        f->ras = NULL;
        hp_nccl_ras__end(q, doc);
}

static void free_targets(struct hp_forensics *f)
{
        for (int i = 0; i < f->count; i++) {
                if (f->targets[i].stacks_fd >= 0)
                        close(f->targets[i].stacks_fd);
                cJSON_Delete(f->targets[i].processes);
                hp_nccl_fr__free(&f->targets[i].fr);
        }
        free(f->targets);
        f->targets = NULL;
        f->count = 0;
}

/* The report as cJSON prints it, and a final newline; no fsync, which
 * could hold up the loop while the workers write their logs. */
static int write_report(int dirfd, const char *name, const cJSON *doc)
{
        char *text = cJSON_Print(doc), *line;
        size_t len;
        int r;

        if (text == NULL)
                return -ENOMEM;
        len = strlen(text);
        line = realloc(text, len + 2);
        if (line == NULL) {
                free(text);
                return -ENOMEM;
        }
        line[len] = '\n';
        line[len + 1] = '\0';
        if (dirfd < 0) {
                free(line);
                return -ENOENT; /* the attempt's directory was not made */
        }
        /* In the attempt's directory, by its fd: private to the agent's
         * user, as the logs are. */
        r = hp_write_file_atomic_at(dirfd, name, line, len + 1, 0600, 0);
        free(line);
        return r;
}

/* A report on request was written to path: the one written
 * HP_STACKS_REPORTS_KEPT before it goes, so that requests in a loop
 * cannot fill the disk. Only files this agent wrote are removed. */
static void keep_report(struct hp_forensics *f, const char *path)
{
        char *slot = f->kept[f->requests % HP_STACKS_REPORTS_KEPT];

        if (slot[0] != '\0' && strcmp(slot, path) != 0 && unlink(slot) < 0 &&
            errno != ENOENT)
                hp_log_warn("hang report: cannot remove the older report "
                            "'%s': %s",
                            slot, hp_strerror(-errno));
        snprintf(slot, PATH_MAX, "%s", path);
}

/* One rank's part of the report; counts the Python workers and the
 * stacks they gave. NULL without memory. */
static cJSON *rank_report(struct hp_forensics *f,
                          struct hp_forensics_target *t, uint64_t now,
                          double wall, int *stacks, int *python)
{
        char when[40];
        double speed;
        cJSON *o = cJSON_CreateObject(), *py;
        char *dump = NULL;
        char frame[512] = "", state[128];

        if (o == NULL)
                return NULL;
        /* null: no global rank yet (in-process restart). */
        if (t->rank >= 0)
                cJSON_AddNumberToObject(o, "rank", t->rank);
        else
                cJSON_AddNullToObject(o, "rank");
        cJSON_AddNumberToObject(o, "local_rank", t->local_rank);
        cJSON_AddNumberToObject(o, "pid", t->pid);
        /* Its heartbeat or step rate over the median's, when the
         * rank monitor measured one. */
        if (f->p.ft != NULL && hp_ftmon_speed(f->p.ft, t->local_rank, &speed))
                cJSON_AddNumberToObject(o, "relative_speed", speed);
        cJSON_AddStringToObject(o, "state", t->state);
        iso_time(wall - (double)(now - t->last_ms) / 1000.0, when,
                 sizeof(when));
        cJSON_AddStringToObject(o, t->wrote ? "last_output" : "started",
                                when);
        cJSON_AddNumberToObject(o, "silent_s",
                                (double)(f->started - t->last_ms) / 1000.0);
        py = cJSON_AddObjectToObject(o, "python");
        if (t->stacks_fd >= 0) {
                (*python)++;
                dump = read_stacks(t);
                cJSON_AddNumberToObject(py, "pid", t->stacks_pid);
        }
        cJSON_AddStringToObject(py, "status",
                                t->stacks_fd < 0 ? "no handler"
                                : dump == NULL   ? "no answer"
                                : t->complete    ? "complete"
                                                 : "cut at the timeout");
        if (dump != NULL) {
                (*stacks)++;
                cJSON_AddStringToObject(py, "stacks", dump);
                innermost_frame(dump, frame, sizeof(frame));
        }
        free(dump);
        hp_nccl_fr__report(&t->fr, o);
        main_thread_state(t, state, sizeof(state));
        cJSON_AddItemToObject(o, "processes", t->processes);
        if (t->rank >= 0)
                hp_log_warn("hang report: rank %d (local %d, pid %d): "
                            "%s%s%s",
                            t->rank, t->local_rank, (int)t->pid,
                            state[0] ? state : "gone",
                            frame[0] ? "; Python: " : "", frame);
        else /* no global rank yet (in-process restart) */
                hp_log_warn("hang report: local rank %d (pid %d): "
                            "%s%s%s",
                            t->local_rank, (int)t->pid,
                            state[0] ? state : "gone",
                            frame[0] ? "; Python: " : "", frame);
        t->processes = NULL;
        return o;
}

static void finish(struct hp_forensics *f)
{
        uint64_t now = uv_now(f->p.loop);
        cJSON *doc = cJSON_CreateObject(), *ranks;
        const char *reason = f->reason;
        char path[PATH_MAX] = "", when[40], line[600];
        char speeds[512] = "";
        const char *dir = f->dir;
        double wall = wall_now();
        int stacks = 0, python = 0, r = 0;

        uv_timer_stop(&f->timer);
        iso_time(wall, when, sizeof(when));
        cJSON_AddStringToObject(doc, "reason",
                                f->on_request ? "request" : "verdict");
        if (reason[0] != '\0') {
                cJSON_AddStringToObject(doc, "verdict", reason);
                cJSON_AddStringToObject(doc, "rule", f->rule);
                cJSON_AddNumberToObject(doc, "verdict_local_rank",
                                        f->verdict_local_rank);
        }
        cJSON_AddStringToObject(doc, "stage", f->stage_name);
        cJSON_AddNumberToObject(doc, "attempt", f->attempt);
        cJSON_AddStringToObject(doc, "time", when);
        cJSON_AddStringToObject(doc, "hang_dump",
                                f->p.full ? "full" : "stacks");
        cJSON_AddNumberToObject(doc, "collect_ms",
                                (double)(now - f->started));
        cJSON_AddStringToObject(doc, "silence", f->silence);
        if (f->p.ft != NULL)
                hp_ftmon_speed_line(f->p.ft, speeds, sizeof(speeds));
        if (speeds[0] != '\0')
                cJSON_AddStringToObject(doc, "speeds", speeds);
        ranks = cJSON_AddArrayToObject(doc, "ranks");
        if (ranks == NULL)
                goto out;
        for (int i = 0; i < f->count; i++) {
                cJSON *o = rank_report(f, &f->targets[i], now, wall, &stacks,
                                       &python);

                if (o == NULL)
                        break;
                cJSON_AddItemToArray(ranks, o);
        }
        ras_end(f, doc);
        if (dir[0] != '\0') {
                char name[64];

                if (f->on_request)
                        snprintf(name, sizeof(name), "stacks-report-%u.json",
                                 ++f->requests);
                else
                        snprintf(name, sizeof(name), "hang-report.json");
                r = hp_snprintf(path, sizeof(path), "%s/%s", dir, name);
                if (r >= 0)
                        r = write_report(f->dirfd, name, doc);
                if (r >= 0 && f->on_request)
                        keep_report(f, path);
        }
        snprintf(line, sizeof(line),
                 "%s: Python stacks from %d of %d "
                 "Python worker%s, collected in %llu ms",
                 reason[0] ? reason : "on request", stacks, python,
                 python == 1 ? "" : "s",
                 (unsigned long long)(now - f->started));
        if (dir[0] == '\0')
                hp_log_warn("hang report (not written: no log files): %s",
                            line);
        else if (r < 0)
                hp_log_error("hang report: cannot write '%s': %s", path,
                             hp_strerror(r));
        else
                hp_log_warn("hang report in %s: %s", path, line);
out:
        ras_end(f, NULL);
        cJSON_Delete(doc);
        free_targets(f);
        f->busy = false;
        f->silence[0] = '\0';
        if (f->dirfd >= 0)
                close(f->dirfd);
        f->dirfd = -1;
        /* The stop that waited for the report: the supervisor sends it
         * if the report's group still runs. */
        if (f->stop_pending) {
                f->stop_pending = false;
                f->p.stop(f->p.ctx, f->stop_signal, f->stop_timeout_ms,
                          f->stage, f->attempt);
        }
}

static void poll_cb(uv_timer_t *timer)
{
        struct hp_forensics *f = hp_container_of(timer, struct hp_forensics,
                                                 timer);
        bool waiting = false;

        for (int i = 0; i < f->count; i++) {
                struct hp_forensics_target *t = &f->targets[i];
                off_t size;

                if (hp_nccl_fr__poll(&t->fr))
                        waiting = true;
                if (!t->signalled || t->complete)
                        continue;
                size = file_size(t->stacks_fd);
                if (size > t->stacks_from && size == t->stacks_seen)
                        t->complete = true;
                else
                        waiting = true;
                t->stacks_seen = size;
        }
        if (hp_nccl_ras__waiting(f->ras))
                waiting = true;
        if (!waiting || uv_now(f->p.loop) >= f->deadline)
                finish(f);
}

void hp_forensics_note_silence(struct hp_forensics *f,
                               const struct hp_forensics_attempt *at,
                               const char *event)
{
        uint64_t now = uv_now(f->p.loop);
        double wall = wall_now();
        struct hp_silence *ranks;
        int n = 0;

        f->silence[0] = '\0';
        if (at->count == 0)
                return;
        ranks = calloc((size_t)at->count, sizeof(*ranks));
        if (ranks == NULL)
                return;
        for (int i = 0; i < at->count; i++) {
                const struct hp_forensics_rank *w = &at->ranks[i];
                double ago = wall - w->exit_wall;

                if (w->pid <= 0)
                        continue; /* never started */
                ranks[n].rank = w->rank;
                ranks[n].local_rank = w->local_rank;
                ranks[n].last_ms = w->last_ms;
                /* A rank that is gone is named with how it ended: it is
                 * not blocked in anything. */
                if (w->exited) {
                        ranks[n].exited = true;
                        ranks[n].exit_code = w->exit_code;
                        ranks[n].exit_signal = w->exit_signal;
                        ranks[n].exit_ms = ago <= 0 ? now
                                           : (double)now > ago * 1000.0
                                                   ? now - (uint64_t)(ago *
                                                                      1000.0)
                                                   : 0;
                }
                n++;
        }
        (void)hp_silence_format(ranks, (size_t)n, now, wall, event,
                                f->silence, sizeof(f->silence));
        free(ranks);
        hp_log_warn("who went silent: %s", f->silence);
}

const char *hp_forensics_silence(const struct hp_forensics *f)
{
        return f != NULL ? f->silence : "";
}

void hp_forensics_clear_silence(struct hp_forensics *f)
{
        if (f != NULL)
                f->silence[0] = '\0';
}

/* Takes the attempt's ranks to look at, by silence: the first to go
 * quiet first. */
static void take_targets(struct hp_forensics *f,
                         const struct hp_forensics_attempt *at)
{
        f->count = 0;
        for (int i = 0; i < at->count; i++) {
                const struct hp_forensics_rank *w = &at->ranks[i];
                struct hp_forensics_target *t = &f->targets[f->count];
                if (w->done)
                        continue;
                t->local_rank = w->local_rank;
                t->rank = w->rank;
                t->pid = w->pid;
                t->state = w->state;
                t->last_ms = w->last_ms;
                t->wrote = w->wrote;
                t->processes = cJSON_CreateArray();
                t->stacks_fd = -1;
                f->count++;
        }
        for (int i = 1; i < f->count; i++)
                for (int j = i; j > 0 && f->targets[j].last_ms <
                                                 f->targets[j - 1].last_ms;
                     j--) {
                        struct hp_forensics_target tmp = f->targets[j];
                        f->targets[j] = f->targets[j - 1];
                        f->targets[j - 1] = tmp;
                }
}

/* The attempt the report is about, copied: the report outlives the
 * call. */
static void take_attempt(struct hp_forensics *f,
                         const struct hp_forensics_attempt *at,
                         bool on_request)
{
        f->stage = at->stage;
        snprintf(f->stage_name, sizeof(f->stage_name), "%s", at->stage_name);
        f->attempt = at->attempt;
        snprintf(f->dir, sizeof(f->dir), "%s", at->dir ? at->dir : "");
        f->dirfd = at->dirfd >= 0 ? fcntl(at->dirfd, F_DUPFD_CLOEXEC, 0) : -1;
        if (f->dirfd < 0)
                f->dir[0] = '\0';
        f->reason[0] = f->rule[0] = '\0';
        f->verdict_local_rank = -1;
        if (!on_request && at->verdict_reason != NULL) {
                snprintf(f->reason, sizeof(f->reason), "%s",
                         at->verdict_reason);
                snprintf(f->rule, sizeof(f->rule), "%s",
                         at->verdict_rule ? at->verdict_rule : "");
                f->verdict_local_rank = at->verdict_local_rank;
        }
}

int hp_forensics_begin(struct hp_forensics *f,
                       const struct hp_forensics_attempt *at, bool on_request)
{
        bool python = f->python_path != NULL;
        int sig = SIGRTMIN + STACKS_SIGNAL_OFFSET;
        char fr_pipe[PATH_MAX], fr_dump[PATH_MAX];

        if (!f->p.enabled)
                return -ENOTSUP;
        if (f->busy)
                return -EBUSY;
        if (at->count == 0)
                return -ESRCH;
        f->targets = calloc((size_t)at->count, sizeof(*f->targets));
        if (f->targets == NULL)
                return -ENOMEM;
        f->busy = true;
        f->on_request = on_request;
        f->stop_pending = false;
        f->started = uv_now(f->p.loop);
        f->deadline = f->started + f->p.timeout_ms;
        take_attempt(f, at, on_request);
        if (on_request || f->silence[0] == '\0')
                hp_forensics_note_silence(f, at,
                                          on_request ? "the request"
                                                     : "the verdict");
        take_targets(f, at);
        /* The states as they were at the verdict, before any signal. */
        snapshot(f, f->p.full, python);
        for (int i = 0; i < f->count; i++) {
                struct hp_forensics_target *t = &f->targets[i];
                if (t->stacks_fd < 0)
                        continue;
                t->stacks_from = t->stacks_seen = file_size(t->stacks_fd);
                /* To our thread alone (see the top of this file). */
                if (t->stacks_from >= 0 &&
                    hp_tgkill(t->stacks_pid, t->stacks_tid, sig) == 0)
                        t->signalled = true;
        }
        if (hp_forensics_fr_prefixes(f, f->dir, fr_pipe, fr_dump,
                                     sizeof(fr_pipe)))
                for (int i = 0; i < f->count; i++)
                        hp_nccl_fr__ask(&f->targets[i].fr, f->targets[i].rank,
                                        fr_pipe, fr_dump);
        if (f->p.full)
                f->ras = hp_nccl_ras__begin(f->p.loop);
        /* The first look comes on the next loop iteration: a report that
         * awaits nothing (no Python worker, no NCCL view) is written and
         * the stop goes ahead at once rather than a period later. */
        uv_timer_start(&f->timer, poll_cb, 0, POLL_MS);
        return 0;
}

int hp_forensics_request_path(const struct hp_forensics *f, const char *dir,
                              char *path, size_t len)
{
        if (!f->p.enabled)
                return -ENOTSUP;
        if (f->busy)
                return -EBUSY;
        /* finish() numbers it the same way: one report at a time. */
        return hp_snprintf(path, len, "%s/stacks-report-%u.json", dir,
                           f->requests + 1);
}

bool hp_forensics_defer_stop(struct hp_forensics *f, int sig,
                             uint64_t timeout_ms)
{
        if (f == NULL || !f->busy)
                return false;
        /* A second stop while waiting (a SIGKILL) wins. */
        if (!f->stop_pending || sig == SIGKILL) {
                f->stop_signal = sig;
                f->stop_timeout_ms = timeout_ms;
        }
        f->stop_pending = true;
        return true;
}

int hp_forensics_new(const struct hp_forensics_params *p,
                     struct hp_forensics **out, char *errbuf, size_t errlen)
{
        const char *tmp = getenv("TMPDIR");
        struct hp_forensics *f = calloc(1, sizeof(*f));

        *out = f;
        if (f == NULL)
                return -ENOMEM;
        f->p = *p;
        f->open = true;
        f->python_dir_fd = -1;
        f->dirfd = -1;
        uv_timer_init(p->loop, &f->timer);
        if (tmp == NULL || *tmp == '\0')
                tmp = "/tmp";
        hp_forensics__remove_stale(tmp);
        /* Python stacks are read from the worker's memory file; without
         * log files there is no report to put them in. */
        if (!p->enabled || p->no_files)
                return 0;
        return hp_forensics__prepare_python(f, tmp, errbuf, errlen);
}

const char *hp_forensics_python_path(const struct hp_forensics *f)
{
        return f != NULL ? f->python_path : NULL;
}

const char *hp_forensics_stacks_signal(const struct hp_forensics *f)
{
        return f != NULL && f->python_path != NULL ? f->stacks_signal : NULL;
}

static void free_cb(uv_handle_t *handle)
{
        free(hp_container_of((uv_timer_t *)handle, struct hp_forensics,
                             timer));
}

void hp_forensics_close(struct hp_forensics *f)
{
        if (f == NULL || !f->open)
                return; /* closed already */
        f->open = false;
        uv_timer_stop(&f->timer);
        ras_end(f, NULL);
        free_targets(f);
        if (f->dirfd >= 0)
                close(f->dirfd);
        f->dirfd = -1;
        f->busy = false;
        free(f->python_path);
        f->python_path = NULL;
        if (f->python_dir[0] != '\0')
                (void)hp_remove_tree(f->python_dir);
        f->python_dir[0] = '\0';
        /* The lock goes last, with the directory. */
        if (f->python_dir_fd >= 0)
                close(f->python_dir_fd);
        f->python_dir_fd = -1;
        uv_close((uv_handle_t *)&f->timer, free_cb);
}
