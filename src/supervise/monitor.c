/* Log rules on the workers' stdout: the glue between the pure rule engine
 * (src/logmon) and the loop. The engine never reads a clock; this file
 * feeds it lines with uv_now() and keeps one timer armed at the earliest
 * deadline of all monitored ranks. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

struct hp_monitor *hp_agent__monitor_for(struct hp_agent *a,
                                         enum hp_stage stage, int local_rank)
{
        int rank = stage == HP_STAGE_TRAIN ? local_rank : 0;

        if (a->monitors == NULL || rank >= a->round.nproc ||
            a->monitors[rank].rules == NULL)
                return NULL;
        return &a->monitors[rank];
}

static void rule_timer_cb(uv_timer_t *timer);

/* What every rule thread compares with (hp_rule_worker_set). */
static void workers_set(struct hp_agent *a, uint64_t armed, bool taken)
{
        for (int i = 0; i < a->rule_worker_count; i++)
                if (a->rule_workers[i] != NULL)
                        hp_rule_worker_set(a->rule_workers[i], armed, taken);
}

/* Arms the timer for deadline if it is earlier than the armed one. A later
 * deadline is left to the timer callback, which recomputes the minimum:
 * that keeps the per-line cost at one comparison. */
static void arm(struct hp_agent *a, uint64_t deadline)
{
        uint64_t now;

        if (deadline >= a->rule_deadline)
                return;
        now = uv_now(a->loop);
        a->rule_deadline = deadline;
        uv_timer_start(&a->rule_timer, rule_timer_cb,
                       deadline > now ? deadline - now : 0, 0);
        workers_set(a, deadline, a->verdict[0] != '\0');
}

static void rearm_all(struct hp_agent *a)
{
        a->rule_deadline = UINT64_MAX;
        uv_timer_stop(&a->rule_timer);
        workers_set(a, UINT64_MAX, a->verdict[0] != '\0');
        for (int i = 0; a->monitors && i < a->round.nproc; i++)
                if (a->monitors[i].rules != NULL)
                        arm(a, logmon_stream_next_deadline(
                                       a->monitors[i].rules));
}

/* The verdict's log line, in the words a replay of the console prints
 * (logmon_verdict_format), with times on the wall clock as ${time}
 * stamps the console (the loop's ms plus the hub's offset), how long
 * after the state change the agent judged, and the line that made it or
 * the rule's last matching line. */
static void log_verdict(struct hp_agent *a, struct hp_monitor *m,
                        const struct logmon_rule_info *info)
{
        uint64_t at = logmon_verdict_time(m->rules);
        double late = at != UINT64_MAX ?
                              (double)uv_hrtime() / 1e6 - (double)at : 0;
        char what[768];

        /* The line that made the verdict goes out first, where both reach
         * one file (a pod's log), so that the console reads in order. */
        for (size_t i = 0; i < a->stream_hub.console_count; i++)
                hp_console_commit_ordered(a->stream_hub.consoles[i]);
        if (logmon_verdict_format(m->rules, m->local_rank,
                                  a->stream_hub.wall_offset_ms, what,
                                  sizeof(what)) != 0)
                snprintf(what, sizeof(what), "%s on local rank %d",
                         a->verdict, m->local_rank);
        if (info != NULL && info->last_line != NULL)
                hp_log_warn("log rule verdict %s; judged %.6f s later; "
                            "last matching line: %.*s", what,
                            late > 0 ? late / 1e3 : 0.0,
                            (int)(info->last_line_len > 400
                                          ? 400
                                          : info->last_line_len),
                            info->last_line);
        else
                hp_log_warn("log rule verdict %s; judged %.6f s later; no "
                            "line matched the rule yet", what,
                            late > 0 ? late / 1e3 : 0.0);
}

void hp_agent__log_rule_change(struct hp_agent *a, int rank,
                               const struct logmon_event *e, uint64_t t_ms,
                               const char *line, size_t len)
{
        char what[LOGMON_NAME_MAX + 128];

        if (logmon_change_format(a->ruleset, e, rank, t_ms,
                                 a->stream_hub.wall_offset_ms, what,
                                 sizeof(what)) != 0)
                return;
        if (line != NULL)
                hp_log_debug("log rule state change %s; line: %.*s", what,
                             (int)(len > 400 ? 400 : len), line);
        else
                hp_log_debug("log rule state change %s", what);
}

/* The state changes one feed or tick brought, at debug. A rule that a
 * tick turned HANGING changed at its deadline, which is the time a replay
 * gives it, not when the timer happened to run. */
static void log_changes(struct hp_agent *a, const struct hp_monitor *m,
                        const struct logmon_events *ev, uint64_t now,
                        const char *line, size_t len)
{
        for (size_t i = 0; i < ev->n; i++) {
                const struct logmon_event *e = &ev->ev[i];
                struct logmon_rule_info info;
                uint64_t t = now;

                if (e->kind != LOGMON_EVENT_STATE)
                        continue;
                if (line == NULL && e->to == LOGMON_HANGING &&
                    logmon_stream_rule_info(m->rules, e->rule, &info) == 0 &&
                    info.due_ms < now)
                        t = info.due_ms;
                hp_agent__log_rule_change(a, m->local_rank, e, t, line, len);
        }
}

/* deadline: the timer's deadline when a tick found the verdict, or
 * UINT64_MAX when a line did (no lateness then). */
static void check_verdict(struct hp_monitor *m, uint64_t deadline)
{
        struct hp_agent *a = m->agent;
        struct logmon_rule_info info;
        bool have_info;
        int rule;

        if (logmon_stream_state(m->rules) < LOGMON_SLOW || a->verdict[0])
                return;
        rule = logmon_stream_reason_rule(m->rules);
        snprintf(a->verdict, sizeof(a->verdict), "%s",
                 logmon_stream_reason(m->rules));
        a->verdict_line[0] = '\0';
        a->verdict_rank = m->local_rank;
        a->verdict_latency_ms = 0;
        if (deadline != UINT64_MAX && uv_now(a->loop) > deadline)
                a->verdict_latency_ms = uv_now(a->loop) - deadline;
        have_info = rule >= 0 && logmon_stream_rule_info(
                                         m->rules, (size_t)rule, &info) == 0;
        if (have_info && info.last_line != NULL)
                snprintf(a->verdict_line, sizeof(a->verdict_line), "%.*s",
                         (int)(info.last_line_len < sizeof(a->verdict_line)
                                       ? info.last_line_len
                                       : sizeof(a->verdict_line) - 1),
                         info.last_line);
        log_verdict(a, m, have_info ? &info : NULL);
        hp_forensics_note_silence(a, "the verdict");
        hp_agent__rule_verdict(a);
}

static void take_verdict(struct hp_agent *a, int rank)
{
        check_verdict(&a->monitors[rank], UINT64_MAX);
}

/* Makes the streams the loop's: every line queued for the rule worker fed
 * and its verdicts taken. Every function here that touches a stream other
 * than for an inline line calls it first. */
static void settle(struct hp_agent *a)
{
        bool earlier, any = false;

        for (int i = 0; i < a->rule_worker_count; i++) {
                if (a->rule_workers[i] == NULL)
                        continue;
                hp_rule_worker_settle(a->rule_workers[i], take_verdict,
                                      &earlier);
                any = any || earlier;
        }
        if (any)
                rearm_all(a);
}

void hp_agent_settle_rules(struct hp_agent *a)
{
        settle(a);
}

/* The rule thread of a local rank, started on its first flood; NULL when
 * none can be started (its lines are then evaluated here, as always
 * before). */
static struct hp_rule_worker *worker_for(struct hp_agent *a,
                                         const struct hp_monitor *m)
{
        struct hp_rule_worker **w;
        int r;

        if (a->rule_worker_count == 0)
                return NULL;
        w = &a->rule_workers[m->worker_slot];
        if (*w != NULL || a->rule_worker_failed)
                return *w;
        r = hp_rule_worker_new(a, &a->rule_wake, w);
        if (r < 0) {
                a->rule_worker_failed = true;
                hp_log_warn("cannot start a thread for the log rules (%s); "
                            "they run on the main thread", hp_strerror(r));
                return NULL;
        }
        hp_rule_worker_set(*w, a->rule_deadline, a->verdict[0] != '\0');
        return *w;
}

void hp_agent__monitor_line_cb(void *ctx, const char *line, size_t len,
                               enum hp_line_end end)
{
        struct hp_monitor *m = ctx;
        struct hp_agent *a = m->agent;
        struct hp_rule_worker *w = a->rule_worker_count > 0 ?
                a->rule_workers[m->worker_slot] : NULL;

        /* A line that takes the iteration past HP_RULE_INLINE_NS sends
         * the rest to the worker. The clock is read on the 1st, 2nd, 4th
         * ... 64th line and every 64th after: a slow rule is caught after
         * its first line, a fast one costs a clock read per 64 lines. */
        if (a->rule_inline == 0) {
                a->rule_inline_start = uv_hrtime();
        } else if (a->rule_inline < HP_RULE_INLINE_MAX &&
                   ((a->rule_inline & 63) == 0 ||
                    (a->rule_inline & (a->rule_inline - 1)) == 0) &&
                   uv_hrtime() - a->rule_inline_start > HP_RULE_INLINE_NS) {
                a->rule_inline = HP_RULE_INLINE_MAX;
                a->rule_inline_off_until =
                        uv_now(a->loop) + HP_RULE_INLINE_OFF_MS;
        }
        /* A rank's lines stay in order: once one is queued, the ones after
         * it are too, until its worker has caught up. */
        if (a->rule_inline >= HP_RULE_INLINE_MAX ||
            (w != NULL && !hp_rule_worker_idle(w))) {
                if (w == NULL)
                        w = worker_for(a, m);
                if (w != NULL) {
                        hp_rule_worker_push(w, m->local_rank, line, len,
                                            uv_now(a->loop), take_verdict);
                        return;
                }
        }
        a->rule_inline++;
        if (hp_log_get_level() >= HP_LOG_DEBUG) {
                struct logmon_events ev;

                /* What the thread's lines changed comes first. */
                if (w != NULL)
                        hp_rule_worker_log_changes(w);

                logmon_stream_feed(m->rules, line, len, uv_now(a->loop), &ev);
                log_changes(a, m, &ev, uv_now(a->loop), line, len);
        } else {
                logmon_stream_feed(m->rules, line, len, uv_now(a->loop),
                                   NULL);
        }
        check_verdict(m, UINT64_MAX);
        arm(a, logmon_stream_next_deadline(m->rules));
}

uint64_t hp_agent_rule_lines_skipped(const struct hp_agent *a)
{
        uint64_t n = 0;

        for (int i = 0; i < a->rule_worker_count; i++)
                if (a->rule_workers[i] != NULL)
                        n += hp_rule_worker_skipped(a->rule_workers[i]);
        return n;
}

/* Matches abandoned at a PCRE2 limit, over every watched rank; false
 * when a rule thread holds a rank's stream now (it is not counted then). */
static bool limit_hits(const struct hp_agent *a, uint64_t *out)
{
        uint64_t n = 0;

        for (int i = 0; a->monitors && i < a->round.nproc; i++) {
                const struct hp_monitor *m = &a->monitors[i];
                const struct hp_rule_worker *w =
                        a->rule_worker_count > 0
                                ? a->rule_workers[m->worker_slot]
                                : NULL;

                if (m->rules == NULL)
                        continue;
                if (w != NULL && !hp_rule_worker_idle(w))
                        return false;
                for (size_t r = 0; r < logmon_ruleset_count(a->ruleset);
                     r++) {
                        struct logmon_rule_info info;

                        if (logmon_stream_rule_info(m->rules, r, &info) == 0)
                                n += info.limit_hits;
                }
        }
        *out = n;
        return true;
}

/* Warns about lines the rules missed and matches given up at a PCRE2
 * limit since the last warning; true if it warned. Both are counted in
 * /metrics too; the warnings are rate-limited by the caller. */
static bool report_rules(struct hp_agent *a)
{
        uint64_t skipped = hp_agent_rule_lines_skipped(a), limits;
        bool warned = false;

        /* A rank's stream that a rule thread holds is looked at later. */
        if (!limit_hits(a, &limits))
                limits = a->rule_limit_reported;
        /* Rule state, and with it the count, starts over with an attempt. */
        if (limits < a->rule_limit_reported)
                a->rule_limit_reported = 0;
        if (skipped > a->rule_skipped_reported) {
                hp_log_warn("log rules fell behind the output: %llu "
                            "monitored line%s not evaluated (%llu in all); "
                            "the log files and the console have them "
                            "(rules are advisory)",
                            (unsigned long long)(skipped -
                                                 a->rule_skipped_reported),
                            skipped - a->rule_skipped_reported == 1 ? ""
                                                                    : "s",
                            (unsigned long long)skipped);
                a->rule_skipped_reported = skipped;
                warned = true;
        }
        if (limits > a->rule_limit_reported) {
                hp_log_warn("log rules: %llu match%s given up at the PCRE2 "
                            "match or depth limit (%llu in all), counted as "
                            "no match; a pattern backtracks too much",
                            (unsigned long long)(limits -
                                                 a->rule_limit_reported),
                            limits - a->rule_limit_reported == 1 ? "" : "es",
                            (unsigned long long)limits);
                a->rule_limit_reported = limits;
                warned = true;
        }
        return warned;
}

/* Once per loop iteration, after the reads: what was queued goes to the
 * worker, and the next iteration may evaluate lines here again. */
static void rule_check_cb(uv_check_t *check)
{
        struct hp_agent *a = hp_container_of(check, struct hp_agent,
                                             rule_check);
        uint64_t now = uv_now(a->loop);

        a->rule_inline = now < a->rule_inline_off_until ? HP_RULE_INLINE_MAX
                                                        : 0;
        for (int i = 0; i < a->rule_worker_count; i++)
                if (a->rule_workers[i] != NULL)
                        hp_rule_worker_publish(a->rule_workers[i]);
        if (now >= a->rule_report_at)
                a->rule_report_at = now + (report_rules(a)
                                                   ? HP_RULE_WARN_MS
                                                   : HP_RULE_REPORT_MS);
}

static void rule_wake_cb(uv_async_t *wake)
{
        settle(hp_container_of(wake, struct hp_agent, rule_wake));
}

static void rule_timer_cb(uv_timer_t *timer)
{
        struct hp_agent *a = hp_container_of(timer, struct hp_agent,
                                             rule_timer);
        uint64_t now, deadline = a->rule_deadline;

        /* Reads are paced (up to HP_READ_PACE_MS): a progress line that
         * came in before the deadline may still sit in its pipe. The lines
         * read now are fed at now, after the deadline, which still counts
         * them as in time: a matching line is recorded before any tick. */
        hp_stream_hub_read_now(&a->stream_hub);
        uv_update_time(a->loop);
        now = uv_now(a->loop);
        settle(a);
        for (int i = 0; i < a->round.nproc; i++) {
                struct hp_monitor *m = &a->monitors[i];
                if (m->rules == NULL)
                        continue;
                if (hp_log_get_level() >= HP_LOG_DEBUG) {
                        struct logmon_events ev;

                        logmon_stream_tick(m->rules, now, &ev);
                        log_changes(a, m, &ev, now, NULL, 0);
                } else {
                        logmon_stream_tick(m->rules, now, NULL);
                }
                check_verdict(m, deadline);
        }
        rearm_all(a);
}

/* Gives every watched rank a fresh monitor on a->ruleset. */
static int make_streams(struct hp_agent *a)
{
        settle(a);
        for (int i = 0; i < a->round.nproc; i++) {
                if (a->monitors[i].rules != NULL)
                        logmon_stream_free(a->monitors[i].rules);
                a->monitors[i].rules = NULL;
                if (a->ruleset == NULL || !a->cfg->monitored[i])
                        continue;
                a->monitors[i].rules = logmon_stream_new(a->ruleset);
                if (a->monitors[i].rules == NULL)
                        return -ENOMEM;
        }
        a->monitors_fresh = true;
        a->verdict[0] = '\0';
        workers_set(a, a->rule_deadline, false);
        return 0;
}

int hp_agent__monitors_init(struct hp_agent *a, char *errbuf, size_t errlen)
{
        const struct hp_config *cfg = a->cfg;
        const char *warnings;
        int r, watched = 0;

        a->rule_deadline = UINT64_MAX;
        uv_timer_init(a->loop, &a->rule_timer);
        /* Neither keeps the loop alive: they serve lines, which come from
         * pipes that do. */
        uv_async_init(a->loop, &a->rule_wake, rule_wake_cb);
        uv_unref((uv_handle_t *)&a->rule_wake);
        uv_check_init(a->loop, &a->rule_check);
        uv_check_start(&a->rule_check, rule_check_cb);
        uv_unref((uv_handle_t *)&a->rule_check);
        /* One slot per local rank, rules or not: the operator may send
         * rules with /start. */
        a->monitors = calloc((size_t)a->round.nproc, sizeof(*a->monitors));
        if (a->monitors == NULL)
                return -ENOMEM;
        for (int i = 0; i < a->round.nproc; i++) {
                a->monitors[i].agent = a;
                a->monitors[i].local_rank = i;
                if (cfg->monitored[i])
                        watched++;
        }
        /* One rule thread per core (with the loop thread, the scheduler
         * then balances the reads and the rules over all of them), up to
         * HP_RULE_WORKERS_MAX and the ranks watched. None starts before a
         * flood. */
        a->rule_worker_count = (int)uv_available_parallelism();
        if (a->rule_worker_count > HP_RULE_WORKERS_MAX)
                a->rule_worker_count = HP_RULE_WORKERS_MAX;
        if (a->rule_worker_count > watched)
                a->rule_worker_count = watched;
        for (int i = 0; i < a->round.nproc; i++)
                a->monitors[i].worker_slot =
                        a->rule_worker_count > 0 ? i % a->rule_worker_count
                                                 : 0;
        if (cfg->log_monitoring_config == NULL)
                return 0;
        r = logmon_config_load_ruleset(cfg->log_monitoring_config,
                                       &(struct logmon_ruleset_opts){
                                               .strict = cfg->strict },
                                       &a->cli_ruleset, errbuf, errlen);
        if (r < 0)
                return r;
        warnings = logmon_ruleset_warnings(a->cli_ruleset);
        if (warnings != NULL && warnings[0] != '\0')
                hp_log_warn("%s: %s", cfg->log_monitoring_config, warnings);
        a->ruleset = logmon_ruleset_ref(a->cli_ruleset);
        r = make_streams(a);
        if (r < 0)
                return r;
        hp_log_info("%zu log rule%s from %s on stdout of local rank%s %s",
                    logmon_ruleset_count(a->ruleset),
                    logmon_ruleset_count(a->ruleset) == 1 ? "" : "s",
                    cfg->log_monitoring_config,
                    cfg->monitored[1] ? "s" : "",
                    cfg->monitored[1] ? "as given" : "0");
        return 0;
}

int hp_agent_use_rules(struct hp_agent *a, struct logmon_ruleset *rs)
{
        if (rs == NULL)
                rs = a->cli_ruleset;
        hp_agent_clear_rules(a);
        if (a->ruleset != NULL)
                logmon_ruleset_unref(a->ruleset);
        a->ruleset = rs ? logmon_ruleset_ref(rs) : NULL;
        return make_streams(a);
}

void hp_agent_clear_rules(struct hp_agent *a)
{
        hp_agent__monitors_clear(a);
}

/* Monitoring runs while a stage's processes run: the first stage of an
 * attempt starts the rule clocks, later stages resume them. */
void hp_agent__monitors_resume(struct hp_agent *a)
{
        uint64_t now = uv_now(a->loop);
        bool started = false;

        settle(a);
        for (int i = 0; a->monitors && i < a->round.nproc; i++) {
                struct logmon_stream *s = a->monitors[i].rules;
                if (s == NULL)
                        continue;
                if (a->monitors_fresh && !started) {
                        char iso[HP_ISO8601_MS_LEN + 1];

                        /* What a replay of the console starts its rule
                         * clocks at. */
                        hp_iso8601_ms((int64_t)now +
                                              a->stream_hub.wall_offset_ms,
                                      iso);
                        hp_log_info("log rules: clock started at %s", iso);
                        started = true;
                }
                if (a->monitors_fresh)
                        logmon_stream_start(s, now);
                else
                        logmon_stream_resume(s, now);
        }
        a->monitors_fresh = false;
        rearm_all(a);
}

/* Between stages and while stopped, time does not count. */
void hp_agent__monitors_suspend(struct hp_agent *a)
{
        uint64_t now = uv_now(a->loop);

        settle(a);
        for (int i = 0; a->monitors && i < a->round.nproc; i++)
                if (a->monitors[i].rules != NULL)
                        logmon_stream_suspend(a->monitors[i].rules, now);
        a->rule_deadline = UINT64_MAX;
        uv_timer_stop(&a->rule_timer);
}

/* The attempt is over: the next one starts with fresh rule state. */
void hp_agent__monitors_clear(struct hp_agent *a)
{
        settle(a);
        for (int i = 0; a->monitors && i < a->round.nproc; i++)
                if (a->monitors[i].rules != NULL)
                        logmon_stream_clear(a->monitors[i].rules);
        a->monitors_fresh = true;
        a->verdict[0] = '\0';
        a->rule_deadline = UINT64_MAX;
        uv_timer_stop(&a->rule_timer);
        workers_set(a, UINT64_MAX, false);
}

void hp_agent__monitors_close(struct hp_agent *a)
{
        settle(a);
        (void)report_rules(a);
        for (int i = 0; i < a->rule_worker_count; i++) {
                hp_rule_worker_free(a->rule_workers[i]);
                a->rule_workers[i] = NULL;
        }
        for (int i = 0; a->monitors && i < a->round.nproc; i++)
                if (a->monitors[i].rules != NULL)
                        logmon_stream_free(a->monitors[i].rules);
        free(a->monitors);
        a->monitors = NULL;
        if (a->ruleset != NULL)
                logmon_ruleset_unref(a->ruleset);
        a->ruleset = NULL;
        if (a->cli_ruleset != NULL)
                logmon_ruleset_unref(a->cli_ruleset);
        a->cli_ruleset = NULL;
        uv_close((uv_handle_t *)&a->rule_timer, NULL);
        uv_close((uv_handle_t *)&a->rule_wake, NULL);
        uv_close((uv_handle_t *)&a->rule_check, NULL);
}
