/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside src/forensics only. */
#ifndef HP_FORENSICS_PRIVATE_H
#define HP_FORENSICS_PRIVATE_H

#include <limits.h>
#include <time.h>

#include "hp-sys.h"
#include "hyperpod/forensics.h"

struct cJSON;
struct hp_forensics_target;
struct hp_nccl_ras;

/* A hang report being collected: the /proc states are read at once, the
 * Python stacks are waited for on a timer, at most --hang-dump-timeout. */
struct hp_forensics {
        struct hp_forensics_params p;
        bool open; /* made, not yet closed */
        uv_timer_t timer;
        bool busy;
        bool stop_pending; /* stop the group once the report is out */
        int stop_signal;
        uint64_t stop_timeout_ms;
        uint64_t started;  /* loop ms */
        uint64_t deadline; /* loop ms */
        bool on_request;   /* SIGUSR2, not a verdict */
        unsigned requests; /* reports written on request */
        /* The latest HP_STACKS_REPORTS_KEPT of them, a ring at
         * requests % HP_STACKS_REPORTS_KEPT ("": none). */
        char kept[HP_STACKS_REPORTS_KEPT][PATH_MAX];
        /* The verdict that asked for it ("" on request). */
        char reason[256];
        char rule[256];
        int verdict_local_rank;
        char silence[512];         /* the latest silence line, or "" */
        char python_dir[PATH_MAX]; /* holds our sitecustomize.py, or "" */
        /* python_dir, open and flock()ed for as long as we live: how a
         * later agent tells a dead agent's directory from a live one's. */
        int python_dir_fd;
        char *python_path;       /* the workers' PYTHONPATH, or NULL */
        char stacks_signal[16];  /* its number, for the workers' env */
        struct hp_nccl_ras *ras; /* the NCCL RAS query, or NULL */
        /* The attempt being reported on. */
        int stage;
        char stage_name[32];
        int attempt;
        char dir[PATH_MAX]; /* "": no files */
        int dirfd;          /* a copy of the attempt's; -1 */
        struct hp_forensics_target *targets;
        int count;
};

/* What faulthandler is registered for in the workers: a real-time signal,
 * so that it cannot collide with a script's own SIGUSR1 or SIGUSR2
 * handler, and which is only ever sent once the handler is known to be in
 * place. */
#define STACKS_SIGNAL_OFFSET 6

/* ---- The workers' sitecustomize.py (python.c) ---- */

/* Removes the Python directories in tmp that provably dead agents left. */
void hp_forensics__remove_stale(const char *tmp);
/* Writes sitecustomize.py into a private directory of tmp, removed at
 * close, and builds the workers' PYTHONPATH with it first. */
int hp_forensics__prepare_python(struct hp_forensics *f, const char *tmp,
                                 char *errbuf, size_t errlen);

/* The threads of pid, at most 512, as a JSON array of {tid, comm, state,
 * wchan} (and kernel_stack when asked for); an empty array when the
 * process is gone, NULL only without memory. */
struct cJSON *hp_proc__threads(pid_t pid, bool kernel_stacks);

/* ---- torch's NCCL flight recorder in a hang report (nccl_fr.c) ---- */

/* One rank's dump; zero-initialise, then hp_nccl_fr__free. */
struct hp_nccl_fr {
        const char *status; /* NULL: not asked for */
        char *pipe;
        char *dump;
        struct timespec mtime; /* the dump as it was before the ask */
        off_t size;
        off_t seen;
        bool waiting;
};

/* Asks rank's ProcessGroupNCCL for its flight recorder through the pipe
 * pipe_prefix<rank>.pipe, the dump to come in dump_prefix<rank>. */
void hp_nccl_fr__ask(struct hp_nccl_fr *fr, int rank, const char *pipe_prefix,
                     const char *dump_prefix);
/* Looks at the dump again: true while it is still awaited. */
bool hp_nccl_fr__poll(struct hp_nccl_fr *fr);
/* Adds "nccl_flight_recorder" to a rank's object o, when it was asked. */
void hp_nccl_fr__report(const struct hp_nccl_fr *fr, struct cJSON *o);
void hp_nccl_fr__free(struct hp_nccl_fr *fr);

/* ---- NCCL's RAS in a hang report (nccl_ras.c) ---- */

/* Starts the query on loop: NCCL_RAS_ADDR from our environment (which the
 * workers inherit), else NCCL's default port on this host. NULL when the
 * environment turns RAS off, or without memory. */
struct hp_nccl_ras *hp_nccl_ras__begin(uv_loop_t *loop);
/* True while the answer is awaited (false for NULL). */
bool hp_nccl_ras__waiting(const struct hp_nccl_ras *q);
/* Adds "nccl_ras" to doc unless doc is NULL (the answer, or why there is
 * none) and lets the query go; q is freed once its socket is closed.
 * NULL is ignored. */
void hp_nccl_ras__end(struct hp_nccl_ras *q, struct cJSON *doc);

#endif
