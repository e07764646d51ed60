/* Shared inside src/supervise only. */
#ifndef HP_SUPERVISE_PRIVATE_H
#define HP_SUPERVISE_PRIVATE_H

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

/* Called by the group after each process exit: reap orphans now that libuv
 * has taken its child. */
void hp_agent__process_exited(struct hp_agent *agent);

/* The line listener for a worker's stdout, or NULL when no rule watches
 * that stage's rank. */
struct hp_monitor *hp_agent__monitor_for(struct hp_agent *a,
                                         enum hp_stage stage, int local_rank);
void hp_agent__monitor_line_cb(void *ctx, const char *line, size_t len,
                               enum hp_line_end end);

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

/* Exit status when a log rule stopped the job and no restart was left
 * (timeout(1)'s status: most verdicts are hangs). */
#define HP_EXIT_RULE_VERDICT 124

/* Prints torchrun's failure summary for the group to fd. */
void hp_agent__print_failure_summary(const struct hp_agent *agent,
                                     const struct hp_group *g, int fd);

/* The first failure by time, or NULL. */
const struct hp_worker *hp_agent__root_cause(const struct hp_group *g);

/* The exit status the root cause asks for: its code, or 128+N for a
 * signal N (tini's convention). */
int hp_agent__root_cause_exit_code(const struct hp_group *g);

#endif
