/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of the operator's request bodies, modelled on the reference's
 * pydantic v2 models in lax mode (docs/operator-api.md, "Validation"):
 * every bad field gets its own entry in the 422 "detail" list, with
 * pydantic's type, loc, msg and input, and nothing is applied unless the
 * whole body is valid. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

struct checker {
        cJSON *detail; /* the error list */
        size_t errors; /* found, listed or not */
        const cJSON *body;
        /* While one member of a union-typed field is checked, its name:
         * pydantic puts it at the end of the loc of that member's error
         * ("master_port", "int") and lists one error per member. */
        const char *member;
        bool oom;
};

/* How many bytes cJSON prints for one byte of a string. */
static size_t printed_width(unsigned char ch)
{
        if (ch < 0x20)
                return 6;
        return ch == '"' || ch == '\\' ? 2 : 1;
}

/* An upper bound on the length of v printed by cJSON, or a value over
 * max as soon as the walk passes max: the cost stays bounded by max
 * whatever v is. */
static size_t json_size(const cJSON *v, size_t max)
{
        size_t n = 0;

        if (v->string != NULL)
                n += 3 + strlen(v->string) * 6; /* "key": worst case */
        if (cJSON_IsString(v)) {
                for (const char *p = v->valuestring; *p && n <= max; p++)
                        n += printed_width((unsigned char)*p);
                return n + 2;
        }
        if (cJSON_IsNumber(v))
                return n + 26;
        if (cJSON_IsRaw(v)) /* a number kept as sent */
                return n + strlen(v->valuestring);
        if (!cJSON_IsArray(v) && !cJSON_IsObject(v))
                return n + 5; /* false */
        n += 2;
        for (const cJSON *it = v->child; it && n <= max; it = it->next)
                n += json_size(it, max - (n < max ? n : max)) + 1;
        return n;
}

/* What a 422 shows of an input: the value itself when it prints within
 * HP_OP_ECHO_MAX bytes, else a string that says what it was: the start
 * of a long string, the size of a list or object. */
static cJSON *echo(const cJSON *input)
{
        char text[HP_OP_ECHO_MAX + 160];
        size_t printed = 0;
        size_t cut;

        if (input == NULL)
                return cJSON_CreateNull();
        if (json_size(input, HP_OP_ECHO_MAX) <= HP_OP_ECHO_MAX)
                return cJSON_Duplicate(input, true);
        if (cJSON_IsString(input)) {
                const char *v = input->valuestring;
                size_t len = strlen(v);

                /* Half the limit as printed, escapes included. */
                for (cut = 0; cut < len; cut++) {
                        size_t w = printed_width((unsigned char)v[cut]);

                        if (printed + w > HP_OP_ECHO_MAX / 2)
                                break;
                        printed += w;
                }
                /* Not inside a UTF-8 sequence. */
                while (cut > 0 && ((unsigned char)v[cut] & 0xc0) == 0x80)
                        cut--;
                snprintf(text, sizeof(text),
                         "%.*s... (%zu bytes in all, over the %d-byte echo "
                         "limit)",
                         (int)cut, v, len, HP_OP_ECHO_MAX);
        } else {
                snprintf(text, sizeof(text),
                         "(%s of %d %s, over the %d-byte echo limit)",
                         cJSON_IsArray(input) ? "a list" : "an object",
                         cJSON_GetArraySize(input),
                         cJSON_IsArray(input) ? "items" : "members",
                         HP_OP_ECHO_MAX);
        }
        return cJSON_CreateString(text);
}

/* Appends one error. loc is "body" followed by the given path elements:
 * strings, or list indexes given as index >= 0. input is duplicated. */
static void add_error(struct checker *c, const char *type, const char *field,
                      int index, const char *subfield, const char *msg,
                      const cJSON *input, const char *ctx_error)
{
        cJSON *err = cJSON_CreateObject();
        cJSON *loc = cJSON_CreateArray();
        cJSON *in;

        /* Counted even when not listed: callers compare counts to know
         * whether a field was valid. */
        if (c->errors++ >= HP_OP_ERRORS_MAX) {
                cJSON_Delete(err);
                cJSON_Delete(loc);
                return;
        }
        if (err == NULL || loc == NULL)
                goto oom;
        cJSON_AddItemToArray(loc, cJSON_CreateString("body"));
        if (field != NULL)
                cJSON_AddItemToArray(loc, cJSON_CreateString(field));
        if (index >= 0)
                cJSON_AddItemToArray(loc, cJSON_CreateNumber(index));
        if (subfield != NULL)
                cJSON_AddItemToArray(loc, cJSON_CreateString(subfield));
        if (c->member != NULL)
                cJSON_AddItemToArray(loc, cJSON_CreateString(c->member));
        cJSON_AddStringToObject(err, "type", type);
        cJSON_AddItemToObject(err, "loc", loc);
        loc = NULL;
        cJSON_AddStringToObject(err, "msg", msg);
        in = echo(input);
        if (in == NULL)
                goto oom;
        cJSON_AddItemToObject(err, "input", in);
        if (ctx_error != NULL) {
                cJSON *ctx = cJSON_AddObjectToObject(err, "ctx");
                if (ctx == NULL)
                        goto oom;
                cJSON_AddStringToObject(ctx, "error", ctx_error);
        }
        cJSON_AddItemToArray(c->detail, err);
        return;
oom:
        cJSON_Delete(err);
        cJSON_Delete(loc);
        c->oom = true;
}

/* One last entry in place of the errors past HP_OP_ERRORS_MAX. */
static void list_the_rest(struct checker *c)
{
        cJSON *err = cJSON_CreateObject();
        cJSON *loc = cJSON_AddArrayToObject(err, "loc");
        char msg[128];

        snprintf(msg, sizeof(msg),
                 "%zu more errors not listed: a 422 "
                 "lists at most %d",
                 c->errors - HP_OP_ERRORS_MAX, HP_OP_ERRORS_MAX);
        if (loc == NULL ||
            !cJSON_AddItemToArray(loc, cJSON_CreateString("body")) ||
            cJSON_AddStringToObject(err, "type", "too_many_errors") == NULL ||
            cJSON_AddStringToObject(err, "msg", msg) == NULL ||
            cJSON_AddNullToObject(err, "input") == NULL ||
            !cJSON_AddItemToArray(c->detail, err)) {
                cJSON_Delete(err);
                c->oom = true;
        }
}

/* A custom validator's failure: pydantic says "Value error, <text>". */
static void value_error(struct checker *c, const char *field, int index,
                        const char *subfield, const cJSON *input,
                        const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));

static void value_error(struct checker *c, const char *field, int index,
                        const char *subfield, const cJSON *input,
                        const char *fmt, ...)
{
        char text[1024];
        char msg[1100];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        snprintf(msg, sizeof(msg), "Value error, %s", text);
        add_error(c, "value_error", field, index, subfield, msg, input, text);
}

/* Python's json keeps the last of duplicate keys; so do we. */
static const cJSON *member(const cJSON *obj, const char *name)
{
        const cJSON *found = NULL;

        for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next)
                if (it->string != NULL && strcmp(it->string, name) == 0)
                        found = it;
        return found;
}

static void missing(struct checker *c, const cJSON *parent, const char *field,
                    int index, const char *subfield)
{
        add_error(c, "missing", field, index, subfield, "Field required",
                  parent, NULL);
}

enum parsed { PARSED_OK = 0, PARSED_BAD };

/* A decimal integer with optional blanks around it, as Python's int()
 * reads a string. */
static bool parse_int_text(const char *text, int64_t *out)
{
        const char *s = text;
        char *end;
        long long n;

        while (isspace((unsigned char)*s))
                s++;
        if (*s == '\0')
                return false;
        errno = 0;
        n = strtoll(s, &end, 10);
        if (end == s || errno != 0 || isspace((unsigned char)*s))
                return false;
        while (isspace((unsigned char)*end))
                end++;
        if (*end != '\0')
                return false;
        *out = n;
        return true;
}

/* An int the way pydantic's lax mode takes it: an integral number, a
 * boolean, or a string holding a decimal integer. */
static enum parsed int_field(struct checker *c, const cJSON *v,
                             const char *field, int index,
                             const char *subfield, int64_t *out)
{
        if (cJSON_IsBool(v)) {
                *out = cJSON_IsTrue(v) ? 1 : 0;
                return PARSED_OK;
        }
        if (cJSON_IsNumber(v)) {
                double d = v->valuedouble;
                if (!isfinite(d)) {
                        add_error(c, "finite_number", field, index, subfield,
                                  "Input should be a finite number", v, NULL);
                        return PARSED_BAD;
                }
                if (d != floor(d)) {
                        add_error(c, "int_from_float", field, index, subfield,
                                  "Input should be a valid integer, got a "
                                  "number with a fractional part",
                                  v, NULL);
                        return PARSED_BAD;
                }
                if (d > 9.2e18 || d < -9.2e18) {
                        value_error(c, field, index, subfield, v,
                                    "%s is out of range", field);
                        return PARSED_BAD;
                }
                *out = (int64_t)d;
                return PARSED_OK;
        }
        if (cJSON_IsString(v)) {
                if (!parse_int_text(v->valuestring, out)) {
                        add_error(c, "int_parsing", field, index, subfield,
                                  "Input should be a valid integer, unable "
                                  "to parse string as an integer",
                                  v, NULL);
                        return PARSED_BAD;
                }
                return PARSED_OK;
        }
        add_error(c, "int_type", field, index, subfield,
                  "Input should be a valid integer", v, NULL);
        return PARSED_BAD;
}

/* Whether pydantic's lax int takes v, strings aside: a boolean or a
 * finite integral number. */
static bool int_like(const cJSON *v)
{
        return cJSON_IsBool(v) ||
               (cJSON_IsNumber(v) && isfinite(v->valuedouble) &&
                v->valuedouble == floor(v->valuedouble));
}

/* v, neither a string nor int_like(), fails both members of a
 * Union[int, str] (int_first) or Union[str, int]: pydantic lists one
 * error per member, in the union's order, each loc ending in the
 * member's name. */
static void union_failed(struct checker *c, const cJSON *v, const char *field,
                         int index, const char *subfield, bool int_first)
{
        int64_t n;

        for (int pass = 0; pass < 2; pass++) {
                if ((pass == 0) == int_first) {
                        c->member = "int";
                        (void)int_field(c, v, field, index, subfield, &n);
                } else {
                        c->member = "str";
                        add_error(c, "string_type", field, index, subfield,
                                  "Input should be a valid string", v, NULL);
                }
        }
        c->member = NULL;
}

/* A required int within [min, max]. */
static void required_int(struct checker *c, const cJSON *obj,
                         const char *field, int64_t min, int64_t max,
                         int *out)
{
        const cJSON *v = member(obj, field);
        int64_t n;

        if (v == NULL) {
                missing(c, obj, field, -1, NULL);
                return;
        }
        if (int_field(c, v, field, -1, NULL, &n) != PARSED_OK)
                return;
        if (n < min || n > max) {
                value_error(c, field, -1, NULL, v,
                            "%s %lld is out of range %lld..%lld", field,
                            (long long)n, (long long)min, (long long)max);
                return;
        }
        *out = (int)n;
}

/* pydantic's lax boolean strings. */
static bool bool_text(const char *text, int *out)
{
        static const char *const truthy[] = { "1",    "on", "t",
                                              "true", "y",  "yes" };
        static const char *const falsy[] = { "0",     "off", "f",
                                             "false", "n",   "no" };

        for (size_t i = 0; i < HP_ARRAY_SIZE(truthy); i++) {
                if (strcasecmp(text, truthy[i]) == 0) {
                        *out = 1;
                        return true;
                }
                if (strcasecmp(text, falsy[i]) == 0) {
                        *out = 0;
                        return true;
                }
        }
        return false;
}

/* Python's bool() of pydantic's lax boolean forms. */
static enum parsed bool_field(struct checker *c, const cJSON *v,
                              const char *field, int *out)
{
        if (cJSON_IsBool(v)) {
                *out = cJSON_IsTrue(v);
                return PARSED_OK;
        }
        if (cJSON_IsNumber(v) &&
            (v->valuedouble == 0 || v->valuedouble == 1)) {
                *out = v->valuedouble != 0;
                return PARSED_OK;
        }
        if (cJSON_IsString(v)) {
                if (bool_text(v->valuestring, out))
                        return PARSED_OK;
                add_error(c, "bool_parsing", field, -1, NULL,
                          "Input should be a valid boolean, unable to "
                          "interpret input",
                          v, NULL);
                return PARSED_BAD;
        }
        add_error(c, "bool_type", field, -1, NULL,
                  "Input should be a valid boolean", v, NULL);
        return PARSED_BAD;
}

/* spare is Union[bool, int], the int through Python's bool(). */
static enum parsed spare_field(struct checker *c, const cJSON *v, int *out)
{
        int64_t n;
        int b;

        if (int_like(v)) {
                *out = cJSON_IsBool(v) ? cJSON_IsTrue(v)
                                       : v->valuedouble != 0;
                return PARSED_OK;
        }
        if (cJSON_IsString(v) && parse_int_text(v->valuestring, &n)) {
                *out = n != 0;
                return PARSED_OK;
        }
        if (cJSON_IsString(v) && bool_text(v->valuestring, out))
                return PARSED_OK;
        /* Neither member takes it: one error each. */
        c->member = "bool";
        (void)bool_field(c, v, "spare", &b);
        c->member = "int";
        (void)int_field(c, v, "spare", -1, NULL, &n);
        c->member = NULL;
        return PARSED_BAD;
}

/* An optional string: absent or null gives NULL. */
static void optional_string(struct checker *c, const cJSON *obj,
                            const char *field, char **out)
{
        const cJSON *v = member(obj, field);

        if (v == NULL || cJSON_IsNull(v))
                return;
        if (!cJSON_IsString(v)) {
                add_error(c, "string_type", field, -1, NULL,
                          "Input should be a valid string", v, NULL);
                return;
        }
        *out = strdup(v->valuestring);
        if (*out == NULL)
                c->oom = true;
}

static bool has_control(const char *s)
{
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || *s == 0x7f)
                        return true;
        return false;
}

/* The offset of the first \u0000 escape inside a JSON string of the body,
 * or -1. cJSON ends its strings at a NUL, so such a value would be cut
 * short without a word. */
static long nul_escape_at(const char *body, size_t len)
{
        bool in_string = false;

        for (size_t i = 0; i < len; i++) {
                if (!in_string) {
                        in_string = body[i] == '"';
                        continue;
                }
                if (body[i] == '"') {
                        in_string = false;
                } else if (body[i] == '\\' && i + 1 < len) {
                        if (body[i + 1] == 'u' && i + 5 < len &&
                            strncmp(body + i + 2, "0000", 4) == 0)
                                return (long)i;
                        i++;
                }
        }
        return -1;
}

static void check_master(struct checker *c, const cJSON *obj,
                         struct hp_op_request *out)
{
        const cJSON *addr = member(obj, "master_addr");
        const cJSON *port = member(obj, "master_port");
        int64_t n;

        if (addr == NULL) {
                missing(c, obj, "master_addr", -1, NULL);
        } else if (!cJSON_IsString(addr)) {
                add_error(c, "string_type", "master_addr", -1, NULL,
                          "Input should be a valid string", addr, NULL);
        } else {
                const char *s = addr->valuestring;
                size_t len = strlen(s);
                size_t blank = strspn(s, " \t\r\n");

                if (blank == len)
                        value_error(c, "master_addr", -1, NULL, addr,
                                    "Empty master_addr received from "
                                    "operator");
                else if (has_control(s))
                        value_error(c, "master_addr", -1, NULL, addr,
                                    "master_addr holds a control character "
                                    "(a newline?): it must be one host name "
                                    "or address");
                else if (len >= sizeof(out->master_addr))
                        value_error(c, "master_addr", -1, NULL, addr,
                                    "master_addr is %zu bytes long; at most "
                                    "%zu are allowed",
                                    len, sizeof(out->master_addr) - 1);
                else
                        memcpy(out->master_addr, s, len + 1);
        }

        /* int or str: a string goes through Python's int(), which takes
         * surrounding blanks; the reference turns "" into port 0, which
         * cannot be a master's port, so it is refused here. */
        if (port == NULL) {
                missing(c, obj, "master_port", -1, NULL);
                return;
        }
        if (!cJSON_IsString(port) && !int_like(port)) {
                union_failed(c, port, "master_port", -1, NULL, true);
                return;
        }
        if (cJSON_IsString(port) && !parse_int_text(port->valuestring, &n)) {
                value_error(c, "master_port", -1, NULL, port,
                            "invalid literal for int() with base 10: "
                            "'%.64s'",
                            port->valuestring);
                return;
        }
        if (int_field(c, port, "master_port", -1, NULL, &n) != PARSED_OK)
                return;
        if (n < 1 || n > 65535) {
                value_error(c, "master_port", -1, NULL, port,
                            "master_port %lld is out of range 1..65535",
                            (long long)n);
                return;
        }
        out->master_port = (int)n;
}

static void check_rank_ips(struct checker *c, const cJSON *obj,
                           struct hp_op_request *out)
{
        const cJSON *v = member(obj, "rankIps");
        size_t errors = c->errors;
        int i = 0;

        if (v == NULL || cJSON_IsNull(v))
                return;
        if (!cJSON_IsArray(v)) {
                add_error(c, "list_type", "rankIps", -1, NULL,
                          "Input should be a valid list", v, NULL);
                return;
        }
        for (const cJSON *item = v->child; item; item = item->next, i++) {
                const cJSON *rank, *ip;
                int64_t n;

                if (!cJSON_IsObject(item)) {
                        add_error(c, "model_type", "rankIps", i, NULL,
                                  "Input should be a valid dictionary or "
                                  "instance of RankIp",
                                  item, NULL);
                        continue;
                }
                rank = member(item, "rank");
                ip = member(item, "ip");
                /* The reference's items are Dict[str, Union[str, int]]. */
                if (rank == NULL)
                        missing(c, item, "rankIps", i, "rank");
                else if (!cJSON_IsString(rank) && !int_like(rank))
                        union_failed(c, rank, "rankIps", i, "rank", false);
                else if (int_field(c, rank, "rankIps", i, "rank", &n) ==
                         PARSED_OK) {
                        /* The reference fails on these deep in a list
                         * assignment (an HTTP 500); they are refused
                         * up front here. */
                        if (n < 0 || n > HP_OP_RANK_IPS_MAX)
                                value_error(c, "rankIps", i, "rank", rank,
                                            "rank %lld is out of range "
                                            "0..%d (list assignment index "
                                            "out of range)",
                                            (long long)n, HP_OP_RANK_IPS_MAX);
                }
                if (ip == NULL)
                        missing(c, item, "rankIps", i, "ip");
                else if (!cJSON_IsString(ip) && !int_like(ip))
                        union_failed(c, ip, "rankIps", i, "ip", false);
        }
        if (c->errors != errors)
                return;
        out->rank_ips = cJSON_Duplicate(v, true);
        if (out->rank_ips == NULL) {
                c->oom = true;
                return;
        }
        /* A boolean ip is the int the reference's lax int makes of it. */
        for (cJSON *item = out->rank_ips->child; item; item = item->next) {
                cJSON *ip = (cJSON *)member(item, "ip");

                if (cJSON_IsBool(ip)) {
                        double n = cJSON_IsTrue(ip) ? 1 : 0;

                        ip->type = cJSON_Number;
                        cJSON_SetNumberValue(ip, n);
                }
        }
}

static void check_rules(struct checker *c, const cJSON *obj,
                        struct hp_op_request *out)
{
        const cJSON *v = member(obj, "log_monitoring_configuration");
        char err[1024];
        int i = 0;
        bool bad = false;

        if (v == NULL || cJSON_IsNull(v))
                return;
        if (!cJSON_IsArray(v)) {
                add_error(c, "list_type", "log_monitoring_configuration", -1,
                          NULL, "Input should be a valid list", v, NULL);
                return;
        }
        for (const cJSON *item = v->child; item; item = item->next, i++) {
                if (!cJSON_IsObject(item)) {
                        add_error(c, "dict_type",
                                  "log_monitoring_configuration", i, NULL,
                                  "Input should be a valid dictionary", item,
                                  NULL);
                        bad = true;
                }
        }
        if (bad)
                return;
        /* Compiled now, so that rules that cannot run are a 422 for the
         * operator rather than a surprise once the workers are up. */
        if (logmon_ruleset_new(v, NULL, &out->ruleset, err, sizeof(err)) <
            0) {
                value_error(c, "log_monitoring_configuration", -1, NULL, v,
                            "%s", err);
                return;
        }
        out->rules = cJSON_Duplicate(v, true);
        if (out->rules == NULL)
                c->oom = true;
}

static void check_job(struct checker *c, const cJSON *obj,
                      enum hp_op_route route, struct hp_op_request *out)
{
        size_t errors = c->errors;
        const cJSON *v;
        int spare;

        /* In the order of the reference's model, as pydantic lists them. */
        required_int(c, obj, "rank", 0, HP_OP_NNODES_MAX - 1, &out->rank);
        required_int(c, obj, "nnodes", 1, HP_OP_NNODES_MAX, &out->nnodes);
        /* Whenever both are valid, whatever else is wrong. */
        if (c->errors == errors && out->rank >= out->nnodes)
                value_error(c, "rank", -1, NULL, member(obj, "rank"),
                            "rank %d is not below nnodes %d", out->rank,
                            out->nnodes);
        required_int(c, obj, "faultCount", 0, INT_MAX, &out->fault_count);
        check_master(c, obj, out);
        check_rules(c, obj, out);
        optional_string(c, obj, "ipVersion", &out->ip_version);
        check_rank_ips(c, obj, out);
        /* Not Optional in the reference's model: null is refused. */
        v = member(obj, "spare");
        if (v != NULL && spare_field(c, v, &spare) == PARSED_OK)
                out->spare = spare;
        /* Any JSON: the in-process restart agent hands it to the workers
         * as it came, numbers as written (hp_op_request_parse()). */
        v = member(obj, "worker_data");
        if (v != NULL && !cJSON_IsNull(v)) {
                out->worker_data = cJSON_Duplicate(v, true);
                if (out->worker_data == NULL)
                        c->oom = true;
        }
        if (route != HP_OP_START)
                return;
        v = member(obj, "progress");
        if (v == NULL)
                return;
        if (!cJSON_IsObject(v)) {
                add_error(c, "dict_type", "progress", -1, NULL,
                          "Input should be a valid dictionary", v, NULL);
                return;
        }
        out->progress = cJSON_Duplicate(v, true);
        if (out->progress == NULL)
                c->oom = true;
}

static void check_stop(struct checker *c, const cJSON *obj,
                       struct hp_op_request *out)
{
        const cJSON *v;
        int64_t n;
        int b;

        optional_string(c, obj, "restart_mode", &out->restart_mode);
        v = member(obj, "is_graceful");
        if (v != NULL && !cJSON_IsNull(v) &&
            bool_field(c, v, "is_graceful", &b) == PARSED_OK)
                out->is_graceful = b;
        v = member(obj, "timeout");
        if (v != NULL && !cJSON_IsNull(v) &&
            int_field(c, v, "timeout", -1, NULL, &n) == PARSED_OK) {
                /* A day is far beyond any graceful stop; a bigger value is
                 * a unit mistake (milliseconds?). */
                if (n < 0 || n > 86400)
                        value_error(c, "timeout", -1, NULL, v,
                                    "timeout %lld is out of range 0..86400 "
                                    "seconds",
                                    (long long)n);
                else
                        out->timeout_s = n;
        }
}

/* FastAPI parses a body as JSON only for these content types. */
static bool is_json_type(const char *type)
{
        size_t len;
        const char *semi;

        if (type == NULL)
                return true;
        semi = strchr(type, ';');
        len = semi ? (size_t)(semi - type) : strlen(type);
        while (len > 0 && type[len - 1] == ' ')
                len--;
        if (len == 16 && strncasecmp(type, "application/json", 16) == 0)
                return true;
        return len > 17 && strncasecmp(type, "application/", 12) == 0 &&
               strncasecmp(type + len - 5, "+json", 5) == 0;
}

void hp_op_request_free(struct hp_op_request *req)
{
        cJSON_Delete(req->rules);
        if (req->ruleset != NULL)
                logmon_ruleset_unref(req->ruleset);
        free(req->ip_version);
        cJSON_Delete(req->rank_ips);
        cJSON_Delete(req->worker_data);
        cJSON_Delete(req->progress);
        free(req->restart_mode);
        memset(req, 0, sizeof(*req));
}

/* The body as JSON, as Python's json.loads reads it, or NULL with the
 * error added to c (or c->oom set). */
static cJSON *decode_body(struct checker *c, const char *body,
                          size_t body_len)
{
        const char *end = NULL;
        cJSON *doc;

        if (!hp_utf8_valid(body, body_len) ||
            nul_escape_at(body, body_len) >= 0) {
                char where[128];
                cJSON *loc_input = cJSON_CreateObject();

                snprintf(where, sizeof(where), "%s",
                         hp_utf8_valid(body, body_len)
                                 ? "a string holds \\u0000 (NUL), which "
                                   "cannot be passed on"
                                 : "the body is not valid UTF-8");
                add_error(c, "json_invalid", NULL, -1, NULL,
                          "JSON decode error", loc_input, where);
                cJSON_Delete(loc_input);
                return NULL;
        }
        doc = cJSON_ParseWithLengthOpts(body, body_len, &end, false);
        if (doc != NULL) {
                /* Only blanks may follow the value, as for json.loads. */
                while (end < body + body_len &&
                       strchr(" \t\r\n", *end) != NULL && *end != '\0')
                        end++;
                if (end != body + body_len) {
                        cJSON_Delete(doc);
                        doc = NULL;
                }
        }
        if (doc == NULL) {
                char where[96];
                cJSON *loc_input = cJSON_CreateObject();
                size_t pos = end && end >= body ? (size_t)(end - body) : 0;

                snprintf(where, sizeof(where),
                         "invalid JSON at byte %zu of %zu", pos, body_len);
                add_error(c, "json_invalid", NULL, (int)pos, NULL,
                          "JSON decode error", loc_input, where);
                cJSON_Delete(loc_input);
                return NULL;
        }
        /* Numbers JSON does not allow are refused as Python's json does;
         * those of worker_data keep their text, which the workers get. */
        if (doc != NULL) {
                size_t bad_at = 0;
                int r = hp_json_exact_numbers(doc,
                                              cJSON_IsObject(doc)
                                                      ? member(doc,
                                                               "worker_data")
                                                      : NULL,
                                              body, body_len, &bad_at);

                if (r == -ENOMEM) {
                        c->oom = true;
                        cJSON_Delete(doc);
                        return NULL;
                }
                if (r < 0) {
                        char where[128];
                        cJSON *loc_input = cJSON_CreateObject();

                        snprintf(where, sizeof(where),
                                 "invalid JSON number at byte %zu of %zu "
                                 "(a leading zero, or no digit after '.' "
                                 "or 'e')",
                                 bad_at, body_len);
                        add_error(c, "json_invalid", NULL, (int)bad_at, NULL,
                                  "JSON decode error", loc_input, where);
                        cJSON_Delete(loc_input);
                        cJSON_Delete(doc);
                        return NULL;
                }
        }
        return doc;
}

int hp_op_request_parse(enum hp_op_route route, const char *content_type,
                        const char *body, size_t body_len, bool has_body,
                        struct hp_op_request *out, cJSON **detail)
{
        struct checker c = { 0 };
        cJSON *doc = NULL;

        memset(out, 0, sizeof(*out));
        out->is_graceful = -1;
        out->timeout_s = -1;
        *detail = NULL;
        c.detail = cJSON_CreateArray();
        if (c.detail == NULL)
                return -ENOMEM;

        if (!has_body || body_len == 0) {
                /* The StopRequest body is optional. */
                if (route != HP_OP_STOP)
                        add_error(&c, "missing", NULL, -1, NULL,
                                  "Field required", NULL, NULL);
                goto done;
        }
        if (!is_json_type(content_type)) {
                cJSON *raw = cJSON_CreateString(body);
                add_error(&c, "model_attributes_type", NULL, -1, NULL,
                          "Input should be a valid dictionary or object to "
                          "extract fields from",
                          raw, NULL);
                cJSON_Delete(raw);
                goto done;
        }
        doc = decode_body(&c, body, body_len);
        if (doc == NULL)
                goto done;
        if (route == HP_OP_STOP && cJSON_IsNull(doc))
                goto done;
        if (!cJSON_IsObject(doc)) {
                add_error(&c, "model_attributes_type", NULL, -1, NULL,
                          "Input should be a valid dictionary or object to "
                          "extract fields from",
                          doc, NULL);
                goto done;
        }
        c.body = doc;
        if (route == HP_OP_STOP)
                check_stop(&c, doc, out);
        else
                check_job(&c, doc, route, out);

done:
        cJSON_Delete(doc);
        if (route == HP_OP_STOP && out->restart_mode == NULL &&
            c.errors == 0 && !c.oom) {
                out->restart_mode = strdup("ipr");
                c.oom = out->restart_mode == NULL;
        }
        if (c.errors > HP_OP_ERRORS_MAX)
                list_the_rest(&c);
        if (c.oom) {
                cJSON_Delete(c.detail);
                hp_op_request_free(out);
                return -ENOMEM;
        }
        if (c.errors > 0) {
                *detail = c.detail;
                hp_op_request_free(out);
                return -EINVAL;
        }
        cJSON_Delete(c.detail);
        return 0;
}
