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
 * deadline at or before now.
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

static struct logmon_ruleset *script_rules(const char **p, const char *end)
{
        const char *sep = NULL, *q;
        struct logmon_ruleset *rs = NULL;
        char errbuf[256];
        cJSON *rules;

        if (*p == end || **p != '[')
                return NULL;
        for (q = *p; q + 3 <= end; q++) {
                if (q[0] == '%' && q[1] == '%' && (q == *p || q[-1] == '\n') &&
                    (q + 2 == end || q[2] == '\n')) {
                        sep = q;
                        break;
                }
        }
        if (sep == NULL)
                return NULL;
        rules = cJSON_ParseWithLength(*p, (size_t)(sep - *p));
        *p = sep + 2 < end ? sep + 3 : end;
        if (rules != NULL)
                logmon_ruleset_new(rules, NULL, &rs, errbuf, sizeof(errbuf));
        cJSON_Delete(rules);
        return rs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *p = (const char *)data, *end = p + size;
        enum logmon_state before[LOGMON_RULES_MAX] = { 0 };
        struct logmon_ruleset *rs = script_rules(&p, end);
        struct logmon_events ev;
        struct logmon_stream *s;
        uint64_t now = 0, delta;

        if (rs == NULL)
                rs = logmon_ruleset_ref(fuzz_fixed_ruleset());
        s = logmon_stream_new(rs);
        FUZZ_ASSERT(s != NULL);
        logmon_stream_start(s, now);
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
                ev.n = 0;
                ev.stream_changed = false;
                switch (op) {
                case 'l':
                        logmon_stream_feed(s, q, (size_t)(line_end - q), now,
                                           &ev);
                        break;
                case 't':
                        logmon_stream_tick(s, now, &ev);
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
                        memset(before, 0, sizeof(before));
                        break;
                }
                check(s, rs, &ev, before, now, op == 'l' || op == 't');
                p = nl != NULL ? nl + 1 : end;
        }
        logmon_stream_free(s);
        logmon_ruleset_unref(rs);
        return 0;
}
