/* SPDX-License-Identifier: Apache-2.0 */
/* A log rule verdict in words: the reason code the operator reports and
 * what it means. Pure, for the tests. */
#include <errno.h>
#include <stdio.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

/* The prefixes logmon_stream_reason gives each state: the operator's
 * /status shows the code, so both must agree byte for byte (the unit
 * tests compare them). */
static const char *const reason_prefix[] = {
        [LOGMON_SLOW] = "LogSlow_",
        [LOGMON_HANGING] = "LogHang_",
        [LOGMON_FAULTED] = "LogFault_",
};

static bool valid(const struct hp_verdict *v)
{
        return v->state >= LOGMON_SLOW &&
               (size_t)v->state < HP_ARRAY_SIZE(reason_prefix);
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
        return finish(snprintf(buf, len, "%s%s", reason_prefix[v->state],
                               v->rule),
                      buf, len);
}

int hp_verdict_describe(const struct hp_verdict *v, char *buf, size_t len)
{
        if (!valid(v)) {
                if (len > 0)
                        buf[0] = '\0';
                return -EINVAL;
        }
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
