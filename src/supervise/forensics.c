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
#include "hyperpod/supervise.h"

#include "supervise-private.h"

/* What faulthandler is registered for in the workers: a real-time signal,
 * so that it cannot collide with a script's own SIGUSR1 or SIGUSR2
 * handler, and which is only ever sent once the handler is known to be in
 * place. */
#define STACKS_SIGNAL_OFFSET 6
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

static const char sitecustomize[] =
"# Written by hyperpodrun (--hang-dump): lets the agent ask this Python\n"
"# worker for the stack of every thread. faulthandler writes it to a\n"
"# memory file that the agent reads, never to stdout or stderr. The\n"
"# variable is removed so that only the worker itself registers, not the\n"
"# processes it starts. Then the sitecustomize this one hides, if any,\n"
"# runs as it would have.\n"
"import os as _hp_os\n"
"import sys as _hp_sys\n"
"\n"
"\n"
"def _hp_register():\n"
"    sig = _hp_os.environ.pop('HYPERPODRUN_STACKS_SIGNAL', None)\n"
"    if not sig:\n"
"        return\n"
"    try:\n"
"        import _thread\n"
"        import faulthandler\n"
"        import signal\n"
"        sig = int(sig)\n"
"        fd = _hp_os.memfd_create('hyperpodrun-stacks')\n"
"        r, w = _hp_os.pipe()\n"
"        # faulthandler puts this back as Python exits: a signal that\n"
"        # comes then is lost instead of killing the worker.\n"
"        signal.signal(sig, signal.SIG_IGN)\n"
"        faulthandler.register(sig, file=fd, all_threads=True)\n"
"        # The thread takes no signal but ours: a SIGTERM sent to the\n"
"        # process must land on the worker's own threads, or its handler\n"
"        # waits for the main thread to wake (time.sleep is not woken).\n"
"        # Blocked here first, so that the thread starts with the mask.\n"
"        keep = {sig, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE,\n"
"                signal.SIGILL, signal.SIGABRT}\n"
"        mask = signal.pthread_sigmask(\n"
"            signal.SIG_BLOCK, set(signal.valid_signals()) - keep)\n"
"        try:\n"
"            _thread.start_new_thread(_hp_stacks_wait,\n"
"                                     (fd, r, w, _thread.get_native_id))\n"
"        finally:\n"
"            signal.pthread_sigmask(signal.SIG_SETMASK, mask)\n"
"    except Exception:\n"
"        pass\n"
"\n"
"\n"
"def _hp_stacks_wait(fd, r, w, native_id):\n"
"    # The only thread the agent signals: it waits in a pipe read, which\n"
"    # the kernel restarts after the handler (SA_RESTART), so no call of\n"
"    # the worker's own threads is ever interrupted by a report.\n"
"    _hp_os.write(fd, ('hyperpodrun-stacks 2 pid=%d tid=%d\\n'\n"
"                      % (_hp_os.getpid(), native_id())).encode())\n"
"    while True:\n"
"        _hp_os.read(r, 1)\n"
"\n"
"\n"
"def _hp_chain():\n"
"    import importlib.machinery\n"
"    import importlib.util\n"
"    here = _hp_os.path.dirname(_hp_os.path.abspath(__file__))\n"
"    path = [p for p in _hp_sys.path\n"
"            if _hp_os.path.abspath(p or _hp_os.curdir) != here]\n"
"    spec = importlib.machinery.PathFinder.find_spec('sitecustomize', path)\n"
"    if spec is None or spec.loader is None:\n"
"        return\n"
"    module = importlib.util.module_from_spec(spec)\n"
"    _hp_sys.modules['sitecustomize'] = module\n"
"    spec.loader.exec_module(module)\n"
"\n"
"\n"
"_hp_register()\n"
"_hp_chain()\n";

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
                          ms > 999 ? 999 : ms < 0 ? 0 : ms);
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
        while (fd < 0 && (de = readdir(dir)) != NULL && seen++ < MAX_PROC_FDS) {
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

                if (pid <= 0 || hp_proc__read(pid, &proc) < 0)
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
        while (start > text && !(start[-1] == '\n' && start - 1 > text &&
                                 start[-2] == '\n'))
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

        if (slot[0] != '\0' && strcmp(slot, path) != 0 &&
            unlink(slot) < 0 && errno != ENOENT)
                hp_log_warn("hang report: cannot remove the older report "
                            "'%s': %s",
                            slot, hp_strerror(-errno));
        snprintf(slot, PATH_MAX, "%s", path);
}

static void finish(struct hp_forensics *f)
{
        struct hp_agent *a = f->agent;
        uint64_t now = uv_now(a->loop);
        cJSON *doc = cJSON_CreateObject(), *ranks;
        char reason[HP_VERDICT_REASON_MAX] = "";
        char path[PATH_MAX] = "", when[40], line[600];
        char speeds[512];
        double speed;
        const char *dir = a->attempt_dir[f->stage];
        double wall = wall_now();
        int stacks = 0, python = 0, r = 0;

        uv_timer_stop(&f->timer);
        iso_time(wall, when, sizeof(when));
        cJSON_AddStringToObject(doc, "reason",
                                f->on_request ? "request" : "verdict");
        if (hp_verdict_reason(&f->verdict, reason, sizeof(reason)) >= 0) {
                cJSON_AddStringToObject(doc, "verdict", reason);
                cJSON_AddStringToObject(doc, "rule", f->verdict.rule);
                cJSON_AddNumberToObject(doc, "verdict_local_rank",
                                        f->verdict.local_rank);
        }
        cJSON_AddStringToObject(doc, "stage", hp_stage_name(f->stage));
        cJSON_AddNumberToObject(doc, "attempt", f->attempt);
        cJSON_AddStringToObject(doc, "time", when);
        cJSON_AddStringToObject(doc, "hang_dump",
                                a->cfg->hang_dump == HP_HANG_DUMP_FULL
                                        ? "full"
                                        : "stacks");
        cJSON_AddNumberToObject(doc, "collect_ms",
                                (double)(now - f->started));
        cJSON_AddStringToObject(doc, "silence", f->silence);
        hp_ftmon_speed_line(&a->ft, speeds, sizeof(speeds));
        if (speeds[0] != '\0')
                cJSON_AddStringToObject(doc, "speeds", speeds);
        ranks = cJSON_AddArrayToObject(doc, "ranks");
        if (ranks == NULL)
                goto out;
        for (int i = 0; i < f->count; i++) {
                struct hp_forensics_target *t = &f->targets[i];
                cJSON *o = cJSON_CreateObject(), *py;
                char *dump = NULL;
                char frame[512] = "", state[128];

                if (o == NULL)
                        break;
                /* null: no global rank yet (in-process restart). */
                if (t->rank >= 0)
                        cJSON_AddNumberToObject(o, "rank", t->rank);
                else
                        cJSON_AddNullToObject(o, "rank");
                cJSON_AddNumberToObject(o, "local_rank", t->local_rank);
                cJSON_AddNumberToObject(o, "pid", t->pid);
                /* Its heartbeat or step rate over the median's, when the
                 * rank monitor measured one. */
                if (hp_ftmon_speed(&a->ft, t->local_rank, &speed))
                        cJSON_AddNumberToObject(o, "relative_speed", speed);
                cJSON_AddStringToObject(o, "state", t->state);
                iso_time(wall - (double)(now - t->last_ms) / 1000.0, when,
                         sizeof(when));
                cJSON_AddStringToObject(o, t->wrote ? "last_output"
                                                    : "started",
                                        when);
                cJSON_AddNumberToObject(o, "silent_s",
                                        (double)(f->started - t->last_ms) /
                                                1000.0);
                py = cJSON_AddObjectToObject(o, "python");
                if (t->stacks_fd >= 0) {
                        python++;
                        dump = read_stacks(t);
                        cJSON_AddNumberToObject(py, "pid", t->stacks_pid);
                }
                cJSON_AddStringToObject(
                        py, "status",
                        t->stacks_fd < 0 ? "no handler"
                        : dump == NULL   ? "no answer"
                        : t->complete    ? "complete"
                                         : "cut at the timeout");
                if (dump != NULL) {
                        stacks++;
                        cJSON_AddStringToObject(py, "stacks", dump);
                        innermost_frame(dump, frame, sizeof(frame));
                }
                free(dump);
                hp_nccl_fr__report(&t->fr, o);
                main_thread_state(t, state, sizeof(state));
                cJSON_AddItemToObject(o, "processes", t->processes);
                if (t->rank >= 0)
                        hp_log_warn("hang report: rank %d (local %d, pid "
                                    "%d): %s%s%s",
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
                        r = write_report(a->attempt_fd[f->stage], name, doc);
                if (r >= 0 && f->on_request)
                        keep_report(f, path);
        }
        snprintf(line, sizeof(line), "%s: Python stacks from %d of %d "
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
        /* The stop that waited for the report, if its group still runs. */
        if (f->stop_pending) {
                f->stop_pending = false;
                if (hp_group__active(&a->group) && !a->group.stopping &&
                    a->stage == f->stage && a->restart_count == f->attempt)
                        hp_group__stop(&a->group, f->stop_signal,
                                      f->stop_timeout_ms);
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
        if (!waiting || uv_now(f->agent->loop) >= f->deadline)
                finish(f);
}

static uint64_t worker_last(const struct hp_worker *w)
{
        return w->out.last_read > w->err.last_read ? w->out.last_read
                                                   : w->err.last_read;
}

void hp_forensics__note_silence(struct hp_agent *a, const char *event)
{
        struct hp_forensics *f = &a->forensics;
        uint64_t now = uv_now(a->loop);
        double wall = wall_now();
        struct hp_silence *ranks;
        int n = 0;

        f->silence[0] = '\0';
        if (!hp_group__active(&a->group) || a->group.count == 0)
                return;
        ranks = calloc((size_t)a->group.count, sizeof(*ranks));
        if (ranks == NULL)
                return;
        for (int i = 0; i < a->group.count; i++) {
                const struct hp_worker *w = &a->group.workers[i];
                double ago = wall - w->exit_time;

                if (w->pid <= 0)
                        continue; /* never started */
                ranks[n].rank = w->rank;
                ranks[n].local_rank = w->local_rank;
                ranks[n].last_ms = worker_last(w);
                /* A rank that is gone is named with how it ended: it is
                 * not blocked in anything. */
                if (w->state >= HP_WORKER_EXITED) {
                        ranks[n].exited = true;
                        ranks[n].exit_code = (int)w->exit_status;
                        ranks[n].exit_signal = w->term_signal;
                        ranks[n].exit_ms =
                                ago <= 0 ? now
                                : (double)now > ago * 1000.0
                                        ? now - (uint64_t)(ago * 1000.0)
                                        : 0;
                }
                n++;
        }
        (void)hp_silence_format(ranks, (size_t)n, now, wall,
                                event, f->silence, sizeof(f->silence));
        free(ranks);
        hp_log_warn("who went silent: %s", f->silence);
}

int hp_forensics__begin(struct hp_forensics *f, bool on_request)
{
        struct hp_agent *a = f->agent;
        const struct hp_group *g = &a->group;
        bool python = f->python_path != NULL;
        int sig = SIGRTMIN + STACKS_SIGNAL_OFFSET;
        char fr_pipe[PATH_MAX], fr_dump[PATH_MAX];

        if (a->cfg->hang_dump == HP_HANG_DUMP_OFF)
                return -ENOTSUP;
        if (f->busy)
                return -EBUSY;
        if (!hp_group__active(&a->group) || g->count == 0)
                return -ESRCH;
        f->targets = calloc((size_t)g->count, sizeof(*f->targets));
        if (f->targets == NULL)
                return -ENOMEM;
        f->busy = true;
        f->on_request = on_request;
        f->stop_pending = false;
        f->started = uv_now(a->loop);
        f->stage = a->stage;
        f->attempt = a->restart_count;
        f->deadline = f->started + a->cfg->hang_dump_timeout_ms;
        if (on_request)
                memset(&f->verdict, 0, sizeof(f->verdict));
        else
                f->verdict = a->verdict;
        if (on_request || f->silence[0] == '\0')
                hp_forensics__note_silence(a, on_request ? "the request"
                                                        : "the verdict");
        f->count = 0;
        for (int i = 0; i < g->count; i++) {
                const struct hp_worker *w = &g->workers[i];
                struct hp_forensics_target *t = &f->targets[f->count];
                if (w->refs == 0 && w->state == HP_WORKER_DONE)
                        continue;
                t->local_rank = w->local_rank;
                t->rank = w->rank;
                t->pid = w->pid;
                t->state = hp_worker__state_name(w->state);
                t->last_ms = worker_last(w);
                t->wrote = w->out.stats.bytes + w->err.stats.bytes > 0;
                t->processes = cJSON_CreateArray();
                t->stacks_fd = -1;
                f->count++;
        }
        /* In the report, by silence: the first to go quiet first. */
        for (int i = 1; i < f->count; i++)
                for (int j = i; j > 0 &&
                                f->targets[j].last_ms < f->targets[j - 1].last_ms;
                     j--) {
                        struct hp_forensics_target tmp = f->targets[j];
                        f->targets[j] = f->targets[j - 1];
                        f->targets[j - 1] = tmp;
                }
        /* The states as they were at the verdict, before any signal. */
        snapshot(f, a->cfg->hang_dump == HP_HANG_DUMP_FULL, python);
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
        if (hp_forensics__fr_prefixes(f, f->stage, fr_pipe, fr_dump,
                                     sizeof(fr_pipe)))
                for (int i = 0; i < f->count; i++)
                        hp_nccl_fr__ask(&f->targets[i].fr,
                                        f->targets[i].rank, fr_pipe, fr_dump);
        if (a->cfg->hang_dump == HP_HANG_DUMP_FULL)
                f->ras = hp_nccl_ras__begin(a->loop);
        /* The first look comes on the next loop iteration: a report that
         * awaits nothing (no Python worker, no NCCL view) is written and
         * the stop goes ahead at once rather than a period later. */
        uv_timer_start(&f->timer, poll_cb, 0, POLL_MS);
        return 0;
}

int hp_agent_stacks_report(struct hp_agent *a, char *path, size_t len)
{
        struct hp_forensics *f = &a->forensics;
        const char *dir = a->attempt_dir[a->stage];
        int r;

        if (a->cfg->hang_dump == HP_HANG_DUMP_OFF)
                return -ENOTSUP;
        if (f->busy)
                return -EBUSY;
        if (!hp_group__active(&a->group) || a->group.count == 0)
                return -ESRCH;
        if (a->no_files || dir[0] == '\0')
                return -ENOENT;
        /* finish() numbers it the same way: one report at a time. */
        r = hp_snprintf(path, len, "%s/stacks-report-%u.json", dir,
                        f->requests + 1);
        if (r < 0)
                return r;
        return hp_forensics__begin(f, true);
}

bool hp_forensics__defer_stop(struct hp_forensics *f, int sig,
                             uint64_t timeout_ms)
{
        if (!f->busy)
                return false;
        /* A second stop while waiting (a SIGKILL) wins. */
        if (!f->stop_pending || sig == SIGKILL) {
                f->stop_signal = sig;
                f->stop_timeout_ms = timeout_ms;
        }
        f->stop_pending = true;
        return true;
}

#define PYTHON_DIR_PREFIX "hyperpodrun-py-"

/* Whether name, in the directory dirfd, is something an agent puts in its
 * Python directory: our sitecustomize.py, Python's __pycache__ of it, and
 * the flight recorder's pipes (nccl-fr-<rank>.pipe), all of our user. */
static bool python_dir_entry_ours(int dirfd, const char *name, bool cache)
{
        size_t len = strlen(name);
        struct stat st;

        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return true;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            st.st_uid != geteuid())
                return false;
        if (cache)
                return S_ISREG(st.st_mode) &&
                       strncmp(name, "sitecustomize.", 14) == 0 && len > 4 &&
                       strcmp(name + len - 4, ".pyc") == 0;
        if (strcmp(name, "sitecustomize.py") == 0)
                return S_ISREG(st.st_mode);
        if (strncmp(name, "nccl-fr-", 8) == 0 && len > 13 &&
            strcmp(name + len - 5, ".pipe") == 0 &&
            strspn(name + 8, "0123456789") == len - 13)
                return S_ISFIFO(st.st_mode);
        if (strcmp(name, "__pycache__") != 0 || !S_ISDIR(st.st_mode))
                return false;
        {
                int fd = openat(dirfd, name,
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                        O_CLOEXEC);
                DIR *d = fd < 0 ? NULL : fdopendir(fd);
                struct dirent *de;
                bool ours = d != NULL;

                if (d == NULL && fd >= 0)
                        close(fd);
                while (ours && (de = readdir(d)) != NULL)
                        ours = python_dir_entry_ours(fd, de->d_name, true);
                if (d != NULL)
                        closedir(d);
                return ours;
        }
}

/* A SIGKILLed agent leaves its Python directory in tmp. One that is
 * provably a dead agent's goes: our name (hyperpodrun-py-<pid>-XXXXXX), a
 * 0700 directory of our user, the pid no live hyperpodrun's, no one
 * holding its lock (a live agent holds it, in any pid namespace), and
 * nothing in it but what an agent puts there. */
static void remove_stale_python_dirs(const char *tmp)
{
        struct dirent *de;
        DIR *d = opendir(tmp);

        if (d == NULL)
                return;
        while ((de = readdir(d)) != NULL) {
                const char *digits = de->d_name + strlen(PYTHON_DIR_PREFIX);
                struct dirent *in;
                struct stat st;
                bool ours;
                DIR *sub;
                char *end;
                long pid;
                int fd;

                if (strncmp(de->d_name, PYTHON_DIR_PREFIX,
                            strlen(PYTHON_DIR_PREFIX)) != 0 ||
                    *digits < '1' || *digits > '9')
                        continue;
                pid = strtol(digits, &end, 10);
                if (*end != '-' || strlen(end + 1) != 6 ||
                    hp_pid_is_other_agent(pid))
                        continue;
                fd = openat(dirfd(d), de->d_name,
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        continue;
                if (fstat(fd, &st) < 0 || st.st_uid != geteuid() ||
                    (st.st_mode & 07777) != 0700 ||
                    flock(fd, LOCK_EX | LOCK_NB) < 0) {
                        close(fd);
                        continue;
                }
                sub = fdopendir(fd);
                if (sub == NULL) {
                        close(fd);
                        continue;
                }
                ours = true;
                while (ours && (in = readdir(sub)) != NULL)
                        ours = python_dir_entry_ours(fd, in->d_name, false);
                /* Removed while we hold its lock: an agent that started
                 * meanwhile never takes a directory it did not make. */
                if (ours && hp_remove_tree_at(dirfd(d), de->d_name) == 0)
                        hp_log_info("removed %s/%s, left by agent %ld, which "
                                    "is gone",
                                    tmp, de->d_name, pid);
                closedir(sub);
        }
        closedir(d);
}

/* Writes sitecustomize.py into a private directory of $TMPDIR, removed at
 * exit, and builds the workers' PYTHONPATH with it first. */
static int prepare_python(struct hp_forensics *f, const char *tmp,
                          char *errbuf, size_t errlen)
{
        const char *inherited = getenv("PYTHONPATH");
        char file[PATH_MAX];
        size_t len;
        int fd, r;

        if (hp_snprintf(f->python_dir, sizeof(f->python_dir),
                        "%s/" PYTHON_DIR_PREFIX "%d-XXXXXX", tmp,
                        (int)getpid()) < 0 ||
            mkdtemp(f->python_dir) == NULL) {
                r = f->python_dir[0] ? -errno : -ENAMETOOLONG;
                snprintf(errbuf, errlen,
                         "--hang-dump: cannot create a directory in %s: %s",
                         tmp, hp_strerror(r));
                f->python_dir[0] = '\0';
                return HP_ECONFIG;
        }
        /* Held until we exit: the directory is a live agent's. */
        f->python_dir_fd = open(f->python_dir,
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                        O_CLOEXEC);
        if (f->python_dir_fd < 0 ||
            flock(f->python_dir_fd, LOCK_EX | LOCK_NB) < 0) {
                r = -errno;
                snprintf(errbuf, errlen, "--hang-dump: cannot lock '%s': %s",
                         f->python_dir, hp_strerror(r));
                return HP_ECONFIG;
        }
        if (hp_snprintf(file, sizeof(file), "%s/sitecustomize.py",
                        f->python_dir) < 0)
                return -ENAMETOOLONG;
        fd = openat(f->python_dir_fd, "sitecustomize.py",
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0644);
        r = fd < 0 ? -errno : hp_write_all(fd, sitecustomize,
                                           sizeof(sitecustomize) - 1);
        if (fd >= 0 && close(fd) < 0 && r == 0)
                r = -errno;
        if (r < 0) {
                snprintf(errbuf, errlen, "--hang-dump: cannot write '%s': %s",
                         file, hp_strerror(r));
                return HP_ECONFIG;
        }
        len = strlen(f->python_dir) + 2 + (inherited ? strlen(inherited) : 0);
        f->python_path = malloc(len);
        if (f->python_path == NULL)
                return -ENOMEM;
        snprintf(f->python_path, len, "%s%s%s", f->python_dir,
                 inherited && *inherited ? ":" : "",
                 inherited ? inherited : "");
        snprintf(f->stacks_signal, sizeof(f->stacks_signal), "%d",
                 SIGRTMIN + STACKS_SIGNAL_OFFSET);
        return 0;
}

int hp_forensics__init(struct hp_forensics *f, struct hp_agent *a,
                      char *errbuf, size_t errlen)
{
        const char *tmp = getenv("TMPDIR");

        memset(f, 0, sizeof(*f));
        f->agent = a;
        f->python_dir_fd = -1;
        uv_timer_init(a->loop, &f->timer);
        if (tmp == NULL || *tmp == '\0')
                tmp = "/tmp";
        remove_stale_python_dirs(tmp);
        /* Python stacks are read from the worker's memory file; without
         * log files there is no report to put them in. */
        if (a->cfg->hang_dump == HP_HANG_DUMP_OFF || a->no_files)
                return 0;
        return prepare_python(f, tmp, errbuf, errlen);
}

void hp_forensics__close(struct hp_forensics *f)
{
        if (f->agent == NULL)
                return; /* never initialised, or closed */
        f->agent = NULL;
        uv_timer_stop(&f->timer);
        uv_close((uv_handle_t *)&f->timer, NULL);
        ras_end(f, NULL);
        free_targets(f);
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
}
