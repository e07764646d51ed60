/* Where rules come from: a JSON list, a JSON object holding the list, or
 * the HyperPodPyTorchJob job.yaml a user applies with kubectl. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "hyperpod/common.h"
#include "logmon-private.h"

/* Rule files are small; a bigger one is a mistake (a log passed by
 * accident), not a configuration. */
#define CONFIG_FILE_MAX (16 * 1024 * 1024)
/* Aliases let a tiny YAML file expand into a huge tree ("billion
 * laughs"); the conversion stops after this many nodes. */
#define YAML_NODES_MAX 100000

static void line_col(const char *data, size_t off, size_t *line,
                     size_t *col)
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
static int take_rules(const char *name, cJSON *doc, cJSON **out,
                      char *errbuf, size_t len)
{
        cJSON *rules = find_rules(doc);

        if (rules == NULL) {
                snprintf(errbuf, len, "%s: no rule list: expected a list "
                         "of rules, an object with logMonitoringConfiguration"
                         " or a job with spec.runPolicy."
                         "logMonitoringConfiguration", name);
                cJSON_Delete(doc);
                return HP_ECONFIG;
        }
        if (!cJSON_IsArray(rules)) {
                snprintf(errbuf, len, "%s: logMonitoringConfiguration: "
                         "expected a list of rules", name);
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

/* YAML 1.2 core schema resolution of a plain scalar. Quoted and block
 * scalars stay strings, so "80" in quotes is the string "80" just as
 * kubectl would send it. libyaml's document API gives untagged and !!str
 * scalars the same tag, so an explicit !!str on a plain scalar is not
 * honoured; job specs do not use tags. */
static cJSON *yaml_scalar(const yaml_node_t *node)
{
        const char *v = (const char *)node->data.scalar.value;
        size_t n = node->data.scalar.length;
        char *end;
        double d;

        if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
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

static cJSON *yaml_to_json(yaml_document_t *doc, yaml_node_t *node,
                           size_t *budget)
{
        yaml_node_item_t *item;
        yaml_node_pair_t *pair;
        cJSON *out, *child;

        if (node == NULL || *budget == 0)
                return NULL;
        (*budget)--;
        switch (node->type) {
        case YAML_SCALAR_NODE:
                return yaml_scalar(node);
        case YAML_SEQUENCE_NODE:
                out = cJSON_CreateArray();
                if (out == NULL)
                        return NULL;
                for (item = node->data.sequence.items.start;
                     item < node->data.sequence.items.top; item++) {
                        child = yaml_to_json(
                                doc, yaml_document_get_node(doc, *item),
                                budget);
                        if (child == NULL) {
                                cJSON_Delete(out);
                                return NULL;
                        }
                        cJSON_AddItemToArray(out, child);
                }
                return out;
        case YAML_MAPPING_NODE:
                out = cJSON_CreateObject();
                if (out == NULL)
                        return NULL;
                for (pair = node->data.mapping.pairs.start;
                     pair < node->data.mapping.pairs.top; pair++) {
                        yaml_node_t *k = yaml_document_get_node(doc,
                                                                pair->key);

                        child = yaml_to_json(
                                doc, yaml_document_get_node(doc, pair->value),
                                budget);
                        /* Keys other than scalars (complex YAML keys) do
                         * not occur in a job spec; they are dropped. */
                        if (child == NULL) {
                                cJSON_Delete(out);
                                return NULL;
                        }
                        if (k == NULL || k->type != YAML_SCALAR_NODE) {
                                cJSON_Delete(child);
                                continue;
                        }
                        cJSON_AddItemToObject(
                                out, (const char *)k->data.scalar.value,
                                child);
                }
                return out;
        case YAML_NO_NODE:
                break;
        }
        return NULL;
}

int logmon__config_parse_yaml(const char *name, const char *data, size_t n,
                              cJSON **out, char *errbuf, size_t len)
{
        yaml_parser_t parser;
        yaml_document_t doc;
        int err = HP_ECONFIG;
        bool any = false;

        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *)data, n);
        /* A file may hold several documents (kubectl's "---"): the first
         * that carries rules wins. */
        for (;;) {
                yaml_node_t *root;
                size_t budget = YAML_NODES_MAX;
                cJSON *json;

                if (!yaml_parser_load(&parser, &doc)) {
                        snprintf(errbuf, len, "%s:%zu:%zu: %s%s%s", name,
                                 parser.problem_mark.line + 1,
                                 parser.problem_mark.column + 1,
                                 parser.problem != NULL ? parser.problem :
                                                          "invalid YAML",
                                 parser.context != NULL ? " " : "",
                                 parser.context != NULL ? parser.context : "");
                        break;
                }
                root = yaml_document_get_root_node(&doc);
                if (root == NULL) {
                        yaml_document_delete(&doc);
                        snprintf(errbuf, len, "%s: %s", name, any ?
                                 "no document has spec.runPolicy."
                                 "logMonitoringConfiguration" :
                                 "empty file");
                        break;
                }
                any = true;
                json = yaml_to_json(&doc, root, &budget);
                yaml_document_delete(&doc);
                if (json == NULL) {
                        snprintf(errbuf, len, "%s: %s", name, budget == 0 ?
                                 "too many YAML nodes (aliases?)" :
                                 "out of memory");
                        err = budget == 0 ? HP_ETOOBIG : -ENOMEM;
                        break;
                }
                if (find_rules(json) != NULL) {
                        err = take_rules(name, json, out, errbuf, len);
                        break;
                }
                cJSON_Delete(json);
        }
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

/* Reads a whole small file. */
static int slurp(const char *path, char **data, size_t *n, char *errbuf,
                 size_t len)
{
        /* O_NONBLOCK: a FIFO must not hang the open; only a regular file
         * is read. */
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        size_t got;
        FILE *f;
        char *buf;
        int err;

        /* Set on every path: a caller reads them only when 0 comes back,
         * but -O3 cannot see that errno is never 0 after fopen fails. */
        *data = NULL;
        *n = 0;
        if (fd < 0 || fstat(fd, &st) < 0) {
                err = -errno;
                snprintf(errbuf, len, "%s: %s", path, strerror(-err));
                if (fd >= 0)
                        close(fd);
                return err;
        }
        if (!S_ISREG(st.st_mode)) {
                snprintf(errbuf, len,
                         "%s: not a regular file (a FIFO, device or "
                         "directory)",
                         path);
                close(fd);
                return HP_ECONFIG;
        }
        f = fdopen(fd, "rb");
        if (f == NULL) {
                err = -errno;
                close(fd);
                snprintf(errbuf, len, "%s: %s", path, strerror(-err));
                return err;
        }
        buf = malloc(CONFIG_FILE_MAX + 1);
        if (buf == NULL) {
                fclose(f);
                return -ENOMEM;
        }
        got = fread(buf, 1, CONFIG_FILE_MAX + 1, f);
        err = ferror(f) ? -EIO : 0;
        fclose(f);
        if (err == 0 && got > CONFIG_FILE_MAX) {
                snprintf(errbuf, len, "%s: larger than %d bytes", path,
                         CONFIG_FILE_MAX);
                err = HP_ETOOBIG;
        } else if (err != 0) {
                snprintf(errbuf, len, "%s: read error", path);
        }
        if (err != 0) {
                free(buf);
                return err;
        }
        buf[got] = '\0';
        *data = buf;
        *n = got;
        return 0;
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
