/* SPDX-License-Identifier: Apache-2.0 */
/* One stage's processes: spawn, tee, stop, and know when they are done.
 *
 * Worker lifecycle (logged at debug level):
 *   RUNNING ─stop─▶ STOPPING ─timeout─▶ KILLING
 *      │               │                   │
 *      └──────exit─────┴───────exit────────┴─▶ EXITED ─EOF on both pipes─▶ DONE
 *
 * A worker is DONE only after its exit and EOF on both pipes, so the last
 * lines before a crash are always in the files and on the console before
 * the group reports its result.
 *
 * The group is done when every worker is DONE and nothing its workers
 * started is alive (scope.c finds those processes wherever they went).
 * Once every worker has exited, or on a stop, the group is stopped:
 *   NONE ─stop─▶ SIGNALLED ─timeout─▶ KILLED ─HP_DRAIN_GRACE_MS─▶ FORCED
 *        ─HP_GIVE_UP_MS─▶ GAVE_UP
 * SIGNALLED sent the stop signal to the workers' process groups and to
 * every process that left them; KILLED sent SIGKILL to all of it; FORCED
 * closed the pipes that something outside the group still held, naming
 * it; GAVE_UP stops waiting for a process that SIGKILL did not end
 * (uninterruptible sleep), so that a stop always completes.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

extern char **environ;

static void worker_set_state(struct hp_worker *w, enum hp_worker_state state,
                             const char *event)
{
        hp_log_debug("%s worker %d (pid %d): %s → %s → %s",
                     hp_stage_name(w->group->stage), w->local_rank,
                     (int)w->pid, hp_worker__state_name(w->state), event,
                     hp_worker__state_name(state));
        w->state = state;
}

static double wall_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The one way the kill phase changes. */
static void group_set_phase(struct hp_group *g, enum hp_kill_phase phase,
                            const char *event)
{
        if (!hp_group__phase_allowed(g->kill_phase, phase))
                hp_log_error("bug: %s group: %s → %s → %s is not a step of "
                             "a stop",
                             hp_stage_name(g->stage),
                             hp_group__phase_name(g->kill_phase), event,
                             hp_group__phase_name(phase));
        else
                hp_log_debug("%s group: %s → %s → %s",
                             hp_stage_name(g->stage),
                             hp_group__phase_name(g->kill_phase), event,
                             hp_group__phase_name(phase));
        g->kill_phase = phase;
}

/* Whether some process the workers started is still alive. When that
 * cannot be told (no /proc), the workers' end is the group's. */
static bool scope_busy(struct hp_group *g)
{
        struct hp_procs procs = { 0 };
        int r = hp_scope__list(&g->scope, &procs);
        bool busy = r == 0 && procs.count > 0;

        if (r < 0)
                hp_log_debug("%s group: cannot list its processes: %s",
                             hp_stage_name(g->stage), hp_strerror(r));
        hp_procs__free(&procs);
        return busy;
}

/* Called after anything that may end the group: the last handle closed,
 * a reaped process, a phase of the stop. Nothing may touch the group
 * after it, as done_cb may release it. */
static void group_check_done(struct hp_group *g)
{
        enum hp_group_result result;

        if (g->reported || g->done < g->count)
                return;
        if (g->kill_phase < HP_KILL_GAVE_UP && scope_busy(g)) {
                if (!g->stopping)
                        hp_group__stop(g, SIGTERM,
                                       g->cfg->shutdown_timeout_ms);
                return;
        }
        uv_timer_stop(&g->timer);
        g->reported = true;
        if (g->dups != NULL) {
                hp_dup_close(&g->dups[0]);
                hp_dup_close(&g->dups[1]);
        }
        hp_scope__close(&g->scope);
        hp_watcher__forget(g->watcher);
        if (g->first_failure != NULL)
                result = HP_GROUP_FAILED;
        else if (g->stop_requested)
                result = HP_GROUP_STOPPED;
        else
                result = HP_GROUP_SUCCEEDED;
        g->done_cb(g, result, g->ctx);
}

static void worker_unref(struct hp_worker *w)
{
        if (--w->refs > 0)
                return;
        worker_set_state(w, HP_WORKER_DONE, "eof");
        w->group->done++;
        group_check_done(w->group);
}

static void stream_closed_cb(struct hp_stream *s)
{
        struct hp_worker *w = s->data;

        if (s->file_fd >= 0) {
                close(s->file_fd);
                s->file_fd = -1;
        }
        worker_unref(w);
}

static void exit_poll_closed_cb(uv_handle_t *handle)
{
        struct hp_worker *w = hp_container_of(handle, struct hp_worker,
                                              exit_poll);

        /* Only now: libuv must not be watching an fd that is closed. */
        close(w->pidfd);
        w->pidfd = -1;
        worker_unref(w);
}

static void signal_group(struct hp_worker *w, int sig)
{
        /* The worker leads its own process group (it was spawned detached,
         * i.e. setsid), so this reaches its dataloaders and shells too. A
         * group whose members are all gone answers ESRCH, which is fine. */
        if (w->pid > 0 && kill(-w->pid, sig) < 0 && errno != ESRCH)
                hp_log_warn("signalling process group %d with %s: %s",
                            (int)w->pid, hp_signal_name(sig),
                            strerror(errno));
}

/* The worker whose pid (and process group) this is, or NULL. */
static const struct hp_worker *worker_by_pid(const struct hp_group *g,
                                             pid_t pid)
{
        for (int i = 0; i < g->count; i++)
                if (g->workers[i].pid == pid && pid > 0)
                        return &g->workers[i];
        return NULL;
}

/* Sends sig to every live process of the group that the signal to the
 * process groups of the workers not yet reaped does not reach. A reaped
 * worker's group is not signalled as a group: once empty, its number may
 * belong to someone else's. What left the workers' groups (setsid,
 * setpgid, or started by something that did) is named once. */
static void signal_scope(struct hp_group *g, int sig)
{
        struct hp_procs procs = { 0 };
        char names[512];
        size_t n = 0;
        int found = 0;

        if (hp_scope__list(&g->scope, &procs) < 0) {
                hp_procs__free(&procs);
                return;
        }
        names[0] = '\0';
        for (size_t i = 0; i < procs.count; i++) {
                const struct hp_proc *p = &procs.items[i];
                const struct hp_worker *leader = worker_by_pid(g, p->pgid);
                int r;

                if (leader != NULL && leader->state < HP_WORKER_EXITED)
                        continue; /* the group signal reaches it */
                if (kill(p->pid, sig) < 0 || leader != NULL)
                        continue;
                found++;
                r = snprintf(names + n, sizeof(names) - n, "%s%d (%s)",
                             n ? ", " : "", (int)p->pid, p->comm);
                if (r > 0 && (size_t)r < sizeof(names) - n)
                        n += (size_t)r;
        }
        if (found > 0 && !g->escaped_logged) {
                g->escaped_logged = true;
                hp_log_warn("%s: %d process%s left the workers' process "
                            "groups; stopping %s with the group (%s): %s",
                            hp_stage_name(g->stage), found,
                            found == 1 ? "" : "es",
                            found == 1 ? "it" : "them", hp_signal_name(sig),
                            names);
        }
        hp_procs__free(&procs);
}

/* After the kill phase: a pipe still open is held by a process outside
 * the group's reach (given away, or stuck). The pipe is closed so that
 * the group can end, naming its holder. */
static void close_held_pipes(struct hp_worker *w)
{
        struct hp_stream *streams[] = { &w->out, &w->err };
        char holders[256], text[24];
        size_t n = 0;
        bool held = false;

        holders[0] = '\0';
        for (size_t i = 0; i < HP_ARRAY_SIZE(streams); i++) {
                struct hp_stream *s = streams[i];
                pid_t pids[4];
                uv_os_fd_t fd;
                struct stat st;
                int found = 0;

                if (hp_stream_closed(s))
                        continue;
                /* Looked up before the close, which drops our end. */
                if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0 &&
                    fstat(fd, &st) == 0)
                        found = hp_proc__pipe_holders(st.st_ino, pids,
                                                      HP_ARRAY_SIZE(pids));
                if (hp_stream_drain_and_close(s))
                        continue; /* it ended meanwhile */
                held = true;
                for (int j = 0; j < found; j++) {
                        struct hp_proc p;
                        bool known = hp_proc_read(pids[j], &p) == 0;
                        int r = snprintf(holders + n, sizeof(holders) - n,
                                         "%spid %d (%s)", n ? ", " : "",
                                         (int)pids[j], known ? p.comm : "?");

                        if (r > 0 && (size_t)r < sizeof(holders) - n)
                                n += (size_t)r;
                }
        }
        if (held)
                hp_log_warn("%s worker %d%s: its output pipe is still held "
                            "after the stop by %s; closed it, so what that "
                            "writes now is not captured",
                            hp_stage_name(w->group->stage), w->local_rank,
                            hp_worker__rank_text(w, text, sizeof(text)),
                            n > 0 ? holders : "a process not found");
}

/* Names what SIGKILL has not ended yet: a worker not reaped, or a
 * process of the group still alive (uninterruptible sleep). */
static void report_survivors(struct hp_group *g, bool giving_up)
{
        struct hp_procs procs = { 0 };
        char names[512];
        size_t n = 0;
        int found = 0;

        names[0] = '\0';
        for (int i = 0; i < g->count; i++) {
                const struct hp_worker *w = &g->workers[i];
                int r;

                if (w->state >= HP_WORKER_EXITED || w->pid <= 0)
                        continue;
                found++;
                r = snprintf(names + n, sizeof(names) - n,
                             "%sworker %d "
                             "(pid %d)",
                             n ? ", " : "", w->local_rank, (int)w->pid);
                if (r > 0 && (size_t)r < sizeof(names) - n)
                        n += (size_t)r;
        }
        if (hp_scope__list(&g->scope, &procs) == 0) {
                for (size_t i = 0; i < procs.count; i++) {
                        const struct hp_proc *p = &procs.items[i];
                        int r;

                        if (worker_by_pid(g, p->pid) != NULL)
                                continue; /* named above */
                        found++;
                        r = snprintf(names + n, sizeof(names) - n,
                                     "%s%d (%s, state %c)", n ? ", " : "",
                                     (int)p->pid, p->comm, p->state);
                        if (r > 0 && (size_t)r < sizeof(names) - n)
                                n += (size_t)r;
                }
        }
        hp_procs__free(&procs);
        if (found == 0)
                return;
        if (giving_up)
                hp_log_error("%s: %d process%s did not end after SIGKILL; "
                             "going on without waiting for %s: %s",
                             hp_stage_name(g->stage), found,
                             found == 1 ? "" : "es",
                             found == 1 ? "it" : "them", names);
        else
                hp_log_warn(
                        "%s: still alive %.3g s after SIGKILL, waiting up "
                        "to %.3g s more: %s",
                        hp_stage_name(g->stage), HP_DRAIN_GRACE_MS / 1000.0,
                        HP_GIVE_UP_MS / 1000.0, names);
}

void hp_group__recheck(struct hp_group *g)
{
        group_check_done(g);
}

static void worker_exited(struct hp_worker *w, int64_t status,
                          int term_signal)
{
        struct hp_group *g = w->group;
        bool failed = status != 0 || term_signal != 0;

        w->exit_status = status;
        w->term_signal = term_signal;
        w->exit_time = wall_now();
        worker_set_state(w, HP_WORKER_EXITED, "exit");
        g->exited++;
        uv_poll_stop(&w->exit_poll);
        uv_close((uv_handle_t *)&w->exit_poll, exit_poll_closed_cb);

        if (failed && !w->signalled) {
                hp_log_info("%s worker %d (pid %d) %s %d",
                            hp_stage_name(g->stage), w->local_rank,
                            (int)w->pid,
                            term_signal ? "was killed by signal"
                                        : "exited with code",
                            term_signal ? term_signal : (int)status);
                if (g->first_failure == NULL) {
                        g->first_failure = w;
                        g->failed_cb(g, g->ctx);
                }
                if (g->stopping)
                        return;
                if (g->exited < g->count &&
                    g->cfg->shutdown_signal == SIGKILL)
                        hp_log_info("stopping the other %s workers: SIGKILL",
                                    hp_stage_name(g->stage));
                else if (g->exited < g->count)
                        hp_log_info("stopping the other %s workers: %s, "
                                    "then SIGKILL after %.3g s",
                                    hp_stage_name(g->stage),
                                    hp_signal_name(g->cfg->shutdown_signal),
                                    (double)g->cfg->shutdown_timeout_ms /
                                            1000.0);
                hp_group__stop(g, g->cfg->shutdown_signal,
                               g->cfg->shutdown_timeout_ms);
                return;
        }
        /* Once every process has exited, whatever they left (a
         * background job still holding the pipe, a daemon that left with
         * setsid) is stopped the same way, so the pipes reach EOF and
         * nothing outlives the group. */
        if (g->exited == g->count && !g->stopping)
                hp_group__stop(g, SIGTERM, g->cfg->shutdown_timeout_ms);
}

/* Reaps the worker if it has exited: true once it has. */
static bool worker_reap(struct hp_worker *w)
{
        int64_t exit_status;
        int term_signal;
        int r = hp_spawn__reap(w->pidfd, &exit_status, &term_signal);

        if (r == 0)
                return false;
        if (r < 0) {
                /* Only ECHILD, if something else reaped it: it is gone,
                 * with a status nobody can know. */
                hp_log_error("%s worker %d (pid %d): cannot read its exit "
                             "status: %s",
                             hp_stage_name(w->group->stage), w->local_rank,
                             (int)w->pid, hp_strerror(r));
                exit_status = 1;
                term_signal = 0;
        }
        worker_exited(w, exit_status, term_signal);
        return true;
}

static void exit_poll_cb(uv_poll_t *handle, int status, int events)
{
        struct hp_worker *w = hp_container_of(handle, struct hp_worker,
                                              exit_poll);
        struct hp_group *g = w->group;

        (void)status;
        (void)events;
        if (worker_reap(w))
                g->exited_cb(g->ctx); /* last: it may end the group */
}

bool hp_group__reap_pid(struct hp_group *g, pid_t pid)
{
        for (int i = 0; i < g->count; i++) {
                struct hp_worker *w = &g->workers[i];

                if (w->pid != pid || w->state >= HP_WORKER_EXITED)
                        continue;
                /* Not reaped here only if it has not exited after all: it
                 * stays its group's either way. */
                (void)worker_reap(w);
                return true;
        }
        return false;
}

/* A worker that could not be started is reported like an exec failure
 * through the normal path: its handles close, the references drop, and
 * the group sees a failed worker. The exit status is the shell's: 127
 * for a program that is not there (and for a rank that could not be
 * started at all: step says where it failed), 126 for one that cannot
 * run. */
static void worker_fail_to_start(struct hp_worker *w, int err,
                                 enum hp_start_step step, const char *program)
{
        struct hp_group *g = w->group;

        if (step != HP_START_EXEC) {
                char why[PATH_MAX + 128], text[24];

                w->start_error = err;
                w->start_step = step;
                hp_worker__start_failure(w, why, sizeof(why));
                hp_log_error("%s worker %d%s could not start: %s",
                             hp_stage_name(g->stage), w->local_rank,
                             hp_worker__rank_text(w, text, sizeof(text)),
                             why);
        } else {
                hp_log_error("%s worker %d: cannot execute '%s': %s",
                             hp_stage_name(g->stage), w->local_rank, program,
                             hp_strerror(err));
        }
        w->exit_status = step != HP_START_EXEC || err == UV_ENOENT ? 127
                                                                   : 126;
        w->exit_time = wall_now();
        g->exited++;
        if (g->first_failure == NULL)
                g->first_failure = w;
        if (w->refs == 0) {
                /* Nothing was opened for it: done already. */
                worker_set_state(w, HP_WORKER_DONE, "start failure");
                g->done++;
                return;
        }
        worker_set_state(w, HP_WORKER_EXITED, "start failure");
        hp_stream_drain_and_close(&w->out);
        hp_stream_drain_and_close(&w->err);
}

/* The worker's environment: torchrun's variables, ours (the worker
 * socket, --hang-dump's), the flight recorder's. */
static int build_env(const struct hp_group *g,
                     const struct hp_group_params *p, struct hp_worker *w,
                     struct hp_envbuf *env)
{
        const struct hp_config *cfg = p->cfg;
        struct hp_env_params params = {
                .local_rank = hp_stage_local_rank(g->stage, w->local_rank),
                .rank = w->rank,
                .group_rank = p->round->node_rank,
                .local_world_size = hp_stage_processes(g->stage,
                                                       p->round->nproc),
                .world_size = p->round->world_size,
                .group_world_size = p->round->group_world_size,
                .role = cfg->role,
                .master_addr = p->round->master_addr,
                .master_port = p->round->master_port,
                .agent_store = p->round->agent_store,
                .restart_count = p->restart_count,
                .max_restarts = p->max_restarts,
                .run_id = p->run_id,
                .error_file = w->error_file,
                .ipc_path = p->ipc_path,
                .python_path = p->python_path,
                .stacks_signal = p->python_path ? p->stacks_signal : NULL,
        };
        if (p->fr_pipe != NULL) {
                params.fr_buffer_size =
                        getenv("TORCH_FR_BUFFER_SIZE") ||
                                        getenv("TORCH_NCCL_TRACE_BUFFER_SIZE")
                                ? NULL
                                : HP_FR_BUFFER_SIZE;
                params.fr_pipe_file = p->fr_pipe;
                params.fr_dump_file = p->fr_dump;
        }
        return hp_env_build(&params, environ, env);
}

/* Starts the worker's process with its output on child_fd (closed
 * here) and watches its exit: its pidfd in *pidfd, or the failure
 * reported. */
static int start_process(struct hp_group *g, const struct hp_group_params *p,
                         struct hp_worker *w, const struct hp_argv *cmd,
                         const struct hp_envbuf *env, int child_fd[2],
                         int *pidfd_out)
{
        struct hp_spawn_options opts;
        int pidfd = -1, r;

        opts = (struct hp_spawn_options){
                .file = cmd->argv[0],
                .argv = cmd->argv,
                .envp = env->envp,
                .stdout_fd = child_fd[0],
                .stderr_fd = child_fd[1],
                .cgroup_fd = g->scope.dirfd,
                .nofile = p->nofile,
        };
        r = hp_spawn__start(&opts, &w->pid, &pidfd);
        close(child_fd[0]);
        close(child_fd[1]);
        child_fd[0] = child_fd[1] = -1;
        if (r == 0) {
                r = uv_poll_init(p->loop, &w->exit_poll, pidfd);
                if (r < 0) {
                        /* Not watched, it could not be reaped: kill it. */
                        (void)kill(-w->pid, SIGKILL);
                        (void)waitid(P_PIDFD, (id_t)pidfd, &(siginfo_t){ 0 },
                                     WEXITED);
                        close(pidfd);
                        w->pid = 0;
                        worker_fail_to_start(w, r, HP_START_WATCH, NULL);
                        return r;
                }
        }
        if (r < 0) {
                /* A pid: the program's exec failed; none: no process. */
                bool ran = w->pid > 0;

                w->pid = 0;
                worker_fail_to_start(w, r,
                                     ran ? HP_START_EXEC : HP_START_PROCESS,
                                     cmd->argv[0]);
                return r;
        }
        *pidfd_out = pidfd;
        return 0;
}

static int spawn_worker(struct hp_group *g, const struct hp_group_params *p,
                        struct hp_worker *w, const struct hp_argv *cmd)
{
        struct hp_envbuf env = { 0 };
        int child_fd[2] = { -1, -1 };
        int pidfd = -1, r;

        r = build_env(g, p, w, &env);
        if (r < 0) {
                worker_fail_to_start(w, r, HP_START_PROCESS, NULL);
                return r;
        }
        for (struct hp_stream *s = &w->out; s;
             s = s == &w->out ? &w->err : NULL) {
                r = hp_stream_init(s, p->hub,
                                   &(struct hp_stream_opts){
                                           .closed_cb = stream_closed_cb,
                                           .data = w,
                                           .rank = hp_stage_local_rank(
                                                   g->stage, w->local_rank),
                                   });
                if (r < 0) {
                        worker_fail_to_start(w, r, HP_START_PIPE, NULL);
                        goto out;
                }
                w->refs++;
        }

        r = hp_worker__setup_stream(p, w, &w->out, HP_STD_OUT);
        if (r < 0) {
                worker_fail_to_start(w, r, HP_START_STDOUT_FILE, NULL);
                goto out;
        }
        r = hp_worker__setup_stream(p, w, &w->err, HP_STD_ERR);
        if (r < 0) {
                worker_fail_to_start(w, r, HP_START_STDERR_FILE, NULL);
                goto out;
        }

        r = hp_group__open_output_pipe(g, p->count, &w->out, &child_fd[0]);
        if (r == 0)
                r = hp_group__open_output_pipe(g, p->count, &w->err,
                                               &child_fd[1]);
        if (r < 0) {
                worker_fail_to_start(w, r, HP_START_PIPE, NULL);
                goto out;
        }
        r = start_process(g, p, w, cmd, &env, child_fd, &pidfd);
        if (r < 0)
                goto out;
        w->pidfd = pidfd;
        w->refs++;
        (void)uv_poll_start(&w->exit_poll, UV_READABLE, exit_poll_cb);
        worker_set_state(w, HP_WORKER_RUNNING, "spawned");

        /* The prefix may name the pid, known only now. */
        hp_worker__set_prefix(p, w, &w->out);
        hp_worker__set_prefix(p, w, &w->err);
        r = hp_stream_start(&w->out);
        if (r == 0)
                r = hp_stream_start(&w->err);
        if (r < 0) {
                /* The process runs but its output cannot be read: stop it
                 * as a failure rather than let it block on a full pipe. */
                hp_log_error("%s worker %d: cannot read its output: %s",
                             hp_stage_name(g->stage), w->local_rank,
                             hp_strerror(r));
                if (g->first_failure == NULL)
                        g->first_failure = w;
        }
        hp_log_debug("%s worker %d started as pid %d",
                     hp_stage_name(g->stage), w->local_rank, (int)w->pid);
out:
        if (child_fd[0] >= 0)
                close(child_fd[0]);
        if (child_fd[1] >= 0)
                close(child_fd[1]);
        hp_env_free(&env);
        return r;
}

/* A worker SIGKILL has not ended is given up on: its pipes are closed and
 * it counts as killed; the sweep reaps it if it ever exits. */
static void give_up_on(struct hp_worker *w)
{
        if (w->state < HP_WORKER_EXITED && w->pidfd >= 0)
                worker_exited(w, 0, SIGKILL);
        if (w->state == HP_WORKER_EXITED) {
                hp_stream_drain_and_close(&w->out);
                hp_stream_drain_and_close(&w->err);
        }
}

static void timer_cb(uv_timer_t *timer)
{
        struct hp_group *g = hp_container_of(timer, struct hp_group, timer);

        enum hp_kill_phase next = hp_group__phase_after_timeout(
                g->kill_phase);

        switch (next) {
        case HP_KILL_KILLED:
                /* The grace period is over: everything the group started
                 * goes, wherever it went. */
                group_set_phase(g, HP_KILL_KILLED, "timeout");
                for (int i = 0; i < g->count; i++) {
                        struct hp_worker *w = &g->workers[i];
                        if (w->state < HP_WORKER_EXITED) {
                                /* Worth a line: a SIGTERM handler that
                                 * did not finish lost its work. */
                                if (g->stop_signal != SIGKILL)
                                        hp_log_warn("%s worker %d (pid %d) "
                                                    "still running after "
                                                    "%s: SIGKILL",
                                                    hp_stage_name(g->stage),
                                                    w->local_rank,
                                                    (int)w->pid,
                                                    hp_signal_name(
                                                            g->stop_signal));
                                w->signalled = true;
                                worker_set_state(w, HP_WORKER_KILLING,
                                                 "timeout");
                                signal_group(w, SIGKILL);
                        }
                }
                hp_scope__kill(&g->scope);
                uv_timer_start(&g->timer, timer_cb, HP_DRAIN_GRACE_MS, 0);
                group_check_done(g); /* a rank that never started */
                return;
        case HP_KILL_FORCED:
                /* Whatever holds a pipe now is out of reach (or stuck):
                 * the group does not wait for it. */
                group_set_phase(g, HP_KILL_FORCED, "grace over");
                for (int i = 0; i < g->count; i++)
                        if (g->workers[i].state == HP_WORKER_EXITED)
                                close_held_pipes(&g->workers[i]);
                report_survivors(g, false);
                uv_timer_start(&g->timer, timer_cb, HP_GIVE_UP_MS, 0);
                group_check_done(g); /* last: it may end the group */
                return;
        case HP_KILL_GAVE_UP:
                group_set_phase(g, HP_KILL_GAVE_UP, "give up");
                report_survivors(g, true);
                for (int i = 0; i < g->count; i++)
                        give_up_on(&g->workers[i]);
                group_check_done(g);
                return;
        default:
                return;
        }
}

void hp_group__stop(struct hp_group *g, int sig, uint64_t timeout_ms)
{
        if (g->stopping) {
                /* A second stop (a second Ctrl-C) takes the next step at
                 * once, from the loop. */
                if (g->kill_phase >= HP_KILL_SIGNALLED &&
                    g->kill_phase < HP_KILL_GAVE_UP)
                        uv_timer_start(&g->timer, timer_cb, 0, 0);
                return;
        }
        g->stopping = true;
        g->stop_signal = sig;
        group_set_phase(g, HP_KILL_SIGNALLED, hp_signal_name(sig));
        for (int i = 0; i < g->count; i++) {
                struct hp_worker *w = &g->workers[i];
                if (w->state == HP_WORKER_RUNNING) {
                        w->signalled = true;
                        worker_set_state(w, HP_WORKER_STOPPING,
                                         hp_signal_name(sig));
                }
                if (w->state < HP_WORKER_EXITED)
                        signal_group(w, sig);
        }
        signal_scope(g, sig);
        uv_timer_start(&g->timer, timer_cb, sig == SIGKILL ? 0 : timeout_ms,
                       0);
}

void hp_group__signal(struct hp_group *g, int sig)
{
        for (int i = 0; i < g->count; i++)
                if (g->workers[i].state < HP_WORKER_EXITED)
                        signal_group(&g->workers[i], sig);
}

void hp_group__signal_takers(struct hp_group *g, int sig, int *sent,
                             int *spared)
{
        struct hp_procs procs = { 0 };

        *sent = *spared = 0;
        if (hp_scope__list(&g->scope, &procs) < 0) {
                hp_procs__free(&procs);
                return;
        }
        for (size_t i = 0; i < procs.count; i++) {
                const struct hp_worker *leader;
                struct hp_proc now;
                int pidfd = hp_pidfd_open(procs.items[i].pid, 0);

                if (pidfd < 0)
                        continue; /* gone */
                /* Read again once the pidfd holds the process: what is
                 * read is then about the process the signal would reach. */
                leader = hp_proc_read(procs.items[i].pid, &now) == 0
                                 ? worker_by_pid(g, now.pgid)
                                 : NULL;
                if (leader != NULL && leader->state < HP_WORKER_EXITED &&
                    hp_proc_live(&now)) {
                        if (!hp_proc_takes_signal(now.pid, sig))
                                (*spared)++;
                        else if (hp_pidfd_send_signal(pidfd, sig) == 0)
                                (*sent)++;
                }
                close(pidfd);
        }
        hp_procs__free(&procs);
}

/* The rank's directory, made private (0700) in the attempt's, which
 * was made empty for this attempt: a name already there is refused. */
static int prepare_dir(const struct hp_group_params *p, struct hp_worker *w,
                       int index)
{
        char name[16];

        w->dir[0] = '\0';
        w->error_file[0] = '\0';
        w->dir_fd = -1;
        if (p->attempt_dir[0] == '\0')
                return 0; /* --log-dir /dev/null */
        if (hp_snprintf(w->dir, sizeof(w->dir), "%s/%d", p->attempt_dir,
                        index) < 0 ||
            hp_snprintf(w->error_file, sizeof(w->error_file), "%s/error.json",
                        w->dir) < 0)
                return -ENAMETOOLONG;
        if (p->attempt_fd < 0)
                return -ENOENT; /* the attempt's directory was not made */
        snprintf(name, sizeof(name), "%d", index);
        w->dir_fd = hp_mkdir_private_at(p->attempt_fd, name);
        return w->dir_fd < 0 ? w->dir_fd : 0;
}

/* The training workers' filtered copies, in the attempt's directory, as
 * torchrun's filtered_stdout.log and filtered_stderr.log. A file that
 * cannot be made is an error in the log; the job goes on. */
static void open_dups(struct hp_group *g, const struct hp_group_params *p)
{
        static const char *const names[2] = { "filtered_stdout.log",
                                              "filtered_stderr.log" };
        const struct hp_config *cfg = p->cfg;

        if (p->stage != HP_STAGE_TRAIN || p->attempt_fd < 0 ||
            (cfg->dup_filters[0].count == 0 &&
             cfg->dup_filters[1].count == 0))
                return;
        g->dups = calloc(2, sizeof(*g->dups));
        if (g->dups == NULL) {
                hp_log_error("no filtered copies of the workers' output: %s",
                             hp_strerror(-ENOMEM));
                return;
        }
        for (int i = 0; i < 2; i++) {
                const struct hp_dup_filters *f = &cfg->dup_filters[i];
                const char *needles[HP_DUP_FILTERS_MAX];
                size_t lens[HP_DUP_FILTERS_MAX];
                int r;

                g->dups[i].fd = -1;
                if (f->count == 0)
                        continue;
                for (int k = 0; k < f->count; k++) {
                        needles[k] = f->text + f->at[k];
                        lens[k] = f->len[k];
                }
                r = hp_dup_open(&g->dups[i], p->attempt_fd, p->attempt_dir,
                                names[i], needles, lens, f->count);
                if (r < 0)
                        hp_log_error("cannot create %s/%s: %s; the %s lines "
                                     "that match the filters are not copied",
                                     p->attempt_dir, names[i], hp_strerror(r),
                                     i ? "stderr" : "stdout");
        }
}

int hp_group__start(struct hp_group *g, const struct hp_group_params *p)
{
        const struct hp_config *cfg = p->cfg;
        enum hp_stage stage = p->stage;
        int count = p->count;
        char name[sizeof(g->scope.name)];
        size_t started = 0;
        pid_t *pgids;
        int r = 0;

        g->cfg = cfg;
        g->watcher = p->watcher;
        g->exited_cb = p->exited_cb;
        g->failed_cb = p->failed_cb;
        g->done_cb = p->done_cb;
        g->ctx = p->ctx;
        g->stage = stage;
        g->count = 0;
        g->exited = 0;
        g->done = 0;
        g->stopping = false;
        g->stop_requested = false;
        g->reported = false;
        g->escaped_logged = false;
        group_set_phase(g, HP_KILL_NONE, "start");
        g->first_failure = NULL;
        g->pipe_limits = hp_group__pipe_limits_apply();
        g->workers = calloc((size_t)count, sizeof(*g->workers));
        if (g->workers == NULL)
                return -ENOMEM;
        snprintf(name, sizeof(name), "attempt_%d.%s", p->restart_count,
                 hp_stage_name(stage));
        hp_scope__open(p->scopes, &g->scope, name);
        free(g->dups);
        g->dups = NULL;
        open_dups(g, p);

        for (int i = 0; i < count; i++) {
                struct hp_worker *w = &g->workers[i];
                struct hp_argv cmd = { 0 };

                w->group = g;
                w->local_rank = i;
                w->rank = p->round->base_rank + i;
                w->state = HP_WORKER_DONE; /* until spawned */
                w->pidfd = -1;
                w->out.file_fd = w->err.file_fd = -1;
                g->count = i + 1;
                r = prepare_dir(p, w, i);
                if (r < 0) {
                        worker_fail_to_start(w, r, HP_START_LOG_DIR, NULL);
                        break;
                }
                if (stage == HP_STAGE_TRAIN)
                        r = hp_argv_build_worker(cfg, i, &cmd);
                else if (stage == HP_STAGE_PRE_TRAIN)
                        r = hp_argv_build_hook(cfg->pre_train_script,
                                               cfg->pre_train_args, &cmd);
                else
                        r = hp_argv_build_hook(cfg->post_train_script,
                                               cfg->post_train_args, &cmd);
                if (r < 0)
                        worker_fail_to_start(w, r, HP_START_PROCESS, NULL);
                else
                        r = spawn_worker(g, p, w,
                                         &cmd); /* failures recorded */
                hp_argv_free(&cmd);
                if (w->dir_fd >= 0)
                        close(w->dir_fd);
                w->dir_fd = -1;
                if (r < 0)
                        break;
        }
        /* The watcher is told once for the whole group. */
        pgids = malloc((size_t)g->count * sizeof(*pgids));
        if (pgids != NULL) {
                for (int i = 0; i < g->count; i++)
                        if (g->workers[i].pid > 0)
                                pgids[started++] = g->workers[i].pid;
                hp_watcher__add(p->watcher, pgids, started);
                free(pgids);
        }
        /* A rank that could not start fails the group: whatever started
         * is stopped, and the group reports the failure through done_cb
         * from the loop, once every handle is closed. */
        if (r < 0)
                hp_group__stop(g, SIGKILL, 0);
        return 0;
}

bool hp_group__active(const struct hp_group *g)
{
        return g->workers != NULL && !g->reported;
}

void hp_group__release(struct hp_group *g)
{
        free(g->workers);
        g->workers = NULL;
        g->count = 0;
        free(g->dups); /* closed when the group reported its end */
        g->dups = NULL;
}
