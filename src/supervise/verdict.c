/* SPDX-License-Identifier: Apache-2.0 */
/* A verdict in words: the reason code the operator reports and what it
 * means. Pure, for the tests. */
#include <errno.h>
#include <stdio.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

/* The rank monitor's codes: a section's carries its name. */
static const struct {
        const char *code;
        bool named;
} monitor_reason[] = {
        [HP_VERDICT_HEARTBEAT] = { "RankHeartbeatTimeout", false },
        [HP_VERDICT_INITIAL_HEARTBEAT] = { "RankInitialHeartbeatTimeout",
                                           false },
        [HP_VERDICT_SECTION] = { "RankSectionTimeout_", true },
        [HP_VERDICT_OUT_OF_SECTION] = { "RankOutOfSectionTimeout", false },
        [HP_VERDICT_STRAGGLER] = { "RankStraggler", false },
};

static bool valid(const struct hp_verdict *v)
{
        if (v->kind != HP_VERDICT_RULE)
                return (unsigned)v->kind < HP_VERDICT_KIND_COUNT &&
                       v->state != LOGMON_WAITING;
        /* A rule's code has logmon's prefix, logmon_stream_reason's. */
        return logmon_reason_prefix(v->state) != NULL;
}

/* snprintf, with its result as a length or -EINVAL. */
static int finish(int n, char *buf, size_t len)
{
        if (n < 0) {
                if (len > 0)
                        buf[0] = '\0';
                return -EINVAL;
        }
        return n;
}

int hp_verdict_reason(const struct hp_verdict *v, char *buf, size_t len)
{
        if (!valid(v)) {
                if (len > 0)
                        buf[0] = '\0';
                return -EINVAL;
        }
        if (v->kind != HP_VERDICT_RULE)
                return finish(snprintf(buf, len, "%s%s",
                                       monitor_reason[v->kind].code,
                                       monitor_reason[v->kind].named ? v->rule
                                                                     : ""),
                              buf, len);
        return finish(snprintf(buf, len, "%s%s",
                               logmon_reason_prefix(v->state), v->rule),
                      buf, len);
}

static int describe_monitor(const struct hp_verdict *v, char *buf, size_t len)
{
        double secs = (double)v->timeout_ms / 1000.0;

        switch (v->kind) {
        case HP_VERDICT_HEARTBEAT:
                return snprintf(buf, len,
                                "Local rank %d (rank %d) sent no heartbeat "
                                "for %.3f s (its heartbeat timeout)",
                                v->local_rank, v->rank, secs);
        case HP_VERDICT_INITIAL_HEARTBEAT:
                return snprintf(buf, len,
                                "Local rank %d (rank %d) sent no first "
                                "heartbeat within %.3f s of its "
                                "init_workload_monitoring() (its initial "
                                "heartbeat timeout)",
                                v->local_rank, v->rank, secs);
        case HP_VERDICT_SECTION:
                return snprintf(buf, len,
                                "Section %s of local rank %d (rank %d) was "
                                "open for %.3f s (its timeout)",
                                v->rule, v->local_rank, v->rank, secs);
        case HP_VERDICT_OUT_OF_SECTION:
                return snprintf(buf, len,
                                "Local rank %d (rank %d) opened no section "
                                "for %.3f s (its out-of-section timeout)",
                                v->local_rank, v->rank, secs);
        case HP_VERDICT_STRAGGLER:
                return snprintf(buf, len,
                                "Local rank %d (rank %d) is a straggler: "
                                "%.2f of the median rate of the ranks",
                                v->local_rank, v->rank, v->speed);
        default:
                return -1;
        }
}

int hp_verdict_describe(const struct hp_verdict *v, char *buf, size_t len)
{
        if (!valid(v)) {
                if (len > 0)
                        buf[0] = '\0';
                return -EINVAL;
        }
        if (v->kind != HP_VERDICT_RULE)
                return finish(describe_monitor(v, buf, len), buf, len);
        if (v->line[0] != '\0')
                return finish(snprintf(buf, len,
                                       "Log rule %s is %s on local rank %d; "
                                       "last matching line: %s",
                                       v->rule, logmon_state_name(v->state),
                                       v->local_rank, v->line),
                              buf, len);
        return finish(snprintf(buf, len,
                               "Log rule %s is %s on local rank %d; no line "
                               "matched it yet",
                               v->rule, logmon_state_name(v->state),
                               v->local_rank),
                      buf, len);
}
