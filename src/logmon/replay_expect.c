/* SPDX-License-Identifier: Apache-2.0 */
/* Replay's expectations: checking a replay against one (--expect), with
 * the transitions aligned as diff does, and writing one (--emit-expect). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "replay-private.h"

static const char *stream_label(const struct logmon_replay *r, size_t i)
{
        return r->streams[i].name != NULL ? r->streams[i].name : "(log)";
}

static bool stream_selected(const struct logmon_replay *r, size_t i,
                            const char *want)
{
        const char *name = r->streams[i].name;

        /* A stream that is not judged has no outcome to compare. */
        if (!r->streams[i].judged)
                return false;
        if (want == NULL)
                return true;
        return name != NULL ? strcmp(name, want) == 0 : want[0] == '\0';
}

static void print_change(FILE *f, const struct logmon_replay *r,
                         const struct replay_change *c)
{
        fprintf(f, "%s %s -> %s on %s at t=%" PRIu64 ".%03" PRIu64,
                logmon_ruleset_rule_name(r->rs, c->rule),
                logmon_state_name(c->from), logmon_state_name(c->to),
                stream_label(r, c->stream), c->time / 1000, c->time % 1000);
        if (c->line_no != 0)
                fprintf(f, " (line %" PRIu64 ")", c->line_no);
        else
                fputs(" (deadline)", f);
}

/* Everything an expectation can get wrong is an error rather than a
 * difference, and is found before a log is read. */
static int validate_final(const struct logmon_ruleset *rs, const cJSON *final,
                          char *errbuf, size_t len)
{
        enum logmon_state state;
        const cJSON *item;

        if (!cJSON_IsObject(final)) {
                snprintf(errbuf, len,
                         "expect: final: expected an object "
                         "of rule names to states");
                return HP_ECONFIG;
        }
        cJSON_ArrayForEach (item, final) {
                if (logmon_ruleset_find(rs, item->string) < 0) {
                        snprintf(errbuf, len,
                                 "expect: final: no rule "
                                 "named \"%s\"",
                                 item->string);
                        return HP_ECONFIG;
                }
                if (!cJSON_IsString(item) ||
                    logmon_state_parse(item->valuestring, &state) != 0) {
                        snprintf(errbuf, len,
                                 "expect: final: %s: expected "
                                 "a state name",
                                 item->string);
                        return HP_ECONFIG;
                }
        }
        return 0;
}

struct expected_change {
        int rule;
        enum logmon_state state;
        const cJSON *line_no;
        const cJSON *time;
        const cJSON *stream;
};

static int parse_transition(const struct logmon_ruleset *rs, const cJSON *t,
                            size_t i, struct expected_change *e, char *errbuf,
                            size_t len)
{
        const cJSON *rule = cJSON_GetObjectItemCaseSensitive(t, "rule");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(t, "state");

        if (!cJSON_IsString(rule) || !cJSON_IsString(state) ||
            logmon_state_parse(state->valuestring, &e->state) != 0) {
                snprintf(errbuf, len,
                         "expect: transitions[%zu]: expected "
                         "{\"rule\": NAME, \"state\": STATE, ...}",
                         i);
                return HP_ECONFIG;
        }
        e->rule = logmon_ruleset_find(rs, rule->valuestring);
        if (e->rule < 0) {
                snprintf(errbuf, len,
                         "expect: transitions[%zu]: no rule "
                         "named \"%s\"",
                         i, rule->valuestring);
                return HP_ECONFIG;
        }
        e->line_no = cJSON_GetObjectItemCaseSensitive(t, "line_no");
        e->time = cJSON_GetObjectItemCaseSensitive(t, "time");
        e->stream = cJSON_GetObjectItemCaseSensitive(t, "stream");
        if ((e->line_no != NULL && !cJSON_IsNumber(e->line_no) &&
             !cJSON_IsNull(e->line_no)) ||
            (e->time != NULL && !cJSON_IsNumber(e->time)) ||
            (e->stream != NULL && !cJSON_IsString(e->stream) &&
             !cJSON_IsNull(e->stream))) {
                snprintf(errbuf, len,
                         "expect: transitions[%zu]: line_no "
                         "and time are numbers, stream a string",
                         i);
                return HP_ECONFIG;
        }
        return 0;
}

/* "reached": {"<rule>": ["HEALTHY", "HANGING"], ...}. */
static int validate_reached(const struct logmon_ruleset *rs,
                            const cJSON *reached, char *errbuf, size_t len)
{
        enum logmon_state state;
        const cJSON *item, *s;

        if (!cJSON_IsObject(reached)) {
                snprintf(errbuf, len,
                         "expect: reached: expected an object "
                         "of rule names to lists of states");
                return HP_ECONFIG;
        }
        cJSON_ArrayForEach (item, reached) {
                if (logmon_ruleset_find(rs, item->string) < 0) {
                        snprintf(errbuf, len,
                                 "expect: reached: no rule "
                                 "named \"%s\"",
                                 item->string);
                        return HP_ECONFIG;
                }
                if (!cJSON_IsArray(item)) {
                        snprintf(errbuf, len,
                                 "expect: reached: %s: "
                                 "expected a list of states",
                                 item->string);
                        return HP_ECONFIG;
                }
                cJSON_ArrayForEach (s, item) {
                        if (!cJSON_IsString(s) ||
                            logmon_state_parse(s->valuestring, &state) != 0) {
                                snprintf(errbuf, len,
                                         "expect: reached: %s: "
                                         "expected a list of states",
                                         item->string);
                                return HP_ECONFIG;
                        }
                }
        }
        return 0;
}

/* "verdict": null, or {"rule": R, "state": S, "stream": N, "time": T,
 * "within": W}, all but rule and state optional. */
static int validate_verdict(const struct logmon_ruleset *rs, const cJSON *v,
                            char *errbuf, size_t len)
{
        const cJSON *rule, *state, *stream, *time, *within;
        enum logmon_state st;

        if (cJSON_IsNull(v))
                return 0;
        rule = cJSON_GetObjectItemCaseSensitive(v, "rule");
        state = cJSON_GetObjectItemCaseSensitive(v, "state");
        stream = cJSON_GetObjectItemCaseSensitive(v, "stream");
        time = cJSON_GetObjectItemCaseSensitive(v, "time");
        within = cJSON_GetObjectItemCaseSensitive(v, "within");
        if (!cJSON_IsObject(v) || !cJSON_IsString(rule) ||
            !cJSON_IsString(state) ||
            logmon_state_parse(state->valuestring, &st) != 0 ||
            (stream != NULL && !cJSON_IsString(stream) &&
             !cJSON_IsNull(stream)) ||
            (time != NULL && !cJSON_IsNumber(time)) ||
            (within != NULL && (!cJSON_IsNumber(within) || time == NULL ||
                                within->valuedouble < 0))) {
                snprintf(errbuf, len,
                         "expect: verdict: expected null or "
                         "{\"rule\": NAME, \"state\": STATE}, with "
                         "optional \"stream\", \"time\" and \"within\" "
                         "(seconds, not below 0, with \"time\")");
                return HP_ECONFIG;
        }
        if (logmon_ruleset_find(rs, rule->valuestring) < 0) {
                snprintf(errbuf, len,
                         "expect: verdict: no rule named "
                         "\"%s\"",
                         rule->valuestring);
                return HP_ECONFIG;
        }
        return 0;
}

int logmon_expect_validate(const struct logmon_ruleset *rs,
                           const cJSON *expect, char *errbuf, size_t len)
{
        static const char *const keys[] = { "final",
                                            "state",
                                            "stream",
                                            "transitions",
                                            "pending_deadline",
                                            "reached",
                                            "verdict" };
        const cJSON *item, *list;
        struct expected_change e;
        enum logmon_state state;
        size_t i, n;
        int err;

        if (!cJSON_IsObject(expect)) {
                snprintf(errbuf, len, "expect: expected a JSON object");
                return HP_ECONFIG;
        }
        cJSON_ArrayForEach (item, expect) {
                for (i = 0; i < HP_ARRAY_SIZE(keys); i++)
                        if (strcmp(item->string, keys[i]) == 0)
                                break;
                if (i == HP_ARRAY_SIZE(keys)) {
                        snprintf(errbuf, len, "expect: unknown key \"%s\"",
                                 item->string);
                        return HP_ECONFIG;
                }
        }
        item = cJSON_GetObjectItemCaseSensitive(expect, "stream");
        if (item != NULL && !cJSON_IsString(item)) {
                snprintf(errbuf, len, "expect: stream: expected a string");
                return HP_ECONFIG;
        }
        item = cJSON_GetObjectItemCaseSensitive(expect, "final");
        if (item != NULL) {
                err = validate_final(rs, item, errbuf, len);
                if (err != 0)
                        return err;
        }
        item = cJSON_GetObjectItemCaseSensitive(expect, "state");
        if (item != NULL &&
            (!cJSON_IsString(item) ||
             logmon_state_parse(item->valuestring, &state) != 0)) {
                snprintf(errbuf, len,
                         "expect: state: expected a state "
                         "name");
                return HP_ECONFIG;
        }
        item = cJSON_GetObjectItemCaseSensitive(expect, "pending_deadline");
        if (item != NULL && !cJSON_IsBool(item)) {
                snprintf(errbuf, len,
                         "expect: pending_deadline: expected "
                         "true or false");
                return HP_ECONFIG;
        }
        item = cJSON_GetObjectItemCaseSensitive(expect, "reached");
        if (item != NULL) {
                err = validate_reached(rs, item, errbuf, len);
                if (err != 0)
                        return err;
        }
        item = cJSON_GetObjectItemCaseSensitive(expect, "verdict");
        if (item != NULL) {
                err = validate_verdict(rs, item, errbuf, len);
                if (err != 0)
                        return err;
        }
        list = cJSON_GetObjectItemCaseSensitive(expect, "transitions");
        if (list == NULL)
                return 0;
        if (!cJSON_IsArray(list)) {
                snprintf(errbuf, len,
                         "expect: transitions: expected a "
                         "list");
                return HP_ECONFIG;
        }
        n = (size_t)cJSON_GetArraySize(list);
        for (i = 0; i < n; i++) {
                err = parse_transition(rs, cJSON_GetArrayItem(list, (int)i),
                                       i, &e, errbuf, len);
                if (err != 0)
                        return err;
        }
        return 0;
}

/* The comparisons, on a validated expectation. */

static int check_final(const struct logmon_replay *r, const cJSON *final,
                       const char *want, FILE *diff)
{
        struct logmon_rule_info info;
        enum logmon_state expected;
        const cJSON *item;
        int diffs = 0, rule;
        size_t i;

        cJSON_ArrayForEach (item, final) {
                rule = logmon_ruleset_find(r->rs, item->string);
                logmon_state_parse(item->valuestring, &expected);
                for (i = 0; i < r->nstreams; i++) {
                        if (!stream_selected(r, i, want))
                                continue;
                        logmon_stream_rule_info(r->streams[i].mon,
                                                (size_t)rule, &info);
                        if (info.state == expected)
                                continue;
                        diffs++;
                        if (diff != NULL)
                                fprintf(diff,
                                        "final state of rule %s on "
                                        "%s: expected %s, got %s\n",
                                        item->string, stream_label(r, i),
                                        item->valuestring,
                                        logmon_state_name(info.state));
                }
        }
        return diffs;
}

static int check_state(const struct logmon_replay *r, const cJSON *state,
                       const char *want, FILE *diff)
{
        enum logmon_state expected;
        int diffs = 0;
        size_t i;

        logmon_state_parse(state->valuestring, &expected);
        for (i = 0; i < r->nstreams; i++) {
                struct logmon_stream *s = r->streams[i].mon;

                if (!stream_selected(r, i, want) ||
                    logmon_stream_state(s) == expected)
                        continue;
                diffs++;
                if (diff != NULL)
                        fprintf(diff,
                                "state of %s: expected %s, got %s "
                                "(%s)\n",
                                stream_label(r, i), state->valuestring,
                                logmon_state_name(logmon_stream_state(s)),
                                logmon_stream_reason(s)[0]
                                        ? logmon_stream_reason(s)
                                        : "no reason");
        }
        return diffs;
}

static bool change_matches(const struct logmon_replay *r,
                           const struct replay_change *c,
                           const struct expected_change *e)
{
        const char *name = r->streams[c->stream].name;

        if ((int)c->rule != e->rule || c->to != e->state)
                return false;
        if (e->line_no != NULL &&
            (cJSON_IsNull(e->line_no)
                     ? c->line_no != 0
                     : (double)c->line_no != e->line_no->valuedouble))
                return false;
        if (e->time != NULL &&
            fabs((double)c->time / 1000.0 - e->time->valuedouble) > 0.001)
                return false;
        if (e->stream != NULL &&
            (cJSON_IsNull(e->stream)
                     ? name != NULL
                     : name == NULL || strcmp(name, e->stream->valuestring)))
                return false;
        return true;
}

static void print_expected(FILE *f, const struct logmon_replay *r,
                           const struct expected_change *e)
{
        fprintf(f, "%s -> %s",
                logmon_ruleset_rule_name(r->rs, (size_t)e->rule),
                logmon_state_name(e->state));
        if (cJSON_IsString(e->stream))
                fprintf(f, " on %s", e->stream->valuestring);
        if (cJSON_IsNumber(e->time))
                fprintf(f, " at t=%.3f", e->time->valuedouble);
        if (cJSON_IsNumber(e->line_no))
                fprintf(f, " (line %.0f)", e->line_no->valuedouble);
        else if (cJSON_IsNull(e->line_no))
                fputs(" (deadline)", f);
}

/* Above this many cells the alignment table is not built, and the two
 * lists are compared position by position instead (a long log checked
 * against a long list; the differences are then less well aligned). */
#define ALIGN_CELLS_MAX (4u * 1024 * 1024)

/*
 * Aligns the expected transitions with the state changes that happened
 * (a longest common subsequence, as diff does), so that one missing or
 * extra transition reads as one line rather than as every later one
 * being wrong. Prints what only one side has, "-" for expected and "+"
 * for got, and returns how many such lines there are.
 */
static int diff_transitions(const struct logmon_replay *r,
                            const struct expected_change *exp, size_t n,
                            const struct replay_change *const *got, size_t m,
                            FILE *diff)
{
        uint32_t *table = NULL;
        size_t i = 0, j = 0, w = m + 1;
        int diffs = 0;
        bool take_exp;

#define CELL(a, b) table[(a)*w + (b)]
        if ((n + 1) * w <= ALIGN_CELLS_MAX)
                table = calloc((n + 1) * w, sizeof(*table));
        if (table != NULL) {
                /* CELL(a, b): the longest common run of exp[a..], got[b..]. */
                for (i = n + 1; i-- > 0;) {
                        for (j = m + 1; j-- > 0;) {
                                if (i == n || j == m)
                                        CELL(i, j) = 0;
                                else if (change_matches(r, got[j], &exp[i]))
                                        CELL(i, j) = CELL(i + 1, j + 1) + 1;
                                else if (CELL(i + 1, j) >= CELL(i, j + 1))
                                        CELL(i, j) = CELL(i + 1, j);
                                else
                                        CELL(i, j) = CELL(i, j + 1);
                        }
                }
        }
        i = j = 0;
        while (i < n || j < m) {
                if (i < n && j < m && change_matches(r, got[j], &exp[i]) &&
                    (table == NULL || CELL(i, j) == CELL(i + 1, j + 1) + 1)) {
                        i++;
                        j++;
                        continue;
                }
                if (table != NULL)
                        take_exp = i < n &&
                                   (j == m ||
                                    CELL(i + 1, j) >= CELL(i, j + 1));
                else
                        take_exp = i < n && (j == m || i <= j);
                diffs++;
                if (diffs == 1 && diff != NULL)
                        fprintf(diff, "transitions (- expected, + got):\n");
                if (take_exp) {
                        if (diff != NULL) {
                                fprintf(diff, "- expected #%zu: ", i + 1);
                                print_expected(diff, r, &exp[i]);
                                fputc('\n', diff);
                        }
                        i++;
                } else {
                        if (diff != NULL) {
                                fprintf(diff, "+ got #%zu:      ", j + 1);
                                print_change(diff, r, got[j]);
                                fputc('\n', diff);
                        }
                        j++;
                }
        }
#undef CELL
        free(table);
        return diffs;
}

static int check_transitions(const struct logmon_replay *r, const cJSON *list,
                             const char *want, FILE *diff)
{
        size_t i, m = 0, n = (size_t)cJSON_GetArraySize(list);
        const struct replay_change **got;
        struct expected_change *exp;
        char unused[8];
        int diffs;

        exp = calloc(n + 1, sizeof(*exp));
        got = calloc(r->nchanges + 1, sizeof(*got));
        if (exp == NULL || got == NULL) {
                free(exp);
                free(got);
                if (diff != NULL)
                        fputs("transitions: out of memory\n", diff);
                return 1;
        }
        /* Validated before: parsing cannot fail here. */
        for (i = 0; i < n; i++)
                parse_transition(r->rs, cJSON_GetArrayItem(list, (int)i), i,
                                 &exp[i], unused, sizeof(unused));
        for (i = 0; i < r->nchanges; i++)
                if (r->changes[i].kind == LOGMON_EVENT_STATE &&
                    stream_selected(r, r->changes[i].stream, want))
                        got[m++] = &r->changes[i];
        diffs = diff_transitions(r, exp, n, got, m, diff);
        free(exp);
        free(got);
        return diffs;
}

size_t logmon_replay_pending(const struct logmon_replay *r)
{
        size_t i, j, n = 0;
        uint64_t due;

        for (i = 0; i < r->nstreams; i++)
                for (j = 0; j < logmon_ruleset_count(r->rs); j++)
                        n += logmon__pending(r, i, j, &due);
        return n;
}

/* "pending_deadline": false, the log must end with every deadline
 * reached (a hung job's log cut before its deadline fails); true, with
 * one still to come. */
static int check_pending(const struct logmon_replay *r, bool expected,
                         const char *want, FILE *diff)
{
        uint64_t due, past;
        size_t i, j, n = 0;

        for (i = 0; i < r->nstreams; i++) {
                if (!stream_selected(r, i, want))
                        continue;
                for (j = 0; j < logmon_ruleset_count(r->rs); j++) {
                        if (!logmon__pending(r, i, j, &due))
                                continue;
                        n++;
                        if (expected || diff == NULL)
                                continue;
                        past = due > r->end_ms ? due - r->end_ms : 0;
                        fprintf(diff,
                                "pending deadline of rule %s on %s: "
                                "expected none, got one at t=%" PRIu64
                                ".%03" PRIu64 ", %" PRIu64 ".%03" PRIu64
                                " s past where the log ends\n",
                                logmon_ruleset_rule_name(r->rs, j),
                                stream_label(r, i), due / 1000, due % 1000,
                                past / 1000, past % 1000);
                }
        }
        if (expected && n == 0) {
                if (diff != NULL)
                        fputs("pending deadline: expected one, got none\n",
                              diff);
                return 1;
        }
        return expected ? 0 : (int)n;
}

/* The states rule entered on the selected streams, as a bit set. */
static unsigned reached_set(const struct logmon_replay *r, size_t rule,
                            const char *want)
{
        unsigned set = 0;
        size_t i;

        for (i = 0; i < r->nchanges; i++)
                if (r->changes[i].kind == LOGMON_EVENT_STATE &&
                    r->changes[i].rule == rule &&
                    stream_selected(r, r->changes[i].stream, want))
                        set |= 1u << r->changes[i].to;
        return set;
}

static void print_set(FILE *f, unsigned set)
{
        int s, k = 0;

        fputc('[', f);
        for (s = 0; s < 32; s++)
                if (set & (1u << s))
                        fprintf(f, "%s\"%s\"", k++ ? ", " : "",
                                logmon_state_name((enum logmon_state)s));
        fputc(']', f);
}

/* Each rule named entered exactly the states listed, in any order and
 * at any time: what a run did, not when. */
static int check_reached(const struct logmon_replay *r, const cJSON *reached,
                         const char *want, FILE *diff)
{
        enum logmon_state st;
        const cJSON *item, *s;
        unsigned expected, got;
        int diffs = 0, rule;

        cJSON_ArrayForEach (item, reached) {
                rule = logmon_ruleset_find(r->rs, item->string);
                expected = 0;
                cJSON_ArrayForEach (s, item) {
                        logmon_state_parse(s->valuestring, &st);
                        expected |= 1u << st;
                }
                got = reached_set(r, (size_t)rule, want);
                if (got == expected)
                        continue;
                diffs++;
                if (diff != NULL) {
                        fprintf(diff, "states rule %s reached: expected ",
                                item->string);
                        print_set(diff, expected);
                        fputs(", got ", diff);
                        print_set(diff, got);
                        fputc('\n', diff);
                }
        }
        return diffs;
}

static int check_verdict(const struct logmon_replay *r, const cJSON *want_v,
                         FILE *diff)
{
        const cJSON *rule, *state, *stream, *time, *within;
        struct logmon_verdict v;
        bool have = logmon_replay_verdict(r, &v);
        double tol;

        if (cJSON_IsNull(want_v)) {
                if (!have)
                        return 0;
                if (diff != NULL)
                        fprintf(diff,
                                "verdict: expected none, got %s (%s) "
                                "by rule %s at t=%" PRIu64 ".%03" PRIu64 "\n",
                                v.stream ? v.stream : "(log)",
                                logmon_state_name(v.state), v.rule,
                                v.time_ms / 1000, v.time_ms % 1000);
                return 1;
        }
        rule = cJSON_GetObjectItemCaseSensitive(want_v, "rule");
        state = cJSON_GetObjectItemCaseSensitive(want_v, "state");
        stream = cJSON_GetObjectItemCaseSensitive(want_v, "stream");
        time = cJSON_GetObjectItemCaseSensitive(want_v, "time");
        within = cJSON_GetObjectItemCaseSensitive(want_v, "within");
        tol = within != NULL ? within->valuedouble : 0.001;
        if (have && strcmp(v.rule, rule->valuestring) == 0 &&
            strcmp(logmon_state_name(v.state), state->valuestring) == 0 &&
            (stream == NULL ||
             (cJSON_IsNull(stream)
                      ? v.stream == NULL
                      : v.stream != NULL &&
                                strcmp(v.stream, stream->valuestring) ==
                                        0)) &&
            (time == NULL || fabs((double)v.time_ms / 1000.0 -
                                  time->valuedouble) <= tol + 1e-9))
                return 0;
        if (diff == NULL)
                return 1;
        fprintf(diff, "verdict: expected %s by rule %s", state->valuestring,
                rule->valuestring);
        if (cJSON_IsString(stream))
                fprintf(diff, " on %s", stream->valuestring);
        if (time != NULL)
                fprintf(diff, " at t=%.3f (within %.3f s)", time->valuedouble,
                        tol);
        if (have)
                fprintf(diff,
                        ", got %s by rule %s on %s at t=%" PRIu64
                        ".%03" PRIu64 "\n",
                        logmon_state_name(v.state), v.rule,
                        v.stream ? v.stream : "(log)", v.time_ms / 1000,
                        v.time_ms % 1000);
        else
                fputs(", got none\n", diff);
        return 1;
}

int logmon_expect_check(const struct logmon_replay *r, const cJSON *expect,
                        FILE *diff, char *errbuf, size_t len)
{
        const cJSON *item;
        const char *want = NULL;
        int diffs = 0, err;
        size_t i;

        err = logmon_expect_validate(r->rs, expect, errbuf, len);
        if (err != 0)
                return err;
        item = cJSON_GetObjectItemCaseSensitive(expect, "stream");
        if (item != NULL) {
                want = item->valuestring;
                for (i = 0; i < r->nstreams; i++)
                        if (stream_selected(r, i, want))
                                break;
                if (i == r->nstreams) {
                        diffs++;
                        if (diff != NULL)
                                fprintf(diff, "stream %s: not in the log\n",
                                        want);
                }
        }
        item = cJSON_GetObjectItemCaseSensitive(expect, "final");
        if (item != NULL)
                diffs += check_final(r, item, want, diff);
        item = cJSON_GetObjectItemCaseSensitive(expect, "state");
        if (item != NULL)
                diffs += check_state(r, item, want, diff);
        item = cJSON_GetObjectItemCaseSensitive(expect, "transitions");
        if (item != NULL)
                diffs += check_transitions(r, item, want, diff);
        item = cJSON_GetObjectItemCaseSensitive(expect, "pending_deadline");
        if (item != NULL)
                diffs += check_pending(r, cJSON_IsTrue(item), want, diff);
        item = cJSON_GetObjectItemCaseSensitive(expect, "reached");
        if (item != NULL)
                diffs += check_reached(r, item, want, diff);
        item = cJSON_GetObjectItemCaseSensitive(expect, "verdict");
        if (item != NULL)
                diffs += check_verdict(r, item, diff);
        return diffs;
}

/* ---------------------------------------------------------------------
 * Writing an expectation (--emit-expect)
 */

/* The state every judged stream of rule (or of the stream, rule < 0)
 * ended in, or -1 when they differ or none is judged. */
static int common_state(const struct logmon_replay *r, int rule)
{
        struct logmon_rule_info info;
        int common = -1, s;
        size_t i;

        for (i = 0; i < r->nstreams; i++) {
                if (!r->streams[i].judged)
                        continue;
                if (rule < 0) {
                        s = (int)logmon_stream_state(r->streams[i].mon);
                } else {
                        logmon_stream_rule_info(r->streams[i].mon,
                                                (size_t)rule, &info);
                        s = (int)info.state;
                }
                if (common >= 0 && s != common)
                        return -1;
                common = s;
        }
        return common;
}

int logmon_expect_emit(const struct logmon_replay *r, FILE *f)
{
        struct logmon_verdict v;
        unsigned set;
        bool first = true;
        size_t i;
        int s;

        fputs("{\n  \"final\": {", f);
        for (i = 0; i < logmon_ruleset_count(r->rs); i++) {
                s = common_state(r, (int)i);
                if (s < 0)
                        continue;
                fputs(first ? "\n    " : ",\n    ", f);
                first = false;
                logmon__json_cstr(f, logmon_ruleset_rule_name(r->rs, i));
                fprintf(f, ": \"%s\"",
                        logmon_state_name((enum logmon_state)s));
        }
        fputs(first ? "},\n" : "\n  },\n", f);
        s = common_state(r, -1);
        if (s >= 0)
                fprintf(f, "  \"state\": \"%s\",\n",
                        logmon_state_name((enum logmon_state)s));
        fprintf(f, "  \"pending_deadline\": %s,\n",
                logmon_replay_pending(r) > 0 ? "true" : "false");
        /* What a run did, not when: another recording of the same job
         * meets it. Exact transitions, line numbers and times are for a
         * reviewer to add. */
        fputs("  \"reached\": {", f);
        first = true;
        for (i = 0; i < logmon_ruleset_count(r->rs); i++) {
                set = reached_set(r, i, NULL);
                fputs(first ? "\n    " : ",\n    ", f);
                first = false;
                logmon__json_cstr(f, logmon_ruleset_rule_name(r->rs, i));
                fputs(": ", f);
                print_set(f, set);
        }
        fputs(first ? "},\n" : "\n  },\n", f);
        fputs("  \"verdict\": ", f);
        if (logmon_replay_verdict(r, &v)) {
                fputs("{\"rule\": ", f);
                logmon__json_cstr(f, v.rule);
                fprintf(f, ", \"state\": \"%s\", \"stream\": ",
                        logmon_state_name(v.state));
                logmon__json_cstr(f, v.stream);
                fputc('}', f);
        } else {
                fputs("null", f);
        }
        fputs("\n}\n", f);
        return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}
