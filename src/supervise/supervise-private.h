/* Shared inside src/supervise only. */
#ifndef HP_SUPERVISE_PRIVATE_H
#define HP_SUPERVISE_PRIVATE_H

#include "hp-sys.h"
#include "hyperpod/supervise.h"

/* After SIGKILL, how long a pipe may stay open before we stop waiting for
 * EOF: only a process that left the worker's group (setsid) can hold it
 * then, and it is killed at exit with the other leftovers. */
#define HP_DRAIN_GRACE_MS 1000

int hp_group_start(struct hp_group *g, struct hp_agent *a, enum hp_stage stage);
/* Sends sig to every process group, SIGKILL after timeout_ms; a second
 * call escalates to SIGKILL at once. */
void hp_group_stop(struct hp_group *g, int sig, uint64_t timeout_ms);
/* Forwards sig to every running worker's group (SIGUSR1, SIGUSR2). */
void hp_group_signal(struct hp_group *g, int sig);
void hp_group_release(struct hp_group *g);
/* After a child exit: drains workers whose process group is now empty. */
void hp_group_recheck(struct hp_group *g);
bool hp_group_owns_pid(const struct hp_group *g, pid_t pid);

/* What hp_spawn starts: file is searched in PATH like execvp's; the
 * child's stdout and stderr become stdout_fd and stderr_fd, its stdin is
 * the agent's. */
struct hp_spawn_options {
        const char *file;
        char *const *argv;
        char *const *envp;
        int stdout_fd;
        int stderr_fd;
};

/* Starts a process in its own session, with every signal at its default
 * action and none blocked, and PR_SET_PDEATHSIG SIGKILL. Returns 0 with
 * its pid and a pidfd (close-on-exec) once it has exec'd, or -errno from
 * the clone, from a step before the exec, or from the exec itself (the
 * child is then reaped already). */
int hp_spawn(const struct hp_spawn_options *opts, pid_t *pid, int *pidfd);
/* 1 and the status once the process has exited (reaped), 0 while it runs,
 * or -errno. exit_status is the exit code, term_signal the signal that
 * killed it (0 when it exited). */
int hp_spawn_reap(int pidfd, int64_t *exit_status, int *term_signal);

/* Called by the group after each process exit: reap orphans now that the
 * group has reaped its child. */
void hp_agent__process_exited(struct hp_agent *agent);

/* The line listener for a worker's stdout, or NULL when no rule watches
 * that stage's rank. */
struct hp_monitor *hp_agent__monitor_for(struct hp_agent *a,
                                         enum hp_stage stage, int local_rank);
void hp_agent__monitor_line_cb(void *ctx, const char *line, size_t len,
                               enum hp_line_end end);

/* Monitored lines evaluated on the loop thread per loop iteration; past
 * that, in the same iteration, they go to the rule worker (ruleworker.c). */
#define HP_RULE_INLINE_MAX 1024

struct hp_rule_worker;
/* Starts the thread; wake is the loop's handle for verdicts and earlier
 * deadlines. */
int hp_rule_worker_new(struct hp_agent *a, uv_async_t *wake,
                       struct hp_rule_worker **out);
/* Every queued line fed and no verdict waiting: the streams are the
 * loop's. */
bool hp_rule_worker_idle(const struct hp_rule_worker *w);
/* Queues a line (waiting for room when the ring is full, and taking a
 * verdict the thread stopped for meanwhile). */
void hp_rule_worker_push(struct hp_rule_worker *w, int rank,
                         const char *line, size_t len, uint64_t now,
                         void (*on_verdict)(struct hp_agent *a, int rank));
/* Hands the thread what was queued since the last call. */
void hp_rule_worker_publish(struct hp_rule_worker *w);
/* Waits until every queued line is fed, taking each verdict on the way;
 * says whether a line moved a deadline before the armed one. */
void hp_rule_worker_settle(struct hp_rule_worker *w,
                           void (*on_verdict)(struct hp_agent *a, int rank),
                           bool *deadline_earlier);
/* What the thread compares with: the armed deadline, and whether a verdict
 * is already taken. Call while idle or settled. */
void hp_rule_worker_set(struct hp_rule_worker *w, uint64_t armed,
                        bool verdict_taken);
void hp_rule_worker_free(struct hp_rule_worker *w);

int hp_agent__monitors_init(struct hp_agent *a, char *errbuf, size_t errlen);
void hp_agent__monitors_resume(struct hp_agent *a);
void hp_agent__monitors_suspend(struct hp_agent *a);
void hp_agent__monitors_clear(struct hp_agent *a);
void hp_agent__monitors_close(struct hp_agent *a);
/* A rule turned SLOW, HANGING or FAULTED (a->verdict names it): stop the
 * group; the attempt then counts as failed. */
void hp_agent__rule_verdict(struct hp_agent *a);
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
/* --preflight nccl passed: the first attempt may start. */
void hp_agent__preflight_passed(struct hp_agent *a);

/* Exit status when a log rule stopped the job and no restart was left
 * (timeout(1)'s status: most verdicts are hangs). */
#define HP_EXIT_RULE_VERDICT 124

/* Prints torchrun's failure summary for the group to fd, and notes the
 * root cause for hp_agent_pass_error_file. */
void hp_agent__print_failure_summary(struct hp_agent *agent,
                                     const struct hp_group *g, int fd);

/* The first failure by time, or NULL. */
const struct hp_worker *hp_agent__root_cause(const struct hp_group *g);

/* The exit status the root cause asks for: its code, or 128+N for a
 * signal N (tini's convention). */
int hp_agent__root_cause_exit_code(const struct hp_group *g);

/* ---- Hang forensics (forensics.c) ---- */

/* Prepares --hang-dump: the sitecustomize.py the workers' PYTHONPATH
 * loads. On failure errbuf says why. */
int hp_forensics_init(struct hp_forensics *f, struct hp_agent *a,
                      char *errbuf, size_t errlen);
/* Puts the running group's silence line, as of event ("the verdict"), in
 * a->forensics.silence and logs it. */
void hp_forensics_note_silence(struct hp_agent *a, const char *event);
/* Starts a report on the running group (a verdict's, or on_request for
 * SIGUSR2): 0 while it is collected, -ENOTSUP with --hang-dump off,
 * -EBUSY while another is, -ESRCH when no group runs. */
int hp_forensics_begin(struct hp_forensics *f, bool on_request);
/* While a report is collected, a stop of the group waits for it: true
 * when the stop was taken to be sent then. */
bool hp_forensics_defer_stop(struct hp_forensics *f, int sig,
                             uint64_t timeout_ms);
/* Stops collecting, removes the sitecustomize directory. */
void hp_forensics_close(struct hp_forensics *f);

#endif
