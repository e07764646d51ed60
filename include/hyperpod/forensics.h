/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: what the job's processes were doing. A hang report (which
 * rank went silent first, every thread's state from /proc, each Python
 * worker's stacks, torch's NCCL flight recorder and NCCL's RAS report),
 * the silence line, and reading processes in /proc.
 *
 * It knows nothing of groups or drivers: the supervisor describes the
 * attempt in plain values (struct hp_forensics_attempt) and is told
 * through a callback when a stop that waited for a report may go. */
#ifndef HYPERPOD_FORENSICS_H
#define HYPERPOD_FORENSICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "hyperpod/ftmon.h"

/* ---- Processes in /proc (procstate.c) ---- */

struct hp_proc {
        pid_t pid;
        pid_t ppid;
        pid_t pgid;
        char state; /* R, S, D, Z... */
        char comm[16];
};

/* Reads /proc/PID/stat: 0, or -ESRCH when it is gone. */
int hp_proc_read(pid_t pid, struct hp_proc *p);
/* Not a zombie. */
bool hp_proc_live(const struct hp_proc *p);
/* Whether sig does something in pid other than its default action: a
 * handler is installed (SigCgt), or every thread blocks it (SigBlk) or
 * waits for it in sigwait, to take it with a signalfd or sigwait. False
 * when it is ignored, or pid is gone. */
bool hp_proc_takes_signal(pid_t pid, int sig);

/* ---- The silence line (silence.c) ---- */

/* One rank's last output, for the silence line. */
struct hp_silence {
        int rank;         /* global rank; negative: not known yet */
        uint64_t last_ms; /* loop clock: its last output, or its start */
        int local_rank;   /* named instead while any rank is unknown */
        bool exited;      /* it is gone: named with how it ended, never
                           * as silent */
        int exit_code;    /* when it exited by itself */
        int exit_signal;  /* when a signal ended it (then not exit_code) */
        uint64_t exit_ms; /* loop clock */
};

/* Ranks that went quiet closer together than this are not told apart:
 * reads are paced (HP_READ_PACE_MS), and ranks in lockstep print within a
 * few milliseconds of each other. */
#define HP_SILENCE_TIE_MS 50

/*
 * The silence line: sorts ranks in place (those that exited first, as
 * they ended, then the others by their last output) and names
 * the first to go quiet, how long before the verdict and the others, then
 * the others, e.g. "rank 3 silent since 10:42:01.120 (63.2 s before the
 * verdict, 2.9 s before the others); ranks 0-2,4-7 silent since
 * 10:42:04.010 (blocked in a collective?)". Ranks that exited come first,
 * in the order they ended, each with how ("rank 0 exited with code 1 at
 * 10:41:59.002 (65.3 s before the verdict)"); only live ones are
 * compared for silence. event names the moment
 * ("the verdict"); now_ms is that moment on the same clock as the ranks'
 * times, now_wall the wall clock (seconds since
 * the epoch) at that moment; times are printed in local time. Returns 0,
 * or -ENOSPC when the line did not fit (it then ends in "...").
 */
int hp_silence_format(struct hp_silence *ranks, size_t count, uint64_t now_ms,
                      double now_wall, const char *event, char *buf,
                      size_t len);

/* ---- Hang reports (forensics.c, nccl_fr.c, nccl_ras.c) ---- */

/* Reports written on request (SIGUSR2, POST /debug/stacks) that are kept:
 * a new one deletes the one this many before it. */
#define HP_STACKS_REPORTS_KEPT 8

/* The hang report collector (opaque): one per agent, made at start. It
 * owns a timer on the loop, so it is allocated, and freed once the loop
 * has closed that timer after hp_forensics_close. */
struct hp_forensics;

/* What a collector is made with; the callbacks run on the loop. */
struct hp_forensics_params {
        uv_loop_t *loop;
        bool enabled;        /* --hang-dump is not off */
        bool full;           /* --hang-dump full */
        bool no_files;       /* --no-files: no report to write */
        uint64_t timeout_ms; /* --hang-dump-timeout */
        /* The rank monitor, for the ranks' relative speeds; NULL: none.
         * Borrowed for the collector's life. */
        const struct hp_ftmon *ft;
        /* A stop that waited for the report (hp_forensics_defer_stop)
         * may go now; stage and attempt are the report's, for the
         * supervisor to check that the same group still runs. */
        void (*stop)(void *ctx, int sig, uint64_t timeout_ms, int stage,
                     int attempt);
        void *ctx;
};

/* One worker of the attempt, as it is now. */
struct hp_forensics_rank {
        int local_rank;
        int rank;          /* global; negative: not known yet */
        pid_t pid;         /* 0: it never started */
        const char *state; /* "running", "exited"...; borrowed */
        uint64_t last_ms;  /* loop ms: its last output, or its start */
        bool wrote;        /* it wrote anything at all */
        bool done;         /* exited and drained: nothing to look at */
        bool exited;
        int exit_code;    /* when exited by itself */
        int exit_signal;  /* when a signal ended it */
        double exit_wall; /* when it exited, wall clock seconds */
};

/* The attempt a report or a silence line is about. Everything is read
 * during the call. */
struct hp_forensics_attempt {
        int stage; /* the supervisor's, handed back */
        const char *stage_name;
        int attempt;     /* its restart count */
        const char *dir; /* its directory; "": no files */
        int dirfd;       /* dir, open; -1: none */
        /* The verdict that asked for the report: its reason ("" on
         * request), rule and local rank. */
        const char *verdict_reason;
        const char *verdict_rule;
        int verdict_local_rank;
        const struct hp_forensics_rank *ranks;
        int count;
};

/* Makes the collector and, for --hang-dump with log files, the
 * sitecustomize.py the workers' PYTHONPATH loads (and removes what dead
 * agents left in $TMPDIR). A config error is HP_ECONFIG with errbuf
 * saying why; *out is set either way unless -ENOMEM. */
int hp_forensics_new(const struct hp_forensics_params *p,
                     struct hp_forensics **out, char *errbuf, size_t errlen);
/* Stops collecting, removes the sitecustomize directory; the memory goes
 * once the loop has run. NULL is ignored. */
void hp_forensics_close(struct hp_forensics *f);
/* The workers' PYTHONPATH and stacks signal (for their environment), or
 * NULL without --hang-dump. */
const char *hp_forensics_python_path(const struct hp_forensics *f);
const char *hp_forensics_stacks_signal(const struct hp_forensics *f);
/* With --hang-dump full and log files: the prefixes of torch's flight
 * recorder trigger pipes and dump files for the workers of an attempt
 * whose directory is attempt_dir (the user's
 * TORCH_NCCL_DEBUG_INFO_PIPE_FILE and TORCH_FR_DUMP_TEMP_FILE or
 * TORCH_NCCL_DEBUG_INFO_TEMP_FILE where set, else ours), each of len
 * bytes; false when the flight recorder is not asked for. */
bool hp_forensics_fr_prefixes(const struct hp_forensics *f,
                              const char *attempt_dir, char *pipe, char *dump,
                              size_t len);
/* The flight recorder's ring size we give the workers, unless they have
 * their own TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE: torch's
 * documented example. */
#define HP_FR_BUFFER_SIZE "2000"
/* Puts the attempt's silence line, as of event ("the verdict"), in the
 * collector and logs it; no ranks clears it. */
void hp_forensics_note_silence(struct hp_forensics *f,
                               const struct hp_forensics_attempt *at,
                               const char *event);
/* The latest silence line, or "". */
const char *hp_forensics_silence(const struct hp_forensics *f);
void hp_forensics_clear_silence(struct hp_forensics *f);
/* Starts a report on the attempt (a verdict's, or on_request for
 * SIGUSR2): 0 while it is collected, -ENOTSUP with --hang-dump off,
 * -EBUSY while another is, -ESRCH without ranks. */
int hp_forensics_begin(struct hp_forensics *f,
                       const struct hp_forensics_attempt *at,
                       bool on_request);
/* The path the next report on request gets in dir; -EBUSY while one is
 * collected, -ENOTSUP with --hang-dump off. */
int hp_forensics_request_path(const struct hp_forensics *f, const char *dir,
                              char *path, size_t len);
/* While a report is collected, a stop of the group waits for it: true
 * when the stop was taken, to be sent through the stop callback. */
bool hp_forensics_defer_stop(struct hp_forensics *f, int sig,
                             uint64_t timeout_ms);

#endif
