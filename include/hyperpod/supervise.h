/* hyperpodrun: spawning, teeing, stopping and reaping the job's processes. */
#ifndef HYPERPOD_SUPERVISE_H
#define HYPERPOD_SUPERVISE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "hyperpod/config.h"
#include "hyperpod/logmon.h"
#include "hyperpod/rendezvous.h"
#include "hyperpod/stream.h"

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

struct hp_group;

struct hp_worker {
        struct hp_group *group;
        uv_process_t proc;
        struct hp_stream out;
        struct hp_stream err;
        enum hp_worker_state state;
        int refs; /* the process handle plus each open pipe */
        int local_rank;
        int rank;
        pid_t pid;
        int64_t exit_status;
        int term_signal;
        bool signalled; /* we signalled it before it exited */
        double exit_time; /* wall clock, seconds */
        char dir[PATH_MAX];
        char error_file[PATH_MAX];
};

enum hp_group_result {
        HP_GROUP_SUCCEEDED = 0,
        HP_GROUP_FAILED,  /* a process exited non-zero on its own */
        HP_GROUP_STOPPED, /* hp_group_stop was called first */
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
        int stop_signal;
        int kill_phase; /* 0 none, 1 signal sent, 2 SIGKILL sent, 3 drained */
        struct hp_worker *first_failure;
        uv_timer_t timer;
        void (*done_cb)(struct hp_group *group, enum hp_group_result result);
};

/* ---- The agent ---- */

/* The rules watching one local rank's stdout. The same monitor sees that
 * rank in every stage (pre-train and post-train count as rank 0), so the
 * stages share rule state, as in the reference. */
struct hp_monitor {
        struct hp_agent *agent;
        struct logmon_stream *rules; /* NULL: this rank is not watched */
        int local_rank;
};

enum hp_agent_state {
        HP_AGENT_IDLE = 0,
        HP_AGENT_RUNNING,
        HP_AGENT_STOPPING,
        HP_AGENT_FINISHED,
};

struct hp_agent {
        uv_loop_t *loop;
        const struct hp_config *cfg;
        struct hp_rdzv rdzv;
        struct hp_rdzv_info round;
        struct hp_console console_out;
        struct hp_console console_err;
        uv_signal_t signals[6];
        uv_signal_t sigchld;
        struct hp_group group;
        enum hp_agent_state state;
        enum hp_stage stage;
        int restart_count;
        int exit_code;
        int received_signal;
        bool group_active;
        bool no_files;
        char self_exe[PATH_MAX];
        char hostname[256];
        char log_root[PATH_MAX];
        struct logmon_ruleset *ruleset;         /* NULL: no rules */
        struct hp_monitor *monitors;            /* one per local rank */
        uv_timer_t rule_timer;                  /* the earliest deadline */
        uint64_t rule_deadline;                 /* armed for, or UINT64_MAX */
        bool monitors_fresh;                    /* cleared, not yet started */
        char verdict[512];                      /* "LogHang_<rule>", or "" */
        char run_dir[HP_STAGE_COUNT][PATH_MAX]; /* "" when the stage is off */
        char attempt_dir[HP_STAGE_COUNT][PATH_MAX];
};

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

/* Closes every handle; the loop can then be closed. */
void hp_agent_close(struct hp_agent *agent);

/* Kills what is left of the job: every descendant of this process. Used at
 * exit, after the orderly stop, for processes that escaped their group. */
int hp_reaper_kill_descendants(int sig);

/* Reaps exited children that libuv does not own (orphans reparented to the
 * subreaper). is_managed tells libuv's pids apart. */
int hp_reaper_sweep(bool (*is_managed)(pid_t pid, void *ctx), void *ctx);

/* The chain-loaded child: hyperpodrun __exec PARENT_PID PROGRAM ARGS...
 * sets PR_SET_PDEATHSIG and execs. Never returns. */
void hp_exec_child(int argc, char **argv) __attribute__((noreturn));

#endif
