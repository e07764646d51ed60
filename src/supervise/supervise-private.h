/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside src/supervise only. */
#ifndef HP_SUPERVISE_PRIVATE_H
#define HP_SUPERVISE_PRIVATE_H

#include "hp-sys.h"
#include "hyperpod/forensics.h"
#include "hyperpod/ftmon.h"
#include "hyperpod/supervise.h"

/* ---- Processes ---- */

enum hp_worker_state {
        HP_WORKER_RUNNING = 0, /* spawned, not yet exited */
        HP_WORKER_STOPPING,    /* the stop signal was sent */
        HP_WORKER_KILLING,     /* SIGKILL was sent */
        HP_WORKER_EXITED,      /* exit seen; waiting for EOF on its pipes */
        HP_WORKER_DONE,        /* exited, pipes drained, handles closed */
};

const char *hp_worker__state_name(enum hp_worker_state state);

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
        bool signalled;  /* we signalled it before it exited */
        int start_error; /* -errno when it never ran, else 0 */
        enum hp_start_step start_step;
        double exit_time; /* wall clock, seconds */
        char dir[PATH_MAX];
        char error_file[PATH_MAX];
        int dir_fd; /* dir, open while the worker is started; else -1 */
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
        enum hp_stage stage;
        struct hp_worker *workers;
        int count;
        int exited;
        int done;
        bool stopping;
        bool stop_requested; /* hp_group__stop, not a failure */
        bool reported;       /* done_cb was called */
        bool escaped_logged;
        int stop_signal;
        enum hp_kill_phase kill_phase;
        struct hp_scope scope;
        struct hp_worker *first_failure;
        bool pipe_limits; /* the user's pipe memory limits apply to us */
        /* The training workers' filtered copies, stdout and stderr
         * (--duplicate-*-filters), or NULL. */
        struct hp_dup *dups;
        uv_timer_t timer;
        /* From hp_group_params; see there. */
        const struct hp_config *cfg;
        struct hp_watcher *watcher;
        void (*exited_cb)(void *ctx);
        void (*failed_cb)(struct hp_group *group, void *ctx);
        void (*done_cb)(struct hp_group *group, enum hp_group_result result,
                        void *ctx);
        void *ctx;
};

/* ---- The log rule watch (rulewatch.c, ruleworker.c) ---- */

/* Threads the log rules may use under a flood (see ruleworker.c): one per
 * core, up to this many, and no more than the watched ranks. */
#define HP_RULE_THREADS_MAX 4

struct hp_rulewatch;
struct hp_rule_thread;

/* One local rank's stdout under the rules: the context of its line
 * listener. The same rank is watched in every stage (pre-train and
 * post-train count as rank 0), so the stages share rule state, as in the
 * reference. */
struct hp_rulewatch__rank {
        struct hp_rulewatch *watch;
        struct logmon_stream *stream; /* NULL: this rank is not watched */
        int local_rank;
        /* Its rule thread in a flood: watch->threads[thread_slot]. Kept
         * rather than computed per line, which takes a division. */
        int thread_slot;
};

/* What the watch is started with; the callbacks run on the loop thread. */
struct hp_rulewatch_params {
        uv_loop_t *loop;
        int nproc;              /* local ranks */
        const bool *monitored;  /* nproc flags, borrowed for the watch's
                                  * life: --log-monitor-ranks */
        const char *rules_path; /* --log-monitoring-config, or NULL */
        bool strict;            /* --strict, for rules_path */
        /* Reads what the workers' pipes hold now: a line written before a
         * deadline must not be judged missing for sitting in a pipe. */
        void (*read_now)(void *ctx);
        /* Writes out the console lines queued so far, so that the line
         * that made a verdict comes before the verdict's log line. */
        void (*commit_output)(void *ctx);
        /* The attempt's verdict; v is borrowed for the call. The workers
         * keep running; the rules keep watching. */
        void (*on_verdict)(void *ctx, const struct hp_verdict *v);
        void *ctx;
};

/*
 * The log rules on the workers' stdout: the glue between the pure rule
 * engine (src/logmon) and the loop. It feeds each watched rank's lines to
 * its rule stream with the loop's time (on the loop thread, or on a rule
 * thread under a flood), keeps one timer armed at the earliest deadline,
 * and reports the first verdict of an attempt through on_verdict.
 */
struct hp_rulewatch {
        uv_loop_t *loop;
        int nproc;
        const bool *monitored;
        void (*read_now)(void *ctx);
        void (*commit_output)(void *ctx);
        void (*on_verdict)(void *ctx, const struct hp_verdict *v);
        void *ctx;
        int64_t wall_offset_ms;             /* epoch ms minus loop ms */
        int base_rank;                      /* global rank of local rank 0 */
        struct logmon_ruleset *cli_ruleset; /* --log-monitoring-config */
        struct logmon_ruleset *ruleset;     /* in use; NULL: no rules */
        struct hp_rulewatch__rank *ranks;   /* one per local rank */
        uv_timer_t timer;                   /* the earliest deadline */
        uint64_t deadline;                  /* armed for, or UINT64_MAX */
        bool fresh;                         /* cleared, not yet started */
        /* Rule threads for floods, local rank r on thread r % count; each
         * NULL until its first flood. */
        struct hp_rule_thread *threads[HP_RULE_THREADS_MAX];
        int thread_count;
        uv_async_t wake;           /* from the rule threads */
        uv_check_t check;          /* once per loop iteration */
        unsigned inline_lines;     /* lines this iteration */
        uint64_t inline_start;     /* uv_hrtime() of the first */
        uint64_t inline_off_until; /* loop ms: none inline */
        uint64_t report_at;        /* loop ms: next look */
        uint64_t skipped_reported; /* lines the rules missed */
        uint64_t limit_reported;   /* PCRE2 limit hits */
        bool thread_failed;        /* could not start one */
        bool judged;               /* verdict holds this attempt's */
        struct hp_verdict verdict;
};

/* Loads the rules file if any and prepares one rank slot per local rank
 * (the operator may send rules later). On failure errbuf says why; the
 * watch must be closed either way. */
int hp_rulewatch__init(struct hp_rulewatch *w,
                       const struct hp_rulewatch_params *p, char *errbuf,
                       size_t errlen);
/* The wall clock for the watch's log lines and verdicts: epoch ms minus
 * loop ms, the consoles' own (hp_stream_hub.wall_offset_ms). */
void hp_rulewatch__set_wall_offset(struct hp_rulewatch *w,
                                   int64_t wall_offset_ms);
/* Watches the next attempt with rs (a reference is taken), or with the
 * rules file's when rs is NULL. Rule state starts fresh. */
int hp_rulewatch__use(struct hp_rulewatch *w, struct logmon_ruleset *rs);
/* Forgets all rule state and the verdict (the attempt is over). */
void hp_rulewatch__clear(struct hp_rulewatch *w);
/* A stage's processes run: the first stage after a clear starts the rule
 * clocks, later ones resume them. base_rank: the global rank of local
 * rank 0 in this round. */
void hp_rulewatch__resume(struct hp_rulewatch *w, int base_rank);
/* Between stages and while stopped, time does not count. */
void hp_rulewatch__suspend(struct hp_rulewatch *w);
/* Applies the rules' deadlines at now (loop ms), as the watch's timer
 * does once it has read the pipes: a verdict it brings is reported with
 * its lateness past the armed deadline. */
void hp_rulewatch__tick(struct hp_rulewatch *w, uint64_t now);
/* Waits until every line read so far has been through the rules, or was
 * skipped and counted once the wait's budget ran out. */
void hp_rulewatch__settle(struct hp_rulewatch *w);
/* Monitored lines the rules never saw because they fell behind. */
uint64_t hp_rulewatch__lines_skipped(const struct hp_rulewatch *w);
/* The listener context for local rank's stdout, or NULL when no rule
 * watches it. */
struct hp_rulewatch__rank *hp_rulewatch__rank(struct hp_rulewatch *w,
                                              int local_rank);
/* The line listener (struct hp_stream's) for a hp_rulewatch__rank. */
void hp_rulewatch__line_cb(void *ctx, const char *line, size_t len,
                           enum hp_line_end end);
/* The rules in use, or NULL; and local rank's rule stream, or NULL. Read
 * them only after hp_rulewatch__settle, on the loop thread. */
const struct logmon_ruleset *
hp_rulewatch__ruleset(const struct hp_rulewatch *w);
const struct logmon_stream *hp_rulewatch__stream(const struct hp_rulewatch *w,
                                                 int local_rank);
/* Reports what the rules missed, stops the threads, frees everything and
 * closes the handles (the loop must run once for them). */
void hp_rulewatch__close(struct hp_rulewatch *w);

/* ---- Node health (health.c): the kernel log and what a fault does ---- */

struct hp_node_health {
        struct hp_agent *agent;
        struct kmsg_watch watch;
        bool watching;
        char fault[256];       /* "NodeFault_<reason>", or "" */
        char fault_line[1024]; /* the kernel's line(s) */
        double fault_wall;     /* when it was read, wall clock seconds */
        uint64_t temporary;    /* temporary rules' hits */
        /* --node-fault-action: scontrol, bounded by scontrol_timeout. */
        uv_process_t action_proc;
        uv_timer_t action_timer;
        bool action_running;
        bool action_timer_ready;
        bool finish_pending;     /* exit once the action has ended */
        char action_result[256]; /* "" until it ran */
        /* --preflight nccl */
        struct hp_preflight preflight;
        bool preflight_running;
        bool preflight_finished;
        struct hp_preflight_result preflight_result;
};

struct hp_agent {
        uv_loop_t *loop;
        const struct hp_config *cfg;
        struct hp_agent_setup setup; /* from main's choice of driver */
        struct hp_rdzv rdzv;
        struct hp_rdzv_info round;
        struct hp_console *console_out; /* owned */
        struct hp_console *console_err; /* owned */
        /* Where workers' stderr and the agent's messages go: console_out
         * when fds 1 and 2 are one file or pipe, whose two writer threads
         * could otherwise cut each other's lines. */
        struct hp_console *console_for_err;
        uint64_t console_reported[2];     /* lines lost, as logged */
        struct hp_stream_hub *stream_hub; /* batches the streams' writes */
        uv_signal_t signals[6];
        uv_signal_t sigchld;
        struct hp_group group;
        struct hp_scope_root scopes;
        struct hp_watcher watcher;
        enum hp_agent_state state;
        enum hp_stage stage;
        int restart_count;
        int exit_code;
        int received_signal; /* the signal that stops it (STOPPING) */
        int signal_at_start; /* a stop sent before the handlers existed */
        /* Self-driven, coordinated rounds: another node ended this round
         * (enum hp_rdzv_end + 1; 0: not), and the rounds that ended in a
         * failure, which --max-restarts counts. */
        int round_ended;
        int failed_rounds;
        bool verdict_report; /* a hang report was started for the verdict */
        bool no_files;
        char hostname[256];
        char log_root[PATH_MAX];
        const struct hp_agent_events *events; /* the driver's; never NULL */
        void *events_ctx;
        struct hp_rulewatch rules; /* the log rules */
        struct hp_verdict verdict; /* this attempt's; state WAITING: none */
        char run_dir[HP_STAGE_COUNT][PATH_MAX]; /* "" when the stage is off */
        char attempt_dir[HP_STAGE_COUNT][PATH_MAX];
        /* The same directories, open: everything the agent makes or
         * writes in them is reached from these fds, never through a path
         * that someone could have redirected meanwhile. -1: none. */
        int log_root_fd;
        int run_fd[HP_STAGE_COUNT];
        int attempt_fd[HP_STAGE_COUNT];
        /* The last failure's root cause, for TORCHELASTIC_ERROR_FILE: its
         * error file ("" when it wrote none), torch's exitcode (-N for a
         * signal) and the exit status it gives the agent. */
        char root_error_file[PATH_MAX];
        int root_exitcode;
        int root_exit_status;
        /* The worker socket: lives as long as the agent, so checkpoint
         * progress outlives every restart of the workers. */
        struct hp_ipc_server ipc;
        /* The rank monitor on that socket: heartbeats, sections and
         * stragglers (src/ftmon). */
        struct hp_ftmon ft;
        /* RLIMIT_NOFILE as the agent was started with, which it raised
         * for itself: what the workers get (nofile_known: it was read). */
        struct rlimit nofile;
        bool nofile_known;
        struct hp_forensics *forensics; /* --hang-dump */
        struct hp_node_health health;   /* --node-problem-config */
        struct hp_agent_counts counts;  /* the self-driven driver's */
        /* Verdicts by rule name (hp_agent_verdict_counts). */
        struct hp_verdict_count {
                char rule[LOGMON_NAME_MAX + 1];
                uint64_t n[3]; /* SLOW, HANGING, FAULTED */
        } verdict_counts[HP_AGENT_VERDICT_RULES];
        size_t nverdict_counts;
        /* What ended groups read, per local rank (nproc of them): stdout,
         * stderr. NULL when it could not be allocated. */
        struct hp_stream_stats (*ended_stats)[2];
};

/* After SIGKILL to everything a group started, how long a pipe may stay
 * open before we stop waiting for EOF: only a process out of our reach
 * (one the pipe was passed to, or one that cannot die) holds it then. */
#define HP_DRAIN_GRACE_MS 1000
/* Then how long a process that SIGKILL did not end (uninterruptible
 * sleep, a GPU driver's teardown) is waited for before the group ends
 * without it, so that a stop always completes. */
#define HP_GIVE_UP_MS 10000

/* What a group is started with. The strings and the round are read while
 * hp_group__start runs; the rest must outlive the group. */
struct hp_group_params {
        enum hp_stage stage;
        int count; /* processes: the round's nproc, or 1 for a hook */
        const struct hp_config *cfg;
        const struct hp_rdzv_info *round;
        int restart_count;
        const char *run_id;
        const char *hostname;
        const char *attempt_dir; /* its ranks' directories go in; "": none */
        int attempt_fd;          /* attempt_dir, open; -1: none */
        const char *ipc_path;    /* the worker socket */
        /* The processes' RLIMIT_NOFILE; NULL: the agent's own. */
        const struct rlimit *nofile;
        int max_restarts; /* TORCHELASTIC_MAX_RESTARTS */
        /* --hang-dump: the workers' PYTHONPATH and stacks signal, and the
         * flight recorder's file prefixes; NULL when not set. */
        const char *python_path;
        const char *stacks_signal;
        const char *fr_pipe;
        const char *fr_dump;
        uv_loop_t *loop;
        struct hp_console *console_out;
        struct hp_console *console_err; /* where stderr goes */
        struct hp_stream_hub *hub;
        struct hp_scope_root *scopes;
        struct hp_watcher *watcher;
        /* The listener for a rank's stdout lines, or NULL (no rules). */
        hp_line_cb (*listener_for)(void *ctx, enum hp_stage stage,
                                   int local_rank, void **listener_ctx);
        /* A process of the group exited (it is reaped already): reap what
         * else exited, then hp_group__recheck. */
        void (*exited_cb)(void *ctx);
        /* The group's first failure was just recorded (g->first_failure);
         * the group stops the rest itself. */
        void (*failed_cb)(struct hp_group *g, void *ctx);
        /* The group is over; g may be released from inside. */
        void (*done_cb)(struct hp_group *g, enum hp_group_result result,
                        void *ctx);
        void *ctx;
};

/* A worker's output (output.c). */

/* " (rank 3)", or "" while the global rank is not known. */
const char *hp_worker__rank_text(const struct hp_worker *w, char *buf,
                                 size_t len);
/* Where one of the worker's streams goes (bit: HP_STD_OUT or
 * HP_STD_ERR), per torchrun's -r/-t and the console filter: its log file
 * opened, its console and listener picked. */
int hp_worker__setup_stream(const struct hp_group_params *p,
                            struct hp_worker *w, struct hp_stream *s,
                            int bit);
/* The stream's console prefix, which may name the pid: once spawned. */
void hp_worker__set_prefix(const struct hp_group_params *p,
                           struct hp_worker *w, struct hp_stream *s);
/* Whether Linux's limits on a user's pipe memory apply to us. */
bool hp_group__pipe_limits_apply(void);
/* The worker's end of a new pipe for one of its outputs, in *child_fd,
 * sized within the group's share; ours goes to s. */
int hp_group__open_output_pipe(const struct hp_group *g, int ranks,
                               struct hp_stream *s, int *child_fd);

/* Spawns the group's processes. A process that cannot start fails the
 * group through done_cb, from the loop; the return is 0 or -ENOMEM. */
int hp_group__start(struct hp_group *g, const struct hp_group_params *p);
/* Sends sig to every process group, SIGKILL after timeout_ms; a second
 * call escalates to SIGKILL at once. */
void hp_group__stop(struct hp_group *g, int sig, uint64_t timeout_ms);
/* Forwards sig to every running worker's group (SIGUSR1, SIGUSR2). */
void hp_group__signal(struct hp_group *g, int sig);
/* Sends sig to each process of the running workers' process groups that
 * takes it (hp_proc_takes_signal()), through a pidfd; the others, whom
 * its default action would end, are left alone. *sent and *spared say
 * how many of each. */
void hp_group__signal_takers(struct hp_group *g, int sig, int *sent,
                             int *spared);
void hp_group__release(struct hp_group *g);
/* From hp_group__start until the group reports its end. */
bool hp_group__active(const struct hp_group *g);
/* The kill phase a stop goes through (pure): whether from → to is a
 * step of it, and the step a timeout takes from phase (phase itself
 * when none). */
bool hp_group__phase_allowed(enum hp_kill_phase from, enum hp_kill_phase to);
enum hp_kill_phase hp_group__phase_after_timeout(enum hp_kill_phase phase);
const char *hp_group__phase_name(enum hp_kill_phase phase);
/* After a child exit: ends the group if nothing of it is left. */
void hp_group__recheck(struct hp_group *g);
/* A zombie the sweep found: if it is a worker of g that has not been
 * reaped yet, reaps it (its exit is handled) and returns true. */
bool hp_group__reap_pid(struct hp_group *g, pid_t pid);

/* What hp_spawn__start starts: file is searched in PATH like execvp's; the
 * child's stdout and stderr become stdout_fd and stderr_fd, its stdin is
 * the agent's. */
struct hp_spawn_options {
        const char *file;
        char *const *argv;
        char *const *envp;
        int stdout_fd;
        int stderr_fd;
        int cgroup_fd; /* cloned into this cgroup (CLONE_INTO_CGROUP); -1 */
        const struct rlimit *nofile; /* set before the exec; NULL: none */
};

/* Starts a process in its own session, with every signal at its default
 * action and none blocked, and PR_SET_PDEATHSIG SIGKILL. Returns 0 with
 * its pid and a pidfd (close-on-exec) once it has exec'd, or -errno from
 * the clone, from a step before the exec, or from the exec itself (the
 * child is then reaped already). *pid is set when the exec itself
 * failed, and 0 when no process got that far. */
int hp_spawn__start(const struct hp_spawn_options *opts, pid_t *pid,
                    int *pidfd);
/* Whether hp_spawn__start can clone into a cgroup on this architecture. */
bool hp_spawn__can_join_cgroup(void);
/* Clones a child that exits at once into the cgroup: 0 if the kernel and
 * any seccomp filter allow it, else -errno. */
int hp_spawn__probe(int cgroup_fd);
/* 1 and the status once the process has exited (reaped), 0 while it runs,
 * or -errno. exit_status is the exit code, term_signal the signal that
 * killed it (0 when it exited). */
int hp_spawn__reap(int pidfd, int64_t *exit_status, int *term_signal);

/* Whether the lifecycle allows from → to (pure; see enum hp_agent_state). */
bool hp_agent__state_allowed(enum hp_agent_state from,
                             enum hp_agent_state to);
/* The one way the agent's state changes: logs from → why → to at debug,
 * and a transition the table does not allow as a bug. FINISHED is
 * final: a change asked for after it is ignored. */
void hp_agent__set_state(struct hp_agent *a, enum hp_agent_state to,
                         const char *why);

/* Which stages run (logdirs.c): whether stage does, and the enabled
 * stage after stage, or -1. */
bool hp_agent__stage_enabled(const struct hp_agent *a, enum hp_stage stage);
int hp_agent__next_enabled(const struct hp_agent *a, enum hp_stage stage);
/* The log root and a run directory per enabled stage (a config error is
 * HP_ECONFIG with errbuf saying why), and their close. */
int hp_agent__prepare_log_dirs(struct hp_agent *a, char *errbuf,
                               size_t errlen);
void hp_agent__close_log_dirs(struct hp_agent *a);
/* Makes the stage's attempt directory for a->restart_count (see
 * logdirs.c); a->attempt_dir[stage] is "" without log files. */
void hp_agent__prepare_attempt_dir(struct hp_agent *a, enum hp_stage stage);

/* ---- Self-driven mode (selfdriven.c) ---- */

/* What ended an attempt's stage, for the restart policy. */
struct hp_attempt_end {
        enum hp_group_result result;
        int signal;        /* a signal to the agent stopped it; 0: none */
        bool node_fault;   /* the node is faulty (kernel log, pre-flight) */
        bool verdict;      /* a log rule stopped the group */
        bool more_stages;  /* a later stage is enabled */
        int restart_count; /* this attempt's */
        int max_restarts;  /* --max-restarts */
        int failure_exit;  /* the root cause's exit status, when FAILED */
};

enum hp_next {
        HP_NEXT_STAGE,      /* start the next enabled stage */
        HP_NEXT_RESTART,    /* a new attempt, restart_count + 1 */
        HP_NEXT_EXIT,       /* exit with exit_code */
        HP_NEXT_NODE_FAULT, /* exit 123 once --node-fault-action ended */
};

struct hp_next_step {
        enum hp_next what;
        int exit_code; /* HP_NEXT_EXIT, HP_NEXT_NODE_FAULT */
};

/* The restart policy (pure): what comes after a stage ended. */
struct hp_next_step hp_selfdriven__next(const struct hp_attempt_end *e);
const char *hp_selfdriven__next_name(enum hp_next what);
/* The driver hp_agent_run starts; also the agent's default. */
extern const struct hp_agent_events hp_selfdriven__events;

/* Reaps every exited child: a worker through its group (reap_managed
 * returns true for those), anything else (an orphan reparented to the
 * subreaper) here. Returns how many orphans were reaped. */
int hp_reaper__sweep(bool (*reap_managed)(pid_t pid, void *ctx), void *ctx);

/* ---- Processes in /proc (reaper.c; one process: hyperpod/forensics.h) ---- */

/* A growable list; zero-initialise, then hp_procs__free. */
struct hp_procs {
        struct hp_proc *items;
        size_t count;
        size_t cap;
};

int hp_procs__push(struct hp_procs *list, const struct hp_proc *p);
void hp_procs__free(struct hp_procs *list);
/* Every live descendant of this process. */
int hp_proc__descendants(struct hp_procs *out);
/* Up to max processes (not this one) that have the pipe with this inode
 * open: how many were found, or -errno. */
int hp_proc__pipe_holders(ino_t ino, pid_t *pids, size_t max);
/* Sends sig to every live descendant of this process, looking again
 * after SIGKILL until none is left; warn logs each one. Returns how many
 * were signalled, or -errno. */
int hp_proc__kill_descendants(int sig, bool warn);

/* ---- Each group's processes (scope.c) ---- */

/* Makes D/hyperpodrun.<pid> when use_cgroup and the cgroup v2 hierarchy
 * allows it; otherwise (logged at debug level) r->dirfd stays -1. */
void hp_scope__root_init(struct hp_scope_root *r, bool use_cgroup);
/* Removes the directory (the groups' are gone by then). */
void hp_scope__root_close(struct hp_scope_root *r);
/* The group's cgroup root/name when the root has a cgroup, else the
 * agent's descendants. */
void hp_scope__open(struct hp_scope_root *r, struct hp_scope *s,
                    const char *name);
void hp_scope__close(struct hp_scope *s);
/* The live processes of the scope. */
int hp_scope__list(const struct hp_scope *s, struct hp_procs *out);
/* SIGKILL to all of them: cgroup.kill, or one by one. */
void hp_scope__kill(const struct hp_scope *s);

/* ---- The watcher (watcher.c) ---- */

/* Forks it (before any thread exists); cgroup_path: the scope root's
 * directory, "" for none. Nothing is started as PID 1, whose death the
 * kernel answers by killing its whole PID namespace. */
int hp_watcher__start(struct hp_watcher *w, const char *cgroup_path);
/* The workers' process groups, to kill if the agent dies. */
void hp_watcher__add(struct hp_watcher *w, const pid_t *pgids, size_t count);
/* The group is over: forget its process groups. */
void hp_watcher__forget(struct hp_watcher *w);
/* The agent exits normally: tells it to quit and reaps it. */
void hp_watcher__stop(struct hp_watcher *w);

/* Why a worker never ran, naming the path and the error: "cannot create
 * its log directory '/logs/.../attempt_0/3': no space left on device
 * (ENOSPC)". */
void hp_worker__start_failure(const struct hp_worker *w, char *buf,
                              size_t len);

/* Monitored lines evaluated on the loop thread per loop iteration; past
 * that, in the same iteration, they go to the rank's rule thread
 * (ruleworker.c). */
#define HP_RULE_INLINE_MAX 1024
/* Nor more than this long per iteration: past it (a slow rule) the rest
 * of the iteration, and every line of the next HP_RULE_INLINE_OFF_MS, go
 * to the rule threads, where a rule that cannot keep up skips lines
 * instead of holding up the reads. */
#define HP_RULE_INLINE_NS (2 * 1000 * 1000ull)
#define HP_RULE_INLINE_OFF_MS 1000
/* How often the loop looks for lines the rules missed and for PCRE2
 * limit hits, and how often at most it warns about them. */
#define HP_RULE_REPORT_MS 1000
#define HP_RULE_WARN_MS 10000

/* How a rule thread's state changes are logged, on the loop thread (the
 * watch's hp_rulewatch__log_change). */
typedef void (*hp_rulewatch__change_cb)(struct hp_rulewatch *w, int rank,
                                        const struct logmon_event *e,
                                        uint64_t t_ms, const char *line,
                                        size_t len);

/* Starts the thread; wake is the loop's handle for verdicts and earlier
 * deadlines, log_change logs the changes it kept. */
int hp_rulewatch__thread_new(struct hp_rulewatch *watch, uv_async_t *wake,
                             hp_rulewatch__change_cb log_change,
                             struct hp_rule_thread **out);
/* Every queued line fed and no verdict waiting: the streams are the
 * loop's. */
bool hp_rulewatch__thread_idle(const struct hp_rule_thread *w);
/* Queues a line. When the ring is full it waits for room out of a
 * budget of the loop's time, taking a verdict the thread stopped for
 * meanwhile; past the budget the line is skipped and counted. */
void hp_rulewatch__thread_push(struct hp_rule_thread *w, int rank,
                               const char *line, size_t len, uint64_t now,
                               void (*on_verdict)(struct hp_rulewatch *watch,
                                                  int rank));
/* Logs the state changes the thread's lines brought; only while it is
 * idle, before the loop feeds that rank a line itself. */
void hp_rulewatch__thread_log_changes(struct hp_rule_thread *w);
/* Hands the thread what was queued since the last call. */
void hp_rulewatch__thread_publish(struct hp_rule_thread *w);
/* Waits until every queued line is fed, taking each verdict on the way;
 * says whether a line moved a deadline before the armed one. Past the
 * wait budget the lines not fed yet are skipped and counted instead. */
void hp_rulewatch__thread_settle(
        struct hp_rule_thread *w,
        void (*on_verdict)(struct hp_rulewatch *watch, int rank),
        bool *deadline_earlier);
/* What the thread compares with: the armed deadline, and whether a verdict
 * is already taken. Call while idle or settled. */
void hp_rulewatch__thread_set(struct hp_rule_thread *w, uint64_t armed,
                              bool verdict_taken);
/* Lines queued for the thread that the rules never saw. */
uint64_t hp_rulewatch__thread_skipped(const struct hp_rule_thread *w);
void hp_rulewatch__thread_free(struct hp_rule_thread *w);

/* Logs a rule's state change on local rank rank at debug (loop thread
 * only), at t_ms on the loop's clock, with the line that made it (NULL
 * for a deadline). */
void hp_rulewatch__log_change(struct hp_rulewatch *w, int rank,
                              const struct logmon_event *e, uint64_t t_ms,
                              const char *line, size_t len);
/* The watch's verdict (copied into a->verdict): stop the group; the
 * attempt then counts as failed. */
void hp_agent__rule_verdict(struct hp_agent *a, const struct hp_verdict *v);
/* The group's first failure was just recorded. */
void hp_agent__worker_failed(struct hp_agent *a, const struct hp_group *g);

/* Node health (health.c): loads the --node-problem-config rules and
 * starts the kernel log watcher; a config error is HP_ECONFIG with errbuf
 * naming it, an unreadable /dev/kmsg only a warning. */
int hp_agent__health_init(struct hp_agent *a, char *errbuf, size_t len);
void hp_agent__health_close(struct hp_agent *a);
/* Ends a self-driven run stopped by a node fault, once --node-fault-action
 * has ended. */
void hp_agent__health_finish(struct hp_agent *a);
/* The driver's events (driver.c): --preflight nccl passed, the first
 * attempt may start; a node fault; --preflight nccl could not run (true:
 * the driver ended the agent for it). */
void hp_agent__preflight_passed(struct hp_agent *a);
void hp_agent__node_fault(struct hp_agent *a);
bool hp_agent__preflight_unavailable(struct hp_agent *a, const char *reason);

/* Exit status when a log rule stopped the job and no restart was left
 * (timeout(1)'s status: most verdicts are hangs). */
#define HP_EXIT_RULE_VERDICT 124

/* Prints torchrun's failure summary for the group where the agent's
 * messages go (hp_log_write), and notes the root cause for
 * hp_agent_pass_error_file. */
void hp_agent__print_failure_summary(struct hp_agent *agent,
                                     const struct hp_group *g);

/* The first failure by time, or NULL. */
const struct hp_worker *hp_agent__root_cause(const struct hp_group *g);

/* The exit status the root cause asks for: its code, or 128+N for a
 * signal N (tini's convention). */
int hp_agent__root_cause_exit_code(const struct hp_group *g);

/* ---- Hang reports (through hyperpod/forensics.h) ---- */

/* The running group as the forensics module sees it: *ranks is
 * allocated (free it), NULL with at->count 0 when no group runs. */
int hp_agent__attempt(const struct hp_agent *a,
                      struct hp_forensics_attempt *at,
                      struct hp_forensics_rank **ranks);
/* Puts the running group's silence line, as of event, in the collector
 * and logs it. */
void hp_agent__note_silence(struct hp_agent *a, const char *event);
/* Starts a report on the running group (see hp_forensics_begin). */
int hp_agent__begin_report(struct hp_agent *a, bool on_request);
/* While a report is collected, a stop of the group waits for it: true
 * when the stop was taken, to be sent once the report is out. */
bool hp_agent__defer_stop(struct hp_agent *a, int sig, uint64_t timeout_ms);
/* Makes a->forensics for --hang-dump (see hp_forensics_new). */
int hp_agent__forensics_init(struct hp_agent *a, char *errbuf, size_t errlen);
/* The collector's stop callback (struct hp_forensics_params). */
void hp_agent__report_stop(void *ctx, int sig, uint64_t timeout_ms, int stage,
                           int attempt);

#endif
