/* SPDX-License-Identifier: Apache-2.0 */
/* The log rule watch on the workers' stdout: the glue between the pure
 * rule engine (src/logmon) and the loop. The engine never reads a clock;
 * the watch feeds it lines with uv_now(), keeps one timer armed at the
 * earliest deadline of all watched ranks, and hands the attempt's first
 * verdict to its owner through a callback. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

struct hp_rulewatch__rank *hp_rulewatch__rank(struct hp_rulewatch *w,
                                              int local_rank)
{
        if (w->ranks == NULL || local_rank < 0 || local_rank >= w->nproc ||
            w->ranks[local_rank].stream == NULL)
                return NULL;
        return &w->ranks[local_rank];
}

const struct logmon_ruleset *
hp_rulewatch__ruleset(const struct hp_rulewatch *w)
{
        return w->ranks != NULL ? w->ruleset : NULL;
}

const struct logmon_stream *hp_rulewatch__stream(const struct hp_rulewatch *w,
                                                 int local_rank)
{
        if (w->ranks == NULL || local_rank < 0 || local_rank >= w->nproc)
                return NULL;
        return w->ranks[local_rank].stream;
}

void hp_rulewatch__set_wall_offset(struct hp_rulewatch *w,
                                   int64_t wall_offset_ms)
{
        w->wall_offset_ms = wall_offset_ms;
}

static void timer_cb(uv_timer_t *timer);

/* What every rule thread compares with (hp_rulewatch__thread_set). */
static void threads_set(struct hp_rulewatch *w, uint64_t armed, bool taken)
{
        for (int i = 0; i < w->thread_count; i++)
                if (w->threads[i] != NULL)
                        hp_rulewatch__thread_set(w->threads[i], armed, taken);
}

/* Arms the timer for deadline if it is earlier than the armed one. A later
 * deadline is left to the timer callback, which recomputes the minimum:
 * that keeps the per-line cost at one comparison. */
static void arm(struct hp_rulewatch *w, uint64_t deadline)
{
        uint64_t now;

        if (deadline >= w->deadline)
                return;
        now = uv_now(w->loop);
        w->deadline = deadline;
        uv_timer_start(&w->timer, timer_cb,
                       deadline > now ? deadline - now : 0, 0);
        threads_set(w, deadline, w->judged);
}

static void rearm_all(struct hp_rulewatch *w)
{
        w->deadline = UINT64_MAX;
        uv_timer_stop(&w->timer);
        threads_set(w, UINT64_MAX, w->judged);
        for (int i = 0; w->ranks && i < w->nproc; i++)
                if (w->ranks[i].stream != NULL)
                        arm(w,
                            logmon_stream_next_deadline(w->ranks[i].stream));
}

/* The verdict's log line, in the words a replay of the console prints
 * (logmon_verdict_format), with times on the wall clock as ${time}
 * stamps the console (the loop's ms plus the consoles' offset), how long
 * after the state change the agent judged, and the line that made it or
 * the rule's last matching line. */
static void log_verdict(struct hp_rulewatch *w, struct hp_rulewatch__rank *m,
                        const struct logmon_rule_info *info)
{
        uint64_t at = logmon_verdict_time(m->stream);
        double late = at != UINT64_MAX
                              ? (double)uv_hrtime() / 1e6 - (double)at
                              : 0;
        char what[768];

        /* The line that made the verdict goes out first, where both reach
         * one file (a pod's log), so that the console reads in order. */
        if (w->commit_output != NULL)
                w->commit_output(w->ctx);
        if (logmon_verdict_format(m->stream, m->local_rank, w->wall_offset_ms,
                                  what, sizeof(what)) != 0) {
                char reason[HP_VERDICT_REASON_MAX];

                (void)hp_verdict_reason(&w->verdict, reason, sizeof(reason));
                snprintf(what, sizeof(what), "%s on local rank %d", reason,
                         m->local_rank);
        }
        if (info != NULL && info->last_line != NULL)
                hp_log_warn("log rule verdict %s; judged %.6f s later; "
                            "last matching line: %.*s",
                            what, late > 0 ? late / 1e3 : 0.0,
                            (int)(info->last_line_len > 400
                                          ? 400
                                          : info->last_line_len),
                            info->last_line);
        else
                hp_log_warn("log rule verdict %s; judged %.6f s later; no "
                            "line matched the rule yet",
                            what, late > 0 ? late / 1e3 : 0.0);
}

void hp_rulewatch__log_change(struct hp_rulewatch *w, int rank,
                              const struct logmon_event *e, uint64_t t_ms,
                              const char *line, size_t len)
{
        char what[LOGMON_NAME_MAX + 128];

        if (logmon_change_format(w->ruleset, e, rank, t_ms, w->wall_offset_ms,
                                 what, sizeof(what)) != 0)
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
static void log_changes(struct hp_rulewatch *w,
                        const struct hp_rulewatch__rank *m,
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
                    logmon_stream_rule_info(m->stream, e->rule, &info) == 0 &&
                    info.due_ms < now)
                        t = info.due_ms;
                hp_rulewatch__log_change(w, m->local_rank, e, t, line, len);
        }
}

/* The attempt's verdict, from rank m's stream, which is SLOW or worse.
 * deadline: the timer's deadline when a tick found it, or UINT64_MAX when
 * a line did (no lateness then); now: the loop's time. */
static void judge(struct hp_rulewatch__rank *m, uint64_t deadline,
                  uint64_t now)
{
        struct hp_rulewatch *w = m->watch;
        struct hp_verdict *v = &w->verdict;
        struct logmon_rule_info info;
        bool have_info;
        int rule;

        rule = logmon_stream_reason_rule(m->stream);
        memset(v, 0, sizeof(*v));
        v->state = logmon_stream_state(m->stream);
        if (rule >= 0)
                snprintf(v->rule, sizeof(v->rule), "%s",
                         logmon_ruleset_rule_name(w->ruleset, (size_t)rule));
        v->local_rank = m->local_rank;
        v->rank = w->base_rank + m->local_rank;
        v->deadline_ms = deadline;
        v->seen_ms = now;
        if (deadline != UINT64_MAX && now > deadline)
                v->latency_ms = now - deadline;
        v->wall = (double)((int64_t)now + w->wall_offset_ms) / 1000.0;
        have_info = rule >= 0 &&
                    logmon_stream_rule_info(m->stream, (size_t)rule, &info) ==
                            0;
        if (have_info && info.last_line != NULL)
                snprintf(v->line, sizeof(v->line), "%.*s",
                         (int)(info.last_line_len < sizeof(v->line)
                                       ? info.last_line_len
                                       : sizeof(v->line) - 1),
                         info.last_line);
        w->judged = true;
        log_verdict(w, m, have_info ? &info : NULL);
        if (w->on_verdict != NULL)
                w->on_verdict(w->ctx, v);
}

/* Kept inline: every line evaluated on the loop thread comes here. */
static inline void check_verdict(struct hp_rulewatch__rank *m,
                                 uint64_t deadline, uint64_t now)
{
        if (!m->watch->judged &&
            logmon_stream_state(m->stream) >= LOGMON_SLOW)
                judge(m, deadline, now);
}

static void take_verdict(struct hp_rulewatch *w, int rank)
{
        check_verdict(&w->ranks[rank], UINT64_MAX, uv_now(w->loop));
}

/* Makes the streams the loop's: every line queued for a rule thread fed
 * and its verdicts taken. Every function here that touches a stream other
 * than for an inline line calls it first. */
void hp_rulewatch__settle(struct hp_rulewatch *w)
{
        bool earlier, any = false;

        for (int i = 0; i < w->thread_count; i++) {
                if (w->threads[i] == NULL)
                        continue;
                hp_rulewatch__thread_settle(w->threads[i], take_verdict,
                                            &earlier);
                any = any || earlier;
        }
        if (any)
                rearm_all(w);
}

/* The rule thread of a local rank, started on its first flood; NULL when
 * none can be started (its lines are then evaluated on the loop
 * thread). */
static struct hp_rule_thread *thread_for(struct hp_rulewatch *w,
                                         const struct hp_rulewatch__rank *m)
{
        struct hp_rule_thread **t;
        int r;

        if (w->thread_count == 0)
                return NULL;
        t = &w->threads[m->thread_slot];
        if (*t != NULL || w->thread_failed)
                return *t;
        r = hp_rulewatch__thread_new(w, &w->wake, hp_rulewatch__log_change,
                                     t);
        if (r < 0) {
                w->thread_failed = true;
                hp_log_warn("cannot start a thread for the log rules (%s); "
                            "they run on the main thread",
                            hp_strerror(r));
                return NULL;
        }
        hp_rulewatch__thread_set(*t, w->deadline, w->judged);
        return *t;
}

void hp_rulewatch__line_cb(void *ctx, const char *line, size_t len,
                           enum hp_line_end end)
{
        struct hp_rulewatch__rank *m = ctx;
        struct hp_rulewatch *w = m->watch;
        struct hp_rule_thread *t = w->thread_count > 0
                                           ? w->threads[m->thread_slot]
                                           : NULL;
        uint64_t now;

        /* A line that takes the iteration past HP_RULE_INLINE_NS sends
         * the rest to the thread. The clock is read on the 1st, 2nd, 4th
         * ... 64th line and every 64th after: a slow rule is caught after
         * its first line, a fast one costs a clock read per 64 lines. */
        if (w->inline_lines == 0) {
                w->inline_start = uv_hrtime();
        } else if (w->inline_lines < HP_RULE_INLINE_MAX &&
                   ((w->inline_lines & 63) == 0 ||
                    (w->inline_lines & (w->inline_lines - 1)) == 0) &&
                   uv_hrtime() - w->inline_start > HP_RULE_INLINE_NS) {
                w->inline_lines = HP_RULE_INLINE_MAX;
                w->inline_off_until = uv_now(w->loop) + HP_RULE_INLINE_OFF_MS;
        }
        /* A rank's lines stay in order: once one is queued, the ones after
         * it are too, until its thread has caught up. */
        if (w->inline_lines >= HP_RULE_INLINE_MAX ||
            (t != NULL && !hp_rulewatch__thread_idle(t))) {
                if (t == NULL)
                        t = thread_for(w, m);
                if (t != NULL) {
                        hp_rulewatch__thread_push(t, m->local_rank, line, len,
                                                  uv_now(w->loop),
                                                  take_verdict);
                        return;
                }
        }
        w->inline_lines++;
        now = uv_now(w->loop);
        if (hp_log_get_level() >= HP_LOG_DEBUG) {
                struct logmon_events ev;

                /* What the thread's lines changed comes first. */
                if (t != NULL)
                        hp_rulewatch__thread_log_changes(t);

                logmon_stream_feed(m->stream, line, len, now, &ev);
                log_changes(w, m, &ev, now, line, len);
        } else {
                logmon_stream_feed(m->stream, line, len, now, NULL);
        }
        check_verdict(m, UINT64_MAX, now);
        arm(w, logmon_stream_next_deadline(m->stream));
}

uint64_t hp_rulewatch__lines_skipped(const struct hp_rulewatch *w)
{
        uint64_t n = 0;

        for (int i = 0; i < w->thread_count; i++)
                if (w->threads[i] != NULL)
                        n += hp_rulewatch__thread_skipped(w->threads[i]);
        return n;
}

/* Matches abandoned at a PCRE2 limit, over every watched rank; false
 * when a rule thread holds a rank's stream now (it is not counted then). */
static bool limit_hits(const struct hp_rulewatch *w, uint64_t *out)
{
        uint64_t n = 0;

        for (int i = 0; w->ranks && i < w->nproc; i++) {
                const struct hp_rulewatch__rank *m = &w->ranks[i];
                const struct hp_rule_thread
                        *t = w->thread_count > 0 ? w->threads[m->thread_slot]
                                                 : NULL;

                if (m->stream == NULL)
                        continue;
                if (t != NULL && !hp_rulewatch__thread_idle(t))
                        return false;
                for (size_t r = 0; r < logmon_ruleset_count(w->ruleset);
                     r++) {
                        struct logmon_rule_info info;

                        if (logmon_stream_rule_info(m->stream, r, &info) == 0)
                                n += info.limit_hits;
                }
        }
        *out = n;
        return true;
}

/* Warns about lines the rules missed and matches given up at a PCRE2
 * limit since the last warning; true if it warned. Both are counted in
 * /metrics too; the warnings are rate-limited by the caller. */
static bool report_rules(struct hp_rulewatch *w)
{
        uint64_t skipped = hp_rulewatch__lines_skipped(w), limits;
        bool warned = false;

        /* A rank's stream that a rule thread holds is looked at later. */
        if (!limit_hits(w, &limits))
                limits = w->limit_reported;
        /* Rule state, and with it the count, starts over with an attempt. */
        if (limits < w->limit_reported)
                w->limit_reported = 0;
        if (skipped > w->skipped_reported) {
                hp_log_warn("log rules fell behind the output: %llu "
                            "monitored line%s not evaluated (%llu in all); "
                            "the log files and the console have them "
                            "(rules are advisory)",
                            (unsigned long long)(skipped -
                                                 w->skipped_reported),
                            skipped - w->skipped_reported == 1 ? "" : "s",
                            (unsigned long long)skipped);
                w->skipped_reported = skipped;
                warned = true;
        }
        if (limits > w->limit_reported) {
                hp_log_warn("log rules: %llu match%s given up at the PCRE2 "
                            "match or depth limit (%llu in all), counted as "
                            "no match; a pattern backtracks too much",
                            (unsigned long long)(limits - w->limit_reported),
                            limits - w->limit_reported == 1 ? "" : "es",
                            (unsigned long long)limits);
                w->limit_reported = limits;
                warned = true;
        }
        return warned;
}

/* Once per loop iteration, after the reads: what was queued goes to the
 * threads, and the next iteration may evaluate lines here again. */
static void check_cb(uv_check_t *check)
{
        struct hp_rulewatch *w = hp_container_of(check, struct hp_rulewatch,
                                                 check);
        uint64_t now = uv_now(w->loop);

        w->inline_lines = now < w->inline_off_until ? HP_RULE_INLINE_MAX : 0;
        for (int i = 0; i < w->thread_count; i++)
                if (w->threads[i] != NULL)
                        hp_rulewatch__thread_publish(w->threads[i]);
        if (now >= w->report_at)
                w->report_at = now + (report_rules(w) ? HP_RULE_WARN_MS
                                                      : HP_RULE_REPORT_MS);
}

static void wake_cb(uv_async_t *wake)
{
        hp_rulewatch__settle(
                hp_container_of(wake, struct hp_rulewatch, wake));
}

/* Applies the deadlines at now; deadline: the one the timer was armed
 * for, which a late verdict is measured from. */
static void tick(struct hp_rulewatch *w, uint64_t deadline, uint64_t now)
{
        hp_rulewatch__settle(w);
        for (int i = 0; w->ranks && i < w->nproc; i++) {
                struct hp_rulewatch__rank *m = &w->ranks[i];
                if (m->stream == NULL)
                        continue;
                if (hp_log_get_level() >= HP_LOG_DEBUG) {
                        struct logmon_events ev;

                        logmon_stream_tick(m->stream, now, &ev);
                        log_changes(w, m, &ev, now, NULL, 0);
                } else {
                        logmon_stream_tick(m->stream, now, NULL);
                }
                check_verdict(m, deadline, now);
        }
        rearm_all(w);
}

void hp_rulewatch__tick(struct hp_rulewatch *w, uint64_t now)
{
        tick(w, w->deadline, now);
}

static void timer_cb(uv_timer_t *timer)
{
        struct hp_rulewatch *w = hp_container_of(timer, struct hp_rulewatch,
                                                 timer);
        uint64_t deadline = w->deadline;

        /* Reads are paced (up to HP_READ_PACE_MS): a progress line that
         * came in before the deadline may still sit in its pipe. The lines
         * read now are fed at now, after the deadline, which still counts
         * them as in time: a matching line is recorded before any tick. */
        if (w->read_now != NULL)
                w->read_now(w->ctx);
        uv_update_time(w->loop);
        tick(w, deadline, uv_now(w->loop));
}

/* Gives every watched rank a fresh rule stream on w->ruleset. */
static int make_streams(struct hp_rulewatch *w)
{
        hp_rulewatch__settle(w);
        for (int i = 0; i < w->nproc; i++) {
                if (w->ranks[i].stream != NULL)
                        logmon_stream_free(w->ranks[i].stream);
                w->ranks[i].stream = NULL;
                if (w->ruleset == NULL || !w->monitored[i])
                        continue;
                w->ranks[i].stream = logmon_stream_new(w->ruleset);
                if (w->ranks[i].stream == NULL)
                        return -ENOMEM;
        }
        w->fresh = true;
        w->judged = false;
        threads_set(w, w->deadline, false);
        return 0;
}

/* A hang rule (one with a clock) on local rank 0 alone misses a rank
 * k > 0 that goes silent, until the collective's own timeout. */
static void warn_rank0_only(const struct hp_rulewatch *w)
{
        int timed;

        if (w->ruleset == NULL || w->nproc < 2 || !w->monitored[0])
                return;
        for (int i = 1; i < w->nproc; i++)
                if (w->monitored[i])
                        return;
        timed = logmon_ruleset_timed(w->ruleset);
        if (timed < 0)
                return;
        hp_log_warn("hang rule %s watches local rank 0 only of %d ranks "
                    "(--log-monitor-ranks 0, the default): a rank k > 0 "
                    "that goes silent is not seen; add "
                    "--log-monitor-ranks all (it costs the rule threads' "
                    "CPU per line), or heartbeats (--ft-rank-heartbeat-"
                    "timeout), which watch every rank at no cost",
                    logmon_ruleset_rule_name(w->ruleset, (size_t)timed),
                    w->nproc);
}

int hp_rulewatch__init(struct hp_rulewatch *w,
                       const struct hp_rulewatch_params *p, char *errbuf,
                       size_t errlen)
{
        const char *warnings;
        int r, watched = 0;

        memset(w, 0, sizeof(*w));
        w->loop = p->loop;
        w->nproc = p->nproc;
        w->monitored = p->monitored;
        w->read_now = p->read_now;
        w->commit_output = p->commit_output;
        w->on_verdict = p->on_verdict;
        w->ctx = p->ctx;
        w->deadline = UINT64_MAX;
        uv_timer_init(w->loop, &w->timer);
        /* Neither keeps the loop alive: they serve lines, which come from
         * pipes that do. */
        uv_async_init(w->loop, &w->wake, wake_cb);
        uv_unref((uv_handle_t *)&w->wake);
        uv_check_init(w->loop, &w->check);
        uv_check_start(&w->check, check_cb);
        uv_unref((uv_handle_t *)&w->check);
        /* One slot per local rank, rules or not: the operator may send
         * rules with /start. */
        w->ranks = calloc((size_t)w->nproc, sizeof(*w->ranks));
        if (w->ranks == NULL)
                return -ENOMEM;
        for (int i = 0; i < w->nproc; i++) {
                w->ranks[i].watch = w;
                w->ranks[i].local_rank = i;
                if (w->monitored[i])
                        watched++;
        }
        /* One rule thread per core (with the loop thread, the scheduler
         * then balances the reads and the rules over all of them), up to
         * HP_RULE_THREADS_MAX and the ranks watched. None starts before a
         * flood. */
        w->thread_count = (int)uv_available_parallelism();
        if (w->thread_count > HP_RULE_THREADS_MAX)
                w->thread_count = HP_RULE_THREADS_MAX;
        if (w->thread_count > watched)
                w->thread_count = watched;
        for (int i = 0; i < w->nproc; i++)
                w->ranks[i].thread_slot = w->thread_count > 0
                                                  ? i % w->thread_count
                                                  : 0;
        if (p->rules_path == NULL)
                return 0;
        r = logmon_config_load_ruleset(p->rules_path,
                                       &(struct logmon_ruleset_opts){
                                               .strict = p->strict },
                                       &w->cli_ruleset, errbuf, errlen);
        if (r < 0)
                return r;
        warnings = logmon_ruleset_warnings(w->cli_ruleset);
        if (warnings != NULL && warnings[0] != '\0')
                hp_log_warn("%s: %s", p->rules_path, warnings);
        w->ruleset = logmon_ruleset_ref(w->cli_ruleset);
        r = make_streams(w);
        if (r < 0)
                return r;
        hp_log_info("%zu log rule%s from %s on stdout of local rank%s %s",
                    logmon_ruleset_count(w->ruleset),
                    logmon_ruleset_count(w->ruleset) == 1 ? "" : "s",
                    p->rules_path, w->nproc > 1 && w->monitored[1] ? "s" : "",
                    w->nproc > 1 && w->monitored[1] ? "as given" : "0");
        warn_rank0_only(w);
        return 0;
}

int hp_rulewatch__use(struct hp_rulewatch *w, struct logmon_ruleset *rs)
{
        if (rs == NULL)
                rs = w->cli_ruleset;
        hp_rulewatch__clear(w);
        if (w->ruleset != NULL)
                logmon_ruleset_unref(w->ruleset);
        w->ruleset = rs ? logmon_ruleset_ref(rs) : NULL;
        if (rs != NULL && rs != w->cli_ruleset)
                warn_rank0_only(w);
        return make_streams(w);
}

void hp_rulewatch__resume(struct hp_rulewatch *w, int base_rank)
{
        uint64_t now = uv_now(w->loop);
        bool started = false;

        hp_rulewatch__settle(w);
        w->base_rank = base_rank;
        for (int i = 0; w->ranks && i < w->nproc; i++) {
                struct logmon_stream *s = w->ranks[i].stream;
                if (s == NULL)
                        continue;
                if (w->fresh && !started) {
                        char iso[HP_ISO8601_MS_LEN + 1];

                        /* What a replay of the console starts its rule
                         * clocks at. */
                        hp_iso8601_ms((int64_t)now + w->wall_offset_ms, iso);
                        hp_log_info("log rules: clock started at %s", iso);
                        started = true;
                }
                if (w->fresh)
                        logmon_stream_start(s, now);
                else
                        logmon_stream_resume(s, now);
        }
        w->fresh = false;
        rearm_all(w);
}

void hp_rulewatch__suspend(struct hp_rulewatch *w)
{
        uint64_t now = uv_now(w->loop);

        hp_rulewatch__settle(w);
        for (int i = 0; w->ranks && i < w->nproc; i++)
                if (w->ranks[i].stream != NULL)
                        logmon_stream_suspend(w->ranks[i].stream, now);
        w->deadline = UINT64_MAX;
        uv_timer_stop(&w->timer);
}

void hp_rulewatch__clear(struct hp_rulewatch *w)
{
        hp_rulewatch__settle(w);
        for (int i = 0; w->ranks && i < w->nproc; i++)
                if (w->ranks[i].stream != NULL)
                        logmon_stream_clear(w->ranks[i].stream);
        w->fresh = true;
        w->judged = false;
        w->deadline = UINT64_MAX;
        uv_timer_stop(&w->timer);
        threads_set(w, UINT64_MAX, false);
}

void hp_rulewatch__close(struct hp_rulewatch *w)
{
        hp_rulewatch__settle(w);
        (void)report_rules(w);
        for (int i = 0; i < w->thread_count; i++) {
                hp_rulewatch__thread_free(w->threads[i]);
                w->threads[i] = NULL;
        }
        for (int i = 0; w->ranks && i < w->nproc; i++)
                if (w->ranks[i].stream != NULL)
                        logmon_stream_free(w->ranks[i].stream);
        free(w->ranks);
        w->ranks = NULL;
        if (w->ruleset != NULL)
                logmon_ruleset_unref(w->ruleset);
        w->ruleset = NULL;
        if (w->cli_ruleset != NULL)
                logmon_ruleset_unref(w->cli_ruleset);
        w->cli_ruleset = NULL;
        uv_close((uv_handle_t *)&w->timer, NULL);
        uv_close((uv_handle_t *)&w->wake, NULL);
        uv_close((uv_handle_t *)&w->check, NULL);
}
