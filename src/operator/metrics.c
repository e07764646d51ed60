/* SPDX-License-Identifier: Apache-2.0 */
/* GET /metrics: the agent in Prometheus' text exposition format (0.0.4).
 * Beyond the reference, which exposes nothing: the agent's state, its
 * restarts and faults, each rule's state on each watched rank, and the
 * traffic of every worker stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

#include "operator-private.h"

static void family(FILE *f, const char *name, const char *type,
                   const char *help)
{
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped. */
static void label_value(FILE *f, const char *v)
{
        for (; *v; v++) {
                if (*v == '\\' || *v == '"')
                        fputc('\\', f), fputc(*v, f);
                else if (*v == '\n')
                        fputs("\\n", f);
                else
                        fputc(*v, f);
        }
}

static void rule_series(FILE *f, const char *name, int rank,
                        const char *rule)
{
        fprintf(f, "%s{local_rank=\"%d\",rule=\"", name, rank);
        label_value(f, rule);
        fputs("\"} ", f);
}

struct rule_ctx {
        FILE *f;
        size_t metric;
        const char *name;
        uint64_t now;
};

static void rule_series_cb(void *ctx, int rank, const struct logmon_stream *s,
                           const struct logmon_ruleset *rs)
{
        struct rule_ctx *c = ctx;
        FILE *f = c->f;

        for (size_t r = 0; r < logmon_ruleset_count(rs); r++) {
                struct logmon_rule_info info;
                if (logmon_stream_rule_info(s, r, &info) < 0)
                        continue;
                rule_series(f, c->name, rank, logmon_ruleset_rule_name(rs, r));
                if (c->metric == 0)
                        fprintf(f, "%d\n", (int)info.state);
                else if (c->metric == 1)
                        fprintf(f, "%llu\n", (unsigned long long)info.matches);
                else if (c->metric == 3)
                        fprintf(f, "%llu\n",
                                (unsigned long long)info.limit_hits);
                else
                        fprintf(f, "%.3f\n",
                                (double)logmon_stream_idle_ms(s, r, c->now) /
                                        1000.0);
        }
}

static void rules(FILE *f, const struct hp_agent *a)
{
        static const char *const metrics[] = {
                "hyperpodrun_rule_state",
                "hyperpodrun_rule_matches_total",
                "hyperpodrun_rule_seconds_since_match",
                "hyperpodrun_rule_limit_hits_total",
        };
        static const char *const types[] = { "gauge", "counter", "gauge",
                                             "counter" };
        static const char *const help[] = {
                "State of a log rule on a watched local rank: 0 waiting, 1 "
                "healthy, 2 slow, 3 hanging, 4 faulted.",
                "Lines that matched the rule's logPattern.",
                "Monitored seconds since the rule last matched (since "
                "monitoring began when it never did).",
                "Lines on which one of the rule's patterns hit the PCRE2 "
                "match or depth limit (counted as no match).",
        };
        struct rule_ctx c = { .f = f, .now = uv_now(hp_agent_loop(a)) };

        /* No families at all without rules. */
        if (!hp_agent_rule_streams(a, NULL, NULL))
                return;
        for (size_t m = 0; m < HP_ARRAY_SIZE(metrics); m++) {
                family(f, metrics[m], types[m], help[m]);
                c.metric = m;
                c.name = metrics[m];
                hp_agent_rule_streams(a, rule_series_cb, &c);
        }
}

/* The running group's live counts, per local rank. */
struct live_stats {
        int nproc;
        struct hp_op_stream_totals (*live)[2];
};

static void live_stats_cb(void *ctx, int rank,
                          const struct hp_stream_stats *out,
                          const struct hp_stream_stats *err)
{
        struct live_stats *c = ctx;
        struct hp_op_stream_totals (*live)[2] = c->live;
        const struct hp_stream_stats *st[2] = { out, err };

        if (rank >= c->nproc)
                return;
        for (int s = 0; s < 2; s++) {
                live[rank][s].lines += st[s]->lines;
                live[rank][s].bytes += st[s]->bytes;
                live[rank][s].file_lost += st[s]->file_lost;
        }
}

static void streams(FILE *f, const struct hp_operator *op)
{
        static const char *const names[] = { "stdout", "stderr" };

        static const char *const metrics[] = {
                "hyperpodrun_stream_lines_total",
                "hyperpodrun_stream_bytes_total",
                "hyperpodrun_log_file_lost_bytes_total",
        };
        static const char *const help[] = {
                "Lines read from a local rank's stream (pre- and post-train "
                "count as rank 0).",
                "Bytes read from a local rank's stream.",
                "Bytes of a local rank's stream that its log file does not "
                "hold: a write failed (a full disk), the file was cut back "
                "to its last whole line and not written again.",
        };

        struct hp_op_stream_totals (*live)[2] =
                calloc((size_t)op->cfg->nproc, sizeof(*live));
        struct live_stats c = { op->cfg->nproc, live };

        /* Without memory for them, the totals of the stages that ended. */
        if (live != NULL)
                hp_agent_stream_stats(op->agent, live_stats_cb, &c);
        for (int m = 0; m < 3; m++) {
                const char *metric = metrics[m];
                family(f, metric, "counter", help[m]);
                for (int i = 0; i < op->cfg->nproc; i++) {
                        for (int s = 0; s < 2; s++) {
                                const struct hp_op_stream_totals *t =
                                        &op->stream_totals[i][s];
                                uint64_t v = m == 0   ? t->lines
                                             : m == 1 ? t->bytes
                                                      : t->file_lost;
                                /* Plus the running group's live counts. */
                                if (live != NULL)
                                        v += m == 0   ? live[i][s].lines
                                             : m == 1 ? live[i][s].bytes
                                                      : live[i][s].file_lost;
                                fprintf(f,
                                        "%s{local_rank=\"%d\",stream=\"%s\"} "
                                        "%llu\n",
                                        metric, i, names[s],
                                        (unsigned long long)v);
                        }
                }
        }
        free(live);
}

/* The worker socket and checkpoint discovery. */
static void ipc(FILE *f, struct hp_agent *a)
{
        const struct hp_ipc_server *s = hp_agent_ipc(a);
        const struct {
                const char *reason;
                uint64_t n;
        } closed[] = {
                { "evicted", s->stats.evicted },
                { "refused", s->stats.refused },
                { "unfinished_frames", s->stats.closed_partial },
                { "unread_replies", s->stats.closed_slow },
        };

        if (s->ckpt.have_max) {
                family(f, "hyperpodrun_checkpoint_step", "gauge",
                       "The latest checkpoint step complete on every local "
                       "rank (/status.progress).");
                fprintf(f, "hyperpodrun_checkpoint_step %lld\n",
                        (long long)s->ckpt.max_step);
                family(f, "hyperpodrun_checkpoint_age_seconds", "gauge",
                       "Seconds since that step became complete (or came "
                       "from /start).");
                fprintf(f, "hyperpodrun_checkpoint_age_seconds %.3f\n",
                        (double)(uv_now(hp_agent_loop(a)) -
                                 s->ckpt.max_at_ms) /
                                1000.0);
        }
        family(f, "hyperpodrun_ipc_clients", "gauge",
               "Client objects registered on the worker socket.");
        fprintf(f, "hyperpodrun_ipc_clients %zu\n", s->nclients);
        family(f, "hyperpodrun_ipc_connections", "gauge",
               "Open connections to the worker socket.");
        fprintf(f, "hyperpodrun_ipc_connections %zu\n", s->nconns);
        family(f, "hyperpodrun_ipc_messages_total", "counter",
               "Worker socket messages handled, and refused (logged).");
        fprintf(f, "hyperpodrun_ipc_messages_total{result=\"handled\"} "
                   "%llu\n",
                (unsigned long long)s->stats.messages);
        fprintf(f, "hyperpodrun_ipc_messages_total{result=\"ignored\"} "
                   "%llu\n",
                (unsigned long long)s->stats.ignored);
        family(f, "hyperpodrun_ipc_rejected_frames_total", "counter",
               "Frames over the size limit (their connection was closed).");
        fprintf(f, "hyperpodrun_ipc_rejected_frames_total %llu\n",
                (unsigned long long)s->stats.rejected_frames);
        family(f, "hyperpodrun_ipc_closed_total", "counter",
               "Worker socket connections the agent closed to protect "
               "itself, by reason.");
        for (size_t i = 0; i < HP_ARRAY_SIZE(closed); i++)
                fprintf(f, "hyperpodrun_ipc_closed_total{reason=\"%s\"} "
                           "%llu\n",
                        closed[i].reason, (unsigned long long)closed[i].n);
}

/* The rank monitor's straggler windows: each local rank's heartbeat (or
 * step) rate over the median rate, as of the latest window; only ranks
 * with a measured rate. */
static void rank_speeds(FILE *f, struct hp_agent *a)
{
        const struct hp_ftmon *m = hp_agent_ftmon(a);
        bool any = false;
        double speed;

        for (int lr = 0; lr < m->nranks; lr++) {
                if (!hp_ftmon_speed(m, lr, &speed))
                        continue;
                if (!any)
                        family(f, "hyperpodrun_rank_relative_speed", "gauge",
                               "A local rank's heartbeat or step rate over "
                               "the median of the ranks, in the latest "
                               "--straggler-window.");
                any = true;
                fprintf(f, "hyperpodrun_rank_relative_speed{local_rank=\"%d\"} "
                           "%.4f\n",
                        lr, speed);
        }
}

/* The kernel log rules under node-problem-detector's own metric names, so
 * dashboards built for NPD read them unchanged. */
static void node_health(FILE *f, const struct hp_agent *a)
{
        const struct kmsg_watch *w = hp_agent_kmsg_watch(a);
        uint64_t old = 0;

        if (w == NULL)
                return;
        family(f, "problem_counter", "counter",
               "Kernel log rule matches, by reason (temporary and "
               "permanent).");
        for (size_t c = 0; c < w->nconfigs; c++)
                for (size_t r = 0; r < kmsg_rules_count(w->rules[c]); r++) {
                        fputs("problem_counter{reason=\"", f);
                        label_value(f, kmsg_rules_reason(w->rules[c], r));
                        fprintf(f, "\"} %llu\n",
                                (unsigned long long)kmsg_matcher_count(
                                        w->matchers[c], r));
                }
        family(f, "problem_gauge", "gauge",
               "1 while a permanent rule's condition holds with its reason.");
        for (size_t c = 0; c < w->nconfigs; c++) {
                old += kmsg_matcher_old(w->matchers[c]);
                for (size_t r = 0; r < kmsg_rules_count(w->rules[c]); r++) {
                        if (kmsg_rules_type(w->rules[c], r) != KMSG_PERMANENT)
                                continue;
                        fputs("problem_gauge{type=\"", f);
                        label_value(f, kmsg_rules_condition(w->rules[c], r));
                        fputs("\",reason=\"", f);
                        label_value(f, kmsg_rules_reason(w->rules[c], r));
                        fprintf(f, "\"} %d\n",
                                kmsg_matcher_active(w->matchers[c], r));
                }
        }
        family(f, "hyperpodrun_kmsg_records_total", "counter",
               "Kernel log records: read, overwritten before they were read "
               "(EPIPE), not in the record format, older than the window "
               "(per config).");
        fprintf(f, "hyperpodrun_kmsg_records_total{result=\"read\"} %llu\n",
                (unsigned long long)w->records);
        fprintf(f,
                "hyperpodrun_kmsg_records_total{result=\"overwritten\"} "
                "%llu\n",
                (unsigned long long)w->overwritten);
        fprintf(f,
                "hyperpodrun_kmsg_records_total{result=\"malformed\"} %llu\n",
                (unsigned long long)w->malformed);
        fprintf(f, "hyperpodrun_kmsg_records_total{result=\"old\"} %llu\n",
                (unsigned long long)old);
}

/* One pre-flight bandwidth, bus or algorithm: the best, then by size. */
static void bandwidths(FILE *f, const char *metric,
                       const struct hp_preflight_result *r, bool bus)
{
        fprintf(f, "%s %.3f\n", metric, bus ? r->busbw : r->algbw);
        for (size_t i = 0; i < r->nsizes; i++)
                fprintf(f, "%s{bytes=\"%llu\"} %.3f\n", metric,
                        (unsigned long long)r->sizes[i].bytes,
                        bus ? r->sizes[i].busbw : r->sizes[i].algbw);
}

/* --preflight nccl's figures, once it has run. */
static void preflight(FILE *f, const struct hp_agent *a)
{
        const struct hp_preflight_result *r = hp_agent_preflight_result(a);

        if (r == NULL)
                return;
        family(f, "hyperpodrun_preflight_passed", "gauge",
               "1 when the NCCL pre-flight all-reduce passed, 0 when not.");
        fprintf(f, "hyperpodrun_preflight_passed %d\n", r->passed);
        family(f, "hyperpodrun_preflight_gpus", "gauge",
               "GPUs in the pre-flight communicator.");
        fprintf(f, "hyperpodrun_preflight_gpus %d\n", r->gpus);
        family(f, "hyperpodrun_preflight_busbw_gbps", "gauge",
               "Pre-flight all-reduce bus bandwidth in GB/s, by size "
               "(bytes); without a size, the best.");
        bandwidths(f, "hyperpodrun_preflight_busbw_gbps", r, true);
        family(f, "hyperpodrun_preflight_algbw_gbps", "gauge",
               "Pre-flight all-reduce algorithm bandwidth in GB/s, by size; "
               "without a size, the best size's.");
        bandwidths(f, "hyperpodrun_preflight_algbw_gbps", r, false);
}

char *hp_op__metrics_render(const struct hp_operator *op, size_t *len)
{
        struct hp_agent *a = op->agent;
        const struct hp_httpd_stats *hs = &op->httpd.stats;
        char *buf = NULL;
        FILE *f = open_memstream(&buf, len);

        if (f == NULL)
                return NULL;
        family(f, "hyperpodrun_agent_state", "gauge",
               "1 for the agent's current state, 0 for the others.");
        for (int s = 0; s < HP_OP_STATE_COUNT; s++)
                fprintf(f, "hyperpodrun_agent_state{state=\"%s\"} %d\n",
                        hp_op_state_lower((enum hp_op_state)s),
                        op->plr.state == (enum hp_op_state)s);
        family(f, "hyperpodrun_agent_transitions_total", "counter",
               "Times the agent entered each state.");
        for (int s = 0; s < HP_OP_STATE_COUNT; s++)
                fprintf(f,
                        "hyperpodrun_agent_transitions_total{state=\"%s\"} "
                        "%llu\n",
                        hp_op_state_lower((enum hp_op_state)s),
                        (unsigned long long)op->plr.entries[s]);
        family(f, "hyperpodrun_attempts_total", "counter",
               "Worker groups started by /start.");
        fprintf(f, "hyperpodrun_attempts_total %llu\n",
                (unsigned long long)op->attempts_started);
        family(f, "hyperpodrun_faults_total", "counter",
               "Times the agent went FAULTED (worker crash, log rule or node fault).");
        fprintf(f, "hyperpodrun_faults_total %llu\n",
                (unsigned long long)op->faults);
        family(f, "hyperpodrun_fault_count", "gauge",
               "The faultCount of the last /start (the job's restarts).");
        fprintf(f, "hyperpodrun_fault_count %d\n",
                op->have_job ? op->job.fault_count : 0);
        if (op->last_detection_latency_s >= 0) {
                family(f, "hyperpodrun_fault_detection_latency_seconds",
                       "gauge",
                       "For the last fault: a log rule's verdict after its "
                       "deadline, or FAULTED after the worker's exit.");
                fprintf(f,
                        "hyperpodrun_fault_detection_latency_seconds %.6f\n",
                        op->last_detection_latency_s);
        }
        family(f, "hyperpodrun_workers_running", "gauge",
               "Processes of the current stage that have not exited.");
        fprintf(f, "hyperpodrun_workers_running %d\n",
                hp_agent_workers_running(a));
        /* Under a flood the rules may run on their own thread: the streams
         * are read once every line read so far has been through them. */
        hp_agent_settle_rules(a);
        rules(f, a);
        family(f, "hyperpodrun_rule_skipped_lines_total", "counter",
               "Monitored lines the log rules never saw because they fell "
               "behind the output (rules are advisory; the log files and "
               "the console have them).");
        fprintf(f, "hyperpodrun_rule_skipped_lines_total %llu\n",
                (unsigned long long)hp_agent_rule_lines_skipped(a));
        streams(f, op);
        family(f, "hyperpodrun_console_dropped_lines_total", "counter",
               "Lines the console could not keep up with or lost to a "
               "failed write (the log files have them).");
        fprintf(f,
                "hyperpodrun_console_dropped_lines_total{stream=\"stdout\"} "
                "%llu\n",
                (unsigned long long)hp_agent_console_dropped(a, 1));
        fprintf(f,
                "hyperpodrun_console_dropped_lines_total{stream=\"stderr\"} "
                "%llu\n",
                (unsigned long long)hp_agent_console_dropped(a, 2));
        ipc(f, a);
        rank_speeds(f, a);
        node_health(f, a);
        preflight(f, a);
        family(f, "hyperpodrun_http_requests_total", "counter",
               "Requests answered by the control API, by status class.");
        fprintf(f, "hyperpodrun_http_requests_total{code=\"2xx\"} %llu\n",
                (unsigned long long)hs->responses_2xx);
        fprintf(f, "hyperpodrun_http_requests_total{code=\"4xx\"} %llu\n",
                (unsigned long long)hs->responses_4xx);
        fprintf(f, "hyperpodrun_http_requests_total{code=\"5xx\"} %llu\n",
                (unsigned long long)hs->responses_5xx);
        if (fclose(f) != 0) {
                free(buf);
                return NULL;
        }
        return buf;
}
