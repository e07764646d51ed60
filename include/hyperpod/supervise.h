/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: spawning, teeing, stopping and reaping the job's processes. */
#ifndef HYPERPOD_SUPERVISE_H
#define HYPERPOD_SUPERVISE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "hyperpod/config.h"
#include "hyperpod/ftmon.h"
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
/* A hook (pre-train, post-train) is one process that counts as local rank
 * 0 of one: the rank its output, rules and environment are known by, and
 * how many processes the stage runs out of the round's nproc. */
int hp_stage_local_rank(enum hp_stage stage, int local_rank);
int hp_stage_processes(enum hp_stage stage, int nproc);

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
        bool agent_store; /* TORCHELASTIC_USE_AGENT_STORE */
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

/* ---- Log rule verdicts (verdict.c) ---- */

/* What made a verdict: a log rule, or the rank monitor (ftmon.h). */
enum hp_verdict_kind {
        HP_VERDICT_RULE = 0,          /* rule: the log rule */
        HP_VERDICT_HEARTBEAT,         /* rule: "heartbeat" */
        HP_VERDICT_INITIAL_HEARTBEAT, /* rule: "initial heartbeat" */
        HP_VERDICT_SECTION,           /* rule: the section's name */
        HP_VERDICT_OUT_OF_SECTION,    /* rule: "out-of-section" */
        HP_VERDICT_STRAGGLER,         /* rule: "straggler" */
        HP_VERDICT_KIND_COUNT
};

/* A log rule that turned SLOW, HANGING or FAULTED on one watched rank, or
 * a rank that missed a heartbeat or section deadline or straggled (state
 * HANGING, SLOW for a straggler): the attempt's first such change. */
struct hp_verdict {
        enum logmon_state state; /* SLOW, HANGING or FAULTED; WAITING: none */
        enum hp_verdict_kind kind;
        char rule[LOGMON_NAME_MAX + 1];
        uint64_t timeout_ms; /* the rank monitor's timeout that passed */
        double speed;        /* a straggler's speed, of the median's */
        int local_rank;
        int rank;             /* global */
        char line[512];       /* the rule's last matching line, "" for none */
        uint64_t deadline_ms; /* loop ms: the deadline a tick found passed,
                               * UINT64_MAX when a line made it */
        uint64_t seen_ms;     /* loop ms: when the watch judged */
        uint64_t latency_ms;  /* seen_ms past the deadline, 0 for a line */
        double wall;          /* wall clock at seen_ms, seconds since epoch */
};

/* Room for any verdict's reason code and its NUL. */
#define HP_VERDICT_REASON_MAX (sizeof("LogFault_") + LOGMON_NAME_MAX)

/* The reason code the operator reports: "LogSlow_<rule>",
 * "LogHang_<rule>" or "LogFault_<rule>", as logmon_stream_reason gives
 * it; for the rank monitor "RankHeartbeatTimeout",
 * "RankInitialHeartbeatTimeout", "RankSectionTimeout_<section>",
 * "RankOutOfSectionTimeout" or "RankStraggler". Cut to fit buf and
 * terminated whenever len > 0. Returns the length of the whole code (as
 * snprintf), or -EINVAL when v holds no verdict. */
int hp_verdict_reason(const struct hp_verdict *v, char *buf, size_t len);
/* What it means, in the operator's fault message: "Log rule <rule> is
 * HANGING on local rank <r>; last matching line: <line>" (or "; no line
 * matched it yet"). Cut and returned as hp_verdict_reason. */
int hp_verdict_describe(const struct hp_verdict *v, char *buf, size_t len);

/* ---- The agent ---- */

/* The agent (opaque): the job's processes, its consoles, rules and
 * signals; driven by self-driven mode (hp_agent_run) or by an outside
 * driver through struct hp_agent_events. */
struct hp_agent;
/* One stage's processes (opaque), valid during the callback that passes
 * it. */
struct hp_group;

/* How a stage's group ended. */
enum hp_group_result {
        HP_GROUP_SUCCEEDED = 0,
        HP_GROUP_FAILED,  /* a process exited non-zero on its own */
        HP_GROUP_STOPPED, /* a stop was asked for first (not a failure) */
};

/*
 * The agent's lifecycle (lifecycle.c; every change is logged at debug):
 *
 *   IDLE ─preflight─▶ PREFLIGHT ─ended─▶ IDLE
 *   IDLE ─stage started─▶ RUNNING ─group ended─▶ IDLE
 *                           │
 *                           └─signal─▶ STOPPING ─group ended─▶ FINISHED
 *   any ─finish─▶ FINISHED
 *
 * IDLE: no group runs (before the first attempt, between stages, or the
 * operator waiting for /start). RUNNING: a stage's group runs. STOPPING:
 * a signal to the agent stops the group; the agent then exits 128+N.
 * FINISHED: the loop is ending with the exit status.
 */
enum hp_agent_state {
        HP_AGENT_IDLE = 0,
        HP_AGENT_PREFLIGHT,
        HP_AGENT_RUNNING,
        HP_AGENT_STOPPING,
        HP_AGENT_FINISHED,
        HP_AGENT_STATE_COUNT
};

const char *hp_agent_state_name(enum hp_agent_state state);

/*
 * How a driver (self-driven mode, the operator API) follows the agent.
 * Every callback runs on the loop thread.
 */
struct hp_agent_events {
        /* A stage's group ended. g is valid for the call only (it is
         * released after, unless the driver starts the next stage or
         * attempt from inside the callback, which releases it first). Not
         * called when a signal to the agent stopped the group: the agent
         * then exits with 128+N. */
        void (*stage_ended)(struct hp_agent *a, enum hp_stage stage,
                            enum hp_group_result result,
                            const struct hp_group *g, void *ctx);
        /* A log rule turned SLOW, HANGING or FAULTED: v (borrowed for the
         * call; hp_agent_verdict keeps a copy until the rules are
         * cleared) names it and says how long after its deadline. The
         * workers keep running. */
        void (*rule_verdict)(struct hp_agent *a, const struct hp_verdict *v,
                             void *ctx);
        /* A process of the running group exited non-zero on its own: the
         * group's first failure (hp_group_failure). The rest of the group
         * is being stopped with --shutdown-signal. */
        void (*worker_failed)(struct hp_agent *a, const struct hp_group *g,
                              void *ctx);
        /* A permanent kernel log rule matched, or the pre-flight failed:
         * hp_agent_node_fault names it ("NodeFault_<reason>") with the
         * kernel's line. The workers keep running. */
        void (*node_fault)(struct hp_agent *a, void *ctx);
        /* --preflight passed: workers may start. */
        void (*preflight_passed)(struct hp_agent *a, void *ctx);
        /* --preflight nccl could not run at all (the image lacks the
         * libraries; reason says what): true when the driver ended the
         * agent for it. NULL, or false: it counts as a node fault. */
        bool (*preflight_unavailable)(struct hp_agent *a, const char *reason,
                                      void *ctx);
};

/* Exit status of a self-driven run stopped by a node fault. */
#define HP_EXIT_NODE_FAULT 123
/* Exit status of a self-driven multi-node run that ended because another
 * node left the job (its workers failed with no restart left, it was
 * stopped or faulty) or the rendezvous store went away. */
#define HP_EXIT_PEER_FAILED 122

/* When the agent's own environment has TORCHELASTIC_ERROR_FILE and it
 * exits with exit_code because a worker failed, copies the root cause's
 * error file there with message.errorCode set to its exit code, as
 * torchrun's @record does for nested launchers and schedulers. */
void hp_agent_pass_error_file(const struct hp_agent *agent, int exit_code);

/* A zeroed agent for hp_agent_init, or NULL with errno set; freed with
 * hp_agent_free after hp_agent_close. */
struct hp_agent *hp_agent_new(void);
void hp_agent_free(struct hp_agent *agent);

/* What the agent needs to know of the driver main picked, before it
 * starts (the driver itself attaches later: hp_agent_set_events). */
struct hp_agent_setup {
        /* The driver gives each attempt's round (the operator's /start):
         * no rendezvous at init, only the local shape is known. */
        bool round_from_driver;
        /* TORCHELASTIC_MAX_RESTARTS as the workers see it: --max-restarts
         * when the agent restarts them itself, HP_OPERATOR_MAX_RESTARTS
         * when the operator does. */
        int max_restarts;
};

/*
 * Prepares everything that can fail before a process is spawned: the log
 * directories, the consoles, the signal handlers, the subreaper flag. On
 * failure errbuf says why and nothing is left running.
 */
int hp_agent_init(struct hp_agent *agent, uv_loop_t *loop,
                  const struct hp_config *cfg,
                  const struct hp_agent_setup *setup, char *errbuf,
                  size_t errlen);

/* Self-driven mode (selfdriven.c): run attempts until success, a failure
 * with no restarts left, or a stop signal. Returns the process exit
 * status. */
int hp_agent_run(struct hp_agent *agent);

/* ---- Driving the agent from outside (operator mode) ---- */

/* Attaches the driver that follows the agent: main picks it (self-driven
 * mode's, which hp_agent_run attaches, or the operator's). The agent has
 * no driver of its own: until one is attached, and after NULL lets it
 * go, what the agent reports goes nowhere. */
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
/* In-process restart, while the training processes wait at the barrier:
 * the rules stop watching (lines are ignored, the clocks stop, every rule
 * keeps its state), and so does the rank monitor. */
void hp_agent_suspend_rules(struct hp_agent *agent);
/* Watches again: fresh rules (hp_agent_use_rules) start their clocks,
 * suspended ones go on without counting the time they were off; the rank
 * monitor keeps the registered ranks and restarts their clocks. */
void hp_agent_resume_rules(struct hp_agent *agent);
/* One line per failed process, "Local Rank <i> (rank <r>) exited with
 * code <c>: <message>", under a heading: the operator's fault message. */
int hp_agent_failure_message(const struct hp_agent *agent,
                             const struct hp_group *g, char *buf, size_t len);
/* The exit status the group's first failure asks for. */
int hp_agent_failure_exit_code(const struct hp_group *g);
/* Prints torchrun's failure summary for a failed group where the agent's
 * messages go, and notes its root cause for hp_agent_pass_error_file. A
 * driver calls it from stage_ended when the failure is the workers'. */
void hp_agent_print_failure_summary(struct hp_agent *agent,
                                    const struct hp_group *g);

/* Operator mode: starts --preflight nccl; workers wait for it
 * (hp_agent_preflight_pending). Returns 0, or an error in errbuf. */
int hp_agent_preflight_start(struct hp_agent *agent, char *errbuf,
                             size_t len);
bool hp_agent_preflight_pending(const struct hp_agent *agent);

/* Closes every handle; the loop can then be closed. */
void hp_agent_close(struct hp_agent *agent);

/* ---- What a driver reads (access.c); borrowed, valid while the agent
 * is ---- */

uv_loop_t *hp_agent_loop(const struct hp_agent *agent);
enum hp_agent_state hp_agent_state(const struct hp_agent *agent);
/* What hp_agent_finish was given. */
int hp_agent_exit_code(const struct hp_agent *agent);
/* The rendezvous round: nproc, node rank, world size, master. */
const struct hp_rdzv_info *hp_agent_round(const struct hp_agent *agent);
/* Replaces the round for the next stage (copied). */
void hp_agent_set_round(struct hp_agent *agent,
                        const struct hp_rdzv_info *round);
/* The restart count the next stage runs with (its
 * TORCHELASTIC_RESTART_COUNT and attempt_<n> log directory): in-process
 * restart's later rounds run at the last /start's faultCount. */
void hp_agent_set_restart_count(struct hp_agent *agent, int restart_count);
/* In-process restart's job_start: the running processes take the
 * round's ranks without a restart. Replaces the round (copied), and each
 * running worker's global rank becomes base_rank + its local rank, for
 * what the agent prints and reports (a negative rank is one the agent
 * does not know yet, printed as such). */
void hp_agent_rerank(struct hp_agent *agent,
                     const struct hp_rdzv_info *round);
const struct hp_rdzv_options *
hp_agent_rdzv_options(const struct hp_agent *agent);
/* The stage running, or the last one that ran. */
enum hp_stage hp_agent_stage(const struct hp_agent *agent);
/* Whether the running group is being stopped. */
bool hp_agent_workers_stopping(const struct hp_agent *agent);
/* Processes of the running group that have not exited; 0 when none
 * runs. */
int hp_agent_workers_running(const struct hp_agent *agent);
/* The latest silence line (who went quiet first, at a failure or a
 * verdict), or "". */
const char *hp_agent_silence(const struct hp_agent *agent);
/* The attempt's log rule verdict, or NULL when none. */
const struct hp_verdict *hp_agent_verdict(const struct hp_agent *agent);
/* The node fault ("NodeFault_<reason>"), or NULL when none; line is the
 * kernel's (or the pre-flight's) line, wall when it was read (seconds
 * since the epoch). Any out pointer may be NULL. */
const char *hp_agent_node_fault(const struct hp_agent *agent,
                                const char **line, double *wall);
/* --preflight nccl's result once it has run, else NULL. */
const struct hp_preflight_result *
hp_agent_preflight_result(const struct hp_agent *agent);
/* The kernel log watch, or NULL when the kernel log is not watched. */
const struct kmsg_watch *hp_agent_kmsg_watch(const struct hp_agent *agent);
/* The rank monitor (heartbeats, sections, straggler speeds). */
const struct hp_ftmon *hp_agent_ftmon(const struct hp_agent *agent);
/* The worker socket, and its checkpoint progress (which outlives every
 * restart of the workers). */
struct hp_ipc_server *hp_agent_ipc(struct hp_agent *agent);
struct hp_ckpt *hp_agent_ckpt(struct hp_agent *agent);
/* Lines console fd (1 or 2) lost so far: dropped or failed writes. */
uint64_t hp_agent_console_dropped(struct hp_agent *agent, int fd);

/* Why an attempt faulted, for /metrics' hyperpodrun_faults_total{cause}. */
enum hp_fault_cause {
        HP_FAULT_WORKER = 0, /* a worker failed, or could not start */
        HP_FAULT_RULE,       /* a log rule's verdict */
        HP_FAULT_NODE,       /* the kernel log or the pre-flight check */
        HP_FAULT_RANK,       /* the rank monitor: heartbeat, section,
                              * straggler */
        HP_FAULT_CAUSE_COUNT
};

/* "worker", "rule", "node", "rank". */
const char *hp_fault_cause_name(enum hp_fault_cause cause);
/* The cause a FAULTED reason names: NodeFault_* a node fault, LogSlow_*,
 * LogHang_* and LogFault_* a rule verdict, RankHeartbeatTimeout,
 * RankInitialHeartbeatTimeout, RankSectionTimeout_*,
 * RankOutOfSectionTimeout and RankStraggler the rank monitor's, anything
 * else (WorkerCrash, WorkerStartFailed, WorkerFault, a reason a worker
 * sent) a worker's. */
enum hp_fault_cause hp_fault_cause_of(const char *reason);

/* What the self-driven driver did, for /metrics (the operator's own
 * drivers count for themselves). */
struct hp_agent_counts {
        uint64_t attempts; /* worker groups started from the first stage */
        uint64_t restarts; /* of those, restarts after a fault */
        uint64_t faults[HP_FAULT_CAUSE_COUNT]; /* attempts ended by each */
};
const struct hp_agent_counts *hp_agent_counts(const struct hp_agent *agent);
/* Log rule verdicts per rule name, in every mode, for /metrics: visit
 * is called for each rule of the rules in use (0 until one fires) and
 * each other rule that gave a verdict since the agent started, with its
 * SLOW, HANGING and FAULTED counts (n[0], n[1], n[2]). The first
 * HP_AGENT_VERDICT_RULES names that fire are counted by name;
 * hyperpodrun_faults_total{cause="rule"} counts them all. */
#define HP_AGENT_VERDICT_RULES 64
void hp_agent_verdict_counts(const struct hp_agent *agent,
                             void (*visit)(void *ctx, const char *rule,
                                           const uint64_t n[3]),
                             void *ctx);
/* The job's run id (--rdzv-id; a random one with --standalone). */
const char *hp_agent_run_id(const struct hp_agent *agent);

/* One rank's stream counts; local_rank counts a hook as 0. */
typedef void (*hp_stream_stats_cb)(void *ctx, int local_rank,
                                   const struct hp_stream_stats *out,
                                   const struct hp_stream_stats *err);
/* Calls visit for each local rank with what its ended groups read (every
 * stage and attempt so far, hooks as rank 0), then for each process of the
 * running group, if one runs: a rank's sum is what it has read since the
 * agent started. */
void hp_agent_stream_stats(const struct hp_agent *agent,
                           hp_stream_stats_cb visit, void *ctx);
/* Calls visit (unless NULL) for each watched local rank with its rule
 * state, once the rules are settled (hp_agent_settle_rules). Returns
 * false, visiting nothing, when the agent has no rules. */
bool hp_agent_rule_streams(const struct hp_agent *agent,
                           void (*visit)(void *ctx, int local_rank,
                                         const struct logmon_stream *rules,
                                         const struct logmon_ruleset *rs),
                           void *ctx);

/* ---- A group, in a callback ---- */

/* A group's first failure. */
struct hp_failure {
        int local_rank;
        int rank;
        bool start_failed; /* it never ran (its directory, pipes, process) */
        double exit_time;  /* wall clock seconds; 0 when unknown */
};

/* The group's first failure in *out: false when it has none. */
bool hp_group_failure(const struct hp_group *g, struct hp_failure *out);
/* Calls visit for each of the group's processes. */
void hp_group_stream_stats(const struct hp_group *g, hp_stream_stats_cb visit,
                           void *ctx);

#endif
