/* SPDX-License-Identifier: Apache-2.0 */
/* GET /metrics: the agent in Prometheus' text exposition format (0.0.4),
 * clean under `promtool check metrics` but for node-problem-detector's own
 * names. Beyond the reference, which exposes nothing: what runs (build,
 * mode, run id, start time), the agent's state, its attempts, restarts and
 * faults in every mode, each rule's state and the value it compares on
 * each watched rank, the traffic of every worker stream, checkpoint
 * progress, the worker socket, the kernel log and the NCCL pre-flight.
 * Base units throughout (seconds, bytes, bytes per second); points in time
 * are wall-clock timestamps (_timestamp_seconds), so a missed scrape loses
 * nothing. docs/observability.md's "Metrics" lists every family. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "hyperpod/operator.h"
#include "hp-config.h"

#include "operator-private.h"

/* GB/s, as the pre-flight helper measures (10^9 bytes), to bytes/s. */
#define GB 1e9

static void family(FILE *f, const char *name, const char *type,
                   const char *help)
{
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A sample value: Prometheus' spelling of the special ones, and the
 * shortest of %.15g and %.17g that reads back as v (250.5, not
 * 250.50000000000000). */
static void value(FILE *f, double v)
{
        char buf[32];

        if (isnan(v)) {
                fputs("NaN\n", f);
                return;
        }
        if (isinf(v)) {
                fputs(v > 0 ? "+Inf\n" : "-Inf\n", f);
                return;
        }
        snprintf(buf, sizeof(buf), "%.15g", v);
        if (strtod(buf, NULL) != v)
                snprintf(buf, sizeof(buf), "%.17g", v);
        fprintf(f, "%s\n", buf);
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

static double wall_seconds(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wall-clock time of a point on the loop's clock. */
static double loop_to_wall(const struct hp_agent *a, uint64_t at_ms,
                           double wall_now)
{
        uint64_t now = uv_now(hp_agent_loop(a));

        return wall_now - (double)(now > at_ms ? now - at_ms : 0) / 1000.0;
}

/* The driver's ("operator", "inprocess"), or the self-driven backend. */
static const char *mode_name(const struct hp_operator *op)
{
        const struct hp_config *cfg = op->cfg;

        if (!op->observer)
                return op->drv->mode;
        if (cfg->standalone)
                return "standalone";
        switch (cfg->rdzv_backend) {
        case HP_RDZV_SLURM:
                return "slurm";
        case HP_RDZV_RESOURCE_CONFIG:
                return "resource-config";
        default:
                return "static";
        }
}

/* ---- Log rules, per watched local rank ---- */

enum rule_metric {
        RM_STATE = 0,
        RM_MATCHES,
        RM_LAST_MATCH,
        RM_LIMIT_HITS,
        RM_VALUE,
        RM_THRESHOLD,
        RM_COUNT
};

static const struct {
        const char *name;
        const char *type;
        const char *help;
} rule_metrics[RM_COUNT] = {
        [RM_STATE] = { "hyperpodrun_rule_state", "gauge",
                       "State of a log rule on a watched local rank: 0 "
                       "waiting, 1 healthy, 2 slow, 3 hanging, 4 faulted." },
        [RM_MATCHES] = { "hyperpodrun_rule_matches_total", "counter",
                         "Lines that matched the rule's logPattern." },
        [RM_LAST_MATCH] = { "hyperpodrun_rule_last_match_timestamp_seconds",
                            "gauge",
                            "When the rule last matched (when monitoring "
                            "began if it never did), as the rule counts "
                            "time: now less the monitored seconds since, "
                            "time between stages left out." },
        [RM_LIMIT_HITS] = { "hyperpodrun_rule_limit_hits_total", "counter",
                            "Lines on which one of the rule's patterns hit "
                            "the PCRE2 match or depth limit (counted as no "
                            "match)." },
        [RM_VALUE] = { "hyperpodrun_rule_value", "gauge",
                       "The last value a threshold rule compared (its "
                       "logPattern's first capture: samples/s, loss, "
                       "TFLOPs...), once it has compared one." },
        [RM_THRESHOLD] = { "hyperpodrun_rule_threshold", "gauge",
                           "A threshold rule's metricThreshold, with the "
                           "operator that compares hyperpodrun_rule_value "
                           "to it (gt, gteq, lt, lteq, eq)." },
};

struct rule_ctx {
        FILE *f;
        enum rule_metric metric;
        uint64_t now;
        double wall;
};

static void rule_labels(FILE *f, const char *name, int rank, const char *rule)
{
        fprintf(f, "%s{local_rank=\"%d\",rule=\"", name, rank);
        label_value(f, rule);
        fputc('"', f);
}

static void rule_series_cb(void *ctx, int rank, const struct logmon_stream *s,
                           const struct logmon_ruleset *rs)
{
        struct rule_ctx *c = ctx;
        FILE *f = c->f;
        const char *name = rule_metrics[c->metric].name;

        for (size_t r = 0; r < logmon_ruleset_count(rs); r++) {
                struct logmon_rule_info info;
                struct logmon_rule_limits lim;
                const char *rule = logmon_ruleset_rule_name(rs, r);

                if (logmon_stream_rule_info(s, r, &info) < 0 ||
                    logmon_ruleset_rule_limits(rs, r, &lim) < 0)
                        continue;
                /* Only what a threshold rule compares, once it has. */
                if ((c->metric == RM_VALUE || c->metric == RM_THRESHOLD) &&
                    !lim.metric)
                        continue;
                if (c->metric == RM_VALUE &&
                    info.matches - info.nonnumeric == 0)
                        continue;
                rule_labels(f, name, rank, rule);
                if (c->metric == RM_THRESHOLD) {
                        fputs(",operator=\"", f);
                        label_value(f, lim.op);
                        fputc('"', f);
                }
                fputs("} ", f);
                switch (c->metric) {
                case RM_STATE:
                        fprintf(f, "%d\n", (int)info.state);
                        break;
                case RM_MATCHES:
                        fprintf(f, "%llu\n",
                                (unsigned long long)info.matches);
                        break;
                case RM_LAST_MATCH:
                        fprintf(f, "%.3f\n",
                                c->wall - (double)logmon_stream_idle_ms(
                                                  s, r, c->now) /
                                                  1000.0);
                        break;
                case RM_LIMIT_HITS:
                        fprintf(f, "%llu\n",
                                (unsigned long long)info.limit_hits);
                        break;
                case RM_VALUE:
                        value(f, info.last_value);
                        break;
                default:
                        value(f, lim.threshold);
                        break;
                }
        }
}

/* Whether any watched rank's rules have a threshold rule. */
static void any_metric_cb(void *ctx, int rank, const struct logmon_stream *s,
                          const struct logmon_ruleset *rs)
{
        bool *any = ctx;

        (void)rank;
        (void)s;
        for (size_t r = 0; r < logmon_ruleset_count(rs); r++) {
                struct logmon_rule_limits lim;
                if (logmon_ruleset_rule_limits(rs, r, &lim) == 0 &&
                    lim.metric)
                        *any = true;
        }
}

static void verdicts_cb(void *ctx, const char *rule, const uint64_t n[3])
{
        static const char *const names[] = { "slow", "hanging", "faulted" };
        FILE *f = ctx;

        for (int i = 0; i < 3; i++) {
                fputs("hyperpodrun_rule_verdicts_total{rule=\"", f);
                label_value(f, rule);
                fprintf(f, "\",verdict=\"%s\"} %llu\n", names[i],
                        (unsigned long long)n[i]);
        }
}

static void rules(FILE *f, const struct hp_agent *a, double wall)
{
        struct rule_ctx c = { .f = f,
                              .now = uv_now(hp_agent_loop(a)),
                              .wall = wall };
        bool any_metric = false;

        /* No families at all without rules. */
        if (!hp_agent_rule_streams(a, any_metric_cb, &any_metric))
                return;
        for (int m = 0; m < RM_COUNT; m++) {
                /* A family is listed only with series in it. */
                if ((m == RM_VALUE || m == RM_THRESHOLD) && !any_metric)
                        continue;
                family(f, rule_metrics[m].name, rule_metrics[m].type,
                       rule_metrics[m].help);
                c.metric = (enum rule_metric)m;
                hp_agent_rule_streams(a, rule_series_cb, &c);
        }
}

/* Every mode's verdicts, by rule: a SLOW that the stop ended at once is
 * still seen. */
static void verdicts(FILE *f, const struct hp_agent *a)
{
        family(f, "hyperpodrun_rule_verdicts_total", "counter",
               "Log rule verdicts (slow, hanging, faulted) by rule, every "
               "attempt: each stopped the workers (self-driven) or made the "
               "agent FAULTED (operator mode).");
        hp_agent_verdict_counts(a, verdicts_cb, f);
}

/* ---- Worker streams: every stage and attempt since the agent started ---- */

struct stream_sum {
        int nproc;
        struct hp_stream_stats (*sum)[2];
};

static void stream_sum_cb(void *ctx, int rank,
                          const struct hp_stream_stats *out,
                          const struct hp_stream_stats *err)
{
        struct stream_sum *c = ctx;
        const struct hp_stream_stats *st[2] = { out, err };

        if (rank < 0 || rank >= c->nproc)
                return;
        for (int s = 0; s < 2; s++) {
                c->sum[rank][s].lines += st[s]->lines;
                c->sum[rank][s].bytes += st[s]->bytes;
                c->sum[rank][s].file_lost += st[s]->file_lost;
        }
}

static void streams(FILE *f, const struct hp_operator *op)
{
        static const char *const names[] = { "stdout", "stderr" };
        static const struct {
                const char *name;
                const char *help;
        } metrics[] = {
                { "hyperpodrun_stream_lines_total",
                  "Lines read from a local rank's stream, every stage and "
                  "attempt (pre- and post-train count as rank 0)." },
                { "hyperpodrun_stream_bytes_total",
                  "Bytes read from a local rank's stream." },
                { "hyperpodrun_log_file_lost_bytes_total",
                  "Bytes of a local rank's stream that its log file does not "
                  "hold: a write failed (a full disk), the file was cut back "
                  "to its last whole line and not written again." },
        };
        struct stream_sum c = {
                .nproc = op->cfg->nproc,
                .sum = calloc((size_t)op->cfg->nproc, sizeof(*c.sum)),
        };

        if (c.sum == NULL)
                return; /* the families are left out of this scrape */
        hp_agent_stream_stats(op->agent, stream_sum_cb, &c);
        for (size_t m = 0; m < HP_ARRAY_SIZE(metrics); m++) {
                family(f, metrics[m].name, "counter", metrics[m].help);
                for (int i = 0; i < c.nproc; i++)
                        for (int s = 0; s < 2; s++) {
                                const struct hp_stream_stats
                                        *t = &c.sum[i][s];
                                uint64_t v = m == 0   ? t->lines
                                             : m == 1 ? t->bytes
                                                      : t->file_lost;
                                fprintf(f,
                                        "%s{local_rank=\"%d\",stream=\"%s\"} "
                                        "%llu\n",
                                        metrics[m].name, i, names[s],
                                        (unsigned long long)v);
                        }
        }
        free(c.sum);
}

/* ---- The worker socket and checkpoint discovery ---- */

static void ipc(FILE *f, const struct hp_agent *a,
                const struct hp_ipc_server *s, double wall)
{
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
                family(f, "hyperpodrun_checkpoint_timestamp_seconds", "gauge",
                       "When that step became complete (or came from "
                       "/start).");
                fprintf(f, "hyperpodrun_checkpoint_timestamp_seconds %.3f\n",
                        loop_to_wall(a, s->ckpt.max_at_ms, wall));
        }
        family(f, "hyperpodrun_ipc_clients", "gauge",
               "Client objects registered on the worker socket.");
        fprintf(f, "hyperpodrun_ipc_clients %zu\n", s->nclients);
        family(f, "hyperpodrun_ipc_connections", "gauge",
               "Open connections to the worker socket.");
        fprintf(f, "hyperpodrun_ipc_connections %zu\n", s->nconns);
        family(f, "hyperpodrun_ipc_messages_total", "counter",
               "Worker socket messages handled, and refused (logged).");
        fprintf(f,
                "hyperpodrun_ipc_messages_total{result=\"handled\"} "
                "%llu\n",
                (unsigned long long)s->stats.messages);
        fprintf(f,
                "hyperpodrun_ipc_messages_total{result=\"ignored\"} "
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
                fprintf(f,
                        "hyperpodrun_ipc_closed_total{reason=\"%s\"} "
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
                fprintf(f,
                        "hyperpodrun_rank_relative_speed{local_rank=\"%d\"} "
                        "%.4f\n",
                        lr, speed);
        }
}

/* ---- The kernel log ---- */

/* Whether rule (c, r) is the first of the configs with its reason (and,
 * for a gauge, its condition); *sum gets the count of all of them, *any
 * whether one's condition holds. NPD keys its series so, and one config
 * may repeat another's reasons. */
static bool first_of_key(const struct kmsg_watch *w, size_t c, size_t r,
                         bool gauge, uint64_t *sum, int *any)
{
        const char *reason = kmsg_rules_reason(w->rules[c], r);
        const char *cond = kmsg_rules_condition(w->rules[c], r);

        *sum = 0;
        *any = 0;
        for (size_t c2 = 0; c2 < w->nconfigs; c2++)
                for (size_t r2 = 0; r2 < kmsg_rules_count(w->rules[c2]);
                     r2++) {
                        bool earlier = c2 < c || (c2 == c && r2 < r);
                        if (strcmp(kmsg_rules_reason(w->rules[c2], r2),
                                   reason) != 0)
                                continue;
                        if (gauge &&
                            (kmsg_rules_type(w->rules[c2], r2) !=
                                     KMSG_PERMANENT ||
                             strcmp(kmsg_rules_condition(w->rules[c2], r2),
                                    cond) != 0))
                                continue;
                        if (earlier)
                                return false;
                        *sum += kmsg_matcher_count(w->matchers[c2], r2);
                        *any |= kmsg_matcher_active(w->matchers[c2], r2);
                }
        return true;
}

/* The kernel log rules under node-problem-detector's own metric names, so
 * dashboards built for NPD read them unchanged: one series per configured
 * reason, from 0 as NPD starts them (a rate sees the first match). */
static void node_health(FILE *f, const struct hp_agent *a)
{
        const struct kmsg_watch *w = hp_agent_kmsg_watch(a);
        uint64_t old = 0, n;
        int active;

        if (w == NULL)
                return;
        family(f, "problem_counter", "counter",
               "Kernel log rule matches, by reason (temporary and "
               "permanent).");
        for (size_t c = 0; c < w->nconfigs; c++)
                for (size_t r = 0; r < kmsg_rules_count(w->rules[c]); r++) {
                        if (!first_of_key(w, c, r, false, &n, &active))
                                continue;
                        fputs("problem_counter{reason=\"", f);
                        label_value(f, kmsg_rules_reason(w->rules[c], r));
                        fprintf(f, "\"} %llu\n", (unsigned long long)n);
                }
        family(f, "problem_gauge", "gauge",
               "1 while a permanent rule's condition holds with its reason.");
        for (size_t c = 0; c < w->nconfigs; c++) {
                old += kmsg_matcher_old(w->matchers[c]);
                for (size_t r = 0; r < kmsg_rules_count(w->rules[c]); r++) {
                        if (kmsg_rules_type(w->rules[c], r) !=
                                    KMSG_PERMANENT ||
                            !first_of_key(w, c, r, true, &n, &active))
                                continue;
                        fputs("problem_gauge{type=\"", f);
                        label_value(f, kmsg_rules_condition(w->rules[c], r));
                        fputs("\",reason=\"", f);
                        label_value(f, kmsg_rules_reason(w->rules[c], r));
                        fprintf(f, "\"} %d\n", active != 0);
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

/* ---- --preflight nccl's figures, once it has run ---- */

static void preflight(FILE *f, const struct hp_agent *a,
                      const struct hp_config *cfg)
{
        const struct hp_preflight_result *r = hp_agent_preflight_result(a);
        static const char *const by_size[] = {
                "hyperpodrun_preflight_busbw_bytes_per_second",
                "hyperpodrun_preflight_algbw_bytes_per_second",
        };
        static const char *const by_size_help[] = {
                "Pre-flight all-reduce bus bandwidth, by message size.",
                "Pre-flight all-reduce algorithm bandwidth, by message size.",
        };

        if (r == NULL)
                return;
        family(f, "hyperpodrun_preflight_passed", "gauge",
               "1 when the NCCL pre-flight all-reduce passed, 0 when not.");
        fprintf(f, "hyperpodrun_preflight_passed %d\n", r->passed);
        family(f, "hyperpodrun_preflight_gpus", "gauge",
               "GPUs in the pre-flight communicator.");
        fprintf(f, "hyperpodrun_preflight_gpus %d\n", r->gpus);
        family(f, "hyperpodrun_preflight_best_busbw_bytes_per_second",
               "gauge",
               "The best pre-flight all-reduce bus bandwidth over the "
               "sizes (what --preflight-min-busbw is compared with).");
        fprintf(f, "hyperpodrun_preflight_best_busbw_bytes_per_second ");
        value(f, r->busbw * GB);
        family(f, "hyperpodrun_preflight_best_algbw_bytes_per_second",
               "gauge",
               "The algorithm bandwidth of the size with the best bus "
               "bandwidth.");
        fprintf(f, "hyperpodrun_preflight_best_algbw_bytes_per_second ");
        value(f, r->algbw * GB);
        family(f, "hyperpodrun_preflight_min_busbw_bytes_per_second", "gauge",
               "--preflight-min-busbw: the least best bus bandwidth that "
               "passes (0: no floor).");
        fprintf(f, "hyperpodrun_preflight_min_busbw_bytes_per_second ");
        value(f, cfg->preflight_min_busbw * GB);
        for (int m = 0; m < 2; m++) {
                family(f, by_size[m], "gauge", by_size_help[m]);
                for (size_t i = 0; i < r->nsizes; i++) {
                        fprintf(f, "%s{size_bytes=\"%llu\"} ", by_size[m],
                                (unsigned long long)r->sizes[i].bytes);
                        value(f, (m == 0 ? r->sizes[i].busbw
                                         : r->sizes[i].algbw) *
                                         GB);
                }
        }
}

/* ---- The agent ---- */

/* What runs, and since when. */
static void identity(FILE *f, const struct hp_operator *op)
{
        family(f, "hyperpodrun_build_info", "gauge",
               "1, with the agent's version and mode (operator, inprocess, "
               "standalone, static, slurm, resource-config).");
        fprintf(f, "hyperpodrun_build_info{version=\"");
        label_value(f, HP_VERSION);
        fprintf(f, "\",mode=\"%s\"} 1\n", mode_name(op));
        family(f, "hyperpodrun_run_info", "gauge",
               "1, with the job's run id (--rdzv-id, TORCHELASTIC_RUN_ID; "
               "a random one with --standalone).");
        fputs("hyperpodrun_run_info{run_id=\"", f);
        label_value(f, hp_agent_run_id(op->agent));
        fputs("\"} 1\n", f);
        family(f, "process_start_time_seconds", "gauge",
               "When the agent started, in seconds since the epoch.");
        fprintf(f, "process_start_time_seconds %.3f\n", op->start_time_s);
}

/* Attempts, restarts and faults: the operator's drivers count their own;
 * in self-driven mode the agent's driver does. */
static void attempts(FILE *f, const struct hp_operator *op)
{
        const struct hp_agent_counts *sd = hp_agent_counts(op->agent);
        uint64_t restarts = op->observer ? sd->restarts
                            : op->have_job && op->job.fault_count > 0
                                    ? (uint64_t)op->job.fault_count
                                    : 0;

        family(f, "hyperpodrun_attempts_total", "counter",
               "Worker groups started from the first stage: by /start in "
               "operator mode, at the start and each restart in self-driven "
               "mode.");
        fprintf(f, "hyperpodrun_attempts_total %llu\n",
                (unsigned long long)(op->observer ? sd->attempts
                                                  : op->attempts_started));
        family(f, "hyperpodrun_restarts_total", "counter",
               "Restarts of the job: the faultCount of the operator's last "
               "/start, or the restarts the agent made (--max-restarts).");
        fprintf(f, "hyperpodrun_restarts_total %llu\n",
                (unsigned long long)restarts);
        family(f, "hyperpodrun_faults_total", "counter",
               "Attempts that faulted, by cause: a worker's failure, a log "
               "rule's verdict, a node fault (kernel log or pre-flight), "
               "the rank monitor's verdict; in operator mode, the times the "
               "agent went FAULTED.");
        for (int c = 0; c < HP_FAULT_CAUSE_COUNT; c++)
                fprintf(f, "hyperpodrun_faults_total{cause=\"%s\"} %llu\n",
                        hp_fault_cause_name((enum hp_fault_cause)c),
                        (unsigned long long)(op->observer ? sd->faults[c]
                                                          : op->faults[c]));
        if (op->last_detection_latency_s >= 0) {
                family(f, "hyperpodrun_fault_detection_latency_seconds",
                       "gauge",
                       "For the last fault: a log rule's verdict after its "
                       "deadline, or FAULTED after the worker's exit.");
                fprintf(f,
                        "hyperpodrun_fault_detection_latency_seconds %.6f\n",
                        op->last_detection_latency_s);
        }
}

char *hp_op__metrics_render(const struct hp_operator *op, size_t *len)
{
        struct hp_agent *a = op->agent;
        const struct hp_httpd *servers[] = { &op->httpd, &op->metrics_httpd };
        static const char *const listeners[] = { "api", "metrics" };
        double wall = wall_seconds();
        char *buf = NULL;
        FILE *f = open_memstream(&buf, len);

        if (f == NULL)
                return NULL;
        identity(f, op);
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
        attempts(f, op);
        family(f, "hyperpodrun_workers_running", "gauge",
               "Processes of the current stage that have not exited.");
        fprintf(f, "hyperpodrun_workers_running %d\n",
                hp_agent_workers_running(a));
        /* Under a flood the rules may run on their own thread: the streams
         * are read once every line read so far has been through them. */
        hp_agent_settle_rules(a);
        rules(f, a, wall);
        verdicts(f, a);
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
        ipc(f, a, op->ipc, wall);
        rank_speeds(f, a);
        node_health(f, a);
        preflight(f, a, op->cfg);
        family(f, "hyperpodrun_http_requests_total", "counter",
               "Requests answered by the control API (listener api) and "
               "--metrics-port (listener metrics), by status class.");
        for (size_t i = 0; i < HP_ARRAY_SIZE(servers); i++) {
                const struct hp_httpd_stats *hs = &servers[i]->stats;
                const uint64_t n[] = { hs->responses_2xx, hs->responses_4xx,
                                       hs->responses_5xx };
                static const int class[] = { 2, 4, 5 };
                if (i == 1 && !op->metrics_httpd_ready)
                        continue;
                if (i == 0 && !op->listening)
                        continue;
                for (size_t c = 0; c < HP_ARRAY_SIZE(n); c++)
                        fprintf(f,
                                "hyperpodrun_http_requests_total{listener="
                                "\"%s\",code=\"%dxx\"} %llu\n",
                                listeners[i], class[c],
                                (unsigned long long)n[c]);
        }
        if (fclose(f) != 0) {
                free(buf);
                return NULL;
        }
        return buf;
}
