/* Rule validation and compilation: JSON rule objects to a shared,
 * read-only ruleset. All or nothing, with an error that says which rule,
 * which field and what is wrong with it. */
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

static void verr(struct validator *v, const char *field, const char *fmt,
                 ...) __attribute__((format(printf, 3, 4)));

/* "rule 2 (LossSpike): metricThreshold: <message>". */
static void verr(struct validator *v, const char *field, const char *fmt,
                 ...)
{
        char msg[512];
        va_list ap;

        if (v->errbuf == NULL || v->len == 0)
                return;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (v->name != NULL)
                snprintf(v->errbuf, v->len, "rule %zu (%s): %s: %s",
                         v->index, v->name, field, msg);
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
                     WARNINGS_MAX - v->warnings_len, "rule %zu (%s): %s: %s\n",
                     v->index, v->name, field, msg);
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
                snprintf(buf, len, "the number %.17g", item->valuedouble);
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
        { "gt", LOGMON_OP_GT },     { "gteq", LOGMON_OP_GTEQ },
        { "lt", LOGMON_OP_LT },     { "lteq", LOGMON_OP_LTEQ },
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
                                           strlen(item->valuestring),
                                           v->loc, out);
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

/* The forms of a pattern other than full, each optional: a form that
 * does not compile (or JIT-compile, when JIT is wanted) is left out and
 * the engine uses the next best. */
static pcre2_code *compile_form(const char *pattern, size_t len,
                                uint32_t options, bool jit)
{
        pcre2_code *code;
        PCRE2_SIZE offset;
        int err;

        code = pcre2_compile((PCRE2_SPTR)pattern, len, options, &err,
                             &offset, NULL);
        if (code != NULL && jit &&
            pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) != 0) {
                pcre2_code_free(code);
                code = NULL;
        }
        return code;
}

/* The quick form answers only whether a line matches, so its groups need
 * not capture, and saving them would be a good part of its search's cost
 * on a progress line. searchable() has refused named groups, so no group
 * is left to capture, and a pattern that refers to one (\1, \g{-1})
 * does not compile that way: it keeps its groups. */
static pcre2_code *compile_quick_len(const char *pattern, size_t len,
                                     uint32_t options, bool jit)
{
        pcre2_code *code;

        code = compile_form(pattern, len, options | PCRE2_NO_AUTO_CAPTURE,
                            jit);
        return code != NULL ? code : compile_form(pattern, len, options, jit);
}

static pcre2_code *compile_quick(const char *pattern, uint32_t options,
                                 bool jit)
{
        return compile_quick_len(pattern, strlen(pattern), options, jit);
}

static bool all_ascii(const char *text)
{
        for (; *text != '\0'; text++)
                if ((unsigned char)*text >= 0x80)
                        return false;
        return true;
}

/*
 * Whether the pattern is ".*X" where a search for X answers the same. The
 * AWS rules are all ".*X.*": anchored, the leading ".*" swallows the line
 * and backs off one character at a time looking for X, and the inner
 * ".*" does it again, so a 110-byte line costs hundreds of steps per
 * rule. Searching for X instead lets PCRE2 jump to X's first character
 * with memchr. The answer is the same when
 *   - the line holds no \n (the only character "." refuses under the LF
 *     newline convention; the engine checks each line), so ".*" can
 *     reach any position where X starts;
 *   - there is no "|": ".*a|b" is (.*a)|b, which a search for "a|b" is
 *     not;
 *   - nothing is atomic: greedy or lazy only changes the order in which
 *     the alternatives are tried, which decides captures but not whether
 *     there is a match, unless something cuts the search short. Atomic
 *     groups, lookarounds, conditions, options and verbs all start with
 *     "(?" (other than "(?:") or "(*"; possessive quantifiers end in "+";
 *   - nothing reads the start offset, moves the match's start or quotes:
 *     "\G" is where a match attempt starts, "\K" makes a match report a
 *     later start than where it began (the rest form takes a search's
 *     start as the leftmost candidate), and "\Q" makes what follows
 *     literal, ".*" included.
 * The test is on the pattern's text, so an escaped "\|" or "\(?" only
 * costs the speed-up.
 */
static bool searchable(const char *pattern)
{
        static const char *const refused[] = { "|", "(*", "*+", "++", "?+",
                                               "}+", "\\G", "\\K", "\\Q" };
        const char *p;
        uint32_t newline = 0;
        size_t i;

        /* ".*?", ".*+", ".**" and ".*{" are other quantifiers. */
        if (strncmp(pattern, ".*", 2) != 0 ||
            (pattern[2] != '\0' && strchr("?+*{", pattern[2]) != NULL))
                return false;
        for (i = 0; i < HP_ARRAY_SIZE(refused); i++)
                if (strstr(pattern, refused[i]) != NULL)
                        return false;
        for (p = strstr(pattern, "(?"); p != NULL; p = strstr(p + 2, "(?"))
                if (p[2] != ':')
                        return false;
        return pcre2_config(PCRE2_CONFIG_NEWLINE, &newline) >= 0 &&
               newline == PCRE2_NEWLINE_LF;
}

/* Length of a searchable pattern without a trailing ".*" (one not
 * escaped: an odd number of backslashes before the dot makes it "\.*").
 * On a line without \n a trailing ".*" always matches what is left, on
 * the first try, so it never sends the match back into what precedes it:
 * the captures are the same without it. */
static size_t without_trailing_any(const char *pattern)
{
        size_t len = strlen(pattern), slashes = 0;

        if (len < 4 || strcmp(pattern + len - 2, ".*") != 0)
                return len;
        while (slashes < len - 2 && pattern[len - 3 - slashes] == '\\')
                slashes++;
        return slashes % 2 == 0 ? len - 2 : len;
}

static uint32_t capture_count(const pcre2_code *code)
{
        uint32_t n = UINT32_MAX;

        pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &n);
        return n;
}

/*
 * The rest form cut in two (see struct logmon_regex). Anchored at a
 * start s, rest is head, then ".*", then tail. PCRE2 finds head's first
 * way of matching at s, lets ".*" take the line and gives it back one
 * character at a time, trying tail at each position from the end; only
 * when none fits does it go back into head for its next way. On a line
 * without \n ".*" can stop anywhere, and tail can only fit where its
 * literal is, so the first success is tail at the last occurrence of
 * the literal, at or after where head ended, at which tail matches, with
 * the captures tail finds there. Head has no group, so tail's groups are
 * numbered as in rest. Where head's first way leaves no fit, the engine
 * asks rest itself (stream.c).
 */
static void split_form(struct logmon_regex *p, const char *rest, size_t len,
                       bool jit)
{
        struct logmon_split split;

        if (!logmon__split_rest(rest, len, &split) || split.head_len == 0)
                return;
        p->head_ascii = compile_form(rest, split.head_len, PCRE2_ANCHORED,
                                     jit);
        p->tail_ascii = compile_form(rest + split.tail_at,
                                     len - split.tail_at, PCRE2_ANCHORED, jit);
        if (p->head_ascii == NULL || p->tail_ascii == NULL ||
            capture_count(p->head_ascii) != 0 ||
            capture_count(p->tail_ascii) != capture_count(p->rest_ascii)) {
                pcre2_code_free(p->head_ascii);
                pcre2_code_free(p->tail_ascii);
                p->head_ascii = p->tail_ascii = NULL;
                return;
        }
        logmon__literal_set(&p->tail_literal, split.literal,
                            split.literal_len);
        /* Lazy and without groups, as the quick form is (compile_quick),
         * and for the same reason: whether tail fits at a place does not
         * depend on how (searchable() has refused what would make it). */
        p->tail_quick = compile_quick_len(rest + split.tail_at,
                                          len - split.tail_at,
                                          PCRE2_ANCHORED | PCRE2_UNGREEDY,
                                          jit);
        p->head_text = strndup(rest, split.head_len);
}

/*
 * The rest form (see struct logmon_regex). Anchored at 0, ".*R" makes
 * the ".*" take the whole line and give it back one character at a time,
 * trying R at each position from the end; on a line without \n the first
 * position where R matches decides the match and its captures. R can
 * only match where its fixed first code unit is, so trying R anchored at
 * each occurrence of that unit, from the end back, makes the same
 * attempts in the same order and skips only those that fail at once.
 * Only for ASCII lines, where a byte is a character. A pattern whose
 * matches do not all start with one code unit (PCRE2 says which) has no
 * rest form. The quick form's pattern is R with the trailing ".*".
 */
static void rest_form(struct logmon_regex *p, const char *pattern, bool jit)
{
        uint32_t type = 0, unit = 0;

        if (p->quick_ascii == NULL ||
            pcre2_pattern_info(p->quick_ascii, PCRE2_INFO_FIRSTCODETYPE,
                               &type) != 0 || type != 1 ||
            pcre2_pattern_info(p->quick_ascii, PCRE2_INFO_FIRSTCODEUNIT,
                               &unit) != 0 || unit == 0 || unit >= 0x80)
                return;
        p->first_unit = (uint8_t)unit;
        p->rest_ascii = compile_form(pattern + 2,
                                     without_trailing_any(pattern) - 2,
                                     PCRE2_ANCHORED, jit);
        if (p->rest_ascii != NULL)
                split_form(p, pattern + 2, without_trailing_any(pattern) - 2,
                           jit);
}

static int regex(struct validator *v, const char *key, const cJSON *item,
                 const struct logmon_ruleset_opts *opts,
                 struct logmon_regex *p, bool *jit_ok)
{
        /* Anchored at compile time rather than per match: PCRE2 runs a
         * match-time PCRE2_ANCHORED without JIT. UTF without
         * PCRE2_MATCH_INVALID_UTF: the engine repairs each line to valid
         * UTF-8 once and matches with PCRE2_NO_UTF_CHECK, which is both
         * cheaper than a check per rule and avoids a PCRE2 10.42 JIT bug
         * in invalid-UTF mode (\S, \D and \W never match a multi-byte
         * character; PCRE2Project/pcre2#224, fixed in 10.43). No
         * PCRE2_UCP: \d, \w, \s and \b stay ASCII, which keeps \d in
         * line with the ASCII float parser (a Python str pattern would
         * match other scripts' digits). */
        const uint32_t options = PCRE2_ANCHORED | PCRE2_UTF;
        const bool jit = !opts->no_jit;
        const char *text;
        char desc[80], literal[LOGMON_LITERAL_MAX];
        size_t literal_len;
        PCRE2_UCHAR msg[256];
        PCRE2_SIZE offset;
        bool ascii;
        int code;

        if (!cJSON_IsString(item)) {
                verr(v, key, "expected a regular expression string, got %s",
                     describe(item, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        text = item->valuestring;
        p->full = pcre2_compile((PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED,
                                options, &code, &offset, NULL);
        if (p->full == NULL) {
                pcre2_get_error_message(code, msg, sizeof(msg));
                verr(v, key, "%s at offset %zu in \"%s\"", (char *)msg,
                     (size_t)offset, text);
                return code == PCRE2_ERROR_HEAPLIMIT ? -ENOMEM : HP_ECONFIG;
        }
        /* A JIT failure (no executable memory under some hardening) is
         * not an error: the interpreter gives the same answers. */
        if (!jit || pcre2_jit_compile(p->full, PCRE2_JIT_COMPLETE) != 0)
                *jit_ok = false;
        if (opts->full_only)
                return 0;

        /* On a line that is all ASCII, an ASCII pattern means the same
         * with UTF or without: every character is one byte, and no
         * character past U+007F, where the two modes part (case folding,
         * \h, \v, \R, classes past U+00FF), can occur in the line. A
         * pattern that needs UTF to compile (\x{100}, \N{U+...}) has no
         * ASCII forms. */
        ascii = all_ascii(text);
        if (ascii)
                p->full_ascii = compile_form(text, strlen(text),
                                             PCRE2_ANCHORED, jit);
        if (!searchable(text))
                return 0;
        literal_len = logmon__required_literal(text, strlen(text), literal,
                                               sizeof(literal));
        logmon__literal_set(&p->literal, literal, literal_len);
        p->quick = compile_quick(text + 2, PCRE2_UTF | PCRE2_UNGREEDY, jit);
        if (ascii) {
                p->quick_ascii = compile_quick(text + 2, PCRE2_UNGREEDY, jit);
                rest_form(p, text, jit);
        }
        return 0;
}

static void pattern_free(struct logmon_regex *p)
{
        pcre2_code_free(p->full);
        pcre2_code_free(p->quick);
        pcre2_code_free(p->full_ascii);
        pcre2_code_free(p->quick_ascii);
        pcre2_code_free(p->rest_ascii);
        pcre2_code_free(p->head_ascii);
        pcre2_code_free(p->tail_ascii);
        pcre2_code_free(p->tail_quick);
        free(p->head_text);
}

static int validate_rule(struct validator *v, struct logmon_ruleset *rs,
                         const cJSON *obj, struct logmon_rule *r,
                         const struct logmon_ruleset_opts *opts)
{
        const cJSON *item, *key;
        char desc[80];
        double d;
        size_t i;
        int err;

        if (!cJSON_IsObject(obj)) {
                verr(v, NULL, "expected an object, got %s",
                     describe(obj, desc, sizeof(desc)));
                return HP_ECONFIG;
        }

        item = field(obj, "name");
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
        for (i = 0; i < v->index; i++) {
                if (strcmp(rs->rules[i].name, r->name) == 0) {
                        vwarn(v, "name",
                              "same name as rule %zu: reasons will name "
                              "the first", i);
                        break;
                }
        }

        item = field(obj, "logPattern");
        if (item == NULL) {
                verr(v, "logPattern", "required");
                return HP_ECONFIG;
        }
        err = regex(v, "logPattern", item, opts, &r->log, &rs->jit);
        if (err != 0)
                return err;
        pcre2_pattern_info(r->log.full, PCRE2_INFO_CAPTURECOUNT,
                           &r->captures);

        err = seconds(v, obj, "expectedStartCutOffInSeconds", &r->has_cutoff,
                      &r->cutoff_ms);
        if (err != 0)
                return err;
        err = seconds(v, obj, "expectedRecurringFrequencyInSeconds",
                      &r->has_freq, &r->freq_ms);
        if (err != 0)
                return err;

        item = field(obj, "stopPattern");
        if (item != NULL) {
                /* An empty pattern matches every line: the rule would
                 * retire on the first line it sees. */
                if (cJSON_IsString(item) && item->valuestring[0] == '\0') {
                        verr(v, "stopPattern", "empty pattern would retire "
                             "the rule on its first line");
                        return HP_ECONFIG;
                }
                err = regex(v, "stopPattern", item, opts, &r->stop,
                            &rs->jit);
                if (err != 0)
                        return err;
        }

        item = field(obj, "metricThreshold");
        if (item != NULL) {
                if (!numeric(v, item, &d)) {
                        verr(v, "metricThreshold",
                             "expected a number, got %s",
                             describe(item, desc, sizeof(desc)));
                        return HP_ECONFIG;
                }
                if (isnan(d)) {
                        verr(v, "metricThreshold", "nan compares false "
                             "with everything; the rule could never be "
                             "SLOW");
                        return HP_ECONFIG;
                }
                r->has_threshold = true;
                r->threshold = d;
        }

        item = field(obj, "operator");
        if (item != NULL) {
                for (i = 0; i < HP_ARRAY_SIZE(operators); i++) {
                        if (cJSON_IsString(item) &&
                            strcmp(item->valuestring, operators[i].text) == 0)
                                r->op = operators[i].op;
                }
                if (r->op == LOGMON_OP_NONE) {
                        static const char *const ops[] = { "gt", "gteq",
                                                           "lt", "lteq",
                                                           "eq" };
                        const char *near = cJSON_IsString(item) ?
                                closest(item->valuestring, ops, 5) : NULL;

                        verr(v, "operator", "expected one of gt, gteq, lt, "
                             "lteq, eq, got %s%s%s%s",
                             describe(item, desc, sizeof(desc)),
                             near ? " (did you mean \"" : "",
                             near ? near : "", near ? "\"?)" : "");
                        return HP_ECONFIG;
                }
        }

        r->datapoints = 1;
        item = field(obj, "metricEvaluationDataPoints");
        if (item != NULL) {
                if (!numeric(v, item, &d) || d != floor(d) || d < 0 ||
                    d > UINT32_MAX) {
                        verr(v, "metricEvaluationDataPoints",
                             "expected a non-negative integer, got %s",
                             describe(item, desc, sizeof(desc)));
                        return HP_ECONFIG;
                }
                r->datapoints = (uint32_t)d;
        }

        /* Python truthiness would make the string "false" true. Booleans
         * and the two words are what people mean; anything else is more
         * likely a mistake than a wish. */
        item = field(obj, "faultOnMatch");
        if (item != NULL) {
                if (cJSON_IsBool(item))
                        r->fault_on_match = cJSON_IsTrue(item);
                else if (cJSON_IsString(item) &&
                         strcasecmp(item->valuestring, "true") == 0)
                        r->fault_on_match = true;
                else if (cJSON_IsString(item) &&
                         strcasecmp(item->valuestring, "false") == 0)
                        r->fault_on_match = false;
                else {
                        verr(v, "faultOnMatch", "expected true or false, "
                             "got %s", describe(item, desc, sizeof(desc)));
                        return HP_ECONFIG;
                }
        }

        r->metric = r->has_threshold && r->op != LOGMON_OP_NONE &&
                    r->captures > 0;
        if (r->has_threshold != (r->op != LOGMON_OP_NONE))
                vwarn(v, r->has_threshold ? "metricThreshold" : "operator",
                      "needs %s as well; the rule never reports SLOW",
                      r->has_threshold ? "operator" : "metricThreshold");
        else if (r->has_threshold && r->captures == 0)
                vwarn(v, "logPattern", "has no capture group for the "
                      "metric; the rule never reports SLOW");

        /* Unknown keys are ignored with a warning rather than refused:
         * the operator forwards the job spec verbatim, and a newer CRD
         * may carry fields this version does not know. */
        cJSON_ArrayForEach(key, obj) {
                bool known = false;
                const char *near;

                for (i = 0; i < HP_ARRAY_SIZE(known_keys); i++)
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

/* The set's patterns in one list, logPattern and stopPattern of each
 * rule in order; NULL past the end. */
static struct logmon_regex *pattern_at(struct logmon_ruleset *rs, size_t k)
{
        if (k >= 2 * rs->n)
                return NULL;
        return k % 2 == 0 ? &rs->rules[k / 2].log : &rs->rules[k / 2].stop;
}

/* Gives the heads that two or more split forms of the set have in common
 * an id each (struct logmon_regex, head_id); every other pattern gets -1
 * and keeps its own forms. A strndup that failed leaves that pattern's
 * head unshared, which only costs the speed-up. */
static void share_heads(struct logmon_ruleset *rs)
{
        struct logmon_regex *p, *q;
        size_t j, k;

        for (k = 0; (p = pattern_at(rs, k)) != NULL; k++)
                p->head_id = -1;
        for (k = 0; (p = pattern_at(rs, k)) != NULL; k++) {
                if (p->head_text == NULL || p->head_id >= 0)
                        continue;
                for (j = k + 1; (q = pattern_at(rs, j)) != NULL; j++) {
                        if (q->head_text == NULL || q->head_id >= 0 ||
                            q->first_unit != p->first_unit ||
                            strcmp(q->head_text, p->head_text) != 0)
                                continue;
                        p->head_id = (int)rs->heads;
                        q->head_id = (int)rs->heads;
                }
                if (p->head_id >= 0)
                        rs->heads++;
        }
}

static void rules_free(struct logmon_ruleset *rs)
{
        size_t i;

        for (i = 0; i < rs->n; i++) {
                free(rs->rules[i].name);
                pattern_free(&rs->rules[i].log);
                pattern_free(&rs->rules[i].stop);
        }
        free(rs->rules);
        pcre2_match_context_free(rs->mctx);
        if (rs->c_locale != (locale_t)0)
                freelocale(rs->c_locale);
        free(rs->warnings);
        free(rs);
}

int logmon_ruleset_new(const cJSON *rules,
                       const struct logmon_ruleset_opts *opts,
                       struct logmon_ruleset **out, char *errbuf,
                       size_t len)
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
                snprintf(errbuf, len, "rules: expected a list of rule "
                         "objects, got %s",
                         describe(rules, desc, sizeof(desc)));
                return HP_ECONFIG;
        }
        count = cJSON_GetArraySize(rules);
        if (count > LOGMON_RULES_MAX) {
                snprintf(errbuf, len, "rules: %d rules, at most %d are "
                         "supported", count, LOGMON_RULES_MAX);
                return HP_ECONFIG;
        }

        rs = calloc(1, sizeof(*rs));
        if (rs == NULL)
                return -ENOMEM;
        rs->refs = 1;
        rs->jit = true;
        rs->max_pairs = 1;
        rs->rules = calloc(count > 0 ? (size_t)count : 1,
                           sizeof(*rs->rules));
        rs->warnings = calloc(1, WARNINGS_MAX);
        rs->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        rs->mctx = pcre2_match_context_create(NULL);
        if (rs->rules == NULL || rs->warnings == NULL ||
            rs->c_locale == (locale_t)0 || rs->mctx == NULL)
                goto error;
        pcre2_set_match_limit(rs->mctx, opts->match_limit != 0 ?
                              opts->match_limit : LOGMON_MATCH_LIMIT);
        pcre2_set_depth_limit(rs->mctx, opts->depth_limit != 0 ?
                              opts->depth_limit : LOGMON_DEPTH_LIMIT);
        v.warnings = rs->warnings;
        v.loc = rs->c_locale;

        i = 0;
        cJSON_ArrayForEach(obj, rules) {
                struct logmon_rule *r = &rs->rules[i];

                v.index = i;
                v.name = NULL;
                /* Counting the rule before validating it lets rules_free
                 * release what a half-validated rule holds. */
                rs->n = ++i;
                err = validate_rule(&v, rs, obj, r, opts);
                if (err != 0)
                        goto error;
                pcre2_pattern_info(r->log.full, PCRE2_INFO_CAPTURECOUNT,
                                   &pairs);
                if (pairs + 1 > rs->max_pairs)
                        rs->max_pairs = pairs + 1;
                if (r->stop.full != NULL) {
                        pcre2_pattern_info(r->stop.full,
                                           PCRE2_INFO_CAPTURECOUNT, &pairs);
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
