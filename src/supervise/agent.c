/* SPDX-License-Identifier: Apache-2.0 */
/* The agent: attempts, stages, signals and exit status in self-driven mode.
 *
 * An attempt runs the stages in order, each one group of processes:
 *   pre-train (if configured) → train (nproc workers) → post-train
 * A non-zero exit in any stage fails the attempt; with restarts left the
 * next attempt starts from pre-train with TORCHELASTIC_RESTART_COUNT + 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

static const int forwarded_signals[] = { SIGTERM, SIGINT,  SIGHUP,
                                         SIGQUIT, SIGUSR1, SIGUSR2 };

static bool reap_managed(pid_t pid, void *ctx)
{
        struct hp_agent *a = ctx;

        /* --node-fault-action's scontrol and the pre-flight check are
         * libuv's to reap. */
        if (a->health.action_running && a->health.action_proc.pid == pid)
                return true;
        if (a->health.preflight_running &&
            a->health.preflight.proc.pid == pid)
                return true;
        return hp_group__active(&a->group) &&
               hp_group__reap_pid(&a->group, pid);
}

/* After a child exit: reaps what else exited and checks whether the
 * group is over. */
static void process_exited(struct hp_agent *a)
{
        (void)hp_reaper__sweep(reap_managed, a);
        /* A reaped process may have been the last of the group. */
        if (hp_group__active(&a->group))
                hp_group__recheck(&a->group);
}

static void sigchld_cb(uv_signal_t *handle, int signum)
{
        process_exited(handle->data);
}

static void rules_read_now_cb(void *ctx);
static void rules_commit_cb(void *ctx);
static void rules_verdict_cb(void *ctx, const struct hp_verdict *v);
static void ft_verdict_cb(void *ctx, const struct hp_ft_verdict *fv);

static void group_exited_cb(void *ctx)
{
        process_exited(ctx);
}

static hp_line_cb listener_for_cb(void *ctx, enum hp_stage stage,
                                  int local_rank, void **listener_ctx)
{
        struct hp_agent *a = ctx;
        struct hp_rulewatch__rank *m = hp_rulewatch__rank(
                &a->rules, hp_stage_local_rank(stage, local_rank));

        *listener_ctx = m;
        return m != NULL ? hp_rulewatch__line_cb : NULL;
}

static void group_failed_cb(struct hp_group *g, void *ctx)
{
        hp_agent__worker_failed(ctx, g);
}

/* Whether two fds lead to the same file, pipe or terminal (2>&1). */
static bool same_file(int a, int b)
{
        struct stat sa, sb;

        return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
               sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static void log_sink_cb(void *ctx, const char *msg, size_t len)
{
        hp_console_put_message(ctx, msg, len);
}

/* Says what console i (0 stdout, 1 stderr) lost since it last said. */
static void report_console(struct hp_agent *a, int i)
{
        struct hp_console *con = i == 0 ? a->console_out : a->console_err;
        int error;
        uint64_t dropped = hp_console_lost_lines(con, &error);

        if (dropped <= a->console_reported[i])
                return;
        a->console_reported[i] = dropped;
        if (error < 0)
                hp_log_error("console %s: writing it failed (%s); %llu lines "
                             "lost to it so far, the job goes on and the log "
                             "files have every byte",
                             i == 0 ? "stdout" : "stderr", hp_strerror(error),
                             (unsigned long long)dropped);
        else
                hp_log_warn("console %s: %llu lines dropped so far because "
                            "it could not keep up; the log files have every "
                            "byte",
                            i == 0 ? "stdout" : "stderr",
                            (unsigned long long)dropped);
}

static void report_console_drops(struct hp_agent *a)
{
        report_console(a, 0);
        report_console(a, 1);
}

static void add_ended_cb(void *ctx, int rank,
                         const struct hp_stream_stats *out,
                         const struct hp_stream_stats *err)
{
        struct hp_agent *a = ctx;
        const struct hp_stream_stats *st[2] = { out, err };

        if (a->ended_stats == NULL || rank < 0 || rank >= a->cfg->nproc)
                return;
        for (int s = 0; s < 2; s++) {
                struct hp_stream_stats *t = &a->ended_stats[rank][s];
                t->lines += st[s]->lines;
                t->bytes += st[s]->bytes;
                t->lines_capped += st[s]->lines_capped;
                t->console_dropped += st[s]->console_dropped;
                t->file_lost += st[s]->file_lost;
        }
}

static void group_done_cb(struct hp_group *g, enum hp_group_result result,
                          void *ctx)
{
        struct hp_agent *a = ctx;
        enum hp_stage stage = g->stage;
        bool signalled = a->state == HP_AGENT_STOPPING;

        /* Before the group goes: /metrics counts what every stage read. */
        hp_group_stream_stats(g, add_ended_cb, a);

        /* A signal to the agent ends it with the group, as torchrun's
         * does, whichever driver follows it, with 128+N (tini's
         * convention); otherwise the driver decides what comes next. */
        if (signalled)
                hp_agent_finish(a, 128 + a->received_signal);
        else
                hp_agent__set_state(a, HP_AGENT_IDLE, "group ended");
        hp_rulewatch__suspend(&a->rules);
        hp_ftmon_pause(&a->ft);
        /* Everything the workers printed is queued by now. Our report is
         * queued after it on the same console, so a console nobody reads
         * is not waited for; a file console gets the lines first. */
        hp_console_commit_ordered(a->console_out);
        hp_console_commit_ordered(a->console_err);
        report_console_drops(a);

        if (signalled) {
                if (result == HP_GROUP_FAILED)
                        hp_agent__print_failure_summary(a, g);
                else
                        hp_log_info("stopped by %s",
                                    hp_signal_name(a->received_signal));
                hp_group__release(g);
                return;
        }
        a->events->stage_ended(a, stage, result, g, a->events_ctx);
        /* Unless the driver started the next group from the callback
         * (which released this one first). */
        if (!hp_group__active(g))
                hp_group__release(g);
}

static int try_start_stage(struct hp_agent *a, enum hp_stage stage)
{
        char fr_pipe[PATH_MAX], fr_dump[PATH_MAX];
        struct hp_group_params p = {
                .stage = stage,
                .count = hp_stage_processes(stage, a->round.nproc),
                .cfg = a->cfg,
                .round = &a->round,
                .restart_count = a->restart_count,
                .run_id = a->rdzv.run_id,
                .hostname = a->hostname,
                .attempt_dir = a->attempt_dir[stage],
                .ipc_path = a->ipc.path,
                .nofile = a->nofile_known ? &a->nofile : NULL,
                .max_restarts = a->setup.max_restarts,
                .python_path = hp_forensics_python_path(a->forensics),
                .stacks_signal = hp_forensics_stacks_signal(a->forensics),
                .loop = a->loop,
                .console_out = a->console_out,
                .console_err = a->console_for_err,
                .hub = a->stream_hub,
                .scopes = &a->scopes,
                .watcher = &a->watcher,
                .listener_for = listener_for_cb,
                .exited_cb = group_exited_cb,
                .failed_cb = group_failed_cb,
                .done_cb = group_done_cb,
                .ctx = a,
        };
        int r;

        /* The last group, if the driver starts this one from the
         * callback that reported its end. */
        hp_group__release(&a->group);
        a->stage = stage;
        hp_agent__prepare_attempt_dir(a, stage);
        p.attempt_fd = a->attempt_fd[stage]; /* made just now */
        /* The flight recorder's files go in the attempt directory. */
        if (hp_forensics_fr_prefixes(a->forensics, a->attempt_dir[stage],
                                     fr_pipe, fr_dump, sizeof(fr_pipe))) {
                p.fr_pipe = fr_pipe;
                p.fr_dump = fr_dump;
        }
        r = hp_group__start(&a->group, &p);
        if (r < 0) {
                hp_log_error("%s: cannot start: %s", hp_stage_name(stage),
                             hp_strerror(r));
                return r;
        }
        hp_agent__set_state(a, HP_AGENT_RUNNING, hp_stage_name(stage));
        hp_rulewatch__resume(&a->rules, a->round.base_rank);
        return 0;
}

/* Counts a verdict under its rule's name. */
static void count_verdict(struct hp_agent *a, const struct hp_verdict *v)
{
        size_t i;

        /* The rank monitor's are counted as faults with cause rank. */
        if (v->kind != HP_VERDICT_RULE || v->state < LOGMON_SLOW ||
            v->state > LOGMON_FAULTED)
                return;
        for (i = 0; i < a->nverdict_counts; i++)
                if (strcmp(a->verdict_counts[i].rule, v->rule) == 0)
                        break;
        if (i == a->nverdict_counts) {
                if (i == HP_AGENT_VERDICT_RULES)
                        return; /* in faults_total{cause="rule"} only */
                snprintf(a->verdict_counts[i].rule,
                         sizeof(a->verdict_counts[i].rule), "%s", v->rule);
                a->nverdict_counts++;
        }
        a->verdict_counts[i].n[v->state - LOGMON_SLOW]++;
}

void hp_agent__rule_verdict(struct hp_agent *a, const struct hp_verdict *v)
{
        char speeds[512];

        count_verdict(a, v);
        a->verdict = *v;
        hp_ftmon_pause(&a->ft);
        hp_ftmon_speed_line(&a->ft, speeds, sizeof(speeds));
        if (speeds[0] != '\0')
                hp_log_warn("%s", speeds);
        /* Which rank went quiet first, before anything is stopped. */
        hp_agent__note_silence(a, "the verdict");
        /* The hang report is collected before any stop: a stop asked for
         * meanwhile waits for it, at most --hang-dump-timeout. */
        a->verdict_report = hp_agent__begin_report(a, false) == 0;
        a->events->rule_verdict(a, &a->verdict, a->events_ctx);
}

void hp_agent__worker_failed(struct hp_agent *a, const struct hp_group *g)
{
        /* The others stop heartbeating as they are stopped: no verdict
         * for that. */
        hp_ftmon_pause(&a->ft);
        /* The others may be blocked waiting for it: say when each went
         * quiet. */
        hp_forensics_clear_silence(a->forensics);
        if (hp_group__active(&a->group) && g == &a->group && g->count > 1)
                hp_agent__note_silence(a, "the failure");
        if (a->events->worker_failed != NULL && a->state != HP_AGENT_STOPPING)
                a->events->worker_failed(a, g, a->events_ctx);
}

static void log_attempt(const struct hp_agent *a)
{
        const struct hp_rdzv_info *r = &a->round;

        /* In-process restart starts its processes before the operator
         * says where the node sits: no node rank, no master yet. */
        if (r->node_rank < 0)
                hp_log_info("attempt %d: %d worker%s, %d node%s (node rank "
                            "and master not known yet), world size %d, run "
                            "id %s%s%s",
                            a->restart_count, r->nproc,
                            r->nproc == 1 ? "" : "s", r->nnodes,
                            r->nnodes == 1 ? "" : "s", r->world_size,
                            a->rdzv.run_id, a->no_files ? "" : ", logs in ",
                            a->no_files ? "" : a->run_dir[HP_STAGE_TRAIN]);
        else
                hp_log_info("attempt %d: %d worker%s, node %d of %d, world "
                            "size %d, master %s:%d, run id %s%s%s",
                            a->restart_count, r->nproc,
                            r->nproc == 1 ? "" : "s", r->node_rank, r->nnodes,
                            r->world_size, r->master_addr, r->master_port,
                            a->rdzv.run_id, a->no_files ? "" : ", logs in ",
                            a->no_files ? "" : a->run_dir[HP_STAGE_TRAIN]);
}

static enum hp_stage first_stage(const struct hp_agent *a)
{
        return hp_agent__stage_enabled(a, HP_STAGE_PRE_TRAIN)
                       ? HP_STAGE_PRE_TRAIN
                       : HP_STAGE_TRAIN;
}

int hp_agent_begin(struct hp_agent *a, const struct hp_rdzv_info *round,
                   int restart_count)
{
        int r;

        if (hp_group__active(&a->group))
                return -EBUSY;
        if (round != &a->round)
                a->round = *round;
        a->restart_count = restart_count;
        memset(&a->verdict, 0, sizeof(a->verdict));
        /* The new workers register anew; computed timeouts come back
         * through their clients (state_dict). */
        hp_ftmon_reset(&a->ft);
        log_attempt(a);
        r = try_start_stage(a, first_stage(a));
        if (r == 0)
                a->counts.attempts++;
        return r;
}

int hp_agent_next_stage(struct hp_agent *a)
{
        int next = hp_agent__next_enabled(a, a->stage);
        int r;

        if (hp_group__active(&a->group))
                return -EBUSY;
        if (next < 0)
                return 0;
        r = try_start_stage(a, (enum hp_stage)next);
        return r < 0 ? r : 1;
}

bool hp_agent_stop_workers(struct hp_agent *a, int sig, uint64_t timeout_ms)
{
        if (!hp_group__active(&a->group))
                return false;
        a->group.stop_requested = true;
        if (!hp_agent__defer_stop(a, sig, timeout_ms))
                hp_group__stop(&a->group, sig, timeout_ms);
        return true;
}

bool hp_agent_workers_active(const struct hp_agent *a)
{
        return hp_group__active(&a->group);
}

int hp_agent_failure_exit_code(const struct hp_group *g)
{
        return hp_agent__root_cause_exit_code(g);
}

static void signal_cb(uv_signal_t *handle, int signum)
{
        struct hp_agent *a = handle->data;

        if (signum == SIGUSR1) {
                /* Forwarded as tini does: HyperPod's graceful stop. */
                if (hp_group__active(&a->group))
                        hp_group__signal(&a->group, signum);
                return;
        }
        if (signum == SIGUSR2) {
                int r, sent, spared;

                if (!hp_group__active(&a->group))
                        return;
                /* A report, the job running on: forwarded only to the
                 * processes that handle it, since its default action
                 * would end the others (a healthy job exited 140). */
                r = hp_agent__begin_report(a, true);
                if (r < 0 && r != -ENOTSUP)
                        hp_log_warn("SIGUSR2: no stacks report: %s",
                                    r == -EBUSY ? "one is being collected"
                                                : hp_strerror(r));
                hp_group__signal_takers(&a->group, signum, &sent, &spared);
                hp_log_info("SIGUSR2: forwarded to %d worker process%s that "
                            "handle%s it; %d without a handler left alone",
                            sent, sent == 1 ? "" : "es", sent == 1 ? "s" : "",
                            spared);
                return;
        }
        if (!hp_group__active(&a->group)) {
                hp_agent_finish(a, 128 + signum);
                return;
        }
        if (a->state == HP_AGENT_RUNNING) {
                a->received_signal = signum;
                hp_agent__set_state(a, HP_AGENT_STOPPING,
                                    hp_signal_name(signum));
                hp_log_warn("received %s: stopping the workers (%s, then "
                            "SIGKILL after %.3g s; send it again to kill "
                            "at once)",
                            hp_signal_name(signum), hp_signal_name(signum),
                            (double)a->cfg->shutdown_timeout_ms / 1000.0);
        }
        a->group.stop_requested = true;
        /* torchrun closes the group with the signal it received. */
        hp_group__stop(&a->group, signum, a->cfg->shutdown_timeout_ms);
}

/* The round: the rendezvous's, or only the local shape when the driver
 * gives each attempt's round (the operator's /start). */
static int init_round(struct hp_agent *a, char *errbuf, size_t errlen)
{
        const struct hp_config *cfg = a->cfg;
        int r;

        r = hp_rdzv_init(&a->rdzv, cfg, errbuf, errlen);
        if (r < 0)
                return r;
        if (a->setup.round_from_driver) {
                a->round.nproc = cfg->nproc;
                a->round.nnodes = cfg->nnodes;
                a->round.node_rank = -1;
                return 0;
        }
        return hp_rdzv_next(&a->rdzv, &a->round, errbuf, errlen);
}

/* What the agent's process needs before any thread or worker exists:
 * the workers' OpenMP default, the scope root and the watcher, the
 * subreaper flag, SIGPIPE and the open-files limit. */
static void init_process(struct hp_agent *a)
{
        rlim_t nofile_now;
        int r;

        /* torchrun's rule: many workers each with a full OpenMP pool would
         * oversubscribe the CPUs, so they get 1 thread unless told. */
        if (a->round.nproc > 1 && getenv("OMP_NUM_THREADS") == NULL) {
                setenv("OMP_NUM_THREADS", "1", 1);
                hp_log_warn("OMP_NUM_THREADS is not set; setting it to 1 for "
                            "each of the %d workers (set it to tune)",
                            a->round.nproc);
        }

        /* Before any thread exists, as it forks, and before we are a
         * subreaper, so that it is not our child. */
        hp_scope__root_init(&a->scopes, a->cfg->cgroup);
        r = hp_watcher__start(&a->watcher, a->scopes.path);
        if (r < 0)
                hp_log_warn("cannot start the watcher (%s): if the agent is "
                            "killed, what the workers started survives it",
                            hp_strerror(r));

        /* Orphaned grandchildren come to us, not to init, so we can reap
         * them and kill them at the end. PID 1 is a reaper anyway. */
        if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0 && getpid() != 1)
                hp_log_warn("cannot become a child subreaper (%s): orphaned "
                            "worker processes will escape; run under tini or "
                            "as PID 1",
                            strerror(errno));
        /* A console that went away must show up as a write error, which
         * the console counts, not kill the agent. */
        signal(SIGPIPE, SIG_IGN);

        /* Before the worker socket, which sizes its connection cap from
         * the limit. The workers get the limit the agent was started
         * with back, as they would under torchrun. */
        a->nofile_known = hp_nofile_raise(&a->nofile, &nofile_now) == 0;
        if (a->nofile_known && nofile_now != a->nofile.rlim_cur)
                hp_log_debug("open files: soft limit raised from %llu to "
                             "%llu; workers keep %llu",
                             (unsigned long long)a->nofile.rlim_cur,
                             (unsigned long long)nofile_now,
                             (unsigned long long)a->nofile.rlim_cur);
}

/* The two consoles and the hub that batches the streams' writes; from
 * here the agent's messages go through the stderr console. Nothing is
 * left open on failure. */
static int init_consoles(struct hp_agent *a)
{
        int r;

        r = hp_console_new(&a->console_out, STDOUT_FILENO, HP_CONSOLE_RING);
        if (r < 0)
                return r;
        r = hp_console_new(&a->console_err, STDERR_FILENO, HP_CONSOLE_RING);
        if (r < 0)
                goto err_out;
        {
                struct hp_console *const consoles[] = { a->console_out,
                                                        a->console_err };

                r = hp_stream_hub_new(&a->stream_hub, a->loop, consoles,
                                      HP_ARRAY_SIZE(consoles));
        }
        if (r < 0)
                goto err_err;
        hp_rulewatch__set_wall_offset(&a->rules, hp_stream_hub_wall_offset_ms(
                                                         a->stream_hub));
        a->console_for_err = same_file(STDOUT_FILENO, STDERR_FILENO)
                                     ? a->console_out
                                     : a->console_err;
        /* From here the agent's messages go through the stderr console:
         * never blocking the loop, and never inside a worker's line. */
        hp_log_set_sink(log_sink_cb, a->console_for_err);
        return 0;

err_err:
        hp_console_close(a->console_err, 0);
        hp_console_free(a->console_err);
        a->console_err = NULL;
err_out:
        hp_console_close(a->console_out, 0);
        hp_console_free(a->console_out);
        a->console_out = NULL;
        return r;
}

/* The agent's signal handlers; a signal sent while the agent started is
 * answered now. */
static void start_signals(struct hp_agent *a)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(forwarded_signals); i++) {
                uv_signal_init(a->loop, &a->signals[i]);
                a->signals[i].data = a;
                uv_signal_start(&a->signals[i], signal_cb,
                                forwarded_signals[i]);
        }
        uv_signal_init(a->loop, &a->sigchld);
        a->sigchld.data = a;
        uv_signal_start(&a->sigchld, sigchld_cb, SIGCHLD);
        /* A signal sent while the agent started is answered now; a stop
         * among them also keeps the first attempt from starting. */
        a->signal_at_start = hp_signals_release();
        uv_timer_init(a->loop, &a->group.timer);
}

int hp_agent_init(struct hp_agent *a, uv_loop_t *loop,
                  const struct hp_config *cfg,
                  const struct hp_agent_setup *setup, char *errbuf,
                  size_t errlen)
{
        int r;

        memset(a, 0, sizeof(*a));
        hp_agent_set_events(a, NULL, NULL);
        a->loop = loop;
        a->cfg = cfg;
        a->setup = *setup;
        a->scopes.dirfd = -1;
        a->watcher.fd = -1;
        a->log_root_fd = -1;
        for (int st = 0; st < HP_STAGE_COUNT; st++)
                a->run_fd[st] = a->attempt_fd[st] = -1;
        a->watcher.pidfd = -1;
        loop->data = a;
        /* main holds them from its first line; a caller that did not is
         * covered from here. */
        hp_signals_hold();

        a->ended_stats = calloc((size_t)cfg->nproc, sizeof(*a->ended_stats));
        if (a->ended_stats == NULL) {
                snprintf(errbuf, errlen, "out of memory");
                return -ENOMEM;
        }
        if (gethostname(a->hostname, sizeof(a->hostname) - 1) < 0)
                snprintf(a->hostname, sizeof(a->hostname), "localhost");

        r = init_round(a, errbuf, errlen);
        if (r < 0)
                return r;
        /* The rules first: a start refused for its rules file leaves no
         * log directory behind. */
        r = hp_rulewatch__init(
                &a->rules,
                &(struct hp_rulewatch_params){
                        .loop = loop,
                        .nproc = a->round.nproc,
                        .monitored = cfg->monitored,
                        .rules_path = cfg->log_monitoring_config,
                        .strict = cfg->strict,
                        .read_now = rules_read_now_cb,
                        .commit_output = rules_commit_cb,
                        .on_verdict = rules_verdict_cb,
                        .ctx = a },
                errbuf, errlen);
        if (r == 0)
                r = hp_agent__forensics_init(a, errbuf, errlen);
        if (r == 0)
                r = hp_agent__health_init(a, errbuf, errlen);
        if (r < 0) {
                if (r == -ENOMEM)
                        snprintf(errbuf, errlen, "out of memory");
                hp_agent__health_close(a);
                hp_forensics_close(a->forensics);
                hp_rulewatch__close(&a->rules);
                return r;
        }
        r = hp_agent__prepare_log_dirs(a, errbuf, errlen);
        if (r < 0) {
                hp_agent__health_close(a);
                hp_forensics_close(a->forensics);
                hp_rulewatch__close(&a->rules);
                return r;
        }

        init_process(a);
        r = hp_ipc_server_start(&a->ipc, loop, a->round.nproc, errbuf,
                                errlen);
        if (r == 0) {
                r = hp_ftmon_init(&a->ft, loop, cfg, a->round.nproc,
                                  ft_verdict_cb, a, errbuf, errlen);
                if (r == 0)
                        r = hp_ftmon_attach(&a->ft, &a->ipc);
                if (r < 0) {
                        hp_ftmon_close(&a->ft);
                        hp_ipc_server_close(&a->ipc);
                        uv_run(loop, UV_RUN_NOWAIT);
                }
        }
        if (r < 0) {
                hp_watcher__stop(&a->watcher);
                hp_scope__root_close(&a->scopes);
                hp_agent__health_close(a);
                hp_forensics_close(a->forensics);
                hp_rulewatch__close(&a->rules);
                hp_agent__close_log_dirs(a);
                return r;
        }
        r = init_consoles(a);
        if (r < 0)
                goto err;
        start_signals(a);
        return 0;

err:
        hp_watcher__stop(&a->watcher);
        hp_scope__root_close(&a->scopes);
        hp_agent__health_close(a);
        hp_ftmon_close(&a->ft);
        hp_ipc_server_close(&a->ipc);
        hp_forensics_close(a->forensics);
        hp_agent__close_log_dirs(a);
        snprintf(errbuf, errlen, "cannot start the console output: %s",
                 hp_strerror(r));
        return r;
}

void hp_agent_print_failure_summary(struct hp_agent *a,
                                    const struct hp_group *g)
{
        hp_agent__print_failure_summary(a, g);
}

static void reap_leftovers(void)
{
        struct timespec pause = { 0, 1000000 };

        /* Bounded: a process stuck in uninterruptible sleep cannot be
         * reaped, and must not keep the agent from exiting. */
        for (int i = 0; i < 2000; i++) {
                pid_t pid = waitpid(-1, NULL, WNOHANG);
                if (pid < 0)
                        return; /* ECHILD: all reaped */
                if (pid == 0)
                        nanosleep(&pause, NULL);
                else /* named as the loop's sweep names an orphan */
                        hp_log_debug("reaped orphan pid %d", (int)pid);
        }
}

void hp_agent_close(struct hp_agent *a)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(forwarded_signals); i++)
                uv_close((uv_handle_t *)&a->signals[i], NULL);
        uv_close((uv_handle_t *)&a->sigchld, NULL);
        uv_close((uv_handle_t *)&a->group.timer, NULL);
        hp_ftmon_close(&a->ft);
        hp_ipc_server_close(&a->ipc);
        hp_agent__health_close(a);
        hp_forensics_close(a->forensics);
        hp_stream_hub_close(a->stream_hub);
        hp_rulewatch__close(&a->rules);
        hp_rdzv_unwatch(&a->rdzv);
        uv_run(a->loop, UV_RUN_DEFAULT);
        /* A store this agent hosts (c10d) goes with it, after the exit
         * barrier when the job succeeded; its thread may still log, so
         * before the consoles close. */
        hp_rdzv_close(&a->rdzv, a->exit_code == 0);

        /* Each group ended with everything it started; anything alive
         * now is a leftover of a group that gave up on it. The job is
         * over, so it goes too. */
        if (hp_proc__kill_descendants(SIGKILL, true) > 0)
                reap_leftovers();
        else
                (void)hp_reaper__sweep(NULL, NULL);
        hp_watcher__stop(&a->watcher);
        hp_scope__root_close(&a->scopes);
        hp_agent__close_log_dirs(a);

        /* The sink must never outlive its console. The stdout console's
         * last losses are known once it is closed. */
        if (a->console_for_err == a->console_out)
                hp_log_set_sink(NULL, NULL);
        hp_console_close(a->console_out, 5000);
        report_console(a, 0);
        hp_log_set_sink(NULL, NULL);
        hp_console_close(a->console_err, 5000);
        hp_console_free(a->console_err);
        hp_console_free(a->console_out);
        a->console_err = a->console_out = NULL;
        if (hp_log_dropped() > 0)
                hp_log_warn("%llu of the agent's messages were dropped: "
                            "stderr was not read",
                            (unsigned long long)hp_log_dropped());
}

/* ---- The log rule watch's callbacks, and its driver-facing calls ---- */

static void rules_read_now_cb(void *ctx)
{
        struct hp_agent *a = ctx;

        hp_stream_hub_read_now(a->stream_hub);
}

static void rules_commit_cb(void *ctx)
{
        struct hp_agent *a = ctx;

        hp_stream_hub_commit_ordered(a->stream_hub);
}

/* The rank monitor's verdict, in the rule verdict's shape: it stops and
 * restarts the workers, or faults the operator, the same way. */
static void ft_verdict_cb(void *ctx, const struct hp_ft_verdict *fv)
{
        static const enum hp_verdict_kind kinds[] = {
                [HP_FT_MISS_INITIAL] = HP_VERDICT_INITIAL_HEARTBEAT,
                [HP_FT_MISS_HEARTBEAT] = HP_VERDICT_HEARTBEAT,
                [HP_FT_MISS_SECTION] = HP_VERDICT_SECTION,
                [HP_FT_MISS_OUT_OF_SECTION] = HP_VERDICT_OUT_OF_SECTION,
        };
        struct hp_agent *a = ctx;
        struct hp_verdict v = { .state = LOGMON_HANGING };
        char reason[HP_VERDICT_REASON_MAX], msg[768];
        const struct hp_worker *w;

        /* The attempt's first verdict only, while its workers run. */
        if (a->verdict.state != LOGMON_WAITING ||
            !hp_group__active(&a->group) || a->group.stopping)
                return;
        if (fv->kind == HP_FT_VERDICT_STRAGGLER) {
                v.state = LOGMON_SLOW;
                v.kind = HP_VERDICT_STRAGGLER;
                snprintf(v.rule, sizeof(v.rule), "straggler");
        } else {
                v.kind = kinds[fv->j.miss];
                snprintf(v.rule, sizeof(v.rule), "%s",
                         fv->j.miss == HP_FT_MISS_SECTION
                                 ? fv->section
                                 : hp_ft_miss_name(fv->j.miss));
                v.deadline_ms = fv->j.deadline_ms;
                v.timeout_ms = fv->j.timeout_ms;
                v.latency_ms = fv->latency_us / 1000;
        }
        v.speed = fv->speed;
        v.local_rank = fv->local_rank;
        w = fv->local_rank < a->group.count
                    ? &a->group.workers[fv->local_rank]
                    : NULL;
        v.rank = w != NULL ? w->rank : (int)fv->rank;
        v.seen_ms = fv->seen_ms;
        v.wall = (double)(hp_stream_hub_wall_offset_ms(a->stream_hub) +
                          fv->seen_ms) /
                 1000.0;
        (void)hp_verdict_reason(&v, reason, sizeof(reason));
        (void)hp_verdict_describe(&v, msg, sizeof(msg));
        if (fv->kind == HP_FT_VERDICT_STRAGGLER)
                hp_log_warn("rank monitor verdict %s: %s", reason, msg);
        else
                hp_log_warn(
                        "rank monitor verdict %s: %s; judged %.3f ms past "
                        "the deadline",
                        reason, msg, (double)fv->latency_us / 1000.0);
        hp_agent__rule_verdict(a, &v);
}

static void rules_verdict_cb(void *ctx, const struct hp_verdict *v)
{
        hp_agent__rule_verdict(ctx, v);
}

/* The verdict copy goes after the watch's settle, which may still bring
 * one from a rule thread. */
int hp_agent_use_rules(struct hp_agent *a, struct logmon_ruleset *rs)
{
        int r = hp_rulewatch__use(&a->rules, rs);

        memset(&a->verdict, 0, sizeof(a->verdict));
        return r;
}

void hp_agent_clear_rules(struct hp_agent *a)
{
        hp_rulewatch__clear(&a->rules);
        memset(&a->verdict, 0, sizeof(a->verdict));
}

void hp_agent_settle_rules(struct hp_agent *a)
{
        hp_rulewatch__settle(&a->rules);
}

uint64_t hp_agent_rule_lines_skipped(const struct hp_agent *a)
{
        return hp_rulewatch__lines_skipped(&a->rules);
}

void hp_agent_suspend_rules(struct hp_agent *a)
{
        hp_rulewatch__suspend(&a->rules);
        hp_ftmon_pause(&a->ft);
}

void hp_agent_resume_rules(struct hp_agent *a)
{
        hp_rulewatch__resume(&a->rules, a->round.base_rank);
        hp_ftmon_resume(&a->ft);
}
