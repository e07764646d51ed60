/* SPDX-License-Identifier: Apache-2.0 */
/* Where rules come from: a JSON list, a JSON object holding the list, or
 * the HyperPodPyTorchJob job.yaml a user applies with kubectl. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

/* Rule files are small; a bigger one is a mistake (a log passed by
 * accident), not a configuration. The operator's request bodies have the
 * same bound. */
#define CONFIG_FILE_MAX (1024 * 1024)
/* Job specs nest a dozen levels; cJSON and the code that walks the rules
 * recurse, and libyaml slows down quadratically with nesting. */
#define CONFIG_DEPTH_MAX 64
/* Aliases let a tiny YAML file expand into a huge tree ("billion
 * laughs"): the conversion counts the bytes the tree would hold, each
 * alias at its full size, and stops before spending them. */
#define CONFIG_EXPANDED_MAX (16 * 1024 * 1024)
/* Each alias looks its anchor up among these. */
#define YAML_ANCHORS_MAX 1024

static void line_col(const char *data, size_t off, size_t *line, size_t *col)
{
        size_t i;

        *line = 1;
        *col = 1;
        for (i = 0; i < off; i++) {
                if (data[i] == '\n') {
                        (*line)++;
                        *col = 1;
                } else {
                        (*col)++;
                }
        }
}

static int too_large(const char *name, char *errbuf, size_t len)
{
        snprintf(errbuf, len, "%s: larger than %d bytes", name,
                 CONFIG_FILE_MAX);
        return HP_ETOOBIG;
}

/* Where JSON text first nests deeper than max, or n when it does not:
 * checked before cJSON, whose own limit only gives "invalid JSON". */
static size_t json_too_deep(const char *data, size_t n, int max)
{
        bool in_string = false;
        int depth = 0;
        size_t i;

        for (i = 0; i < n; i++) {
                if (in_string) {
                        if (data[i] == '\\')
                                i++;
                        else if (data[i] == '"')
                                in_string = false;
                } else if (data[i] == '"') {
                        in_string = true;
                } else if (data[i] == '[' || data[i] == '{') {
                        if (++depth > max)
                                return i;
                } else if (data[i] == ']' || data[i] == '}') {
                        depth--;
                }
        }
        return n;
}

/* The rule list inside a parsed document: the document itself when it is
 * a list, its logMonitoringConfiguration, or the one of a whole job in
 * spec.runPolicy. NULL when there is none. */
static cJSON *find_rules(cJSON *doc)
{
        cJSON *spec, *policy;

        if (cJSON_IsArray(doc))
                return doc;
        if (!cJSON_IsObject(doc))
                return NULL;
        if (cJSON_HasObjectItem(doc, "logMonitoringConfiguration"))
                return cJSON_GetObjectItemCaseSensitive(
                        doc, "logMonitoringConfiguration");
        spec = cJSON_GetObjectItemCaseSensitive(doc, "spec");
        policy = cJSON_GetObjectItemCaseSensitive(spec, "runPolicy");
        if (cJSON_HasObjectItem(policy, "logMonitoringConfiguration"))
                return cJSON_GetObjectItemCaseSensitive(
                        policy, "logMonitoringConfiguration");
        return NULL;
}

/* Takes the rule list out of doc (which is freed) into *out. */
static int take_rules(const char *name, cJSON *doc, cJSON **out, char *errbuf,
                      size_t len)
{
        cJSON *rules = find_rules(doc);

        if (rules == NULL) {
                snprintf(errbuf, len,
                         "%s: no rule list: expected a list "
                         "of rules, an object with logMonitoringConfiguration"
                         " or a job with spec.runPolicy."
                         "logMonitoringConfiguration",
                         name);
                cJSON_Delete(doc);
                return HP_ECONFIG;
        }
        if (!cJSON_IsArray(rules)) {
                snprintf(errbuf, len,
                         "%s: logMonitoringConfiguration: "
                         "expected a list of rules",
                         name);
                cJSON_Delete(doc);
                return HP_ECONFIG;
        }
        if (rules != doc) {
                /* Detach the list so the rest of the document can go. */
                cJSON *parent = doc;
                cJSON *spec = cJSON_GetObjectItemCaseSensitive(doc, "spec");

                if (!cJSON_HasObjectItem(doc, "logMonitoringConfiguration"))
                        parent = cJSON_GetObjectItemCaseSensitive(
                                spec, "runPolicy");
                rules = cJSON_DetachItemViaPointer(parent, rules);
                cJSON_Delete(doc);
        }
        *out = rules;
        return 0;
}

int logmon__config_parse_json(const char *name, const char *data, size_t n,
                              cJSON **out, char *errbuf, size_t len)
{
        const char *end = NULL;
        size_t line, col;
        cJSON *doc;

        size_t deep;

        if (n > CONFIG_FILE_MAX)
                return too_large(name, errbuf, len);
        deep = json_too_deep(data, n, CONFIG_DEPTH_MAX);
        if (deep < n) {
                line_col(data, deep, &line, &col);
                snprintf(errbuf, len,
                         "%s:%zu:%zu: nested deeper than %d "
                         "levels",
                         name, line, col, CONFIG_DEPTH_MAX);
                return HP_ETOOBIG;
        }
        doc = cJSON_ParseWithLengthOpts(data, n, &end, false);
        if (doc == NULL) {
                if (end == NULL || end < data || end > data + n)
                        end = data;
                line_col(data, (size_t)(end - data), &line, &col);
                snprintf(errbuf, len, "%s:%zu:%zu: invalid JSON", name, line,
                         col);
                return HP_ECONFIG;
        }
        return take_rules(name, doc, out, errbuf, len);
}

/* YAML 1.2 core schema resolution of a scalar's text. Quoted and block
 * scalars, and plain ones tagged !!str, stay strings, so "80" in quotes is
 * the string "80" just as kubectl would send it. */
static cJSON *yaml_scalar(const char *v, size_t n, bool plain)
{
        char *end;
        double d;

        if (!plain)
                return cJSON_CreateString(v);
        if (n == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
            strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0)
                return cJSON_CreateNull();
        if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 ||
            strcmp(v, "TRUE") == 0)
                return cJSON_CreateTrue();
        if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 ||
            strcmp(v, "FALSE") == 0)
                return cJSON_CreateFalse();
        if (strcmp(v, ".inf") == 0 || strcmp(v, "+.inf") == 0 ||
            strcmp(v, ".Inf") == 0 || strcmp(v, ".INF") == 0)
                return cJSON_CreateNumber(INFINITY);
        if (strcmp(v, "-.inf") == 0 || strcmp(v, "-.Inf") == 0 ||
            strcmp(v, "-.INF") == 0)
                return cJSON_CreateNumber(-INFINITY);
        if (strcmp(v, ".nan") == 0 || strcmp(v, ".NaN") == 0 ||
            strcmp(v, ".NAN") == 0)
                return cJSON_CreateNumber(NAN);
        /* Decimal, 0x and 0o integers and decimal floats; strtod would also
         * take "inf" or "nan" words, which YAML keeps as strings. */
        if (strspn(v, "+-0123456789.eExXoOabcdefABCDEF") == n &&
            strpbrk(v, "0123456789") != NULL) {
                if (n > 2 && v[0] == '0' && (v[1] == 'o' || v[1] == 'O')) {
                        long long o = strtoll(v + 2, &end, 8);

                        if (*end == '\0')
                                return cJSON_CreateNumber((double)o);
                } else if (n > 2 && v[0] == '0' &&
                           (v[1] == 'x' || v[1] == 'X')) {
                        long long x = strtoll(v + 2, &end, 16);

                        if (*end == '\0')
                                return cJSON_CreateNumber((double)x);
                } else if (strpbrk(v, "xXoOabcdfABCDF") == NULL) {
                        d = strtod(v, &end);
                        if (*end == '\0')
                                return cJSON_CreateNumber(d);
                }
        }
        return cJSON_CreateString(v);
}

/* An anchor of the document being converted. A scalar's is kept as text
 * (it may be a key); a container's points into the tree, which owns it. */
struct yaml_anchor {
        char *name;
        char *text;  /* scalar: its text */
        bool plain;  /* scalar: resolved as a plain scalar */
        cJSON *node; /* container */
        size_t cost; /* what one more copy adds to the tree */
        int height;  /* container levels in it: 0 for a scalar */
};

/* A container being filled. */
struct yaml_frame {
        cJSON *node;
        char *key;    /* an object's key waiting for its value */
        char *anchor; /* the anchor naming this container, or NULL */
        size_t cost_at_start;
        int height; /* the highest child's */
};

/* The conversion of one document, event by event: an explicit stack
 * instead of recursion, and every limit checked before the memory is
 * spent. */
struct yaml_build {
        const char *name;
        char *errbuf;
        size_t len;
        struct yaml_frame frames[CONFIG_DEPTH_MAX];
        int depth;
        cJSON *root;
        size_t cost; /* bytes the tree holds, aliases expanded */
        struct yaml_anchor anchors[YAML_ANCHORS_MAX];
        size_t nanchors;
};

static void build_reset(struct yaml_build *b)
{
        size_t i;

        for (; b->depth > 0; b->depth--) {
                free(b->frames[b->depth - 1].key);
                free(b->frames[b->depth - 1].anchor);
        }
        for (i = 0; i < b->nanchors; i++) {
                free(b->anchors[i].name);
                free(b->anchors[i].text);
        }
        b->nanchors = 0;
        cJSON_Delete(b->root);
        b->root = NULL;
        b->cost = 0;
}

__attribute__((format(printf, 4, 5))) static int
build_fail(struct yaml_build *b, int err, const yaml_mark_t *m,
           const char *fmt, ...)
{
        size_t n;
        va_list ap;

        snprintf(b->errbuf, b->len, "%s:%zu:%zu: ", b->name, m->line + 1,
                 m->column + 1);
        n = strlen(b->errbuf);
        va_start(ap, fmt);
        vsnprintf(b->errbuf + n, b->len - n, fmt, ap);
        va_end(ap);
        return err;
}

static int build_oom(struct yaml_build *b)
{
        snprintf(b->errbuf, b->len, "%s: out of memory", b->name);
        return -ENOMEM;
}

static int build_spend(struct yaml_build *b, size_t cost,
                       const yaml_mark_t *m)
{
        if (cost > CONFIG_EXPANDED_MAX - b->cost)
                return build_fail(b, HP_ETOOBIG, m,
                                  "expands to more than %d bytes (aliases "
                                  "included)",
                                  CONFIG_EXPANDED_MAX);
        b->cost += cost;
        return 0;
}

static struct yaml_frame *build_top(struct yaml_build *b)
{
        return b->depth > 0 ? &b->frames[b->depth - 1] : NULL;
}

/* True when the next node is an object's key. */
static bool build_wants_key(struct yaml_build *b)
{
        struct yaml_frame *f = build_top(b);

        return f != NULL && cJSON_IsObject(f->node) && f->key == NULL;
}

/* Hands node (of the given height) to the container being filled, or
 * makes it the document's root. */
static int build_attach(struct yaml_build *b, cJSON *node, int height)
{
        struct yaml_frame *f = build_top(b);
        bool ok;

        if (f == NULL) {
                b->root = node;
                return 0;
        }
        if (cJSON_IsArray(f->node)) {
                ok = cJSON_AddItemToArray(f->node, node);
        } else {
                ok = cJSON_AddItemToObject(f->node, f->key, node);
                free(f->key);
                f->key = NULL;
        }
        if (!ok) {
                cJSON_Delete(node);
                return build_oom(b);
        }
        if (f->height < height)
                f->height = height;
        return 0;
}

/* Takes name (freed on failure). */
static int build_anchor(struct yaml_build *b, char *name, const char *text,
                        bool plain, cJSON *node, size_t cost, int height,
                        const yaml_mark_t *m)
{
        struct yaml_anchor *a;

        if (b->nanchors == YAML_ANCHORS_MAX) {
                free(name);
                return build_fail(b, HP_ETOOBIG, m, "more than %d anchors",
                                  YAML_ANCHORS_MAX);
        }
        a = &b->anchors[b->nanchors];
        *a = (struct yaml_anchor){ .name = name,
                                   .plain = plain,
                                   .node = node,
                                   .cost = cost,
                                   .height = height };
        if (text != NULL && (a->text = strdup(text)) == NULL) {
                free(name);
                return build_oom(b);
        }
        b->nanchors++;
        return 0;
}

/* The latest anchor of that name: YAML lets a name be reused. */
static const struct yaml_anchor *build_find(const struct yaml_build *b,
                                            const char *name)
{
        size_t i;

        for (i = b->nanchors; i > 0; i--)
                if (strcmp(b->anchors[i - 1].name, name) == 0)
                        return &b->anchors[i - 1];
        return NULL;
}

static int build_key(struct yaml_build *b, const char *text,
                     const yaml_mark_t *m)
{
        struct yaml_frame *f = build_top(b);
        int err = build_spend(b, strlen(text) + 1, m);

        if (err != 0)
                return err;
        f->key = strdup(text);
        return f->key != NULL ? 0 : build_oom(b);
}

static int build_scalar(struct yaml_build *b, const yaml_event_t *ev)
{
        const char *v = (const char *)ev->data.scalar.value;
        const char *tag = (const char *)ev->data.scalar.tag;
        bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                     (tag == NULL || strcmp(tag, YAML_STR_TAG) != 0);
        size_t cost = sizeof(cJSON) + ev->data.scalar.length + 1;
        char *anchor = NULL;
        cJSON *node;
        int err;

        if (ev->data.scalar.anchor != NULL) {
                anchor = strdup((const char *)ev->data.scalar.anchor);
                if (anchor == NULL)
                        return build_oom(b);
                err = build_anchor(b, anchor, v, plain, NULL, cost, 0,
                                   &ev->start_mark);
                if (err != 0)
                        return err;
        }
        if (build_wants_key(b))
                return build_key(b, v, &ev->start_mark);
        err = build_spend(b, cost, &ev->start_mark);
        if (err != 0)
                return err;
        node = yaml_scalar(v, ev->data.scalar.length, plain);
        if (node == NULL)
                return build_oom(b);
        return build_attach(b, node, 0);
}

static int build_start(struct yaml_build *b, const yaml_event_t *ev)
{
        bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
        const yaml_char_t *anchor = seq ? ev->data.sequence_start.anchor
                                        : ev->data.mapping_start.anchor;
        struct yaml_frame *f;
        cJSON *node;
        int err;

        if (build_wants_key(b))
                return build_fail(b, HP_ECONFIG, &ev->start_mark,
                                  "a mapping key must be a scalar");
        if (b->depth == CONFIG_DEPTH_MAX)
                return build_fail(b, HP_ETOOBIG, &ev->start_mark,
                                  "nested deeper than %d levels",
                                  CONFIG_DEPTH_MAX);
        err = build_spend(b, sizeof(cJSON), &ev->start_mark);
        if (err != 0)
                return err;
        node = seq ? cJSON_CreateArray() : cJSON_CreateObject();
        if (node == NULL)
                return build_oom(b);
        /* Attached at once, so that the tree owns it whatever happens. */
        err = build_attach(b, node, 1);
        if (err != 0)
                return err;
        f = &b->frames[b->depth++];
        *f = (struct yaml_frame){ .node = node,
                                  .cost_at_start = b->cost - sizeof(cJSON) };
        if (anchor != NULL &&
            (f->anchor = strdup((const char *)anchor)) == NULL)
                return build_oom(b);
        return 0;
}

static int build_end(struct yaml_build *b, const yaml_event_t *ev)
{
        struct yaml_frame f = b->frames[--b->depth];
        struct yaml_frame *parent = build_top(b);
        int height = f.height + 1;

        free(f.key);
        if (parent != NULL && parent->height < height)
                parent->height = height;
        if (f.anchor == NULL)
                return 0;
        return build_anchor(b, f.anchor, NULL, false, f.node,
                            b->cost - f.cost_at_start, height,
                            &ev->start_mark);
}

static int build_alias(struct yaml_build *b, const yaml_event_t *ev)
{
        const char *name = (const char *)ev->data.alias.anchor;
        const struct yaml_anchor *a = build_find(b, name);
        cJSON *node;
        int err;

        /* An alias inside its own anchor's node is not found either: it
         * is not complete yet. */
        if (a == NULL)
                return build_fail(b, HP_ECONFIG, &ev->start_mark,
                                  "alias *%s has no anchor before it", name);
        if (build_wants_key(b)) {
                if (a->text == NULL)
                        return build_fail(b, HP_ECONFIG, &ev->start_mark,
                                          "a mapping key must be a scalar");
                return build_key(b, a->text, &ev->start_mark);
        }
        if (b->depth + a->height > CONFIG_DEPTH_MAX)
                return build_fail(b, HP_ETOOBIG, &ev->start_mark,
                                  "nested deeper than %d levels",
                                  CONFIG_DEPTH_MAX);
        err = build_spend(b, a->cost, &ev->start_mark);
        if (err != 0)
                return err;
        node = a->text != NULL
                       ? yaml_scalar(a->text, strlen(a->text), a->plain)
                       : cJSON_Duplicate(a->node, true);
        if (node == NULL)
                return build_oom(b);
        return build_attach(b, node, a->height);
}

static int build_event(struct yaml_build *b, const yaml_event_t *ev)
{
        switch (ev->type) {
        case YAML_SCALAR_EVENT:
                return build_scalar(b, ev);
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
                return build_start(b, ev);
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
                return build_end(b, ev);
        case YAML_ALIAS_EVENT:
                return build_alias(b, ev);
        default:
                return 0;
        }
}

int logmon__config_parse_yaml(const char *name, const char *data, size_t n,
                              cJSON **out, char *errbuf, size_t len)
{
        struct yaml_build *b;
        yaml_parser_t parser;
        yaml_event_t ev;
        bool any = false;
        bool done = false;
        int err = 0;

        if (n > CONFIG_FILE_MAX)
                return too_large(name, errbuf, len);
        b = calloc(1, sizeof(*b));
        if (b == NULL)
                return -ENOMEM;
        if (!yaml_parser_initialize(&parser)) {
                free(b);
                return -ENOMEM;
        }
        b->name = name;
        b->errbuf = errbuf;
        b->len = len;
        yaml_parser_set_input_string(&parser, (const unsigned char *)data, n);
        /* A file may hold several documents (kubectl's "---"): the first
         * that carries rules wins. */
        while (!done && err == 0) {
                if (!yaml_parser_parse(&parser, &ev)) {
                        snprintf(errbuf, len, "%s:%zu:%zu: %s%s%s", name,
                                 parser.problem_mark.line + 1,
                                 parser.problem_mark.column + 1,
                                 parser.problem != NULL ? parser.problem
                                                        : "invalid YAML",
                                 parser.context != NULL ? " " : "",
                                 parser.context != NULL ? parser.context
                                                        : "");
                        err = HP_ECONFIG;
                        break;
                }
                switch (ev.type) {
                case YAML_STREAM_END_EVENT:
                        snprintf(errbuf, len, "%s: %s", name,
                                 any ? "no document has spec.runPolicy."
                                       "logMonitoringConfiguration"
                                     : "empty file");
                        err = HP_ECONFIG;
                        break;
                case YAML_DOCUMENT_START_EVENT:
                        build_reset(b);
                        break;
                case YAML_DOCUMENT_END_EVENT:
                        any = true;
                        if (find_rules(b->root) != NULL) {
                                err = take_rules(name, b->root, out, errbuf,
                                                 len);
                                b->root = NULL;
                                done = true;
                        }
                        build_reset(b);
                        break;
                default:
                        err = build_event(b, &ev);
                        break;
                }
                yaml_event_delete(&ev);
        }
        build_reset(b);
        free(b);
        yaml_parser_delete(&parser);
        return err;
}

int logmon_config_parse(const char *name, const char *data, size_t n,
                        cJSON **out, char *errbuf, size_t len)
{
        size_t i = 0;

        /* JSON first when it looks like JSON: cJSON's error position is
         * more useful than libyaml's view of broken JSON. */
        while (i < n && (data[i] == ' ' || data[i] == '\t' ||
                         data[i] == '\n' || data[i] == '\r'))
                i++;
        if (i < n && (data[i] == '[' || data[i] == '{'))
                return logmon__config_parse_json(name, data, n, out, errbuf,
                                                 len);
        return logmon__config_parse_yaml(name, data, n, out, errbuf, len);
}

/* Reads a whole small file, each failure in its own words. */
static int slurp(const char *path, char **data, size_t *n, char *errbuf,
                 size_t len)
{
        int err = hp_read_file(path, CONFIG_FILE_MAX, data, n);

        switch (err) {
        case 0:
                return 0;
        case -EISDIR:
        case -ENODEV:
                snprintf(errbuf, len,
                         "%s: not a regular file (a FIFO, device or "
                         "directory)",
                         path);
                return HP_ECONFIG;
        case -EFBIG:
                return too_large(path, errbuf, len);
        case -ENOMEM:
                return err;
        case -EIO:
                snprintf(errbuf, len, "%s: read error", path);
                return err;
        default:
                snprintf(errbuf, len, "%s: %s", path, strerror(-err));
                return err;
        }
}

int logmon_config_load(const char *path, cJSON **out, char *errbuf,
                       size_t len)
{
        char *data;
        size_t n;
        int err;

        err = slurp(path, &data, &n, errbuf, len);
        if (err != 0)
                return err;
        err = logmon_config_parse(path, data, n, out, errbuf, len);
        free(data);
        return err;
}

int logmon_config_load_ruleset(const char *path,
                               const struct logmon_ruleset_opts *opts,
                               struct logmon_ruleset **out, char *errbuf,
                               size_t len)
{
        char msg[1024];
        cJSON *rules;
        int err;

        err = logmon_config_load(path, &rules, errbuf, len);
        if (err != 0)
                return err;
        err = logmon_ruleset_new(rules, opts, out, msg, sizeof(msg));
        if (err != 0)
                snprintf(errbuf, len, "%s: %s", path, msg);
        cJSON_Delete(rules);
        return err;
}

int logmon_expect_load(const char *path, cJSON **out, char *errbuf,
                       size_t len)
{
        const char *end = NULL;
        size_t line, col;
        char *data;
        cJSON *doc;
        size_t n;
        int err;

        err = slurp(path, &data, &n, errbuf, len);
        if (err != 0)
                return err;
        doc = cJSON_ParseWithLengthOpts(data, n, &end, false);
        if (doc == NULL || !cJSON_IsObject(doc)) {
                if (doc == NULL) {
                        if (end == NULL || end < data || end > data + n)
                                end = data;
                        line_col(data, (size_t)(end - data), &line, &col);
                        snprintf(errbuf, len, "%s:%zu:%zu: invalid JSON",
                                 path, line, col);
                } else {
                        snprintf(errbuf, len, "%s: expected a JSON object",
                                 path);
                }
                cJSON_Delete(doc);
                free(data);
                return HP_ECONFIG;
        }
        free(data);
        *out = doc;
        return 0;
}
