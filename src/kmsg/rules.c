/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node-problem-detector's kernel-monitor config (its system-log-monitor
 * JSON), so that clusters reuse the configs they already run NPD with.
 * Patterns are searched as NPD does: with an implicit end anchor, over the
 * last bufferSize lines joined by "\n". A pattern that is not anchored at
 * the start of a record gets a warning: an unprivileged process can put
 * text inside a kernel record, never (beyond its 15-byte command name) at
 * its start.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "hyperpod/kmsg.h"

#include "kmsg-private.h"

/* NPD's default when a config gives no bufferSize. */
#define DEFAULT_BUFFER_SIZE 10
#define MAX_BUFFER_SIZE 1000
#define MAX_RULES 256

static int field_error(char *errbuf, size_t len, const char *origin,
                       const char *what)
{
        snprintf(errbuf, len, "%s: %s", origin, what);
        return HP_ECONFIG;
}

/* A Go duration ("5m", "1h30m", "90s", "500ms"), as NPD's lookback. */
int kmsg__parse_duration(const char *text, uint64_t *out_us)
{
        static const struct {
                const char *unit;
                double us;
        } units[] = {
                { "ns", 1e-3 }, { "us", 1 },   { "µs", 1 },     { "ms", 1e3 },
                { "s", 1e6 },   { "m", 60e6 }, { "h", 3600e6 },
        };
        const char *p = text;
        double total = 0;

        if (*p == '\0')
                return HP_ECONFIG;
        if (strcmp(p, "0") == 0) {
                *out_us = 0;
                return 0;
        }
        while (*p) {
                char *end;
                double v = strtod(p, &end);
                size_t best = 0, best_len = 0;

                if (end == p || v < 0)
                        return HP_ECONFIG;
                p = end;
                for (size_t i = 0; i < HP_ARRAY_SIZE(units); i++) {
                        size_t n = strlen(units[i].unit);
                        if (strncmp(p, units[i].unit, n) == 0 &&
                            n > best_len) {
                                best = i;
                                best_len = n;
                        }
                }
                if (best_len == 0)
                        return HP_ECONFIG;
                total += v * units[best].us;
                p += best_len;
        }
        if (total > 1e18)
                return HP_ECONFIG;
        *out_us = (uint64_t)total;
        return 0;
}

static int string_field(const cJSON *obj, const char *name, bool required,
                        const char **out, const char *origin,
                        const char *where, char *errbuf, size_t len)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
        char what[512];

        *out = "";
        if (v == NULL || cJSON_IsNull(v)) {
                if (!required)
                        return 0;
                snprintf(what, sizeof(what), "%s has no \"%s\"", where, name);
                return field_error(errbuf, len, origin, what);
        }
        if (!cJSON_IsString(v)) {
                snprintf(what, sizeof(what), "%s: \"%s\" is not a string",
                         where, name);
                return field_error(errbuf, len, origin, what);
        }
        *out = v->valuestring;
        return 0;
}

static int compile_rule(struct kmsg_rule *rule, const char *pattern,
                        const char *origin, size_t index, char *errbuf,
                        size_t len)
{
        size_t plen = strlen(pattern);
        char *anchored = malloc(plen + 8);
        PCRE2_UCHAR msg[256];
        PCRE2_SIZE offset;
        int code;

        if (anchored == NULL)
                return -ENOMEM;
        /* NPD appends an end anchor: a match must end at the newest line. */
        memcpy(anchored, "(?:", 3);
        memcpy(anchored + 3, pattern, plen);
        memcpy(anchored + 3 + plen, ")\\z", 4);
        rule->code = pcre2_compile((PCRE2_SPTR)anchored,
                                   PCRE2_ZERO_TERMINATED, 0, &code, &offset,
                                   NULL);
        free(anchored);
        if (rule->code == NULL) {
                pcre2_get_error_message(code, msg, sizeof(msg));
                snprintf(errbuf, len,
                         "%s: rules[%zu].pattern '%s' is not a valid regular "
                         "expression: %s at offset %zu",
                         origin, index, pattern, (const char *)msg,
                         (size_t)(offset > 3 ? offset - 3 : 0));
                return HP_ECONFIG;
        }
        rule->match = pcre2_match_data_create_from_pattern(rule->code, NULL);
        if (rule->match == NULL)
                return -ENOMEM;
        return 0;
}

/*
 * Where the pattern is anchored: at the start of the searched text ('^' or
 * '\A', after any leading "(?flags)"), at the start of any line of it
 * ("(?m)^"), or nowhere. A leading ".*" or ".+" after the anchor undoes
 * it. PCRE2 is called without PCRE2_MULTILINE, as Go's regexp is by NPD:
 * '^' is the start of the whole buffer, the oldest of its lines.
 */
enum anchor { ANCHOR_NONE, ANCHOR_TEXT, ANCHOR_LINE };

static enum anchor anchor_of(const char *p)
{
        bool multiline = false;
        enum anchor a;

        while (p[0] == '(' && p[1] == '?') {
                const char *q = p + 2;
                bool on = true, m = false;

                for (; *q != ')' && *q != '\0'; q++) {
                        if (*q == '-')
                                on = false;
                        else if (*q == 'm')
                                m = on;
                        else if (strchr("imnsxUJ^", *q) == NULL)
                                break;
                }
                if (*q != ')')
                        break; /* a group, not an option setting */
                if (m)
                        multiline = true;
                p = q + 1;
        }
        if (p[0] == '^') {
                a = multiline ? ANCHOR_LINE : ANCHOR_TEXT;
                p++;
        } else if (p[0] == '\\' && p[1] == 'A') {
                a = ANCHOR_TEXT;
                p += 2;
        } else {
                return ANCHOR_NONE;
        }
        if (p[0] == '.' && (p[1] == '*' || p[1] == '+'))
                return ANCHOR_NONE;
        return a;
}

/* A sentence when text that any process can get into the kernel log could
 * match the pattern (NULL when none is due), or when '^' cannot work with
 * the buffer: sets rule->warning, or returns -ENOMEM. */
static int check_anchor(struct kmsg_rule *rule, const char *pattern,
                        size_t buffer_size, const char *origin, size_t index)
{
        char text[1024];
        enum anchor a = anchor_of(pattern);

        if (a == ANCHOR_NONE)
                snprintf(text, sizeof(text),
                         "%s: rules[%zu] (%s): the pattern '%.200s' is not "
                         "anchored at the start of the record (it does not "
                         "start with '^', or starts with '.*'): an "
                         "unprivileged process can get text into the middle "
                         "of a kernel record (a crashing program's name is "
                         "printed in its segfault line) and trip this rule; "
                         "start it with '^' and the driver's own prefix",
                         origin, index, rule->reason, pattern);
        else if (a == ANCHOR_TEXT && buffer_size > 1)
                snprintf(text, sizeof(text),
                         "%s: rules[%zu] (%s): the pattern '%.200s' starts "
                         "with '^' but bufferSize is %zu: '^' is the start "
                         "of the oldest of the %zu records searched, not of "
                         "the newest, so a one-line pattern matches only the "
                         "first record read; use \"bufferSize\": 1, or "
                         "'(?m)^' for the start of any line",
                         origin, index, rule->reason, pattern, buffer_size,
                         buffer_size);
        else
                return 0;
        rule->warning = strdup(text);
        return rule->warning == NULL ? -ENOMEM : 0;
}

static bool condition_known(const cJSON *conditions, const char *type)
{
        const cJSON *c;

        cJSON_ArrayForEach (c, conditions) {
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "type");
                if (cJSON_IsString(t) && strcmp(t->valuestring, type) == 0)
                        return true;
        }
        return false;
}

/* The config's own keys: its plugin (the kernel log only), source,
 * lookback and buffer size. */
static int parse_header(struct kmsg_rules *rs, const cJSON *root,
                        const char *origin, char *errbuf, size_t len)
{
        const cJSON *v;
        const char *s;
        int err;

        if (!cJSON_IsObject(root))
                return field_error(
                        errbuf, len, origin,
                        "not a JSON object (a node-problem-detector "
                        "kernel monitor config)");
        /* NPD's system-log-monitor also reads journald and plain log
         * files; such a config run against the kernel log would watch the
         * wrong text and never say so. No plugin is the kernel log. */
        err = string_field(root, "plugin", false, &s, origin, "the config",
                           errbuf, len);
        if (err < 0)
                return err;
        if (*s != '\0' && strcmp(s, "kmsg") != 0) {
                snprintf(errbuf, len,
                         "%s: \"plugin\" is '%.64s': hyperpodrun reads only "
                         "the kernel log (plugin \"kmsg\", from /dev/kmsg or "
                         "--kmsg); run node-problem-detector itself for a "
                         "journald or filelog monitor, or give "
                         "--node-problem-config kmsg configs only",
                         origin, s);
                return HP_ECONFIG;
        }
        err = string_field(root, "source", false, &s, origin, "the config",
                           errbuf, len);
        if (err < 0)
                return err;
        rs->source = strdup(s);
        err = string_field(root, "lookback", false, &s, origin, "the config",
                           errbuf, len);
        if (err < 0)
                return err;
        if (*s != '\0' && kmsg__parse_duration(s, &rs->lookback_us) < 0) {
                snprintf(errbuf, len,
                         "%s: \"lookback\" '%s' is not a duration (e.g. 5m, "
                         "1h30m, 90s)",
                         origin, s);
                return HP_ECONFIG;
        }
        rs->buffer_size = DEFAULT_BUFFER_SIZE;
        v = cJSON_GetObjectItemCaseSensitive(root, "bufferSize");
        if (v != NULL) {
                if (!cJSON_IsNumber(v) || v->valuedouble < 1 ||
                    v->valuedouble > MAX_BUFFER_SIZE ||
                    v->valuedouble != (double)(int)v->valuedouble) {
                        snprintf(errbuf, len,
                                 "%s: \"bufferSize\" must be a whole number "
                                 "from 1 to %d",
                                 origin, MAX_BUFFER_SIZE);
                        return HP_ECONFIG;
                }
                rs->buffer_size = (size_t)v->valueint;
        }
        return 0;
}

/* rules[i] of an NPD config: its type, reason, condition and pattern,
 * compiled. */
static int parse_rule(struct kmsg_rule *rule, const cJSON *r,
                      const cJSON *conditions, size_t buffer_size,
                      const char *origin, size_t i, char *errbuf, size_t len)
{
        const char *type, *reason, *condition, *pattern;
        char where[64];
        int err;

        snprintf(where, sizeof(where), "rules[%zu]", i);
        if (!cJSON_IsObject(r))
                return field_error(errbuf, len, origin,
                                   "a rule is not an object");
        if ((err = string_field(r, "type", true, &type, origin, where, errbuf,
                                len)) < 0 ||
            (err = string_field(r, "reason", true, &reason, origin, where,
                                errbuf, len)) < 0 ||
            (err = string_field(r, "pattern", true, &pattern, origin, where,
                                errbuf, len)) < 0 ||
            (err = string_field(r, "condition", false, &condition, origin,
                                where, errbuf, len)) < 0)
                return err;
        if (strcmp(type, "temporary") == 0) {
                rule->type = KMSG_TEMPORARY;
        } else if (strcmp(type, "permanent") == 0) {
                rule->type = KMSG_PERMANENT;
        } else {
                snprintf(errbuf, len,
                         "%s: %s.type '%s' is not temporary or "
                         "permanent",
                         origin, where, type);
                return HP_ECONFIG;
        }
        if (*reason == '\0') {
                snprintf(errbuf, len, "%s: %s.reason is empty", origin,
                         where);
                return HP_ECONFIG;
        }
        if (rule->type == KMSG_PERMANENT) {
                if (*condition == '\0') {
                        snprintf(errbuf, len,
                                 "%s: %s is permanent but names no "
                                 "\"condition\"",
                                 origin, where);
                        return HP_ECONFIG;
                }
                if (conditions != NULL &&
                    !condition_known(conditions, condition)) {
                        snprintf(errbuf, len,
                                 "%s: %s.condition '%s' is not one of "
                                 "\"conditions\"",
                                 origin, where, condition);
                        return HP_ECONFIG;
                }
        }
        rule->reason = strdup(reason);
        rule->condition = strdup(condition);
        if (rule->reason == NULL || rule->condition == NULL)
                return -ENOMEM;
        err = compile_rule(rule, pattern, origin, i, errbuf, len);
        if (err < 0)
                return err;
        err = check_anchor(rule, pattern, buffer_size, origin, i);
        if (err < 0)
                return err;
        return 0;
}

static int parse_rules(struct kmsg_rules *rs, const cJSON *root,
                       const char *origin, char *errbuf, size_t len)
{
        const cJSON *conditions, *rules, *r;
        size_t i = 0;
        int err;

        err = parse_header(rs, root, origin, errbuf, len);
        if (err < 0)
                return err;
        conditions = cJSON_GetObjectItemCaseSensitive(root, "conditions");
        if (conditions != NULL && !cJSON_IsArray(conditions))
                return field_error(errbuf, len, origin,
                                   "\"conditions\" is not a list");
        rules = cJSON_GetObjectItemCaseSensitive(root, "rules");
        if (!cJSON_IsArray(rules))
                return field_error(errbuf, len, origin,
                                   "\"rules\" is missing or not a list");
        rs->count = (size_t)cJSON_GetArraySize(rules);
        if (rs->count > MAX_RULES) {
                snprintf(errbuf, len, "%s: %zu rules; at most %d", origin,
                         rs->count, MAX_RULES);
                return HP_ECONFIG;
        }
        rs->rules = calloc(rs->count ? rs->count : 1, sizeof(*rs->rules));
        if (rs->rules == NULL || rs->source == NULL)
                return -ENOMEM;
        cJSON_ArrayForEach (r, rules) {
                err = parse_rule(&rs->rules[i], r, conditions,
                                 rs->buffer_size, origin, i, errbuf, len);
                if (err < 0)
                        return err;
                i++;
        }
        return 0;
}

int kmsg_rules_parse(const char *json, size_t len, const char *origin,
                     struct kmsg_rules **out, char *errbuf, size_t errlen)
{
        struct kmsg_rules *rs;
        const char *end = NULL;
        cJSON *root;
        int r;

        *out = NULL;
        root = cJSON_ParseWithLengthOpts(json, len, &end, false);
        if (root == NULL) {
                size_t at = end != NULL && end >= json ? (size_t)(end - json)
                                                       : 0;
                snprintf(errbuf, errlen, "%s: not valid JSON near byte %zu",
                         origin, at);
                return HP_ECONFIG;
        }
        rs = calloc(1, sizeof(*rs));
        if (rs == NULL) {
                cJSON_Delete(root);
                return -ENOMEM;
        }
        r = parse_rules(rs, root, origin, errbuf, errlen);
        cJSON_Delete(root);
        if (r < 0) {
                if (r == -ENOMEM)
                        snprintf(errbuf, errlen, "%s: out of memory", origin);
                kmsg_rules_free(rs);
                return r;
        }
        *out = rs;
        return 0;
}

/* The whole file, at most max bytes. */
static int read_file(const char *path, size_t max, char **out, size_t *len)
{
        FILE *f = fopen(path, "rb");
        char *buf;
        size_t n;

        if (f == NULL)
                return errno ? -errno : -EIO;
        buf = malloc(max + 1);
        if (buf == NULL) {
                fclose(f);
                return -ENOMEM;
        }
        n = fread(buf, 1, max + 1, f);
        if (ferror(f)) {
                free(buf);
                fclose(f);
                return -EIO;
        }
        fclose(f);
        if (n > max) {
                free(buf);
                return -EFBIG;
        }
        *out = buf;
        *len = n;
        return 0;
}

int kmsg_rules_load(const char *path, struct kmsg_rules **out, char *errbuf,
                    size_t errlen)
{
        char *text = NULL;
        size_t len = 0;
        char origin[4200];
        int r;

        snprintf(origin, sizeof(origin), "--node-problem-config '%s'", path);
        r = read_file(path, 1 << 20, &text, &len);
        if (r < 0) {
                snprintf(errbuf, errlen, "%s: cannot read it: %s", origin,
                         hp_strerror(r));
                return r == -ENOMEM ? r : HP_ECONFIG;
        }
        r = kmsg_rules_parse(text, len, origin, out, errbuf, errlen);
        free(text);
        return r;
}

void kmsg_rules_free(struct kmsg_rules *rs)
{
        if (rs == NULL)
                return;
        for (size_t i = 0; rs->rules != NULL && i < rs->count; i++) {
                pcre2_match_data_free(rs->rules[i].match);
                pcre2_code_free(rs->rules[i].code);
                free(rs->rules[i].reason);
                free(rs->rules[i].condition);
                free(rs->rules[i].warning);
        }
        free(rs->rules);
        free(rs->source);
        free(rs);
}

size_t kmsg_rules_count(const struct kmsg_rules *rs)
{
        return rs->count;
}

enum kmsg_rule_type kmsg_rules_type(const struct kmsg_rules *rs, size_t i)
{
        return rs->rules[i].type;
}

const char *kmsg_rules_reason(const struct kmsg_rules *rs, size_t i)
{
        return rs->rules[i].reason;
}

const char *kmsg_rules_condition(const struct kmsg_rules *rs, size_t i)
{
        return rs->rules[i].condition;
}

const char *kmsg_rules_warning(const struct kmsg_rules *rs, size_t i)
{
        return rs->rules[i].warning;
}

uint64_t kmsg_rules_lookback_us(const struct kmsg_rules *rs)
{
        return rs->lookback_us;
}

const char *kmsg_rules_source(const struct kmsg_rules *rs)
{
        return rs->source;
}
