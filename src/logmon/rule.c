/* SPDX-License-Identifier: Apache-2.0 */
/* Rule validation: JSON rule objects to a shared, read-only ruleset,
 * each pattern compiled by the matcher (matcher.c). All or nothing, with
 * an error that says which rule, which field and what is wrong with
 * it. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

/* The largest number of seconds we accept: a deadline in milliseconds
 * must not overflow when added to a monotonic clock. 10^10 s is three
 * centuries. */
#define SECONDS_MAX 1e10
#define WARNINGS_MAX 4096

struct validator {
        char *errbuf;
        size_t len;
        size_t index;
        const char *name; /* NULL until the name is known */
        char *warnings;
        size_t warnings_len;
        locale_t loc;
};

static void verr(struct validator *v, const char *field, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* "rule 2 (LossSpike): metricThreshold: <message>". */
static void verr(struct validator *v, const char *field, const char *fmt, ...)
{
        char msg[512];
        va_list ap;

        if (v->errbuf == NULL || v->len == 0)
                return;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (v->name != NULL)
                snprintf(v->errbuf, v->len, "rule %zu (%s): %s: %s", v->index,
                         v->name, field, msg);
        else if (field != NULL)
                snprintf(v->errbuf, v->len, "rule %zu: %s: %s", v->index,
                         field, msg);
        else
                snprintf(v->errbuf, v->len, "rule %zu: %s", v->index, msg);
}

static void vwarn(struct validator *v, const char *field, const char *fmt,
                  ...) __attribute__((format(printf, 3, 4)));

/* Warnings are collected into one bounded text; past the bound they are
 * dropped, which only loses advice, never a decision. */
static void vwarn(struct validator *v, const char *field, const char *fmt,
                  ...)
{
        char msg[512];
        va_list ap;
        int n;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (v->warnings_len >= WARNINGS_MAX - 1)
                return;
        n = snprintf(v->warnings + v->warnings_len,
                     WARNINGS_MAX - v->warnings_len,
                     "rule %zu (%s): %s: %s\n", v->index, v->name, field,
                     msg);
        if (n > 0)
                v->warnings_len += (size_t)n;
        if (v->warnings_len >= WARNINGS_MAX)
                v->warnings_len = WARNINGS_MAX - 1;
}

/* Describes a JSON value for an error message, the way a user wrote it. */
static const char *describe(const cJSON *item, char *buf, size_t len)
{
        if (cJSON_IsNull(item))
                return "null";
        if (cJSON_IsTrue(item))
                return "true";
        if (cJSON_IsFalse(item))
                return "false";
        if (cJSON_IsArray(item))
                return "a list";
        if (cJSON_IsObject(item))
                return "an object";
        if (cJSON_IsNumber(item)) {
                char number[HP_DOUBLE_LEN];

                snprintf(buf, len, "the number %s",
                         hp_format_double(item->valuedouble, number));
                return buf;
        }
        if (cJSON_IsString(item)) {
                if (strlen(item->valuestring) > 40)
                        snprintf(buf, len, "the string \"%.37s...\"",
                                 item->valuestring);
                else
                        snprintf(buf, len, "the string \"%s\"",
                                 item->valuestring);
                return buf;
        }
        return "an invalid value";
}

static const char *const known_keys[] = {
        "name",
        "logPattern",
        "expectedStartCutOffInSeconds",
        "expectedRecurringFrequencyInSeconds",
        "stopPattern",
        "metricThreshold",
        "operator",
        "metricEvaluationDataPoints",
        "faultOnMatch",
};

/* Edit distance, letters compared without case: what a misspelling of a
 * key costs. Keys are short; longer words are not compared. */
static size_t distance(const char *a, const char *b)
{
        size_t la = strlen(a), lb = strlen(b), i, j, prev, cur, sub;
        size_t row[64];

        if (la >= HP_ARRAY_SIZE(row) || lb >= HP_ARRAY_SIZE(row))
                return SIZE_MAX;
        for (j = 0; j <= lb; j++)
                row[j] = j;
        for (i = 1; i <= la; i++) {
                prev = row[0];
                row[0] = i;
                for (j = 1; j <= lb; j++) {
                        cur = row[j];
                        sub = prev + (tolower((unsigned char)a[i - 1]) !=
                                      tolower((unsigned char)b[j - 1]));
                        row[j] = sub;
                        if (row[j - 1] + 1 < row[j])
                                row[j] = row[j - 1] + 1;
                        if (cur + 1 < row[j])
                                row[j] = cur + 1;
                        prev = cur;
                }
        }
        return row[lb];
}

/* The word of words[] closest to what, when it is close enough to be
 * what was meant (a third of its letters wrong at most); NULL if none. */
static const char *closest(const char *what, const char *const *words,
                           size_t n)
{
        const char *best = NULL;
        size_t i, d, best_d = SIZE_MAX;

        for (i = 0; i < n; i++) {
                d = distance(what, words[i]);
                /* On a tie, a word that begins with what was typed. */
                if (d < best_d ||
                    (d == best_d &&
                     strncasecmp(words[i], what, strlen(what)) == 0)) {
                        best_d = d;
                        best = words[i];
                }
        }
        return best != NULL && best_d <= 1 + strlen(best) / 3 ? best : NULL;
}

static const struct {
        const char *text;
        enum logmon_op op;
} operators[] = {
        { "gt", LOGMON_OP_GT }, { "gteq", LOGMON_OP_GTEQ },
        { "lt", LOGMON_OP_LT }, { "lteq", LOGMON_OP_LTEQ },
        { "eq", LOGMON_OP_EQ },
};

/* Optional fields: absent and JSON null mean the same, because a CRD
 * round-trip may spell an unset field either way. Keys are matched
 * case-sensitively, as Python's dict.get does. */
static const cJSON *field(const cJSON *rule, const char *key)
{
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(rule, key);

        return cJSON_IsNull(item) ? NULL : item;
}

/* A JSON number, or a string float() accepts, as a double. */
static bool numeric(struct validator *v, const cJSON *item, double *out)
{
        if (cJSON_IsNumber(item)) {
                *out = item->valuedouble;
                return true;
        }
        if (cJSON_IsString(item))
                return logmon__parse_float(item->valuestring,
                                           strlen(item->valuestring), v->loc,
                                           out);
        return false;
}

/* Seconds: a non-negative number of seconds, fractions kept to the
 * millisecond (the reference's int() would cut 2.5 to 2; the CRD types
 * these as integers, so only hand-written configurations differ). */
static int seconds(struct validator *v, const cJSON *rule, const char *key,
                   bool *has, uint64_t *out_ms)
{
        const cJSON *item = field(rule, key);
        char desc[80];
        double d;

        *has = false;
        if (item == NULL)
                return 0;
        if (!numeric(v, item, &d) || isnan(d)) {
                verr(v, key, "expected a number of seconds, got %s",
                     describe(item, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        if (d < 0 || d > SECONDS_MAX) {
                verr(v, key, "%g seconds is out of range (0 to %.0f)", d,
                     SECONDS_MAX);
                return HP_ECONFIG;
        }
        *has = true;
        *out_ms = (uint64_t)llround(d * 1000.0);
        return 0;
}

/* A pattern compiled through the matcher (matcher.c); a PCRE2 error is
 * reported with the pattern it concerns. */
static int regex(struct validator *v, const char *key, const cJSON *item,
                 const struct logmon_ruleset_opts *opts,
                 struct logmon_regex *p, bool *jit_ok)
{
        struct logmon_regex_error rerr;
        char desc[80];
        int err;

        if (!cJSON_IsString(item)) {
                verr(v, key, "expected a regular expression string, got %s",
                     describe(item, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        err = logmon__regex_compile(p, item->valuestring, !opts->no_jit,
                                    opts->full_only, jit_ok, &rerr);
        if (err != 0)
                verr(v, key, "%s at offset %zu in \"%s\"", rerr.msg,
                     rerr.offset, item->valuestring);
        return err;
}

/* One check of a rule object: a field, or a few that go together, into
 * r. 0, HP_ECONFIG (reported through v) or -ENOMEM. */
typedef int (*rule_check_fn)(struct validator *v, struct logmon_ruleset *rs,
                             const cJSON *obj, struct logmon_rule *r,
                             const struct logmon_ruleset_opts *opts);

static int check_name(struct validator *v, struct logmon_ruleset *rs,
                      const cJSON *obj, struct logmon_rule *r,
                      const struct logmon_ruleset_opts *opts)
{
        const cJSON *item = field(obj, "name");
        char desc[80];

        if (item == NULL) {
                verr(v, "name", "required");
                return HP_ECONFIG;
        }
        if (!cJSON_IsString(item) || item->valuestring[0] == '\0') {
                verr(v, "name", "expected a non-empty string, got %s",
                     describe(item, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        if (strlen(item->valuestring) >= LOGMON_NAME_MAX) {
                verr(v, "name", "longer than %d bytes", LOGMON_NAME_MAX - 1);
                return HP_ECONFIG;
        }
        r->name = strdup(item->valuestring);
        if (r->name == NULL)
                return -ENOMEM;
        v->name = r->name;
        for (size_t i = 0; i < v->index; i++) {
                if (strcmp(rs->rules[i].name, r->name) == 0) {
                        vwarn(v, "name",
                              "same name as rule %zu: reasons will name "
                              "the first",
                              i);
                        break;
                }
        }
        return 0;
}

static int check_log_pattern(struct validator *v, struct logmon_ruleset *rs,
                             const cJSON *obj, struct logmon_rule *r,
                             const struct logmon_ruleset_opts *opts)
{
        const cJSON *item = field(obj, "logPattern");
        int err;

        if (item == NULL) {
                verr(v, "logPattern", "required");
                return HP_ECONFIG;
        }
        err = regex(v, "logPattern", item, opts, &r->log, &rs->jit);
        if (err != 0)
                return err;
        r->captures = logmon__regex_groups(&r->log);
        return 0;
}

static int check_timing(struct validator *v, struct logmon_ruleset *rs,
                        const cJSON *obj, struct logmon_rule *r,
                        const struct logmon_ruleset_opts *opts)
{
        int err = seconds(v, obj, "expectedStartCutOffInSeconds",
                          &r->has_cutoff, &r->cutoff_ms);

        if (err != 0)
                return err;
        return seconds(v, obj, "expectedRecurringFrequencyInSeconds",
                       &r->has_freq, &r->freq_ms);
}

static int check_stop_pattern(struct validator *v, struct logmon_ruleset *rs,
                              const cJSON *obj, struct logmon_rule *r,
                              const struct logmon_ruleset_opts *opts)
{
        const cJSON *item = field(obj, "stopPattern");

        if (item == NULL)
                return 0;
        /* An empty pattern matches every line: the rule would retire on
         * the first line it sees. */
        if (cJSON_IsString(item) && item->valuestring[0] == '\0') {
                verr(v, "stopPattern",
                     "empty pattern would retire "
                     "the rule on its first line");
                return HP_ECONFIG;
        }
        return regex(v, "stopPattern", item, opts, &r->stop, &rs->jit);
}

static int check_threshold(struct validator *v, struct logmon_ruleset *rs,
                           const cJSON *obj, struct logmon_rule *r,
                           const struct logmon_ruleset_opts *opts)
{
        const cJSON *item = field(obj, "metricThreshold");
        char desc[80];
        double d;

        if (item == NULL)
                return 0;
        if (!numeric(v, item, &d)) {
                verr(v, "metricThreshold", "expected a number, got %s",
                     describe(item, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        if (isnan(d)) {
                verr(v, "metricThreshold",
                     "nan compares false "
                     "with everything; the rule could never be "
                     "SLOW");
                return HP_ECONFIG;
        }
        r->has_threshold = true;
        r->threshold = d;
        return 0;
}

static int check_operator(struct validator *v, struct logmon_ruleset *rs,
                          const cJSON *obj, struct logmon_rule *r,
                          const struct logmon_ruleset_opts *opts)
{
        static const char *const ops[] = { "gt", "gteq", "lt", "lteq", "eq" };
        const cJSON *item = field(obj, "operator");
        const char *near;
        char desc[80];

        if (item == NULL)
                return 0;
        for (size_t i = 0; i < HP_ARRAY_SIZE(operators); i++) {
                if (cJSON_IsString(item) &&
                    strcmp(item->valuestring, operators[i].text) == 0)
                        r->op = operators[i].op;
        }
        if (r->op != LOGMON_OP_NONE)
                return 0;
        near = cJSON_IsString(item) ? closest(item->valuestring, ops, 5)
                                    : NULL;
        verr(v, "operator",
             "expected one of gt, gteq, lt, "
             "lteq, eq, got %s%s%s%s",
             describe(item, desc, sizeof(desc)),
             near ? " (did you mean \"" : "", near ? near : "",
             near ? "\"?)" : "");
        return HP_ECONFIG;
}

static int check_datapoints(struct validator *v, struct logmon_ruleset *rs,
                            const cJSON *obj, struct logmon_rule *r,
                            const struct logmon_ruleset_opts *opts)
{
        const cJSON *item = field(obj, "metricEvaluationDataPoints");
        char desc[80];
        double d;

        r->datapoints = 1;
        if (item == NULL)
                return 0;
        if (!numeric(v, item, &d) || d != floor(d) || d < 0 ||
            d > UINT32_MAX) {
                verr(v, "metricEvaluationDataPoints",
                     "expected a non-negative integer, got %s",
                     describe(item, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        r->datapoints = (uint32_t)d;
        return 0;
}

/* Python truthiness would make the string "false" true. Booleans and the
 * two words are what people mean; anything else is more likely a mistake
 * than a wish. */
static int check_fault_on_match(struct validator *v,
                                struct logmon_ruleset *rs, const cJSON *obj,
                                struct logmon_rule *r,
                                const struct logmon_ruleset_opts *opts)
{
        const cJSON *item = field(obj, "faultOnMatch");
        char desc[80];

        if (item == NULL)
                return 0;
        if (cJSON_IsBool(item))
                r->fault_on_match = cJSON_IsTrue(item);
        else if (cJSON_IsString(item) &&
                 strcasecmp(item->valuestring, "true") == 0)
                r->fault_on_match = true;
        else if (cJSON_IsString(item) &&
                 strcasecmp(item->valuestring, "false") == 0)
                r->fault_on_match = false;
        else {
                verr(v, "faultOnMatch",
                     "expected true or false, "
                     "got %s",
                     describe(item, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        return 0;
}

/* The checks of a rule, in the order its errors are reported. */
static const rule_check_fn rule_checks[] = {
        check_name,         check_log_pattern,    check_timing,
        check_stop_pattern, check_threshold,      check_operator,
        check_datapoints,   check_fault_on_match,
};

/* A metric rule needs a threshold, an operator and a capture group. */
static void warn_metric(struct validator *v, struct logmon_rule *r)
{
        r->metric = r->has_threshold && r->op != LOGMON_OP_NONE &&
                    r->captures > 0;
        if (r->has_threshold != (r->op != LOGMON_OP_NONE))
                vwarn(v, r->has_threshold ? "metricThreshold" : "operator",
                      "needs %s as well; the rule never reports SLOW",
                      r->has_threshold ? "operator" : "metricThreshold");
        else if (r->has_threshold && r->captures == 0)
                vwarn(v, "logPattern",
                      "has no capture group for the "
                      "metric; the rule never reports SLOW");
}

/* Unknown keys are ignored with a warning rather than refused: the
 * operator forwards the job spec verbatim, and a newer CRD may carry
 * fields this version does not know. */
static int check_unknown_keys(struct validator *v, const cJSON *obj,
                              const struct logmon_ruleset_opts *opts)
{
        const cJSON *key;

        cJSON_ArrayForEach (key, obj) {
                bool known = false;
                const char *near;

                for (size_t i = 0; i < HP_ARRAY_SIZE(known_keys); i++)
                        if (strcmp(key->string, known_keys[i]) == 0)
                                known = true;
                if (known)
                        continue;
                near = closest(key->string, known_keys,
                               HP_ARRAY_SIZE(known_keys));
                if (opts->strict) {
                        verr(v, key->string, "unknown key (--strict)%s%s%s",
                             near ? "; did you mean \"" : "",
                             near ? near : "", near ? "\"?" : "");
                        return HP_ECONFIG;
                }
                vwarn(v, key->string, "unknown key, ignored%s%s%s",
                      near ? "; did you mean \"" : "", near ? near : "",
                      near ? "\"?" : "");
        }
        return 0;
}

static int validate_rule(struct validator *v, struct logmon_ruleset *rs,
                         const cJSON *obj, struct logmon_rule *r,
                         const struct logmon_ruleset_opts *opts)
{
        char desc[80];
        int err;

        if (!cJSON_IsObject(obj)) {
                verr(v, NULL, "expected an object, got %s",
                     describe(obj, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        for (size_t i = 0; i < HP_ARRAY_SIZE(rule_checks); i++) {
                err = rule_checks[i](v, rs, obj, r, opts);
                if (err != 0)
                        return err;
        }
        warn_metric(v, r);
        return check_unknown_keys(v, obj, opts);
}

/* Gives the heads that two or more patterns of the set have in common
 * an id each (logmon__regex_share_heads): logPattern and stopPattern of
 * each rule in order. */
static void share_heads(struct logmon_ruleset *rs)
{
        struct logmon_regex *list[2 * LOGMON_RULES_MAX];
        size_t i, n = 0;

        for (i = 0; i < rs->n; i++) {
                list[n++] = &rs->rules[i].log;
                list[n++] = &rs->rules[i].stop;
        }
        rs->heads = logmon__regex_share_heads(list, n);
}

static void rules_free(struct logmon_ruleset *rs)
{
        size_t i;

        for (i = 0; i < rs->n; i++) {
                free(rs->rules[i].name);
                logmon__regex_free(&rs->rules[i].log);
                logmon__regex_free(&rs->rules[i].stop);
        }
        free(rs->rules);
        logmon__match_limits_free(rs->mctx);
        if (rs->c_locale != (locale_t)0)
                freelocale(rs->c_locale);
        free(rs->warnings);
        free(rs);
}

int logmon_ruleset_new(const cJSON *rules,
                       const struct logmon_ruleset_opts *opts,
                       struct logmon_ruleset **out, char *errbuf, size_t len)
{
        static const struct logmon_ruleset_opts defaults = { 0 };
        struct validator v = { .errbuf = errbuf, .len = len };
        struct logmon_ruleset *rs;
        const cJSON *obj;
        char desc[80];
        int count, err = -ENOMEM;
        uint32_t pairs;
        size_t i;

        if (opts == NULL)
                opts = &defaults;
        if (!cJSON_IsArray(rules)) {
                snprintf(errbuf, len,
                         "rules: expected a list of rule "
                         "objects, got %s",
                         describe(rules, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        count = cJSON_GetArraySize(rules);
        if (count > LOGMON_RULES_MAX) {
                snprintf(errbuf, len,
                         "rules: %d rules, at most %d are "
                         "supported",
                         count, LOGMON_RULES_MAX);
                return HP_ECONFIG;
        }

        rs = calloc(1, sizeof(*rs));
        if (rs == NULL)
                return -ENOMEM;
        rs->refs = 1;
        rs->jit = true;
        rs->max_pairs = 1;
        rs->rules = calloc(count > 0 ? (size_t)count : 1, sizeof(*rs->rules));
        rs->warnings = calloc(1, WARNINGS_MAX);
        rs->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        rs->mctx = logmon__match_limits_new(opts->match_limit != 0
                                                    ? opts->match_limit
                                                    : LOGMON_MATCH_LIMIT,
                                            opts->depth_limit != 0
                                                    ? opts->depth_limit
                                                    : LOGMON_DEPTH_LIMIT);
        if (rs->rules == NULL || rs->warnings == NULL ||
            rs->c_locale == (locale_t)0 || rs->mctx == NULL)
                goto error;
        v.warnings = rs->warnings;
        v.loc = rs->c_locale;

        i = 0;
        cJSON_ArrayForEach (obj, rules) {
                struct logmon_rule *r = &rs->rules[i];

                v.index = i;
                v.name = NULL;
                /* Counting the rule before validating it lets rules_free
                 * release what a half-validated rule holds. */
                rs->n = ++i;
                err = validate_rule(&v, rs, obj, r, opts);
                if (err != 0)
                        goto error;
                pairs = r->captures;
                if (pairs + 1 > rs->max_pairs)
                        rs->max_pairs = pairs + 1;
                if (r->stop.full != NULL) {
                        pairs = logmon__regex_groups(&r->stop);
                        if (pairs + 1 > rs->max_pairs)
                                rs->max_pairs = pairs + 1;
                }
        }

        share_heads(rs);
        *out = rs;
        return 0;

error:
        if (err == -ENOMEM && errbuf != NULL && len > 0)
                snprintf(errbuf, len, "out of memory");
        rules_free(rs);
        return err;
}

struct logmon_ruleset *logmon_ruleset_ref(struct logmon_ruleset *rs)
{
        rs->refs++;
        return rs;
}

void logmon_ruleset_unref(struct logmon_ruleset *rs)
{
        if (rs != NULL && --rs->refs == 0)
                rules_free(rs);
}

int logmon_ruleset_rule_limits(const struct logmon_ruleset *rs, size_t i,
                               struct logmon_rule_limits *out)
{
        const struct logmon_rule *r;
        size_t k;

        if (i >= rs->n)
                return -EINVAL;
        r = &rs->rules[i];
        out->cutoff_ms = r->has_cutoff ? r->cutoff_ms : UINT64_MAX;
        out->freq_ms = r->has_freq ? r->freq_ms : UINT64_MAX;
        out->metric = r->metric;
        out->threshold = r->threshold;
        out->op = "";
        for (k = 0; k < HP_ARRAY_SIZE(operators); k++)
                if (operators[k].op == r->op)
                        out->op = operators[k].text;
        out->datapoints = r->datapoints;
        out->fault_on_match = r->fault_on_match;
        return 0;
}

int logmon_ruleset_timed(const struct logmon_ruleset *rs)
{
        size_t i;

        for (i = 0; i < rs->n; i++)
                if (rs->rules[i].has_cutoff || rs->rules[i].has_freq)
                        return (int)i;
        return -1;
}

size_t logmon_ruleset_count(const struct logmon_ruleset *rs)
{
        return rs->n;
}

const char *logmon_ruleset_rule_name(const struct logmon_ruleset *rs,
                                     size_t i)
{
        return i < rs->n ? rs->rules[i].name : NULL;
}

int logmon_ruleset_find(const struct logmon_ruleset *rs, const char *name)
{
        size_t i;

        for (i = 0; i < rs->n; i++)
                if (strcmp(rs->rules[i].name, name) == 0)
                        return (int)i;
        return -1;
}

const char *logmon_ruleset_warnings(const struct logmon_ruleset *rs)
{
        return rs->warnings;
}

bool logmon_ruleset_jit(const struct logmon_ruleset *rs)
{
        return rs->jit;
}
