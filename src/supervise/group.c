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

/* Workers write into pipes rather than the socket pairs libuv makes: a
 * socket allocates a buffer per write, which makes workers printing line
 * by line (PYTHONUNBUFFERED=1) cost several times the kernel time. A pipe
 * of 256 KiB lets a burst go out without waiting for us; one of 1 MiB
 * is slower in a flood of large writes. Together the
 * pipes of a group stay within HP_OUTPUT_PIPES_MAX (so 128 KiB each from
 * 33 ranks on, the default 64 KiB from 65), a quarter of the pipe memory
 * an unprivileged user may hold (/proc/sys/fs/pipe-user-pages-soft)
 * before Linux gives every new pipe of theirs two pages, the job's own
 * pipes included. Those limits do not apply to a process with
 * CAP_SYS_RESOURCE or CAP_SYS_ADMIN (root in most training containers):
 * its groups get HP_OUTPUT_PIPES_MAX_PRIVILEGED, 256 KiB each up to 128
 * ranks, so that flooding producers block half as often as with 128 KiB
 * (BENCHMARKS.md). A pipe's pages are allocated only while it holds
 * data. */
#define HP_OUTPUT_PIPE_MAX (256 * 1024)
#define HP_OUTPUT_PIPE_MIN (64 * 1024)
#define HP_OUTPUT_PIPES_MAX (16 * 1024 * 1024)
#define HP_OUTPUT_PIPES_MAX_PRIVILEGED (64 * 1024 * 1024)

extern char **environ;

const char *hp_worker_state_name(enum hp_worker_state state)
{
        static const char *const names[] = {
                [HP_WORKER_RUNNING] = "RUNNING",
                [HP_WORKER_STOPPING] = "STOPPING",
                [HP_WORKER_KILLING] = "KILLING",
                [HP_WORKER_EXITED] = "EXITED",
                [HP_WORKER_DONE] = "DONE",
        };
        return names[state];
}

static void worker_set_state(struct hp_worker *w, enum hp_worker_state state,
                             const char *event)
{
        hp_log_debug("%s worker %d (pid %d): %s → %s → %s",
                     hp_stage_name(w->group->stage), w->local_rank, (int)w->pid,
                     hp_worker_state_name(w->state), event,
                     hp_worker_state_name(state));
        w->state = state;
}

static double wall_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void group_check_done(struct hp_group *g)
{
        enum hp_group_result result;

        if (g->done < g->count)
                return;
        uv_timer_stop(&g->timer);
        if (g->first_failure != NULL)
                result = HP_GROUP_FAILED;
        else if (g->stop_requested)
                result = HP_GROUP_STOPPED;
        else
                result = HP_GROUP_SUCCEEDED;
        g->done_cb(g, result);
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
                            (int)w->pid, hp_signal_name(sig), strerror(errno));
}

/* A worker whose process has exited and whose process group is empty can
 * only be waiting for EOF from a process that left the group (or from data
 * already sitting in the pipe): read what is there and stop waiting. */
static void drain_if_group_gone(struct hp_worker *w)
{
        bool out_eof, err_eof;

        if (w->state != HP_WORKER_EXITED || w->pid <= 0)
                return;
        /* Most workers' pipes end with them: nothing to wait for, and no
         * kill() per exited worker on every child's exit (64 workers made
         * that 3,600 calls). */
        if (hp_stream_closed(&w->out) && hp_stream_closed(&w->err))
                return;
        if (kill(-w->pid, 0) == 0 || errno != ESRCH)
                return; /* members left: they get the stop signal */
        out_eof = hp_stream_drain_and_close(&w->out);
        err_eof = hp_stream_drain_and_close(&w->err);
        if (!out_eof || !err_eof)
                hp_log_warn("%s worker %d: its output pipe is held by a "
                            "process that left its process group; output "
                            "written after the worker exited is not "
                            "captured",
                            hp_stage_name(w->group->stage), w->local_rank);
}

void hp_group_recheck(struct hp_group *g)
{
        for (int i = 0; i < g->count; i++)
                drain_if_group_gone(&g->workers[i]);
}

static void worker_exited(struct hp_worker *w, int64_t status, int term_signal)
{
        struct hp_group *g = w->group;
        bool failed = status != 0 || term_signal != 0;

        w->exit_status = status;
        w->term_signal = term_signal;
        w->exit_time = wall_now();
        worker_set_state(w, HP_WORKER_EXITED, "exit");
        g->exited++;
        uv_close((uv_handle_t *)&w->exit_poll, exit_poll_closed_cb);
        hp_agent__process_exited(g->agent);
        drain_if_group_gone(w);

        if (failed && !w->signalled) {
                hp_log_info("%s worker %d (pid %d) %s %d", hp_stage_name(g->stage),
                            w->local_rank, (int)w->pid,
                            term_signal ? "was killed by signal"
                                        : "exited with code",
                            term_signal ? term_signal : (int)status);
                if (g->first_failure == NULL) {
                        g->first_failure = w;
                        hp_agent__worker_failed(g->agent, g);
                }
                if (!g->stopping)
                        hp_group_stop(g, g->agent->cfg->shutdown_signal,
                                      g->agent->cfg->shutdown_timeout_ms);
                return;
        }
        /* Once every process has exited, whatever they left in their
         * groups (a background job still holding the pipe) is stopped the
         * same way, so the pipes reach EOF. */
        if (g->exited == g->count && !g->stopping)
                hp_group_stop(g, SIGTERM, g->agent->cfg->shutdown_timeout_ms);
}

static void exit_poll_cb(uv_poll_t *handle, int status, int events)
{
        struct hp_worker *w = hp_container_of(handle, struct hp_worker,
                                              exit_poll);
        int64_t exit_status;
        int term_signal, r;

        (void)status;
        (void)events;
        r = hp_spawn_reap(w->pidfd, &exit_status, &term_signal);
        if (r == 0)
                return;
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
        uv_poll_stop(handle);
        worker_exited(w, exit_status, term_signal);
}

/* Opens dir/name for s, which keeps the path for its messages. */
static int open_log_file(struct hp_stream *s, const char *dir,
                         const char *name)
{
        int r = hp_snprintf(s->file_path, sizeof(s->file_path), "%s/%s", dir,
                            name);

        if (r < 0)
                return -ENAMETOOLONG;
        s->file_fd = open(s->file_path,
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND,
                          0644);
        return s->file_fd < 0 ? -errno : 0;
}

static void set_prefix(struct hp_group *g, struct hp_worker *w,
                       struct hp_stream *s)
{
        const struct hp_agent *a = g->agent;
        char rank[16], local_rank[16], group_rank[16], restarts[16], pid[16];
        const char *role = g->stage == HP_STAGE_TRAIN ? a->cfg->role
                                                      : hp_stage_name(g->stage);
        const struct hp_template_var vars[] = {
                { "role_name", role },         { "rank", rank },
                { "local_rank", local_rank },  { "group_rank", group_rank },
                { "restart_count", restarts }, { "hostname", a->hostname },
                { "pid", pid },
                /* A placeholder as long as the time, stamped per line by
                 * the stream. */
                { "time", "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
                          "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01" },
        };
        const char *tmpl = a->cfg->prefix_template
                                   ? a->cfg->prefix_template
                                   : "[${role_name}${local_rank}]:";
        char err[256];

        const char *t;

        s->prefix_len = 0;
        s->prefix[0] = '\0';
        s->time_at = -1;
        s->time_stamped = UINT64_MAX;
        /* A stream that is neither tee'd nor redirected reaches the console
         * as torchrun's inherited fd would: without a prefix. */
        if (!s->prefixed)
                return;
        snprintf(rank, sizeof(rank), "%d", w->rank);
        snprintf(local_rank, sizeof(local_rank), "%d", w->local_rank);
        snprintf(group_rank, sizeof(group_rank), "%d", a->round.node_rank);
        snprintf(restarts, sizeof(restarts), "%d", a->restart_count);
        snprintf(pid, sizeof(pid), "%d", (int)w->pid);
        if (hp_template_expand(tmpl, vars, HP_ARRAY_SIZE(vars), s->prefix,
                               sizeof(s->prefix), &s->prefix_len, err,
                               sizeof(err)) < 0) {
                /* The template was checked at startup; only the length can
                 * fail here, with a very long hostname. Keep what fits. */
                s->prefix_len = strlen(s->prefix);
        }
        t = memchr(s->prefix, '\x01', s->prefix_len);
        if (t != NULL && s->prefix_len - (size_t)(t - s->prefix) >=
                                 HP_ISO8601_MS_LEN)
                s->time_at = (int)(t - s->prefix);
}

/* Decides where one stream goes, per torchrun's -r/-t and the filter. */
static int setup_stream(struct hp_group *g, struct hp_worker *w,
                        struct hp_stream *s, int bit)
{
        const struct hp_config *cfg = g->agent->cfg;
        int rank = g->stage == HP_STAGE_TRAIN ? w->local_rank : 0;
        bool redirect = (cfg->redirects[rank] & bit) != 0;
        bool tee = (cfg->tee[rank] & bit) != 0;
        bool shown = !cfg->console_filter_set || cfg->console_shown[rank];
        int r;

        s->file_fd = -1;
        s->rank = rank;
        s->data = w;
        s->closed_cb = stream_closed_cb;
        s->listener = NULL;
        s->listener_ctx = NULL;
        s->console = NULL;
        if ((redirect || tee) && w->dir[0] != '\0') {
                r = open_log_file(s, w->dir,
                                  bit == HP_STD_OUT ? "stdout.log"
                                                    : "stderr.log");
                if (r < 0)
                        return r;
        }
        if (bit == HP_STD_OUT) {
                struct hp_monitor *m = hp_agent__monitor_for(
                        g->agent, g->stage, w->local_rank);
                if (m != NULL) {
                        s->listener = hp_agent__monitor_line_cb;
                        s->listener_ctx = m;
                }
        }
        if (shown && (tee || !redirect))
                s->console = bit == HP_STD_OUT ? &g->agent->console_out
                                               : g->agent->console_for_err;
        s->prefixed = tee;
        return 0;
}

/* A worker that could not be started is reported like an exec failure
 * through the normal path: its handles close, the references drop, and
 * the group sees a failed worker. program: the one that could not be
 * executed, or NULL when the worker failed before its exec (pipes,
 * files). The exit status is the shell's: 127 for a program that is not
 * there (and for a failure before the exec), 126 for one that cannot
 * run. */
static void worker_fail_to_start(struct hp_worker *w, int err,
                                 const char *program)
{
        struct hp_group *g = w->group;

        if (program != NULL)
                hp_log_error("%s worker %d: cannot execute '%s': %s",
                             hp_stage_name(g->stage), w->local_rank, program,
                             hp_strerror(err));
        else
                hp_log_error("%s worker %d: cannot start: %s",
                             hp_stage_name(g->stage), w->local_rank,
                             hp_strerror(err));
        w->exit_status = program == NULL || err == UV_ENOENT ? 127 : 126;
        w->exit_time = wall_now();
        w->state = HP_WORKER_EXITED;
        g->exited++;
        if (g->first_failure == NULL)
                g->first_failure = w;
        hp_stream_drain_and_close(&w->out);
        hp_stream_drain_and_close(&w->err);
}

/* Whether Linux's limits on a user's pipe memory apply to us: not with
 * CAP_SYS_RESOURCE or CAP_SYS_ADMIN in the effective set (fs/pipe.c). */
static bool pipe_limits_apply(void)
{
        struct __user_cap_header_struct header = {
                .version = _LINUX_CAPABILITY_VERSION_3,
        };
        struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
        uint32_t wanted = (1u << CAP_SYS_RESOURCE) | (1u << CAP_SYS_ADMIN);

        if (syscall(SYS_capget, &header, data) < 0)
                return true;
        return (data[0].effective & wanted) == 0;
}

/* The worker's end of a new pipe for one of its outputs, in *child_fd;
 * ours goes to the stream. */
static int open_output_pipe(const struct hp_group *g, struct hp_stream *s,
                            int *child_fd)
{
        int ranks = g->stage == HP_STAGE_TRAIN ? g->agent->round.nproc : 1;
        int budget = g->pipe_limits ? HP_OUTPUT_PIPES_MAX
                                    : HP_OUTPUT_PIPES_MAX_PRIVILEGED;
        int share = budget / (2 * (ranks > 0 ? ranks : 1));
        int size = HP_OUTPUT_PIPE_MAX, fds[2], r;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        /* Linux rounds a size up to a power of two pages: halve down to
         * one within the share instead. */
        while (size > share && size > HP_OUTPUT_PIPE_MIN)
                size /= 2;
        /* Refused past the user's limits: the default size still works,
         * only with more waits for a fast writer. */
        if (size > HP_OUTPUT_PIPE_MIN)
                (void)fcntl(fds[0], F_SETPIPE_SZ, size);
        r = uv_pipe_open(&s->pipe, fds[0]);
        if (r < 0) {
                close(fds[0]);
                close(fds[1]);
                return r;
        }
        *child_fd = fds[1];
        return 0;
}

static int spawn_worker(struct hp_group *g, struct hp_worker *w,
                        const struct hp_argv *cmd)
{
        struct hp_agent *a = g->agent;
        const struct hp_config *cfg = a->cfg;
        struct hp_env_params params = {
                .local_rank = g->stage == HP_STAGE_TRAIN ? w->local_rank : 0,
                .rank = w->rank,
                .group_rank = a->round.node_rank,
                .local_world_size = g->stage == HP_STAGE_TRAIN ? a->round.nproc
                                                               : 1,
                .world_size = a->round.world_size,
                .group_world_size = a->round.group_world_size,
                .role = cfg->role,
                .master_addr = a->round.master_addr,
                .master_port = a->round.master_port,
                .restart_count = a->restart_count,
                /* Operator mode: the operator restarts, not the agent,
                 * so workers see what the reference's do: torch's
                 * WorkerSpec default. */
                .max_restarts = hp_config_operator_mode(cfg)
                                        ? HP_OPERATOR_MAX_RESTARTS
                                        : cfg->max_restarts,
                .run_id = a->rdzv.run_id,
                .error_file = w->error_file,
                .ipc_path = a->ipc.path,
                .python_path = a->forensics.python_path,
                .stacks_signal = a->forensics.python_path
                                         ? a->forensics.stacks_signal
                                         : NULL,
        };
        struct hp_envbuf env = { 0 };
        struct hp_spawn_options opts;
        int child_fd[2] = { -1, -1 };
        int pidfd = -1, r;

        r = hp_env_build(&params, environ, &env);
        if (r < 0)
                return r;
        r = hp_stream_init(&w->out, &a->stream_hub);
        if (r < 0)
                goto out;
        w->refs++;
        r = hp_stream_init(&w->err, &a->stream_hub);
        if (r < 0) {
                w->out.data = w;
                w->out.closed_cb = stream_closed_cb;
                w->out.file_fd = -1;
                hp_stream_drain_and_close(&w->out);
                goto out;
        }
        w->refs++;
        for (struct hp_stream *s = &w->out; s; s = s == &w->out ? &w->err : NULL) {
                s->data = w;
                s->closed_cb = stream_closed_cb;
                s->file_fd = -1;
                s->console = NULL;
                s->listener = NULL;
        }

        r = setup_stream(g, w, &w->out, HP_STD_OUT);
        if (r == 0)
                r = setup_stream(g, w, &w->err, HP_STD_ERR);
        if (r < 0) {
                worker_fail_to_start(w, r, NULL);
                goto out;
        }

        r = open_output_pipe(g, &w->out, &child_fd[0]);
        if (r == 0)
                r = open_output_pipe(g, &w->err, &child_fd[1]);
        if (r < 0) {
                worker_fail_to_start(w, r, NULL);
                goto out;
        }
        opts = (struct hp_spawn_options){
                .file = cmd->argv[0],
                .argv = cmd->argv,
                .envp = env.envp,
                .stdout_fd = child_fd[0],
                .stderr_fd = child_fd[1],
        };
        r = hp_spawn(&opts, &w->pid, &pidfd);
        close(child_fd[0]);
        close(child_fd[1]);
        child_fd[0] = child_fd[1] = -1;
        if (r == 0) {
                r = uv_poll_init(a->loop, &w->exit_poll, pidfd);
                if (r < 0) {
                        /* Not watched, it could not be reaped: kill it. */
                        hp_log_error("%s worker %d (pid %d): cannot watch it: %s",
                                     hp_stage_name(g->stage), w->local_rank,
                                     (int)w->pid, hp_strerror(r));
                        (void)kill(-w->pid, SIGKILL);
                        (void)waitid(P_PIDFD, (id_t)pidfd, &(siginfo_t){ 0 },
                                     WEXITED);
                        close(pidfd);
                        w->pid = 0;
                        worker_fail_to_start(w, r, NULL);
                        goto out;
                }
        }
        if (r < 0) {
                worker_fail_to_start(w, r, cmd->argv[0]);
                goto out;
        }
        w->pidfd = pidfd;
        w->refs++;
        (void)uv_poll_start(&w->exit_poll, UV_READABLE, exit_poll_cb);
        w->state = HP_WORKER_RUNNING;

        /* The prefix may name the pid, known only now. */
        set_prefix(g, w, &w->out);
        set_prefix(g, w, &w->err);
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
        hp_log_debug("%s worker %d started as pid %d", hp_stage_name(g->stage),
                     w->local_rank, (int)w->pid);
out:
        if (child_fd[0] >= 0)
                close(child_fd[0]);
        if (child_fd[1] >= 0)
                close(child_fd[1]);
        hp_env_free(&env);
        return r;
}

static void timer_cb(uv_timer_t *timer)
{
        struct hp_group *g = hp_container_of(timer, struct hp_group, timer);

        if (g->kill_phase == 1) {
                /* The grace period is over. */
                g->kill_phase = 2;
                for (int i = 0; i < g->count; i++) {
                        struct hp_worker *w = &g->workers[i];
                        if (w->state == HP_WORKER_DONE)
                                continue;
                        if (w->state != HP_WORKER_EXITED) {
                                w->signalled = true;
                                worker_set_state(w, HP_WORKER_KILLING,
                                                 "timeout");
                        }
                        signal_group(w, SIGKILL);
                }
                uv_timer_start(&g->timer, timer_cb, HP_DRAIN_GRACE_MS, 0);
                return;
        }
        if (g->kill_phase == 2) {
                /* Everything in the groups is dead. A pipe still open is
                 * held by a process that left the group (setsid): take what
                 * it holds and stop waiting for it. */
                g->kill_phase = 3;
                for (int i = 0; i < g->count; i++) {
                        struct hp_worker *w = &g->workers[i];
                        if (w->state != HP_WORKER_EXITED)
                                continue;
                        if (!hp_stream_drain_and_close(&w->out) ||
                            !hp_stream_drain_and_close(&w->err))
                                hp_log_warn("%s worker %d: output pipe "
                                            "still held by an escaped "
                                            "process; closing it",
                                            hp_stage_name(g->stage),
                                            w->local_rank);
                }
        }
}

void hp_group_stop(struct hp_group *g, int sig, uint64_t timeout_ms)
{
        if (g->stopping) {
                /* A second stop (a second Ctrl-C) escalates at once. */
                if (g->kill_phase == 1) {
                        uv_timer_stop(&g->timer);
                        timer_cb(&g->timer);
                }
                return;
        }
        g->stopping = true;
        g->stop_signal = sig;
        g->kill_phase = 1;
        for (int i = 0; i < g->count; i++) {
                struct hp_worker *w = &g->workers[i];
                if (w->state == HP_WORKER_DONE)
                        continue;
                if (w->state == HP_WORKER_RUNNING) {
                        w->signalled = true;
                        worker_set_state(w, HP_WORKER_STOPPING,
                                         hp_signal_name(sig));
                }
                signal_group(w, sig);
        }
        uv_timer_start(&g->timer, timer_cb, sig == SIGKILL ? 0 : timeout_ms, 0);
}

void hp_group_signal(struct hp_group *g, int sig)
{
        for (int i = 0; i < g->count; i++)
                if (g->workers[i].state < HP_WORKER_EXITED)
                        signal_group(&g->workers[i], sig);
}

static int prepare_dir(struct hp_group *g, struct hp_worker *w, int index)
{
        struct hp_agent *a = g->agent;
        const char *attempt = a->attempt_dir[g->stage];
        int r;

        w->dir[0] = '\0';
        w->error_file[0] = '\0';
        if (attempt[0] == '\0')
                return 0; /* --log-dir /dev/null */
        if (hp_snprintf(w->dir, sizeof(w->dir), "%s/%d", attempt, index) < 0 ||
            hp_snprintf(w->error_file, sizeof(w->error_file), "%s/error.json",
                        w->dir) < 0)
                return -ENAMETOOLONG;
        r = hp_mkdir_p(w->dir, 0755);
        return r;
}

int hp_group_start(struct hp_group *g, struct hp_agent *a, enum hp_stage stage)
{
        const struct hp_config *cfg = a->cfg;
        int count = stage == HP_STAGE_TRAIN ? a->round.nproc : 1;
        int r = 0;

        g->agent = a;
        g->stage = stage;
        g->count = 0;
        g->exited = 0;
        g->done = 0;
        g->stopping = false;
        g->stop_requested = false;
        g->kill_phase = 0;
        g->first_failure = NULL;
        g->pipe_limits = pipe_limits_apply();
        g->workers = calloc((size_t)count, sizeof(*g->workers));
        if (g->workers == NULL)
                return -ENOMEM;

        for (int i = 0; i < count; i++) {
                struct hp_worker *w = &g->workers[i];
                struct hp_argv cmd = { 0 };

                w->group = g;
                w->local_rank = i;
                w->rank = a->round.base_rank + i;
                w->state = HP_WORKER_DONE; /* until spawned */
                r = prepare_dir(g, w, i);
                if (r < 0) {
                        hp_log_error("%s: cannot create '%s': %s",
                                     hp_stage_name(stage), w->dir,
                                     hp_strerror(r));
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
                if (r == 0)
                        r = spawn_worker(g, w, &cmd);
                hp_argv_free(&cmd);
                if (w->refs > 0)
                        g->count = i + 1;
                if (r < 0 && w->refs > 0 && g->first_failure == NULL)
                        g->first_failure = w;
                if (r < 0) {
                        /* A worker that got as far as spawning has logged
                         * its failure already (worker_fail_to_start). */
                        if (w->refs == 0)
                                hp_log_error("%s worker %d: cannot start: %s",
                                             hp_stage_name(stage), i,
                                             hp_strerror(r));
                        break;
                }
        }
        /* Whatever started is stopped, and the group reports a failure
         * through done_cb once every handle is closed. */
        if (r < 0) {
                if (g->count == 0) {
                        free(g->workers);
                        g->workers = NULL;
                        return r;
                }
                hp_group_stop(g, SIGKILL, 0);
        }
        return 0;
}

void hp_group_release(struct hp_group *g)
{
        free(g->workers);
        g->workers = NULL;
        g->count = 0;
}

bool hp_group_owns_pid(const struct hp_group *g, pid_t pid)
{
        for (int i = 0; i < g->count; i++)
                if (g->workers[i].pid == pid &&
                    g->workers[i].state < HP_WORKER_EXITED)
                        return true;
        return false;
}
