/* SPDX-License-Identifier: Apache-2.0 */
/* Data-driven tests of the log-rule engine: every file in the case
 * directory (argv[1]) is one test, run once with JIT and once with the
 * interpreter. The format, curl-style:
 *
 *   # a comment
 *   %name what this case shows
 *   %opts matchlimit=N depthlimit=N strict  optional
 *   %rules                                  the rule list, JSON, to the
 *   [ ... ]                                 next %-line
 *   %nostart                                do not start the stream at 0
 *   %input
 *   @<ms> line <text>                       \xHH, \t, \r, \\ escapes
 *   @<ms> tick                              logmon_stream_tick
 *   @<ms> advance                           fire every deadline up to ms
 *                                           at its own time, then tick
 *   @<ms> start | suspend | resume | clear
 *   %events                                 every event, in order:
 *   @<ms> <rule> <FROM> -> <TO>
 *   @<ms> <rule> nonnumeric
 *   @<ms> <rule> limit logPattern|stopPattern
 *   %final                                  per rule, after the input:
 *   <rule> <STATE> [matches=N] [nonnumeric=N] [limit=N] [consecutive=N]
 *                  [retired]
 *   %lastline <rule> <text>|none
 *   %state <STATE> [<reason>]               the stream's state and reason
 *   %deadline <ms>|none                     next deadline after the input
 *   %error <text>                           logmon_ruleset_new must fail
 *                                           with exactly this message
 *   %warnings                               the exact warning lines
 *
 * Every stream state change is also checked against the published
 * transition table.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/logmon.h"

#define MAX_LINES 512
#define MODES 3

struct text {
        char *lines[MAX_LINES];
        size_t n;
};

struct case_file {
        char *path;
        char *data;
        bool no_jit;
        bool full_only;
        bool strict;
        char *rules;
        bool nostart;
        struct text input, events, final, warnings, lastline;
        char *state;
        char *deadline;
        char *error;
        uint32_t match_limit, depth_limit;
};

static void text_add(struct text *t, char *line)
{
        assert_true(t->n < MAX_LINES);
        t->lines[t->n++] = line;
}

/* Splits the file into sections; the lines point into data. */
static void parse_case(struct case_file *c)
{
        struct text *block = NULL;
        char *rules_start = NULL, *rules_end = NULL;
        char *save = NULL, *line, *p;
        FILE *f;
        long size;

        f = fopen(c->path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        c->data = calloc(1, (size_t)size + 1);
        assert_non_null(c->data);
        assert_int_equal(fread(c->data, 1, (size_t)size, f), (size_t)size);
        fclose(f);

        c->rules = calloc(1, (size_t)size + 1);
        assert_non_null(c->rules);
        for (line = strtok_r(c->data, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
                if (line[0] == '#')
                        continue;
                if (line[0] != '%') {
                        if (rules_start != NULL && rules_end == NULL) {
                                strcat(c->rules, line);
                                strcat(c->rules, "\n");
                        } else if (block != NULL) {
                                text_add(block, line);
                        } else if (line[0] != '\0') {
                                fail_msg("%s: text outside a section: %s",
                                         c->path, line);
                        }
                        continue;
                }
                if (rules_start != NULL && rules_end == NULL)
                        rules_end = line;
                block = NULL;
                p = strchr(line, ' ');
                if (p != NULL)
                        *p++ = '\0';
                if (strcmp(line, "%name") == 0)
                        ;
                else if (strcmp(line, "%rules") == 0)
                        rules_start = line;
                else if (strcmp(line, "%nostart") == 0)
                        c->nostart = true;
                else if (strcmp(line, "%input") == 0)
                        block = &c->input;
                else if (strcmp(line, "%events") == 0)
                        block = &c->events;
                else if (strcmp(line, "%final") == 0)
                        block = &c->final;
                else if (strcmp(line, "%warnings") == 0)
                        block = &c->warnings;
                else if (strcmp(line, "%lastline") == 0)
                        text_add(&c->lastline, p);
                else if (strcmp(line, "%state") == 0)
                        c->state = p;
                else if (strcmp(line, "%deadline") == 0)
                        c->deadline = p;
                else if (strcmp(line, "%error") == 0)
                        c->error = p;
                else if (strcmp(line, "%opts") == 0) {
                        char *tok, *s2 = NULL;

                        for (tok = strtok_r(p, " ", &s2); tok != NULL;
                             tok = strtok_r(NULL, " ", &s2)) {
                                if (strncmp(tok, "matchlimit=", 11) == 0)
                                        c->match_limit = (uint32_t)atol(tok +
                                                                        11);
                                else if (strncmp(tok, "depthlimit=", 11) == 0)
                                        c->depth_limit = (uint32_t)atol(tok +
                                                                        11);
                                else if (strcmp(tok, "strict") == 0)
                                        c->strict = true;
                                else
                                        fail_msg("unknown option %s", tok);
                        }
                } else
                        fail_msg("%s: unknown directive %s", c->path, line);
        }
        assert_non_null(rules_start);
}

/* Undoes the escapes of an input line into buf. */
static size_t unescape(const char *in, char *buf, size_t cap)
{
        size_t n = 0;

        while (*in != '\0' && n < cap) {
                if (in[0] == '\\' && in[1] == 'x' && in[2] && in[3]) {
                        char hex[3] = { in[2], in[3], 0 };

                        buf[n++] = (char)strtol(hex, NULL, 16);
                        in += 4;
                } else if (in[0] == '\\' && in[1] == 't') {
                        buf[n++] = '\t';
                        in += 2;
                } else if (in[0] == '\\' && in[1] == 'r') {
                        buf[n++] = '\r';
                        in += 2;
                } else if (in[0] == '\\' && in[1] == '\\') {
                        buf[n++] = '\\';
                        in += 2;
                } else {
                        buf[n++] = *in++;
                }
        }
        return n;
}

struct run {
        struct logmon_ruleset *rs;
        struct logmon_stream *s;
        struct text got;
        char store[MAX_LINES][160];
        const char *path;
};

static void collect(struct run *r, uint64_t at,
                    const struct logmon_events *ev)
{
        size_t i;

        for (i = 0; i < ev->n; i++) {
                const struct logmon_event *e = &ev->ev[i];
                char *out;

                assert_true(r->got.n < MAX_LINES);
                out = r->store[r->got.n];
                if (e->kind == LOGMON_EVENT_STATE)
                        snprintf(out, sizeof(r->store[0]),
                                 "@%" PRIu64 " %s %s -> %s", at,
                                 logmon_ruleset_rule_name(r->rs, e->rule),
                                 logmon_state_name(e->from),
                                 logmon_state_name(e->to));
                else if (e->kind == LOGMON_EVENT_NONNUMERIC)
                        snprintf(out, sizeof(r->store[0]),
                                 "@%" PRIu64 " %s nonnumeric", at,
                                 logmon_ruleset_rule_name(r->rs, e->rule));
                else
                        snprintf(out, sizeof(r->store[0]),
                                 "@%" PRIu64 " %s limit %s", at,
                                 logmon_ruleset_rule_name(r->rs, e->rule),
                                 e->pattern == LOGMON_PATTERN_STOP
                                         ? "stopPattern"
                                         : "logPattern");
                r->got.lines[r->got.n++] = out;
        }
        if (ev->stream_changed &&
            !logmon_state_transition_allowed(ev->stream_from, ev->stream_to))
                fail_msg("%s: stream went %s -> %s at %" PRIu64, r->path,
                         logmon_state_name(ev->stream_from),
                         logmon_state_name(ev->stream_to), at);
        if (ev->stream_changed)
                assert_int_equal(ev->stream_to, logmon_stream_state(r->s));
}

static void step(struct run *r, const char *cmd)
{
        static char buf[70000];
        struct logmon_events ev;
        uint64_t at, d;
        char *rest;
        int guard;

        assert_true(cmd[0] == '@');
        at = strtoull(cmd + 1, &rest, 10);
        assert_true(*rest == ' ');
        rest++;
        if (strncmp(rest, "line ", 5) == 0 || strcmp(rest, "line") == 0) {
                size_t n = rest[4] ? unescape(rest + 5, buf, sizeof(buf)) : 0;

                logmon_stream_feed(r->s, buf, n, at, &ev);
                collect(r, at, &ev);
        } else if (strcmp(rest, "tick") == 0) {
                logmon_stream_tick(r->s, at, &ev);
                collect(r, at, &ev);
        } else if (strcmp(rest, "advance") == 0) {
                for (guard = 0; guard < 100; guard++) {
                        d = logmon_stream_next_deadline(r->s);
                        if (d > at)
                                break;
                        logmon_stream_tick(r->s, d, &ev);
                        /* A deadline that changes nothing would be a
                         * timer firing for no reason. */
                        if (ev.n == 0)
                                fail_msg("%s: deadline %" PRIu64
                                         " changed nothing",
                                         r->path, d);
                        collect(r, d, &ev);
                }
                logmon_stream_tick(r->s, at, &ev);
                collect(r, at, &ev);
        } else if (strcmp(rest, "start") == 0) {
                logmon_stream_start(r->s, at);
        } else if (strcmp(rest, "suspend") == 0) {
                logmon_stream_suspend(r->s, at);
        } else if (strcmp(rest, "resume") == 0) {
                logmon_stream_resume(r->s, at);
        } else if (strcmp(rest, "clear") == 0) {
                logmon_stream_clear(r->s);
        } else {
                fail_msg("%s: unknown input %s", r->path, rest);
        }
}

static bool texts_equal(const struct text *a, const struct text *b)
{
        size_t i;

        if (a->n != b->n)
                return false;
        for (i = 0; i < a->n; i++)
                if (strcmp(a->lines[i], b->lines[i]) != 0)
                        return false;
        return true;
}

static void print_text(const char *title, const struct text *t)
{
        size_t i;

        print_message("%s (%zu):\n", title, t->n);
        for (i = 0; i < t->n; i++)
                print_message("    %s\n", t->lines[i]);
}

static void check_final(struct run *r, const char *spec)
{
        struct logmon_rule_info info;
        char copy[512], *tok, *save = NULL;
        enum logmon_state state;
        int idx;

        snprintf(copy, sizeof(copy), "%s", spec);
        tok = strtok_r(copy, " ", &save);
        idx = logmon_ruleset_find(r->rs, tok);
        if (idx < 0)
                fail_msg("%s: %%final: no rule %s", r->path, tok);
        assert_int_equal(logmon_stream_rule_info(r->s, (size_t)idx, &info),
                         0);
        tok = strtok_r(NULL, " ", &save);
        assert_int_equal(logmon_state_parse(tok, &state), 0);
        if (info.state != state)
                fail_msg("%s: rule %s: expected %s, got %s", r->path, spec,
                         tok, logmon_state_name(info.state));
        while ((tok = strtok_r(NULL, " ", &save)) != NULL) {
                uint64_t want = 0, got = 0;

                if (strcmp(tok, "retired") == 0) {
                        assert_true(info.retired);
                        continue;
                }
                if (strchr(tok, '=') == NULL)
                        fail_msg("%s: bad %%final token %s", r->path, tok);
                want = strtoull(strchr(tok, '=') + 1, NULL, 10);
                if (strncmp(tok, "matches=", 8) == 0)
                        got = info.matches;
                else if (strncmp(tok, "nonnumeric=", 11) == 0)
                        got = info.nonnumeric;
                else if (strncmp(tok, "limit=", 6) == 0)
                        got = info.limit_hits;
                else if (strncmp(tok, "consecutive=", 12) == 0)
                        got = info.consecutive;
                else
                        fail_msg("%s: bad %%final token %s", r->path, tok);
                if (got != want)
                        fail_msg("%s: %s: expected %s, got %" PRIu64, r->path,
                                 spec, tok, got);
        }
}

static void check_lastline(struct run *r, const char *spec)
{
        struct logmon_rule_info info;
        char name[LOGMON_NAME_MAX], buf[4096];
        const char *text = strchr(spec, ' ');
        size_t n;
        int idx;

        assert_non_null(text);
        snprintf(name, sizeof(name), "%.*s", (int)(text - spec), spec);
        text++;
        idx = logmon_ruleset_find(r->rs, name);
        assert_true(idx >= 0);
        logmon_stream_rule_info(r->s, (size_t)idx, &info);
        if (strcmp(text, "none") == 0) {
                assert_null(info.last_line);
                return;
        }
        n = unescape(text, buf, sizeof(buf));
        assert_non_null(info.last_line);
        assert_int_equal(info.last_line_len, n);
        assert_memory_equal(info.last_line, buf, n);
}

static void run_case(void **state)
{
        struct case_file *c = *state;
        struct logmon_ruleset_opts opts = {
                .no_jit = c->no_jit,
                .full_only = c->full_only,
                .strict = c->strict,
                .match_limit = c->match_limit,
                .depth_limit = c->depth_limit,
        };
        char errbuf[1024];
        struct run *r;
        struct text want_warn = c->warnings, got_warn = { .n = 0 };
        char *warn_copy, *save = NULL, *w;
        cJSON *rules;
        size_t i;
        int err;

        rules = cJSON_Parse(c->rules);
        if (rules == NULL)
                fail_msg("%s: %%rules is not JSON", c->path);
        memset(errbuf, 0xad, sizeof(errbuf));
        r = calloc(1, sizeof(*r));
        assert_non_null(r);
        r->path = c->path;
        err = logmon_ruleset_new(rules, &opts, &r->rs, errbuf,
                                 sizeof(errbuf));
        cJSON_Delete(rules);
        if (c->error != NULL) {
                assert_int_equal(err, HP_ECONFIG);
                if (strcmp(errbuf, c->error) != 0)
                        fail_msg(
                                "%s:\n  expected error: %s\n  got error:      "
                                "%s",
                                c->path, c->error, errbuf);
                free(r);
                return;
        }
        if (err != 0)
                fail_msg("%s: %s", c->path, errbuf);

        warn_copy = strdup(logmon_ruleset_warnings(r->rs));
        for (w = strtok_r(warn_copy, "\n", &save); w != NULL;
             w = strtok_r(NULL, "\n", &save))
                text_add(&got_warn, w);
        if (!texts_equal(&want_warn, &got_warn)) {
                print_text("expected warnings", &want_warn);
                print_text("got warnings", &got_warn);
                fail_msg("%s: warnings differ", c->path);
        }
        free(warn_copy);

        r->s = logmon_stream_new(r->rs);
        assert_non_null(r->s);
        if (!c->nostart)
                logmon_stream_start(r->s, 0);
        for (i = 0; i < c->input.n; i++)
                step(r, c->input.lines[i]);

        if (!texts_equal(&c->events, &r->got)) {
                print_text("expected events", &c->events);
                print_text("got events", &r->got);
                fail_msg("%s: events differ", c->path);
        }
        for (i = 0; i < c->final.n; i++)
                check_final(r, c->final.lines[i]);
        for (i = 0; i < c->lastline.n; i++)
                check_lastline(r, c->lastline.lines[i]);
        if (c->state != NULL) {
                char want[512];

                snprintf(want, sizeof(want), "%s%s%s",
                         logmon_state_name(logmon_stream_state(r->s)),
                         logmon_stream_reason(r->s)[0] ? " " : "",
                         logmon_stream_reason(r->s));
                if (strcmp(want, c->state) != 0)
                        fail_msg("%s: state: expected \"%s\", got \"%s\"",
                                 c->path, c->state, want);
        }
        if (c->deadline != NULL) {
                uint64_t d = logmon_stream_next_deadline(r->s);
                uint64_t want = strcmp(c->deadline, "none") == 0
                                        ? UINT64_MAX
                                        : strtoull(c->deadline, NULL, 10);

                if (d != want)
                        fail_msg("%s: deadline: expected %s, got %" PRIu64,
                                 c->path, c->deadline, d);
        }
        logmon_stream_free(r->s);
        logmon_ruleset_unref(r->rs);
        free(r);
}

static int setup_case(void **state)
{
        struct case_file *c = *state;

        parse_case(c);
        return 0;
}

static int teardown_case(void **state)
{
        struct case_file *c = *state;

        free(c->data);
        free(c->rules);
        c->data = NULL;
        c->rules = NULL;
        memset(&c->input, 0, sizeof(*c) - offsetof(struct case_file, input));
        c->nostart = false;
        return 0;
}

static int by_name(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
        struct CMUnitTest *tests;
        struct case_file *cases;
        char **names = NULL;
        size_t n = 0, i;
        struct dirent *de;
        DIR *dir;
        int rc;

        if (argc != 2) {
                fprintf(stderr, "usage: %s CASE-DIRECTORY\n", argv[0]);
                return 2;
        }
        dir = opendir(argv[1]);
        if (dir == NULL) {
                perror(argv[1]);
                return 2;
        }
        while ((de = readdir(dir)) != NULL) {
                size_t len = strlen(de->d_name);

                if (len < 5 || strcmp(de->d_name + len - 4, ".txt") != 0)
                        continue;
                names = realloc(names, (n + 1) * sizeof(*names));
                names[n++] = strdup(de->d_name);
        }
        closedir(dir);
        if (n == 0) {
                fprintf(stderr, "%s: no cases\n", argv[1]);
                return 2;
        }
        qsort(names, n, sizeof(*names), by_name);

        /* Each case three times: with JIT, with the interpreter, and with
         * the patterns as written only (no derived forms), which must all
         * give the same answers. */
        tests = calloc(MODES * n, sizeof(*tests));
        cases = calloc(MODES * n, sizeof(*cases));
        for (i = 0; i < MODES * n; i++) {
                static const char *const mode[MODES] = { "jit", "interp",
                                                         "full" };
                char *label;

                cases[i].no_jit = i % MODES == 1;
                cases[i].full_only = i % MODES == 2;
                if (asprintf(&cases[i].path, "%s/%s", argv[1],
                             names[i / MODES]) < 0 ||
                    asprintf(&label, "%s [%s]", names[i / MODES],
                             mode[i % MODES]) < 0)
                        return 2;
                tests[i].name = label;
                tests[i].test_func = run_case;
                tests[i].setup_func = setup_case;
                tests[i].teardown_func = teardown_case;
                tests[i].initial_state = &cases[i];
        }
        rc = _cmocka_run_group_tests("logmon-cases", tests, MODES * n, NULL,
                                     NULL);
        for (i = 0; i < MODES * n; i++) {
                free((char *)tests[i].name);
                free(cases[i].path);
        }
        for (i = 0; i < n; i++)
                free(names[i]);
        free(names);
        free(tests);
        free(cases);
        return rc;
}
