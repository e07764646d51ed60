/* hyperpodrun: spawning, teeing, stopping and reaping the job's processes. */
#ifndef HYPERPOD_SUPERVISE_H
#define HYPERPOD_SUPERVISE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "hyperpod/config.h"
#include "hyperpod/ipc.h"
#include "hyperpod/kmsg.h"
#include "hyperpod/preflight.h"
#include "hyperpod/logmon.h"
#include "hyperpod/rendezvous.h"
#include "hyperpod/stream.h"

/* TORCHELASTIC_MAX_RESTARTS in operator mode: torch's WorkerSpec default,
 * which the reference agent's workers always see (it never passes
 * --max-restarts on). */
#define HP_OPERATOR_MAX_RESTARTS 3

enum hp_stage {
        HP_STAGE_PRE_TRAIN = 0,
        HP_STAGE_TRAIN,
        HP_STAGE_POST_TRAIN,
        HP_STAGE_COUNT
};

const char *hp_stage_name(enum hp_stage stage);

/* ---- The worker environment (pure, for tests) ---- */

struct hp_env_params {
        int local_rank;
        int rank;
        int group_rank;
        int local_world_size;
        int world_size;
        int group_world_size;
        const char *role;
        const char *master_addr;
        int master_port;
        int restart_count;
        int max_restarts;
        const char *run_id;
        const char *error_file; /* "" when there are no files */
        const char *ipc_path;   /* the worker socket */
        /* --hang-dump: the PYTHONPATH that loads hyperpodrun's
         * sitecustomize, and the signal it registers; NULL: not set. */
        const char *python_path;
        const char *stacks_signal;
        /* --hang-dump full: torch's NCCL flight recorder variables;
         * NULL: not set (the user's own, if any, are kept). */
        const char *fr_buffer_size;
        const char *fr_pipe_file;
        const char *fr_dump_file;
};

/* A whole envp, owned by the struct: the inherited environment with every
 * variable hyperpodrun sets replaced. */
struct hp_envbuf {
        char **envp;
        char *strings;
};

int hp_env_build(const struct hp_env_params *p, char *const *inherited,
                 struct hp_envbuf *out);
void hp_env_free(struct hp_envbuf *env);
/* Looks a variable up in an envp. */
const char *hp_env_get(char *const *envp, const char *name);

/* The worker's argv as torchrun builds it, with ${local_rank} replaced.
 * Owned by the struct. */
struct hp_argv {
        char **argv;
        int argc;
        char *strings;
};

int hp_argv_build_worker(const struct hp_config *cfg, int local_rank,
                         struct hp_argv *out);
/* A hook: the script and, when given, its one opaque argument. */
int hp_argv_build_hook(const char *script, const char *args,
                       struct hp_argv *out);
void hp_argv_free(struct hp_argv *a);

/* ---- Processes ---- */

enum hp_worker_state {
        HP_WORKER_RUNNING = 0, /* spawned, not yet exited */
        HP_WORKER_STOPPING,    /* the stop signal was sent */
        HP_WORKER_KILLING,     /* SIGKILL was sent */
        HP_WORKER_EXITED,      /* exit seen; waiting for EOF on its pipes */
        HP_WORKER_DONE,        /* exited, pipes drained, handles closed */
};

const char *hp_worker_state_name(enum hp_worker_state state);

/* Where a worker that never ran failed (its failure names the path and
 * the error). */
enum hp_start_step {
        HP_START_NONE = 0,
        HP_START_LOG_DIR,     /* its log directory, attempt_N/<rank> */
        HP_START_STDOUT_FILE, /* stdout.log */
        HP_START_STDERR_FILE, /* stderr.log */
        HP_START_PIPE,        /* its output pipes */
        HP_START_PROCESS,     /* its environment, argv or process */
        HP_START_WATCH,       /* watching its process */
        HP_START_EXEC,        /* the program's exec: it exits 126 or 127 */
};

struct hp_group;

struct hp_worker {
        struct hp_group *group;
        uv_poll_t exit_poll; /* on pidfd, readable once the process exited */
        int pidfd;
        struct hp_stream out;
        struct hp_stream err;
        enum hp_worker_state state;
        int refs; /* the exit watch plus each open pipe */
        int local_rank;
        int rank;
        pid_t pid;
        int64_t exit_status;
        int term_signal;
        bool signalled; /* we signalled it before it exited */
        int start_error; /* -errno when it never ran, else 0 */
        enum hp_start_step start_step;
        double exit_time; /* wall clock, seconds */
        char dir[PATH_MAX];
        char error_file[PATH_MAX];
};

enum hp_group_result {
        HP_GROUP_SUCCEEDED = 0,
        HP_GROUP_FAILED,  /* a process exited non-zero on its own */
        HP_GROUP_STOPPED, /* hp_group_stop was called first */
};

/* Where the processes of the agent's groups are kept track of (scope.c):
 * D/hyperpodrun.<pid>, a cgroup v2 child of the agent's cgroup D, when
 * the hierarchy is writable; otherwise among the agent's descendants. */
struct hp_scope_root {
        int dirfd;           /* D/hyperpodrun.<pid>, or -1: no cgroup */
        char path[PATH_MAX]; /* "" without one */
};

/* One group's processes: its cgroup under the root, or (dirfd -1) the
 * agent's descendants. */
struct hp_scope {
        struct hp_scope_root *root;
        int dirfd;
        char name[64];
};

/* What kills the job if the agent is killed (watcher.c). */
struct hp_watcher {
        pid_t pid; /* 0: none (PID 1, or it could not start) */
        int fd;    /* the agent's end of its pipe */
        int pidfd; /* to wait for its exit; -1 */
};

/* How far a stop has gone; see group.c. */
enum hp_kill_phase {
        HP_KILL_NONE = 0,
        HP_KILL_SIGNALLED, /* the stop signal was sent */
        HP_KILL_KILLED,    /* SIGKILL to everything the group started */
        HP_KILL_FORCED,    /* held pipes closed; survivors named */
        HP_KILL_GAVE_UP,   /* not waiting for survivors any more */
};

/* The processes of one stage: nproc workers, or the one hook process. */
struct hp_group {
        struct hp_agent *agent;
        enum hp_stage stage;
        struct hp_worker *workers;
        int count;
        int exited;
        int done;
        bool stopping;
        bool stop_requested; /* hp_group_stop, not a failure */
        bool reported;       /* done_cb was called */
        bool escaped_logged;
        int stop_signal;
        enum hp_kill_phase kill_phase;
        struct hp_scope scope;
        struct hp_worker *first_failure;
        bool pipe_limits; /* the user's pipe memory limits apply to us */
        uv_timer_t timer;
        void (*done_cb)(struct hp_group *group, enum hp_group_result result);
};

/* ---- Hang forensics (silence.c, forensics.c) ---- */

/* One rank's last output, for the silence line. */
struct hp_silence {
        int rank;         /* global rank */
        uint64_t last_ms; /* loop clock: its last output, or its start */
};

/* Ranks that went quiet closer together than this are not told apart:
 * reads are paced (HP_READ_PACE_MS), and ranks in lockstep print within a
 * few milliseconds of each other. */
#define HP_SILENCE_TIE_MS 50

/*
 * The silence line: sorts ranks in place by their last output and names
 * the first to go quiet, how long before the verdict and the others, then
 * the others, e.g. "rank 3 silent since 10:42:01.120 (63.2 s before the
 * verdict, 2.9 s before the others); ranks 0-2,4-7 silent since
 * 10:42:04.010 (blocked in a collective?)". event names the moment
 * ("the verdict"); now_ms is that moment on the same clock as the ranks'
 * times, now_wall the wall clock (seconds since
 * the epoch) at that moment; times are printed in local time. Returns 0,
 * or -ENOSPC when the line did not fit (it then ends in "...").
 */
int hp_silence_format(struct hp_silence *ranks, size_t count, uint64_t now_ms,
                      double now_wall, const char *event, char *buf,
                      size_t len);

struct hp_forensics_target;

/* A hang report being collected: the /proc states are read at once, the
 * Python stacks are waited for on a timer, at most --hang-dump-timeout. */
struct hp_forensics {
        struct hp_agent *agent;
        uv_timer_t timer;
        bool busy;
        bool stop_pending;      /* stop the group once the report is out */
        int stop_signal;
        uint64_t stop_timeout_ms;
        uint64_t started;       /* loop ms */
        uint64_t deadline;      /* loop ms */
        bool on_request;        /* SIGUSR2, not a verdict */
        unsigned requests;      /* reports written on request */
        char verdict[512];      /* a copy of the agent's, or "" */
        char silence[512];      /* the latest silence line, or "" */
        char python_dir[PATH_MAX]; /* holds our sitecustomize.py, or "" */
        char *python_path;      /* the workers' PYTHONPATH, or NULL */
        char stacks_signal[16]; /* its number, for the workers' env */
        struct hp_forensics_ras *ras; /* the NCCL RAS query, or NULL */
        enum hp_stage stage;    /* of the group being reported on */
        int attempt;
        struct hp_forensics_target *targets;
        int count;
};

/* ---- The agent ---- */

/* The rules watching one local rank's stdout. The same monitor sees that
 * rank in every stage (pre-train and post-train count as rank 0), so the
 * stages share rule state, as in the reference. */
struct hp_monitor {
        struct hp_agent *agent;
        struct logmon_stream *rules; /* NULL: this rank is not watched */
        int local_rank;
        /* Its rule thread in a flood: agent->rule_workers[worker_slot].
         * Kept rather than computed per line, which took a division. */
        int worker_slot;
};

enum hp_agent_state {
        HP_AGENT_IDLE = 0,
        HP_AGENT_RUNNING,
        HP_AGENT_STOPPING,
        HP_AGENT_FINISHED,
};

/*
 * How an outside driver (the operator API) follows the agent instead of
 * the self-driven attempt loop. Both run on the loop thread.
 */
struct hp_agent_events {
        /* A stage's group ended. g is valid for the call only (it is
         * released after); start nothing from inside the callback. Not
         * called when a signal to the agent stopped the group: the agent
         * then exits with 128+N. */
        void (*stage_ended)(struct hp_agent *a, enum hp_stage stage,
                            enum hp_group_result result,
                            const struct hp_group *g, void *ctx);
        /* A log rule turned SLOW, HANGING or FAULTED: a->verdict names it,
         * a->verdict_latency_ms says how long after its deadline. The
         * workers keep running. */
        void (*rule_verdict)(struct hp_agent *a, void *ctx);
        /* A process of the running group exited non-zero on its own: the
         * group's first failure (g->first_failure). The rest of the group
         * is being stopped with --shutdown-signal. */
        void (*worker_failed)(struct hp_agent *a, const struct hp_group *g,
                              void *ctx);
        /* A permanent kernel log rule matched: a->health.fault names it
         * ("NodeFault_<reason>"), a->health.fault_line is the kernel's
         * line. The workers keep running. */
        void (*node_fault)(struct hp_agent *a, void *ctx);
        /* --preflight passed: workers may start. */
        void (*preflight_passed)(struct hp_agent *a, void *ctx);
};

/* ---- Node health (health.c): the kernel log and what a fault does ---- */

struct hp_node_health {
        struct hp_agent *agent;
        struct kmsg_watch watch;
        bool watching;
        char fault[256];        /* "NodeFault_<reason>", or "" */
        char fault_line[1024];  /* the kernel's line(s) */
        double fault_wall;      /* when it was read, wall clock seconds */
        uint64_t temporary;     /* temporary rules' hits */
        /* --node-fault-action: scontrol, bounded by scontrol_timeout. */
        uv_process_t action_proc;
        uv_timer_t action_timer;
        bool action_running;
        bool action_timer_ready;
        bool finish_pending;    /* exit once the action has ended */
        char action_result[256]; /* "" until it ran */
        /* --preflight nccl */
        struct hp_preflight preflight;
        bool preflight_running;
        bool preflight_finished;
        struct hp_preflight_result preflight_result;
};

/* Exit status of a self-driven run stopped by a node fault. */
#define HP_EXIT_NODE_FAULT 123

/* Threads the log rules may use under a flood (see ruleworker.c): one per
 * core, up to this many, and no more than the watched ranks. */
#define HP_RULE_WORKERS_MAX 4

struct hp_agent {
        uv_loop_t *loop;
        const struct hp_config *cfg;
        struct hp_rdzv rdzv;
        struct hp_rdzv_info round;
        struct hp_console console_out;
        struct hp_console console_err;
        /* Where workers' stderr and the agent's messages go: console_out
         * when fds 1 and 2 are one file or pipe, whose two writer threads
         * could otherwise cut each other's lines. */
        struct hp_console *console_for_err;
        uint64_t console_reported[2];           /* lines lost, as logged */
        struct hp_stream_hub stream_hub; /* batches the streams' writes */
        uv_signal_t signals[6];
        uv_signal_t sigchld;
        struct hp_group group;
        struct hp_scope_root scopes;
        struct hp_watcher watcher;
        enum hp_agent_state state;
        enum hp_stage stage;
        int restart_count;
        int exit_code;
        int received_signal;
        bool group_active;
        bool no_files;
        char hostname[256];
        char log_root[PATH_MAX];
        const struct hp_agent_events *events;   /* NULL: self-driven */
        void *events_ctx;
        struct logmon_ruleset *cli_ruleset;     /* --log-monitoring-config */
        struct logmon_ruleset *ruleset;         /* in use; NULL: no rules */
        struct hp_monitor *monitors;            /* one per local rank */
        uv_timer_t rule_timer;                  /* the earliest deadline */
        uint64_t rule_deadline;                 /* armed for, or UINT64_MAX */
        bool monitors_fresh;                    /* cleared, not yet started */
        /* Rule threads for floods, local rank r on worker r % count; each
         * NULL until its first flood. */
        struct hp_rule_worker *rule_workers[HP_RULE_WORKERS_MAX];
        int rule_worker_count;
        uv_async_t rule_wake;                   /* from the rule worker */
        uv_check_t rule_check;                  /* once per loop iteration */
        unsigned rule_inline;                   /* lines this iteration */
        uint64_t rule_inline_start;             /* uv_hrtime() of the first */
        uint64_t rule_inline_off_until;         /* loop ms: none inline */
        uint64_t rule_report_at;                /* loop ms: next look */
        uint64_t rule_skipped_reported;         /* lines the rules missed */
        uint64_t rule_limit_reported;           /* PCRE2 limit hits */
        bool rule_worker_failed;                /* could not start one */
        char verdict[512];                      /* "LogHang_<rule>", or "" */
        char verdict_line[512];                 /* its last matching line */
        uint64_t verdict_latency_ms;            /* past the deadline */
        int verdict_rank;                       /* local rank it is on */
        char run_dir[HP_STAGE_COUNT][PATH_MAX]; /* "" when the stage is off */
        char attempt_dir[HP_STAGE_COUNT][PATH_MAX];
        /* The last failure's root cause, for TORCHELASTIC_ERROR_FILE: its
         * error file ("" when it wrote none), torch's exitcode (-N for a
         * signal) and the exit status it gives the agent. */
        char root_error_file[PATH_MAX];
        int root_exitcode;
        int root_exit_status;
        /* The worker socket: lives as long as the agent, so checkpoint
         * progress outlives every restart of the workers. */
        struct hp_ipc_server ipc;
        struct hp_forensics forensics;          /* --hang-dump */
        struct hp_node_health health;           /* --node-problem-config */
};

/* When the agent's own environment has TORCHELASTIC_ERROR_FILE and it
 * exits with exit_code because a worker failed, copies the root cause's
 * error file there with message.errorCode set to its exit code, as
 * torchrun's @record does for nested launchers and schedulers. */
void hp_agent_pass_error_file(const struct hp_agent *agent, int exit_code);

/*
 * Prepares everything that can fail before a process is spawned: the log
 * directories, the consoles, the signal handlers, the subreaper flag. On
 * failure errbuf says why and nothing is left running.
 */
int hp_agent_init(struct hp_agent *agent, uv_loop_t *loop,
                  const struct hp_config *cfg, char *errbuf, size_t errlen);

/* Self-driven mode: run attempts until success, a failure with no restarts
 * left, or a stop signal. Returns the process exit status. */
int hp_agent_run(struct hp_agent *agent);

/* ---- Driving the agent from outside (operator mode) ---- */

void hp_agent_set_events(struct hp_agent *agent,
                         const struct hp_agent_events *events, void *ctx);
/* Starts an attempt with this rendezvous round and restart count: the
 * first enabled stage. Returns 0, or an error with the reason logged. */
int hp_agent_begin(struct hp_agent *agent, const struct hp_rdzv_info *round,
                   int restart_count);
/* Starts the stage after the one that just ended: 1 when one started, 0
 * when none is left, or an error. */
int hp_agent_next_stage(struct hp_agent *agent);
/* Stops the running group: sig to every process group, SIGKILL after
 * timeout_ms. Returns false when nothing runs. */
bool hp_agent_stop_workers(struct hp_agent *agent, int sig,
                           uint64_t timeout_ms);
bool hp_agent_workers_active(const struct hp_agent *agent);
/* GET /debug/stacks: starts the report SIGUSR2 starts, without signalling
 * the workers; 0 with the file it will be written to in path. -ENOTSUP
 * with --hang-dump off, -ENOENT without log files, -ESRCH when no group
 * runs, -EBUSY while a report is collected. */
int hp_agent_stacks_report(struct hp_agent *agent, char *path, size_t len);
/* Ends the loop; hp_agent_run or the driver returns exit_code. */
void hp_agent_finish(struct hp_agent *agent, int exit_code);
/* Watches the next attempt with rs (a reference is taken), or with the
 * --log-monitoring-config rules when rs is NULL. Rule state starts
 * fresh. */
int hp_agent_use_rules(struct hp_agent *agent, struct logmon_ruleset *rs);
/* Forgets all rule state (the attempt is over). */
void hp_agent_clear_rules(struct hp_agent *agent);
/* Waits until every line read so far has been through the rules (they may
 * run on a thread of their own under a flood), or was skipped and counted
 * once the wait's budget ran out, so that the rule streams can be read. */
void hp_agent_settle_rules(struct hp_agent *agent);
/* Monitored lines the rules never saw because they fell behind. */
uint64_t hp_agent_rule_lines_skipped(const struct hp_agent *agent);
/* One line per failed process, "Local Rank <i> (rank <r>) exited with
 * code <c>: <message>", under a heading: the operator's fault message. */
int hp_agent_failure_message(const struct hp_agent *agent,
                             const struct hp_group *g, char *buf, size_t len);
/* The exit status the group's first failure asks for. */
int hp_agent_failure_exit_code(const struct hp_group *g);

/* Operator mode: starts --preflight nccl; workers wait for it
 * (hp_agent_preflight_pending). Returns 0, or an error in errbuf. */
int hp_agent_preflight_start(struct hp_agent *agent, char *errbuf,
                             size_t len);
bool hp_agent_preflight_pending(const struct hp_agent *agent);

/* Closes every handle; the loop can then be closed. */
void hp_agent_close(struct hp_agent *agent);

/* ---- In-process restart (inprocess.c) ---- */

/* Stops the running stage's rules from watching: lines are ignored and
 * the clocks stop, every rule keeps its state. */
void hp_agent_suspend_rules(struct hp_agent *agent);
/* Watches again: fresh rules (hp_agent_use_rules) start their clocks,
 * suspended ones continue without counting the time they were off. */
void hp_agent_resume_rules(struct hp_agent *agent);
/* The stage of the group started last. */
enum hp_stage hp_agent_stage(const struct hp_agent *agent);
/* A stop of the running group is under way. */
bool hp_agent_workers_stopping(const struct hp_agent *agent);
/* The worker socket, which lives as long as the agent. */
struct hp_ipc_server *hp_agent_ipc(struct hp_agent *agent);

#endif
