/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the evaluator. The input is a script, one command a
 * line, so that log files and engine test cases make useful seeds:
 *
 *   [ ...JSON rules... ]   optional first part, up to a line "%%": the
 *   %%                     rules to use, when they load (else the fixed
 *                          rules of fuzz.h)
 *   l<ms> <text>           after <ms> more milliseconds, feed <text>
 *   t<ms>                  tick then
 *   s<ms> r<ms> S<ms> c    suspend, resume, start, clear
 *   anything else          feed the whole line at the current time
 *
 * After every call the published invariants must hold: rule and stream
 * transitions within the table (nothing leaves FAULTED, nothing goes back
 * to WAITING), the stream's state the highest of its rules', a reason
 * exactly when the state is a verdict, and after a line or a tick no
 * deadline at or before now. A twin stream runs the same script with the
 * patterns as written only (no derived forms): the two must agree on
 * every rule, until a pattern of either hits a PCRE2 limit, where the
 * forms may legitimately get further.
 */
#include <string.h>

#include "fuzz.h"

static void check(struct logmon_stream *s, struct logmon_ruleset *rs,
                  const struct logmon_events *ev, enum logmon_state *before,
                  uint64_t now, bool evaluated)
{
        enum logmon_state top = LOGMON_WAITING, state;
        struct logmon_rule_info info;
        size_t i, n = logmon_ruleset_count(rs);

        FUZZ_ASSERT(ev->n <= LOGMON_EVENTS_MAX);
        for (i = 0; i < ev->n; i++) {
                const struct logmon_event *e = &ev->ev[i];

                FUZZ_ASSERT(e->rule < n);
                if (e->kind != LOGMON_EVENT_STATE)
                        continue;
                FUZZ_ASSERT(e->from == before[e->rule]);
                FUZZ_ASSERT(logmon_state_transition_allowed(
                        (enum logmon_state)e->from,
                        (enum logmon_state)e->to));
                before[e->rule] = (enum logmon_state)e->to;
        }
        if (ev->stream_changed)
                FUZZ_ASSERT(logmon_state_transition_allowed(
                        (enum logmon_state)ev->stream_from,
                        (enum logmon_state)ev->stream_to));
        for (i = 0; i < n; i++) {
                FUZZ_ASSERT(logmon_stream_rule_info(s, i, &info) == 0);
                FUZZ_ASSERT(info.state == before[i]);
                if (info.state > top)
                        top = info.state;
                FUZZ_ASSERT(info.last_line_len <= LOGMON_LAST_LINE_MAX);
        }
        state = logmon_stream_state(s);
        FUZZ_ASSERT(state == top);
        FUZZ_ASSERT((logmon_stream_reason(s)[0] != '\0') ==
                    (state >= LOGMON_SLOW));
        /* After a line or a tick, whatever was due by now has been
         * judged. (Start and resume judge nothing: the caller ticks.) */
        if (evaluated && logmon_stream_running(s))
                FUZZ_ASSERT(logmon_stream_next_deadline(s) > now);
}

/* The rules of the script, as written and matched both ways (rs[1] with
 * full_only), or both NULL. */
static void script_rules(const char **p, const char *end,
                         struct logmon_ruleset *rs[2])
{
        const char *sep = NULL, *q;
        char errbuf[256];
        cJSON *rules;
        int i;

        rs[0] = rs[1] = NULL;
        if (*p == end || **p != '[')
                return;
        for (q = *p; q + 3 <= end; q++) {
                if (q[0] == '%' && q[1] == '%' &&
                    (q == *p || q[-1] == '\n') &&
                    (q + 2 == end || q[2] == '\n')) {
                        sep = q;
                        break;
                }
        }
        if (sep == NULL)
                return;
        rules = cJSON_ParseWithLength(*p, (size_t)(sep - *p));
        *p = sep + 2 < end ? sep + 3 : end;
        for (i = 0; i < 2 && rules != NULL; i++) {
                const struct logmon_ruleset_opts opts = { .full_only = i };

                logmon_ruleset_new(rules, &opts, &rs[i], errbuf,
                                   sizeof(errbuf));
        }
        /* Validation does not depend on the forms. */
        FUZZ_ASSERT((rs[0] == NULL) == (rs[1] == NULL));
        cJSON_Delete(rules);
}

/* false once a pattern hit a limit in either stream. */
static bool agree(struct logmon_stream *a, struct logmon_stream *b, size_t n)
{
        struct logmon_rule_info x[LOGMON_RULES_MAX], y[LOGMON_RULES_MAX];
        size_t i;

        for (i = 0; i < n; i++) {
                FUZZ_ASSERT(logmon_stream_rule_info(a, i, &x[i]) == 0);
                FUZZ_ASSERT(logmon_stream_rule_info(b, i, &y[i]) == 0);
                if (x[i].limit_hits != 0 || y[i].limit_hits != 0)
                        return false;
        }
        for (i = 0; i < n; i++) {
                FUZZ_ASSERT(x[i].state == y[i].state);
                FUZZ_ASSERT(x[i].retired == y[i].retired);
                FUZZ_ASSERT(x[i].matches == y[i].matches);
                FUZZ_ASSERT(x[i].nonnumeric == y[i].nonnumeric);
                FUZZ_ASSERT(x[i].consecutive == y[i].consecutive);
                FUZZ_ASSERT(x[i].last_line_len == y[i].last_line_len);
                FUZZ_ASSERT(x[i].last_line_len == 0 ||
                            memcmp(x[i].last_line, y[i].last_line,
                                   x[i].last_line_len) == 0);
        }
        FUZZ_ASSERT(logmon_stream_state(a) == logmon_stream_state(b));
        return true;
}

static void apply(struct logmon_stream *s, char op, const char *q,
                  const char *line_end, uint64_t now,
                  struct logmon_events *ev)
{
        ev->n = 0;
        ev->stream_changed = false;
        switch (op) {
        case 'l':
                logmon_stream_feed(s, q, (size_t)(line_end - q), now, ev);
                break;
        case 't':
                logmon_stream_tick(s, now, ev);
                break;
        case 's':
                logmon_stream_suspend(s, now);
                break;
        case 'r':
                logmon_stream_resume(s, now);
                break;
        case 'S':
                logmon_stream_start(s, now);
                break;
        case 'c':
                logmon_stream_clear(s);
                break;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *p = (const char *)data, *end = p + size;
        enum logmon_state before[LOGMON_RULES_MAX] = { 0 };
        struct logmon_ruleset *rs[2];
        struct logmon_events ev, twin_ev;
        struct logmon_stream *s, *twin;
        uint64_t now = 0, delta;
        bool comparing = true;

        script_rules(&p, end, rs);
        if (rs[0] == NULL) {
                rs[0] = logmon_ruleset_ref(fuzz_fixed_ruleset_opt(false));
                rs[1] = logmon_ruleset_ref(fuzz_fixed_ruleset_opt(true));
        }
        s = logmon_stream_new(rs[0]);
        twin = logmon_stream_new(rs[1]);
        FUZZ_ASSERT(s != NULL && twin != NULL);
        logmon_stream_start(s, now);
        logmon_stream_start(twin, now);
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                const char *line_end = nl != NULL ? nl : end;
                const char *q = p + 1;
                char op = *p;

                delta = 0;
                while (q < line_end && *q >= '0' && *q <= '9' &&
                       delta < 100000000)
                        delta = delta * 10 + (uint64_t)(*q++ - '0');
                if (strchr("ltsrSc", op) == NULL || op == '\0') {
                        q = p;
                        op = 'l';
                        delta = 0;
                } else if (q < line_end && *q == ' ') {
                        q++;
                }
                now += delta;
                apply(s, op, q, line_end, now, &ev);
                apply(twin, op, q, line_end, now, &twin_ev);
                if (op == 'c')
                        memset(before, 0, sizeof(before));
                check(s, rs[0], &ev, before, now, op == 'l' || op == 't');
                if (comparing)
                        comparing = agree(s, twin,
                                          logmon_ruleset_count(rs[0]));
                p = nl != NULL ? nl + 1 : end;
        }
        logmon_stream_free(s);
        logmon_stream_free(twin);
        logmon_ruleset_unref(rs[0]);
        logmon_ruleset_unref(rs[1]);
        return 0;
}
