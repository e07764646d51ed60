/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the pure parts of the operator API (src/operator): the
 * PLR state machine, request validation and its 422 entries, the /status
 * body and the pod_resourceconfig.json update. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

/* ---- State machine ---- */

/* The PLR table (docs/operator-api.md, "States"), spelled out pair by
 * pair. */
static const char *const plr_allowed[] = {
        "INIT>READY",         "INIT>SHUTDOWN",     "READY>RUNNING",
        "READY>SHUTDOWN",     "RUNNING>COMPLETED", "RUNNING>FAULTED",
        "RUNNING>STOPPING",   "RUNNING>SHUTDOWN",  "FAULTED>STOPPING",
        "FAULTED>SHUTDOWN",   "STOPPING>READY",    "COMPLETED>SHUTDOWN",
        "COMPLETED>STOPPING",
};

static void test_plr_table(void **state)
{
        (void)state;
        for (int from = 0; from < HP_OP_STATE_COUNT; from++) {
                for (int to = 0; to < HP_OP_STATE_COUNT; to++) {
                        char pair[64];
                        bool expect = false;

                        snprintf(pair, sizeof(pair), "%s>%s",
                                 hp_op_state_name((enum hp_op_state)from),
                                 hp_op_state_name((enum hp_op_state)to));
                        for (size_t i = 0; i < HP_ARRAY_SIZE(plr_allowed);
                             i++)
                                if (strcmp(plr_allowed[i], pair) == 0)
                                        expect = true;
                        if (hp_plr_allowed((enum hp_op_state)from,
                                           (enum hp_op_state)to) != expect)
                                fail_msg("%s: expected %s", pair,
                                         expect ? "allowed" : "refused");
                }
        }
}

static void test_plr_transitions_keep_first_order(void **state)
{
        struct hp_plr plr;

        (void)state;
        hp_plr_init(&plr, 1000);
        assert_int_equal(hp_plr_transition(&plr, HP_OP_READY, 2000, NULL,
                                           NULL),
                         0);
        assert_int_equal(hp_plr_transition(&plr, HP_OP_RUNNING, 3000,
                                           "Running", NULL),
                         0);
        assert_string_equal(plr.reason, "Running");
        /* Refused: nothing changes, not even the reason. */
        assert_int_equal(hp_plr_transition(&plr, HP_OP_READY, 3500, "x", "y"),
                         -EPERM);
        assert_int_equal(plr.state, HP_OP_RUNNING);
        assert_string_equal(plr.reason, "Running");
        /* Re-entering the same state is refused too. */
        assert_int_equal(hp_plr_transition(&plr, HP_OP_RUNNING, 3600, NULL,
                                           NULL),
                         -EPERM);
        assert_int_equal(hp_plr_transition(&plr, HP_OP_FAULTED, 4000,
                                           "WorkerCrash", "m"),
                         0);
        assert_int_equal(hp_plr_transition(&plr, HP_OP_STOPPING, 5000, NULL,
                                           NULL),
                         0);
        assert_int_equal(hp_plr_transition(&plr, HP_OP_READY, 6000, NULL,
                                           NULL),
                         0);
        assert_string_equal(plr.reason, "");
        /* READY keeps its first position but carries its last time. */
        assert_int_equal(plr.first_count, 5);
        assert_int_equal(plr.first_order[1], HP_OP_READY);
        assert_int_equal(plr.entered_us[HP_OP_READY], 6000);
        assert_int_equal(plr.entries[HP_OP_READY], 2);
        assert_int_equal(plr.first_order[4], HP_OP_STOPPING);
}

struct iso_case {
        int64_t us;
        const char *text;
};

static const struct iso_case iso_cases[] = {
        { 1732145837855065LL, "2024-11-20T23:37:17.855065+00:00" },
        { 1732145837000000LL, "2024-11-20T23:37:17+00:00" },
        { 1732145837000001LL, "2024-11-20T23:37:17.000001+00:00" },
        { 0, "1970-01-01T00:00:00+00:00" },
        { 951782400123000LL, "2000-02-29T00:00:00.123000+00:00" },
};

static void test_isoformat(void **state)
{
        char buf[64];

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(iso_cases); i++) {
                assert_int_equal(hp_isoformat_utc(iso_cases[i].us, buf,
                                                  sizeof(buf)),
                                 0);
                assert_string_equal(buf, iso_cases[i].text);
        }
        assert_int_equal(hp_isoformat_utc(iso_cases[0].us, buf, 10),
                         HP_ETOOBIG);
}

/* ---- Requests ---- */

#define START_OK                                                             \
        "\"rank\":1,\"nnodes\":2,\"faultCount\":3,\"master_addr\""           \
        ":\"10.1.2.3\","                                                     \
        "\"master_port\":29500"

struct request_case {
        enum hp_op_route route;
        const char *content_type;
        const char *body; /* NULL: no body at all */
        /* Expected errors, "type@loc" with loc elements joined by '.',
         * in order; NULL-terminated. Empty: the request is valid. */
        const char *errors[6];
        const char *msg_part; /* the first error's msg contains this */
};

#define JSON "application/json"

static const struct request_case request_cases[] = {
        /* Valid bodies. */
        { HP_OP_START, JSON, "{" START_OK "}", { NULL }, NULL },
        { HP_OP_START, NULL, "{" START_OK "}", { NULL }, NULL },
        { HP_OP_START,
          "application/json; charset=utf-8",
          "{" START_OK "}",
          { NULL },
          NULL },
        { HP_OP_START,
          "application/vnd.api+json",
          "{" START_OK "}",
          { NULL },
          NULL },
        { HP_OP_START,
          JSON,
          "{\"rank\":\"1\",\"nnodes\":\" 2 \",\"faultCount\":3.0,"
          "\"master_addr\":\"h\",\"master_port\":\"29500\",\"spare\":1,"
          "\"unknown\":[1]}",
          { NULL },
          NULL },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"ipVersion\":null,\"rankIps\":null,"
          "\"log_monitoring_configuration\":null,\"progress\":{}}",
          { NULL },
          NULL },
        { HP_OP_UPDATE,
          JSON,
          "{" START_OK ",\"ipVersion\":\"v\",\"rankIps\":[{\"rank\":0,"
          "\"ip\":\"10.0.0.1\"},{\"rank\":\"1\",\"ip\":167772162}]}",
          { NULL },
          NULL },
        { HP_OP_STOP, NULL, NULL, { NULL }, NULL },
        { HP_OP_STOP, JSON, "", { NULL }, NULL },
        { HP_OP_STOP, JSON, "null", { NULL }, NULL },
        { HP_OP_STOP,
          JSON,
          "{\"restart_mode\":null,\"is_graceful\":\"true\",\"timeout\":\"5\"}",
          { NULL },
          NULL },
        { HP_OP_STOP, "text/plain", "", { NULL }, NULL },

        /* Missing and malformed bodies. */
        { HP_OP_START,
          JSON,
          NULL,
          { "missing@body", NULL },
          "Field required" },
        { HP_OP_UPDATE,
          JSON,
          "",
          { "missing@body", NULL },
          "Field required" },
        { HP_OP_START,
          JSON,
          "{\"rank\":",
          { "json_invalid@body.7", NULL },
          "JSON decode error" },
        { HP_OP_START, JSON, "{} x", { "json_invalid@body.3", NULL }, NULL },
        { HP_OP_START,
          "application/x-www-form-urlencoded",
          "{" START_OK "}",
          { "model_attributes_type@body", NULL },
          "valid dictionary" },
        { HP_OP_START,
          JSON,
          "[1]",
          { "model_attributes_type@body", NULL },
          NULL },
        { HP_OP_STOP,
          "text/plain",
          "x",
          { "model_attributes_type@body", NULL },
          NULL },
        { HP_OP_STOP,
          JSON,
          "{\"timeout\":",
          { "json_invalid@body.10", NULL },
          NULL },

        /* Fields. */
        { HP_OP_START,
          JSON,
          "{}",
          { "missing@body.rank", "missing@body.nnodes",
            "missing@body.faultCount", "missing@body.master_addr",
            "missing@body.master_port", NULL },
          "Field required" },
        { HP_OP_START,
          JSON,
          "{\"rank\":\"x\",\"nnodes\":1.5,\"faultCount\":[],"
          "\"master_addr\":123,\"master_port\":29500}",
          { "int_parsing@body.rank", "int_from_float@body.nnodes",
            "int_type@body.faultCount", "string_type@body.master_addr",
            NULL },
          "unable to parse string" },
        { HP_OP_START,
          JSON,
          "{\"rank\":0,\"nnodes\":1,\"faultCount\":0,\"master_addr\":\"\","
          "\"master_port\":1}",
          { "value_error@body.master_addr", NULL },
          "Value error, Empty master_addr received from operator" },
        { HP_OP_START,
          JSON,
          "{\"rank\":0,\"nnodes\":1,\"faultCount\":0,\"master_addr\":\"  \","
          "\"master_port\":1}",
          { "value_error@body.master_addr", NULL },
          "Empty master_addr" },
        { HP_OP_START,
          JSON,
          "{\"rank\":0,\"nnodes\":1,\"faultCount\":0,\"master_addr\":\"h\","
          "\"master_port\":\"http\"}",
          { "value_error@body.master_port", NULL },
          "invalid literal for int() with base 10: 'http'" },
        { HP_OP_START,
          JSON,
          "{\"rank\":0,\"nnodes\":1,\"faultCount\":0,\"master_addr\":\"h\","
          "\"master_port\":\"\"}",
          { "value_error@body.master_port", NULL },
          "invalid literal" },
        { HP_OP_START,
          JSON,
          "{\"rank\":0,\"nnodes\":1,\"faultCount\":0,\"master_addr\":\"h\","
          "\"master_port\":70000}",
          { "value_error@body.master_port", NULL },
          "out of range 1..65535" },
        { HP_OP_START,
          JSON,
          "{\"rank\":2,\"nnodes\":2,\"faultCount\":0,\"master_addr\":\"h\","
          "\"master_port\":1}",
          { "value_error@body.rank", NULL },
          "rank 2 is not below nnodes 2" },
        /* Listed whatever else is wrong. */
        { HP_OP_START,
          JSON,
          "{\"rank\":2,\"nnodes\":2,\"faultCount\":0,\"master_addr\":\"\","
          "\"master_port\":1.5}",
          { "value_error@body.rank", "value_error@body.master_addr",
            "int_from_float@body.master_port.int",
            "string_type@body.master_port.str", NULL },
          "rank 2 is not below nnodes 2" },
        { HP_OP_START,
          JSON,
          "{\"rank\":-1,\"nnodes\":0,\"faultCount\":-2,\"master_addr\":\"h\","
          "\"master_port\":1}",
          { "value_error@body.rank", "value_error@body.nnodes",
            "value_error@body.faultCount", NULL },
          "rank -1 is out of range" },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"spare\":\"maybe\"}",
          { "bool_parsing@body.spare.bool", "int_parsing@body.spare.int",
            NULL },
          "valid boolean" },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"spare\":null}",
          { "bool_type@body.spare.bool", "int_type@body.spare.int", NULL },
          NULL },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"progress\":[]}",
          { "dict_type@body.progress", NULL },
          "valid dictionary" },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"ipVersion\":5}",
          { "string_type@body.ipVersion", NULL },
          "valid string" },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"rankIps\":{}}",
          { "list_type@body.rankIps", NULL },
          "valid list" },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"rankIps\":[1,{\"ip\":\"a\"},{\"rank\":0,"
          "\"ip\":[]},{\"rank\":100001,\"ip\":\"b\"}]}",
          { "model_type@body.rankIps.0", "missing@body.rankIps.1.rank",
            "string_type@body.rankIps.2.ip.str",
            "int_type@body.rankIps.2.ip.int",
            "value_error@body.rankIps.3.rank", NULL },
          NULL },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"rankIps\":[{\"rank\":100001,\"ip\":\"b\"}]}",
          { "value_error@body.rankIps.0.rank", NULL },
          "list assignment index out of range" },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"log_monitoring_configuration\":5}",
          { "list_type@body.log_monitoring_configuration", NULL },
          NULL },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"log_monitoring_configuration\":[\"x\"]}",
          { "dict_type@body.log_monitoring_configuration.0", NULL },
          NULL },
        { HP_OP_START,
          JSON,
          "{" START_OK ",\"log_monitoring_configuration\":[{\"name\":\"R\","
          "\"logPattern\":\"(\"}]}",
          { "value_error@body.log_monitoring_configuration", NULL },
          "logPattern" },
        { HP_OP_STOP,
          JSON,
          "{\"restart_mode\":1,\"is_graceful\":2,\"timeout\":-1}",
          { "string_type@body.restart_mode", "bool_type@body.is_graceful",
            "value_error@body.timeout", NULL },
          "valid string" },
        { HP_OP_STOP,
          JSON,
          "{\"timeout\":1.5}",
          { "int_from_float@body.timeout", NULL },
          NULL },
};

/* "type@body.rank" of one detail entry. */
static void describe(const cJSON *err, char *out, size_t len)
{
        const cJSON *type = cJSON_GetObjectItem(err, "type");
        const cJSON *loc = cJSON_GetObjectItem(err, "loc");
        const cJSON *el;
        size_t n = (size_t)snprintf(out, len, "%s@",
                                    cJSON_IsString(type) ? type->valuestring
                                                         : "?");

        cJSON_ArrayForEach (el, loc) {
                if (cJSON_IsString(el))
                        n += (size_t)snprintf(out + n, len - n, "%s%s",
                                              el == loc->child ? "" : ".",
                                              el->valuestring);
                else
                        n += (size_t)snprintf(out + n, len - n, ".%d",
                                              el->valueint);
        }
}

static void test_requests(void **state)
{
        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(request_cases); i++) {
                const struct request_case *c = &request_cases[i];
                struct hp_op_request req;
                cJSON *detail = NULL;
                size_t expected = 0;
                int r;

                while (c->errors[expected] != NULL)
                        expected++;
                r = hp_op_request_parse(c->route, c->content_type, c->body,
                                        c->body ? strlen(c->body) : 0,
                                        c->body != NULL, &req, &detail);
                if (expected == 0) {
                        if (r != 0) {
                                char *text = cJSON_PrintUnformatted(detail);
                                fail_msg("case %zu (%s): unexpected 422 %s",
                                         i, c->body, text);
                        }
                        hp_op_request_free(&req);
                        continue;
                }
                if (r != -EINVAL)
                        fail_msg("case %zu (%s): accepted", i, c->body);
                if ((size_t)cJSON_GetArraySize(detail) != expected) {
                        char *text = cJSON_PrintUnformatted(detail);
                        fail_msg("case %zu: %d errors, expected %zu: %s", i,
                                 cJSON_GetArraySize(detail), expected, text);
                }
                for (size_t e = 0; e < expected; e++) {
                        const cJSON *err = cJSON_GetArrayItem(detail, (int)e);
                        char got[256];

                        describe(err, got, sizeof(got));
                        if (strcmp(got, c->errors[e]) != 0)
                                fail_msg(
                                        "case %zu error %zu: %s, expected %s",
                                        i, e, got, c->errors[e]);
                        /* Every entry has pydantic's four keys. */
                        assert_non_null(cJSON_GetObjectItem(err, "msg"));
                        assert_non_null(cJSON_GetObjectItem(err, "input"));
                }
                if (c->msg_part != NULL) {
                        const cJSON *msg = cJSON_GetObjectItem(
                                cJSON_GetArrayItem(detail, 0), "msg");
                        if (strstr(msg->valuestring, c->msg_part) == NULL)
                                fail_msg("case %zu: msg '%s' lacks '%s'", i,
                                         msg->valuestring, c->msg_part);
                }
                cJSON_Delete(detail);
        }
}

/* A 422 does not send megabytes back: a huge input is summed up, and
 * past HP_OP_ERRORS_MAX errors one entry counts the rest. */
static char *big_body(const char *head, const char *unit, size_t times,
                      const char *tail)
{
        size_t ul = strlen(unit), hl = strlen(head), tl = strlen(tail);
        char *b = malloc(hl + ul * times + tl + 1);
        char *p = b;

        assert_non_null(b);
        memcpy(p, head, hl);
        p += hl;
        for (size_t i = 0; i < times; i++, p += ul)
                memcpy(p, unit, ul);
        memcpy(p, tail, tl + 1);
        return b;
}

static void test_request_echo_capped(void **state)
{
        static const struct {
                const char *content_type;
                const char *head, *unit, *tail;
                size_t times;
                int entries;
                const char *input; /* of the first entry */
        } cases[] = {
                /* Five missing fields, each echoing the 900 KB body. */
                { JSON, "{\"pad\":\"", "x", "\"}", 900000, 5,
                  "(an object of 1 members, over the 1024-byte echo "
                  "limit)" },
                { "text/plain", "", "x", "", 900000, 1, NULL },
                /* 300,000 bad rules. */
                { JSON, "{" START_OK ",\"log_monitoring_configuration\":[",
                  "1,", "1]}", 300000, HP_OP_ERRORS_MAX + 1, "1" },
                /* Within the limit, the input is the input. */
                { JSON, "{\"pad\":\"", "x", "\"}", 900, 5, NULL },
                /* Short, but long once escaped: 85 of its newlines,
                 * 6 bytes each once printed. */
                { "text/plain", "", "\n", "", 1000, 1,
                  "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
                  "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
                  "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
                  "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
                  "\n... (1000 bytes in all, over the 1024-byte echo "
                  "limit)" },
        };

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                char *body = big_body(cases[i].head, cases[i].unit,
                                      cases[i].times, cases[i].tail);
                struct hp_op_request req;
                cJSON *detail = NULL;
                const cJSON *input;
                char *text;

                assert_int_equal(hp_op_request_parse(HP_OP_START,
                                                     cases[i].content_type,
                                                     body, strlen(body), true,
                                                     &req, &detail),
                                 -EINVAL);
                text = cJSON_PrintUnformatted(detail);
                assert_non_null(text);
                if (strlen(text) > 96 * 1024)
                        fail_msg("case %zu: a %zu-byte 422", i, strlen(text));
                for (const cJSON *e = detail->child; e; e = e->next) {
                        char *shown = cJSON_PrintUnformatted(
                                cJSON_GetObjectItem(e, "input"));

                        if (strlen(shown) > HP_OP_ECHO_MAX)
                                fail_msg("case %zu: a %zu-byte input", i,
                                         strlen(shown));
                        free(shown);
                }
                assert_int_equal(cJSON_GetArraySize(detail),
                                 cases[i].entries);
                input = cJSON_GetObjectItem(cJSON_GetArrayItem(detail, 0),
                                            "input");
                if (cases[i].input != NULL) {
                        char *got = cJSON_PrintUnformatted(input);

                        if (cJSON_IsString(input))
                                assert_string_equal(input->valuestring,
                                                    cases[i].input);
                        else
                                assert_string_equal(got, cases[i].input);
                        free(got);
                } else if (cases[i].times > 1000) {
                        /* The start of the string, then what it was. */
                        assert_true(cJSON_IsString(input));
                        assert_true(strncmp(input->valuestring, body, 512) ==
                                    0);
                        assert_non_null(strstr(input->valuestring,
                                               "... (900000 bytes in all, "
                                               "over the 1024-byte echo "
                                               "limit)"));
                } else {
                        assert_true(cJSON_IsObject(input));
                        assert_int_equal(strlen(cJSON_GetObjectItem(input,
                                                                    "pad")
                                                        ->valuestring),
                                         900);
                }
                if (cases[i].entries > HP_OP_ERRORS_MAX)
                        assert_string_equal(
                                cJSON_GetObjectItem(
                                        cJSON_GetArrayItem(detail,
                                                           HP_OP_ERRORS_MAX),
                                        "msg")
                                        ->valuestring,
                                "299937 more errors not listed: a 422 lists "
                                "at most 64");
                free(text);
                cJSON_Delete(detail);
                free(body);
        }
}

static void test_request_values(void **state)
{
        const char *body =
                "{\"rank\":\"1\",\"nnodes\":4,\"faultCount\":2,"
                "\"master_addr\":\"ip-10-1-2-3\",\"master_port\":\" 29501 \","
                "\"rank\":3,\"spare\":0,\"ipVersion\":\"2025-01-10T12:00:00Z\","
                "\"log_monitoring_configuration\":[{\"name\":\"JobStart\","
                "\"logPattern\":\".*start.*\","
                "\"expectedStartCutOffInSeconds\":60}]}";
        struct hp_op_request req;
        cJSON *detail;

        (void)state;
        assert_int_equal(hp_op_request_parse(HP_OP_START, NULL, body,
                                             strlen(body), true, &req,
                                             &detail),
                         0);
        /* The last of duplicate keys wins, as with Python's json. */
        assert_int_equal(req.rank, 3);
        assert_int_equal(req.nnodes, 4);
        assert_int_equal(req.fault_count, 2);
        assert_string_equal(req.master_addr, "ip-10-1-2-3");
        assert_int_equal(req.master_port, 29501);
        assert_false(req.spare);
        assert_string_equal(req.ip_version, "2025-01-10T12:00:00Z");
        assert_null(req.rank_ips);
        assert_non_null(req.ruleset);
        assert_int_equal(logmon_ruleset_count(req.ruleset), 1);
        hp_op_request_free(&req);

        body = "{\"is_graceful\":true,\"timeout\":7}";
        assert_int_equal(hp_op_request_parse(HP_OP_STOP, JSON, body,
                                             strlen(body), true, &req,
                                             &detail),
                         0);
        assert_int_equal(req.is_graceful, 1);
        assert_int_equal(req.timeout_s, 7);
        assert_string_equal(req.restart_mode, "ipr");
        hp_op_request_free(&req);

        assert_int_equal(hp_op_request_parse(HP_OP_STOP, JSON, NULL, 0, false,
                                             &req, &detail),
                         0);
        assert_int_equal(req.is_graceful, -1);
        assert_int_equal(req.timeout_s, -1);
        hp_op_request_free(&req);
}

/* ---- /status ---- */

static void test_status_render(void **state)
{
        struct hp_plr plr;
        struct hp_op_status st = { .plr = &plr,
                                   .agent_version = "1.2.3",
                                   .assigned_rank = -1,
                                   .spare = true };
        char *text;

        (void)state;
        hp_plr_init(&plr, 1732145837855065LL);
        hp_plr_transition(&plr, HP_OP_READY, 1732145838000000LL, NULL, NULL);
        text = hp_op_status_render(&st);
        assert_string_equal(
                text,
                "{\"status\":\"ready\",\"transitions\":{\"INIT\":\"2024-11-20T"
                "23:37:17.855065+00:00\",\"READY\":\"2024-11-20T23:37:18+00:"
                "00\"},\"restartMode\":\"process_level_restart\","
                "\"agent_version\":\"1.2.3\",\"spare\":\"True\"}");
        free(text);

        hp_plr_transition(&plr, HP_OP_RUNNING, 1732145839000000LL, "Running",
                          NULL);
        hp_plr_transition(&plr, HP_OP_FAULTED, 1732145840000000LL,
                          "LogHang_JobHang", "Log rule JobHang é \"quoted\"");
        st.ip_version = "v7";
        st.assigned_rank = 0;
        st.spare = false;
        text = hp_op_status_render(&st);
        assert_string_equal(
                text,
                "{\"status\":\"faulted\",\"transitions\":{\"INIT\":\"2024-11-"
                "20T23:37:17.855065+00:00\",\"READY\":\"2024-11-20T23:37:18+"
                "00:00\",\"RUNNING\":\"2024-11-20T23:37:19+00:00\",\"FAULTED\":"
                "\"2024-11-20T23:37:20+00:00\"},\"reason\":\"LogHang_JobHang\","
                "\"message\":\"Log rule JobHang é \\\"quoted\\\"\","
                "\"restartMode\":\"process_level_restart\",\"ipversion\":"
                "\"v7\",\"agent_version\":\"1.2.3\",\"assigned_rank\":\"0\","
                "\"spare\":\"False\"}");
        free(text);
}

/* Bytes that are not UTF-8 become U+FFFD, one per maximal invalid
 * subpart, as Python's errors="replace" does. */
#define FFFD "\xef\xbf\xbd"
static const struct {
        const char *in, *out;
} repair_cases[] = {
        { "plain", "plain" },
        { "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", NULL },
        { "a\xff\xfe b", "a" FFFD FFFD " b" },
        { "cut \xe2\x82 here", "cut " FFFD " here" },
        { "cut at the end \xf0\x9f\x98", "cut at the end " FFFD },
        { "overlong \xc0\xaf", "overlong " FFFD FFFD },
        { "surrogate \xed\xa0\x80", "surrogate " FFFD FFFD FFFD },
        { "past U+10FFFF \xf4\x90\x80\x80",
          "past U+10FFFF " FFFD FFFD FFFD FFFD },
        { "lone continuation \x80", "lone continuation " FFFD },
};

static void test_utf8_repair(void **state)
{
        char out[256];

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(repair_cases); i++) {
                const char *want = repair_cases[i].out ? repair_cases[i].out
                                                       : repair_cases[i].in;
                size_t n = hp_utf8_repair(repair_cases[i].in, out,
                                          sizeof(out));
                if (strcmp(out, want) != 0)
                        fail_msg("case %zu: got '%s'", i, out);
                assert_int_equal(n, strlen(want));
                assert_true(hp_utf8_valid(out, n));
                assert_int_equal(hp_utf8_valid(repair_cases[i].in,
                                               strlen(repair_cases[i].in)),
                                 strcmp(repair_cases[i].in, want) == 0);
        }
        /* Cut only between characters when the room runs out. */
        assert_int_equal(hp_utf8_repair("ab\xc3\xa9", out, 4), 2);
        assert_string_equal(out, "ab");
        assert_int_equal(hp_utf8_repair("a\xff", out, 4), 1);
        assert_string_equal(out, "a");
}

static void test_status_render_repairs_utf8(void **state)
{
        struct hp_plr plr;
        struct hp_op_status st = { .plr = &plr,
                                   .agent_version = "1",
                                   .assigned_rank = -1,
                                   .spare = true };
        char *text;

        (void)state;
        hp_plr_init(&plr, 0);
        hp_plr_transition(&plr, HP_OP_READY, 0, NULL, NULL);
        hp_plr_transition(&plr, HP_OP_RUNNING, 0, "Running", NULL);
        hp_plr_transition(&plr, HP_OP_FAULTED, 0, "LogFault_Bad",
                          "line: bad \xff byte");
        text = hp_op_status_render(&st);
        assert_non_null(
                strstr(text, "\"message\":\"line: bad " FFFD " byte\""));
        assert_true(hp_utf8_valid(text, strlen(text)));
        free(text);
}

/* ---- pod_resourceconfig.json ---- */

struct podcfg_case {
        const char *before; /* NULL: no file */
        int rank, nnodes;
        const char *rank_ips;
        const char *after;
};

static const struct podcfg_case podcfg_cases[] = {
        /* A fresh file. */
        { NULL, 1, 2, "[{\"rank\":0,\"ip\":\"a\"},{\"rank\":1,\"ip\":\"b\"}]",
          "{\"ips\":[\"a\",\"b\"],\"current_pod_ip\":\"b\","
          "\"ips_timestamp\":\"T\"}" },
        /* A partial update replaces only the listed ranks. */
        { "{\"ips\":[\"a\",\"b\",\"c\"],\"current_pod_ip\":\"a\","
          "\"ips_timestamp\":\"old\"}",
          0, 3, "[{\"rank\":1,\"ip\":\"B\"}]",
          "{\"ips\":[\"a\",\"B\",\"c\"],\"current_pod_ip\":\"a\","
          "\"ips_timestamp\":\"T\"}" },
        /* Scale up 2 → 4 pads with nulls; ranks past nnodes ignored. */
        { "{\"ips\":[\"a\",\"b\"]}", 3, 4,
          "[{\"rank\":2,\"ip\":\"c\"},{\"rank\":9,\"ip\":\"z\"}]",
          "{\"ips\":[\"a\",\"b\",\"c\",null],\"current_pod_ip\":null,"
          "\"ips_timestamp\":\"T\"}" },
        /* Scale down 4 → 2 cuts. */
        { "{\"ips\":[\"a\",\"b\",\"c\",\"d\"]}", 1, 2,
          "[{\"rank\":0,\"ip\":\"A\"}]",
          "{\"ips\":[\"A\",\"b\"],\"current_pod_ip\":\"b\","
          "\"ips_timestamp\":\"T\"}" },
        /* An empty rankIps keeps the list, not resized (12 → 8). */
        { "{\"ips\":[1,2,3,4,5,6,7,8,9,10,11,12]}", 2, 8, "[]",
          "{\"ips\":[1,2,3,4,5,6,7,8,9,10,11,12],\"current_pod_ip\":3,"
          "\"ips_timestamp\":\"T\"}" },
        /* ... and with no list yet, it is nnodes nulls. */
        { NULL, 0, 2, "[]",
          "{\"ips\":[null,null],\"current_pod_ip\":null,"
          "\"ips_timestamp\":\"T\"}" },
        /* Other keys are kept; rank past the list gives null. */
        { "{\"framework\":{\"x\":1},\"ips\":[\"a\"]}", 1, 1, "[]",
          "{\"framework\":{\"x\":1},\"ips\":[\"a\"],\"current_pod_ip\":null,"
          "\"ips_timestamp\":\"T\"}" },
};

static void test_podcfg_apply(void **state)
{
        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(podcfg_cases); i++) {
                const struct podcfg_case *c = &podcfg_cases[i];
                cJSON *before = c->before ? cJSON_Parse(c->before) : NULL;
                cJSON *ips = cJSON_Parse(c->rank_ips);
                cJSON *after = NULL;
                char *text;

                assert_int_equal(hp_podcfg_apply(before, c->rank, c->nnodes,
                                                 ips, "T", &after),
                                 0);
                text = cJSON_PrintUnformatted(after);
                if (strcmp(text, c->after) != 0)
                        fail_msg("case %zu: %s, expected %s", i, text,
                                 c->after);
                free(text);
                cJSON_Delete(after);
                cJSON_Delete(ips);
        }
}

static void test_podcfg_files(void **state)
{
        char dir[] = "/tmp/hp-podcfg-XXXXXX";
        char path[256], err[512];
        cJSON *doc, *ips, *after;
        FILE *f;

        (void)state;
        assert_non_null(mkdtemp(dir));
        assert_int_equal(hp_podcfg_read(dir, &doc, err, sizeof(err)), 0);
        assert_null(doc);

        ips = cJSON_Parse("[{\"rank\":0,\"ip\":\"10.0.0.1\"}]");
        assert_int_equal(hp_podcfg_apply(NULL, 0, 1, ips, "v1", &after), 0);
        assert_int_equal(hp_podcfg_write(dir, after, err, sizeof(err)), 0);
        cJSON_Delete(after);
        cJSON_Delete(ips);
        /* No temporary file is left behind. */
        snprintf(path, sizeof(path), "%s/pod_resourceconfig.json.tmp", dir);
        assert_int_equal(access(path, F_OK), -1);

        assert_int_equal(hp_podcfg_read(dir, &doc, err, sizeof(err)), 0);
        assert_string_equal(
                cJSON_GetObjectItem(doc, "ips_timestamp")->valuestring, "v1");
        cJSON_Delete(doc);

        snprintf(path, sizeof(path), "%s/pod_resourceconfig.json", dir);
        f = fopen(path, "w");
        fputs("[not an object", f);
        fclose(f);
        assert_int_equal(hp_podcfg_read(dir, &doc, err, sizeof(err)),
                         HP_ECONFIG);
        assert_non_null(strstr(err, "pod_resourceconfig.json is not a JSON "
                                    "object"));
        unlink(path);
        rmdir(dir);
}

/* ---- The token and the rate limit (auth.c) ---- */

static void test_token_matches(void **state)
{
        static const char tok[] = "s3cr3t";
        static const struct {
                const char *header; /* NULL: none */
                bool ok;
        } cases[] = {
                { "Bearer s3cr3t", true },
                { "bearer s3cr3t", true },
                { "BEARER \t s3cr3t ", true },
                { NULL, false },
                { "", false },
                { "Bearer", false },
                { "Bearer ", false },
                { "Bearers3cr3t", false },
                { "Basic s3cr3t", false },
                { "Bearer s3cr3", false },
                { "Bearer s3cr3tt", false },
                { "Bearer s3cr3T", false },
                { "Bearer  x s3cr3t", false },
                { "Bearer s3cr3t x", false },
        };
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++)
                if (hp_op_token_matches(tok, strlen(tok), cases[i].header) !=
                    cases[i].ok) {
                        print_error("'%s': expected %s\n",
                                    cases[i].header ? cases[i].header
                                                    : "(none)",
                                    cases[i].ok ? "a match" : "no match");
                        failures++;
                }
        assert_int_equal(failures, 0);
}

static void write_mode(const char *path, const char *text, mode_t mode)
{
        FILE *f = fopen(path, "w");

        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        assert_int_equal(chmod(path, mode), 0);
}

static void test_token_load(void **state)
{
        char dir[] = "/tmp/hp-token-XXXXXX", path[64], err[512];
        char *tok;
        size_t len;

        (void)state;
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/token", dir);
        /* One line, its newline dropped. */
        write_mode(path, "abc-DEF_123\n", 0600);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         0);
        assert_string_equal(tok, "abc-DEF_123");
        assert_int_equal(len, 11);
        free(tok);
        /* 0400 and 0640 are fine: others cannot read, nobody else writes. */
        write_mode(path, "abc", 0640);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         0);
        free(tok);
        /* Readable or writable by others, writable by the group. */
        write_mode(path, "abc", 0604);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         -EPERM);
        assert_null(tok);
        assert_non_null(strstr(err, "(mode 0604, owner uid"));
        assert_non_null(strstr(err, "is readable by others"));
        write_mode(path, "abc", 0660);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         -EPERM);
        assert_non_null(strstr(err, "writable by its group or others"));
        /* Empty, two words, a second line: refused, named. */
        write_mode(path, "\n", 0600);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         -EINVAL);
        assert_non_null(strstr(err, "is empty"));
        write_mode(path, "a b\n", 0600);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         -EINVAL);
        assert_non_null(strstr(err, "byte 1 of the token is 0x20"));
        write_mode(path, "a\nb\n", 0600);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         -EINVAL);
        /* Not a regular file, not there. */
        assert_int_equal(hp_op_token_load(dir, &tok, &len, err, sizeof(err)),
                         -EINVAL);
        assert_non_null(strstr(err, "is not a regular file"));
        assert_int_equal(unlink(path), 0);
        assert_int_equal(hp_op_token_load(path, &tok, &len, err, sizeof(err)),
                         -ENOENT);
        assert_non_null(strstr(err, path));
        assert_int_equal(rmdir(dir), 0);
}

static void test_limit(void **state)
{
        struct hp_op_limit l = { 0 };

        (void)state;
        /* The first is allowed at any time, 0 included. */
        assert_int_equal(hp_op_limit_wait(&l, 0), 0);
        hp_op_limit_note(&l, 0, 1000);
        assert_int_equal(hp_op_limit_wait(&l, 0), 1000);
        assert_int_equal(hp_op_limit_wait(&l, 999), 1);
        assert_int_equal(hp_op_limit_wait(&l, 1000), 0);
        hp_op_limit_note(&l, 5000, 1000);
        assert_int_equal(hp_op_limit_wait(&l, 5500), 500);
        assert_int_equal(hp_op_limit_wait(&l, 7000), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_token_matches),
                cmocka_unit_test(test_token_load),
                cmocka_unit_test(test_limit),
                cmocka_unit_test(test_plr_table),
                cmocka_unit_test(test_plr_transitions_keep_first_order),
                cmocka_unit_test(test_isoformat),
                cmocka_unit_test(test_requests),
                cmocka_unit_test(test_request_echo_capped),
                cmocka_unit_test(test_request_values),
                cmocka_unit_test(test_status_render),
                cmocka_unit_test(test_utf8_repair),
                cmocka_unit_test(test_status_render_repairs_utf8),
                cmocka_unit_test(test_podcfg_apply),
                cmocka_unit_test(test_podcfg_files),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
