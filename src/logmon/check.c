/* hyperpodrun --replay: rules, an optional expectation and a recorded log
 * in; the rules' state changes as JSON lines, a diff and the check's
 * outcome out. Everything that can be wrong with the rules or the
 * expectation is found before the log is read, so that a CI job fails on
 * a typo at once and not after replaying a gigabyte. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

static const char *log_label(const char *path)
{
        return strcmp(path, "-") == 0 ? "standard input" : path;
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
         * bare EISDIR; say so up front. */
        if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
                fclose(f);
                snprintf(errbuf, len, "--replay %s: is a directory", path);
                return -EISDIR;
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
                   const struct logmon_replay *r)
{
        struct logmon_replay_info info;

        logmon_replay_get_info(r, &info);
        if (info.lines > 0 && strcmp(info.clock, "none") == 0)
                hp_log_warn("%s: no line starts with a timestamp and "
                            "--replay-rate was not given: time stood still, "
                            "so no cut-off or recurring frequency could "
                            "expire", log_label(opts->log));
        if (info.unprefixed > 0)
                hp_log_info("%s: %" PRIu64 " line%s without a console "
                            "prefix (not a rank's output) went to no rule",
                            log_label(opts->log), info.unprefixed,
                            info.unprefixed == 1 ? "" : "s");
}

int logmon_check_run(const struct logmon_check_opts *opts, FILE *in,
                     FILE *out, FILE *diff, char *errbuf, size_t len)
{
        struct logmon_replay_opts replay_opts = { .rate = opts->rate };
        struct logmon_ruleset *rs = NULL;
        struct logmon_replay *r = NULL;
        const char *warnings;
        cJSON *expect = NULL;
        FILE *log = NULL;
        char unused[8];
        int err;

        err = logmon_config_load_ruleset(opts->rules, NULL, &rs, errbuf,
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
        err = open_log(opts->log, in, &log, errbuf, len);
        if (err != 0)
                goto out;

        err = logmon_replay_run(rs, log, &replay_opts, out, &r);
        if (err != 0) {
                if (ferror(log))
                        snprintf(errbuf, len, "--replay %s: read error",
                                 log_label(opts->log));
                else
                        snprintf(errbuf, len, "--replay %s: %s",
                                 log_label(opts->log),
                                 err == -EIO ? "cannot write the output" :
                                               hp_strerror(err));
                goto out;
        }
        report(opts, r);
        if (expect == NULL)
                goto out;
        /* Validated above: the check cannot fail, only differ. */
        err = logmon_expect_check(r, expect, diff, unused, sizeof(unused));
        if (err == 0)
                hp_log_info("%s: expectation met by %s", opts->expect,
                            log_label(opts->log));
        else
                hp_log_error("%s: expectation not met by %s: %d "
                             "difference%s (above)", opts->expect,
                             log_label(opts->log), err, err == 1 ? "" : "s");
out:
        if (log != NULL && log != in)
                fclose(log);
        logmon_replay_free(r);
        cJSON_Delete(expect);
        logmon_ruleset_unref(rs);
        return err;
}
