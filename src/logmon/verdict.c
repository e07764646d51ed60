/* SPDX-License-Identifier: Apache-2.0 */
/* The words of a verdict: one wording for the live agent's log line and
 * for a replay's text output, so that a rule author reads the same thing
 * in both. Pure: the caller says how its clock maps to the wall clock. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

/* A time on the stream's clock, on the wall clock when one is known. */
static void when(uint64_t ms, int64_t wall_offset_ms, char *buf, size_t len)
{
        char iso[HP_ISO8601_MS_LEN + 1];

        if (wall_offset_ms == LOGMON_NO_WALL_CLOCK) {
                snprintf(buf, len, "t=%" PRIu64 ".%03" PRIu64 " s", ms / 1000,
                         ms % 1000);
                return;
        }
        hp_iso8601_ms((int64_t)ms + wall_offset_ms, iso);
        snprintf(buf, len, "%s", iso);
}

static void why(const struct logmon_stream *s, size_t rule,
                const struct logmon_rule_info *info,
                const struct logmon_rule_limits *lim, int64_t wall_offset_ms,
                char *buf, size_t len)
{
        char last[48], value[HP_DOUBLE_LEN], threshold[HP_DOUBLE_LEN];

        switch (info->state) {
        case LOGMON_HANGING:
                if (!info->matched) {
                        snprintf(buf, len,
                                 "no line matched within the "
                                 "start cut-off, limit %.3f s "
                                 "(expectedStartCutOffInSeconds)",
                                 (double)lim->cutoff_ms / 1e3);
                        return;
                }
                when(info->last_match_ms, wall_offset_ms, last, sizeof(last));
                snprintf(buf, len,
                         "%.3f s since the last match at %s, "
                         "limit %.3f s (expectedRecurringFrequencyInSeconds)",
                         (double)(info->due_ms - info->last_match_ms) / 1e3,
                         last, (double)lim->freq_ms / 1e3);
                return;
        case LOGMON_SLOW:
                snprintf(buf, len,
                         "metric %s %s threshold %s in %" PRIu32
                         " data point%s in a row "
                         "(metricEvaluationDataPoints %" PRIu32 ")",
                         hp_format_double(info->last_value, value), lim->op,
                         hp_format_double(lim->threshold, threshold),
                         info->consecutive, info->consecutive == 1 ? "" : "s",
                         lim->datapoints);
                return;
        case LOGMON_FAULTED:
                snprintf(buf, len, "a line matched (faultOnMatch)");
                return;
        default:
                break;
        }
        (void)s;
        (void)rule;
        buf[0] = '\0';
}

int logmon_verdict_format(const struct logmon_stream *s, int local_rank,
                          int64_t wall_offset_ms, char *buf, size_t len)
{
        struct logmon_rule_limits lim;
        struct logmon_rule_info info;
        char at[48], reason[320];
        int rule = logmon_stream_reason_rule(s);
        uint64_t t;

        if (rule < 0 || logmon_stream_rule_info(s, (size_t)rule, &info) != 0)
                return -EINVAL;
        logmon_ruleset_rule_limits(s->rs, (size_t)rule, &lim);
        t = info.state == LOGMON_HANGING ? info.due_ms : info.last_match_ms;
        when(t, wall_offset_ms, at, sizeof(at));
        why(s, (size_t)rule, &info, &lim, wall_offset_ms, reason,
            sizeof(reason));
        if (local_rank >= 0)
                snprintf(buf, len,
                         "%s (%s) by rule %s on local rank %d at "
                         "%s: %s",
                         logmon_stream_reason(s),
                         logmon_state_name(info.state),
                         logmon_ruleset_rule_name(s->rs, (size_t)rule),
                         local_rank, at, reason);
        else
                snprintf(buf, len, "%s (%s) by rule %s at %s: %s",
                         logmon_stream_reason(s),
                         logmon_state_name(info.state),
                         logmon_ruleset_rule_name(s->rs, (size_t)rule), at,
                         reason);
        return 0;
}

uint64_t logmon_verdict_time(const struct logmon_stream *s)
{
        struct logmon_rule_info info;
        int rule = logmon_stream_reason_rule(s);

        if (rule < 0 || logmon_stream_rule_info(s, (size_t)rule, &info) != 0)
                return UINT64_MAX;
        return info.state == LOGMON_HANGING ? info.due_ms
                                            : info.last_match_ms;
}

int logmon_change_format(const struct logmon_ruleset *rs,
                         const struct logmon_event *e, int local_rank,
                         uint64_t t_ms, int64_t wall_offset_ms, char *buf,
                         size_t len)
{
        char at[48];

        if (e->kind != LOGMON_EVENT_STATE)
                return -EINVAL;
        when(t_ms, wall_offset_ms, at, sizeof(at));
        if (local_rank >= 0)
                snprintf(buf, len, "rule %s on local rank %d: %s -> %s at %s",
                         logmon_ruleset_rule_name(rs, e->rule), local_rank,
                         logmon_state_name(e->from), logmon_state_name(e->to),
                         at);
        else
                snprintf(buf, len, "rule %s: %s -> %s at %s",
                         logmon_ruleset_rule_name(rs, e->rule),
                         logmon_state_name(e->from), logmon_state_name(e->to),
                         at);
        return 0;
}
