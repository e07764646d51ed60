/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun --replay: rules, an optional expectation and a recorded log
 * in; the rules' state changes as JSON lines, a diff and the check's
 * outcome out. Everything that can be wrong with the rules or the
 * expectation is found before the log is read, so that a CI job fails on
 * a typo at once and not after replaying a gigabyte. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

static const char *log_label(const char *path)
{
        return strcmp(path, "-") == 0 ? "standard input" : path;
}

/* A torchrun attempt directory: <local_rank>/stdout.log for each rank,
 * in rank order. */
struct rank_dir {
        FILE *files[1024];
        char names[1024][16];
        const char *name_ptrs[1024];
        size_t n;
};

static int open_rank_dir(const char *path, struct rank_dir *d, char *errbuf,
                         size_t len)
{
        char file[4096];
        size_t i;
        FILE *f;

        d->n = 0;
        for (i = 0; i < HP_ARRAY_SIZE(d->files); i++) {
                snprintf(file, sizeof(file), "%s/%zu/stdout.log", path, i);
                f = fopen(file, "rb");
                if (f == NULL) {
                        if (errno == ENOENT)
                                continue;
                        snprintf(errbuf, len, "--replay %s: %s", file,
                                 strerror(errno));
                        return -errno;
                }
                snprintf(d->names[d->n], sizeof(d->names[0]), "%zu", i);
                d->name_ptrs[d->n] = d->names[d->n];
                d->files[d->n++] = f;
        }
        if (d->n == 0) {
                snprintf(errbuf, len,
                         "--replay %s: is a directory with no "
                         "<local_rank>/stdout.log in it (an attempt "
                         "directory of per-rank files)",
                         path);
                return -EISDIR;
        }
        return 0;
}

static void close_rank_dir(struct rank_dir *d)
{
        for (size_t i = 0; i < d->n; i++)
                fclose(d->files[i]);
        d->n = 0;
}

static int open_log(const char *path, FILE *in, FILE **out, char *errbuf,
                    size_t len)
{
        struct stat st;
        FILE *f;
        int err;

        if (strcmp(path, "-") == 0) {
                *out = in;
                return 0;
        }
        f = fopen(path, "rb");
        if (f == NULL) {
                err = -errno;
                snprintf(errbuf, len, "--replay %s: %s", path,
                         strerror(-err));
                return err;
        }
        /* fopen opens a directory happily and fread then fails with a
         * bare EISDIR: a directory is read as per-rank files instead. */
        if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
                fclose(f);
                *out = NULL;
                return 0;
        }
        *out = f;
        return 0;
}

static int load_expectation(const struct logmon_check_opts *opts,
                            const struct logmon_ruleset *rs, cJSON **out,
                            char *errbuf, size_t len)
{
        char msg[512];
        int err;

        err = logmon_expect_load(opts->expect, out, errbuf, len);
        if (err != 0)
                return err;
        err = logmon_expect_validate(rs, *out, msg, sizeof(msg));
        if (err != 0) {
                snprintf(errbuf, len, "%s: %s", opts->expect, msg);
                cJSON_Delete(*out);
                *out = NULL;
        }
        return err;
}

/* What the user should know about how the log was read. */
static void report(const struct logmon_check_opts *opts,
                   const struct logmon_ruleset *rs,
                   const struct logmon_replay *r)
{
        struct logmon_replay_info info;
        size_t i;

        logmon_replay_get_info(r, &info);
        hp_log_info("%s: read as a %s log, clock: %s", log_label(opts->log),
                    info.format, info.clock);
        if (info.agent_lines > 0)
                hp_log_info("%s: %" PRIu64
                            " line%s of hyperpodrun's own went "
                            "to no rule",
                            log_label(opts->log), info.agent_lines,
                            info.agent_lines == 1 ? "" : "s");
        if (info.lines > 0 && strcmp(info.clock, "none") == 0)
                hp_log_warn("%s: no line starts with a timestamp and "
                            "--replay-rate was not given: time stood still, "
                            "so no cut-off or recurring frequency could "
                            "expire",
                            log_label(opts->log));
        /* A pattern that never matches is the likeliest reason for a
         * rule that stayed WAITING: say which. */
        for (i = 0; i < logmon_ruleset_count(rs); i++)
                if (!logmon_replay_rule_matched(r, i))
                        hp_log_warn("%s: rule %zu (%s) matched no line",
                                    log_label(opts->log), i,
                                    logmon_ruleset_rule_name(rs, i));
        if (info.unprefixed > 0)
                hp_log_info("%s: %" PRIu64 " line%s without a console "
                            "prefix (not a rank's output) went to no rule",
                            log_label(opts->log), info.unprefixed,
                            info.unprefixed == 1 ? "" : "s");
}

static int emit(const char *path, const struct logmon_replay *r, char *errbuf,
                size_t len)
{
        FILE *f = fopen(path, "w");
        int err;

        if (f == NULL) {
                err = -errno;
                snprintf(errbuf, len, "--emit-expect %s: %s", path,
                         strerror(-err));
                return err;
        }
        err = logmon_expect_emit(r, f);
        if (fclose(f) != 0 && err == 0)
                err = -errno;
        if (err != 0)
                snprintf(errbuf, len, "--emit-expect %s: %s", path,
                         hp_strerror(err));
        else
                hp_log_info("%s: expectation written: review it, then "
                            "check with --expect",
                            path);
        return err;
}

/* --replay-until: "verdict", "+SECONDS" or an ISO 8601 time. */
static int parse_until(const char *text, struct logmon_replay_opts *o,
                       char *errbuf, size_t len)
{
        char *end;
        double secs;

        if (text == NULL)
                return 0;
        if (strcmp(text, "verdict") == 0) {
                o->until = LOGMON_UNTIL_VERDICT;
                return 0;
        }
        if (text[0] == '+') {
                errno = 0;
                secs = strtod(text + 1, &end);
                if (errno == 0 && end != text + 1 && *end == '\0' &&
                    isfinite(secs) && secs >= 0 && secs <= 1e9) {
                        o->tail_ms = (uint64_t)llround(secs * 1000);
                        return 0;
                }
        } else if (logmon__parse_time(text, &o->until_ms)) {
                o->until = LOGMON_UNTIL_TIME;
                return 0;
        }
        snprintf(errbuf, len,
                 "invalid value '%s' for --replay-until: "
                 "expected an ISO 8601 time such as "
                 "2025-06-17T05:51:29.300Z, +SECONDS after the last line "
                 "such as +600, or verdict",
                 text);
        return HP_EUSAGE;
}

/* The replay itself, of the log or of the directory's ranks; errbuf says
 * why it failed in the flags' terms. */
static int replay(const struct logmon_check_opts *opts, FILE *log,
                  struct rank_dir *dir, struct logmon_ruleset *rs,
                  const struct logmon_replay_opts *replay_opts, FILE *out,
                  struct logmon_replay **r, char *errbuf, size_t len)
{
        int err;

        if (log == NULL) {
                err = open_rank_dir(opts->log, dir, errbuf, len);
                if (err != 0)
                        return err;
                err = logmon_replay_files(rs, dir->files, dir->name_ptrs,
                                          dir->n, replay_opts, out, r);
        } else {
                err = logmon_replay_run(rs, log, replay_opts, out, r);
        }
        if (err == 0)
                return 0;
        if (log != NULL && ferror(log))
                snprintf(errbuf, len, "--replay %s: read error",
                         log_label(opts->log));
        else if (err == -EDOM)
                snprintf(errbuf, len,
                         "--replay-until: no line of %s "
                         "has a timestamp to count a time from",
                         log_label(opts->log));
        else if (err == -ENOENT)
                snprintf(errbuf, len,
                         "--replay-until verdict: %s "
                         "has no verdict line of hyperpodrun's "
                         "(\"log rule verdict ...\")",
                         log_label(opts->log));
        else
                snprintf(errbuf, len, "--replay %s: %s", log_label(opts->log),
                         err == -EIO ? "cannot write the output"
                                     : hp_strerror(err));
        return err;
}

/* The outcome of a replay against the expectation: 0 when met, the
 * number of differences (written to diff) when not, HP_ECONFIG when the
 * log has no clock for rules that need one. */
static int judge(const struct logmon_check_opts *opts,
                 const struct logmon_ruleset *rs, struct logmon_replay *r,
                 const cJSON *expect, FILE *diff, char *errbuf, size_t len)
{
        struct logmon_replay_info info;
        char unused[8];
        int err, timed;

        /* An expectation judged with time standing still would pass a
         * hung log: without a clock, rules that need one cannot be
         * checked. */
        logmon_replay_get_info(r, &info);
        timed = logmon_ruleset_timed(rs);
        /* The agent's own times are a clock only for a log with no
         * worker line between them (a job that printed nothing). */
        if (timed >= 0 &&
            (strcmp(info.clock, "none") == 0 ||
             (strcmp(info.clock, "agent") == 0 &&
              info.lines > info.agent_lines + info.unprefixed))) {
                snprintf(errbuf, len,
                         "--expect %s: rule %d (%s) has a time "
                         "limit, but no line of %s has a timestamp, so "
                         "time stood still; give --replay-rate, or record "
                         "the console with ${time} in "
                         "--log-line-prefix-template",
                         opts->expect, timed,
                         logmon_ruleset_rule_name(rs, (size_t)timed),
                         log_label(opts->log));
                return HP_ECONFIG;
        }
        /* A log that ends before a deadline says nothing of the rule:
         * the expectation decides, or is told it did not. */
        if (logmon_replay_pending(r) > 0 &&
            cJSON_GetObjectItemCaseSensitive(expect, "pending_deadline") ==
                    NULL)
                hp_log_warn("%s: %s ends with %zu rule deadline%s still to "
                            "come (the summary's \"pending\"), so it "
                            "cannot tell a hung job from a healthy one; "
                            "say \"pending_deadline\": false to fail such "
                            "a log, or true to accept it",
                            opts->expect, log_label(opts->log),
                            logmon_replay_pending(r),
                            logmon_replay_pending(r) == 1 ? "" : "s");
        /* Validated above: the check cannot fail, only differ. */
        err = logmon_expect_check(r, expect, diff, unused, sizeof(unused));
        if (err == 0)
                hp_log_info("%s: expectation met by %s", opts->expect,
                            log_label(opts->log));
        else
                hp_log_error("%s: expectation not met by %s: %d "
                             "difference%s (above)",
                             opts->expect, log_label(opts->log), err,
                             err == 1 ? "" : "s");
        return err;
}

int logmon_check_run(const struct logmon_check_opts *opts, FILE *in,
                     FILE *out, FILE *diff, char *errbuf, size_t len)
{
        struct logmon_replay_opts replay_opts = {
                .rate = opts->rate,
                .layout = opts->layout,
                .monitored = opts->monitored,
                .nmonitored = opts->nmonitored,
                .text = opts->text,
        };
        const struct logmon_ruleset_opts rule_opts = {
                .strict = opts->strict
        };
        struct logmon_ruleset *rs = NULL;
        struct logmon_replay *r = NULL;
        const char *warnings;
        cJSON *expect = NULL;
        FILE *log = NULL;
        struct rank_dir *dir = NULL;
        int err;

        err = logmon_config_load_ruleset(opts->rules, &rule_opts, &rs, errbuf,
                                         len);
        if (err != 0)
                return err;
        warnings = logmon_ruleset_warnings(rs);
        if (warnings[0] != '\0')
                hp_log_warn("%s: %s", opts->rules, warnings);
        if (opts->expect != NULL) {
                err = load_expectation(opts, rs, &expect, errbuf, len);
                if (err != 0)
                        goto out;
        }
        err = parse_until(opts->until, &replay_opts, errbuf, len);
        if (err != 0)
                goto out;
        err = open_log(opts->log, in, &log, errbuf, len);
        if (err != 0)
                goto out;
        if (log == NULL) {
                dir = calloc(1, sizeof(*dir));
                if (dir == NULL) {
                        err = -ENOMEM;
                        snprintf(errbuf, len, "--replay %s: %s", opts->log,
                                 strerror(ENOMEM));
                        goto out;
                }
        }

        err = replay(opts, log, dir, rs, &replay_opts, out, &r, errbuf, len);
        if (err != 0)
                goto out;
        report(opts, rs, r);
        if (opts->emit_expect != NULL) {
                err = emit(opts->emit_expect, r, errbuf, len);
                if (err != 0)
                        goto out;
        }
        if (expect == NULL)
                goto out;
        err = judge(opts, rs, r, expect, diff, errbuf, len);
out:
        if (log != NULL && log != in)
                fclose(log);
        if (dir != NULL) {
                close_rank_dir(dir);
                free(dir);
        }
        logmon_replay_free(r);
        cJSON_Delete(expect);
        logmon_ruleset_unref(rs);
        return err;
}

static void print_seconds(FILE *out, const char *key, uint64_t ms,
                          const char *meaning)
{
        if (ms == UINT64_MAX)
                fprintf(out, "  %s: none\n", key);
        else
                fprintf(out, "  %s: %" PRIu64 ".%03" PRIu64 " s (%s)\n", key,
                        ms / 1000, ms % 1000, meaning);
}

/* One rule as the engine took it: the patterns as written, every limit
 * with its default filled in and what it makes the rule do. */
static void print_rule(FILE *out, const struct logmon_ruleset *rs,
                       const cJSON *obj, size_t i)
{
        const cJSON *log = cJSON_GetObjectItemCaseSensitive(obj,
                                                            "logPattern");
        const cJSON *stop = cJSON_GetObjectItemCaseSensitive(obj,
                                                             "stopPattern");
        struct logmon_rule_limits lim;
        char number[HP_DOUBLE_LEN];

        logmon_ruleset_rule_limits(rs, i, &lim);
        fprintf(out, "rule %zu: %s\n", i, logmon_ruleset_rule_name(rs, i));
        fprintf(out, "  logPattern: %s\n",
                cJSON_IsString(log) ? log->valuestring : "(none)");
        fprintf(out, "  stopPattern: %s\n",
                cJSON_IsString(stop) ? stop->valuestring
                                     : "none (the rule never retires)");
        print_seconds(out, "expectedStartCutOffInSeconds", lim.cutoff_ms,
                      "HANGING when no line matches within it");
        print_seconds(out, "expectedRecurringFrequencyInSeconds", lim.freq_ms,
                      "HANGING when a match is not followed by another "
                      "within it");
        if (lim.metric)
                fprintf(out,
                        "  metric: capture 1 %s %s in %" PRIu32
                        " data point%s in a row makes it SLOW\n",
                        lim.op, hp_format_double(lim.threshold, number),
                        lim.datapoints, lim.datapoints == 1 ? "" : "s");
        else
                fputs("  metric: none (the rule never reports SLOW)\n", out);
        fprintf(out, "  faultOnMatch: %s\n",
                lim.fault_on_match ? "true (a match makes it FAULTED)"
                                   : "false");
}

int logmon_rules_check(const char *path, bool strict, FILE *out, char *errbuf,
                       size_t len)
{
        const struct logmon_ruleset_opts opts = { .strict = strict };
        struct logmon_ruleset *rs = NULL;
        const char *warnings;
        char msg[1024];
        cJSON *rules;
        size_t i;
        int err;

        err = logmon_config_load(path, &rules, errbuf, len);
        if (err != 0)
                return err;
        err = logmon_ruleset_new(rules, &opts, &rs, msg, sizeof(msg));
        if (err != 0) {
                snprintf(errbuf, len, "%s: %s", path, msg);
                cJSON_Delete(rules);
                return err;
        }
        warnings = logmon_ruleset_warnings(rs);
        if (warnings[0] != '\0')
                hp_log_warn("%s: %s", path, warnings);
        for (i = 0; i < logmon_ruleset_count(rs); i++)
                print_rule(out, rs, cJSON_GetArrayItem(rules, (int)i), i);
        fprintf(out, "%s: %zu rule%s, valid%s\n", path,
                logmon_ruleset_count(rs),
                logmon_ruleset_count(rs) == 1 ? "" : "s",
                warnings[0] != '\0' ? ", with the warnings above" : "");
        logmon_ruleset_unref(rs);
        cJSON_Delete(rules);
        return fflush(out) == 0 ? 0 : -EIO;
}
