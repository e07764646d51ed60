/* SPDX-License-Identifier: Apache-2.0 */
/* Questions about a replay's state that the driver (replay.c), the
 * report (replay_report.c) and the expectation (replay_expect.c) all ask:
 * kept below all three, so that none calls back into another. */
#include <stdint.h>

#include "replay-private.h"

int64_t logmon__wall_offset(const struct logmon_replay *r)
{
        return r->have_base && r->clock != CLOCK_RATE ? r->base
                                                      : LOGMON_NO_WALL_CLOCK;
}

bool logmon__pending(const struct logmon_replay *r, size_t i, size_t rule,
                     uint64_t *due_ms)
{
        const struct logmon_stream *mon = r->streams[i].mon;
        struct logmon_rule_info info;

        if (r->job_ended || !r->streams[i].judged ||
            !logmon_stream_running(mon) ||
            logmon_stream_rule_info(mon, rule, &info) != 0 ||
            info.state == LOGMON_HANGING || info.due_ms == UINT64_MAX)
                return false;
        *due_ms = info.due_ms;
        return true;
}
