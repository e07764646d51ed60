/* SPDX-License-Identifier: Apache-2.0 */
/* The routes of the operator API (docs/operator-api.md, the table of
 * routes). Every handler answers at once; slow work (spawning, stopping)
 * happens in the kick timer after the response is on its way. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

#include "hp-config.h"
#include "operator-private.h"

#define JSON_TYPE "application/json"
#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* The most of a request body or a 422 that goes into one log line. */
#define LOG_ECHO_MAX 2048
/* POST /debug/stacks: at most one report started per this many ms (and
 * one at a time), so that a loop of requests cannot keep the workers'
 * stack handlers busy or fill the disk. */
#define STACKS_INTERVAL_MS 1000

static void respond(struct hp_operator *op, struct hp_httpd_response *res,
                    int status, const char *type, char *body)
{
        free(op->response);
        op->response = body;
        res->status = status;
        res->content_type = type;
        res->body = body;
        res->body_len = body ? strlen(body) : 0;
        res->headers = NULL;
}

/* Adds one header line to the response (after respond()). */
static void add_header(struct hp_operator *op, struct hp_httpd_response *res,
                       const char *name, const char *value)
{
        snprintf(op->headers, sizeof(op->headers), "%s: %s\r\n", name, value);
        res->headers = op->headers;
}

static void respond_static(struct hp_operator *op,
                           struct hp_httpd_response *res, int status,
                           const char *type, const char *body)
{
        respond(op, res, status, type, body ? strdup(body) : NULL);
        if (body != NULL && op->response == NULL)
                respond(op, res, 500, NULL, NULL);
}

static void respond_status(struct hp_operator *op,
                           struct hp_httpd_response *res)
{
        struct hp_op_status st = {
                .plr = &op->plr,
                .ip_version = op->ip_version[0] ? op->ip_version : NULL,
                .agent_version = HP_VERSION,
                .assigned_rank = op->assigned_rank,
        };
        cJSON *progress = hp_ckpt_progress(op->ckpt);
        cJSON *owned = NULL;
        char *body;

        op->drv->status(op, &st, &owned);
        st.progress = progress;
        body = hp_op_status_render(&st);
        cJSON_Delete(progress);
        cJSON_Delete(owned);

        if (body == NULL) {
                respond_static(op, res, 500, JSON_TYPE,
                               "{\"detail\":\"Internal Server Error\"}");
                return;
        }
        /* The reference sends /status without a Content-Type. */
        respond(op, res, 200, NULL, body);
}

static void respond_422(struct hp_operator *op, struct hp_httpd_response *res,
                        const struct hp_httpd_request *req, cJSON *detail)
{
        cJSON *doc = cJSON_CreateObject();
        char *body;

        cJSON_AddItemToObject(doc, "detail", detail);
        body = cJSON_PrintUnformatted(doc);
        cJSON_Delete(doc);
        /* The start of each is enough to see what went wrong. */
        hp_log_error("%s %s from %s: 422 %.*s; body: %.*s", req->method_name,
                     req->path, req->peer, LOG_ECHO_MAX,
                     body ? body : "(out of memory)",
                     (int)(req->body_len > LOG_ECHO_MAX ? LOG_ECHO_MAX
                                                        : req->body_len),
                     req->body ? req->body : "");
        if (body == NULL) {
                respond_static(op, res, 500, JSON_TYPE,
                               "{\"detail\":\"Internal Server Error\"}");
                return;
        }
        respond(op, res, 422, JSON_TYPE, body);
}

static void respond_500(struct hp_operator *op, struct hp_httpd_response *res,
                        const char *why)
{
        cJSON *doc = cJSON_CreateObject();

        hp_log_error("%s", why);
        cJSON_AddStringToObject(doc, "detail", why);
        respond(op, res, 500, JSON_TYPE, cJSON_PrintUnformatted(doc));
        cJSON_Delete(doc);
        if (op->response == NULL)
                respond(op, res, 500, NULL, NULL);
}

static void handle_start(struct hp_operator *op,
                         const struct hp_httpd_request *req,
                         struct hp_httpd_response *res,
                         struct hp_op_request *body)
{
        char err[1024];

        if (op->drv->start(op, body, err, sizeof(err)) < 0) {
                respond_500(op, res, err);
                return;
        }
        respond(op, res, 200, NULL, NULL);
}

static void handle_update(struct hp_operator *op,
                          const struct hp_httpd_request *req,
                          struct hp_httpd_response *res,
                          struct hp_op_request *body)
{
        char err[1024];

        if (hp_op__store_ip_table(op, body, err, sizeof(err)) < 0) {
                respond_500(op, res, err);
                return;
        }
        op->drv->update(op, body);
        respond_status(op, res);
}

static void handle_stop(struct hp_operator *op,
                        const struct hp_httpd_request *req,
                        struct hp_httpd_response *res,
                        struct hp_op_request *body)
{
        /* Stored on every /stop, nulls included, as the reference does. */
        op->stop_graceful = body->is_graceful;
        op->stop_timeout_s = body->timeout_s;
        op->drv->stop(op, body);
        op->can_start = false;
        op->start_pending = false;
        op->next_stage_pending = false;
        respond(op, res, 200, NULL, NULL);
}

static void handle_shutdown(struct hp_operator *op,
                            struct hp_httpd_response *res)
{
        if (hp_op__set_state(op, HP_OP_SHUTDOWN, NULL, NULL))
                hp_op__kick(op);
        respond(op, res, 200, NULL, NULL);
}

static void too_many(struct hp_operator *op, struct hp_httpd_response *res,
                     const char *body, uint64_t wait_ms)
{
        char secs[24];

        respond_static(op, res, 429, JSON_TYPE, body);
        /* Whole seconds, rounded up, at least 1. */
        snprintf(secs, sizeof(secs), "%llu",
                 (unsigned long long)(wait_ms ? (wait_ms + 999) / 1000 : 1));
        add_header(op, res, "Retry-After", secs);
}

/* POST /debug/stacks: the SIGUSR2 report, asked over HTTP. It only reads
 * (/proc, the workers' stack files) and signals nothing but the stack
 * handler, so self-driven modes serve it too. It writes a file, so it is
 * a POST, one report at a time and at most one per STACKS_INTERVAL_MS;
 * the agent keeps the latest few files (forensics.c). */
static void handle_stacks(struct hp_operator *op,
                          struct hp_httpd_response *res)
{
        uint64_t now = uv_now(hp_agent_loop(op->agent));
        uint64_t wait = hp_op_limit_wait(&op->stacks_limit, now);
        char path[PATH_MAX];
        cJSON *doc;
        char *body;
        int r;

        if (wait > 0) {
                too_many(op, res,
                         "{\"detail\":\"at most one stacks report "
                         "per second; ask again after "
                         "Retry-After\"}",
                         wait);
                return;
        }
        r = hp_agent_stacks_report(op->agent, path, sizeof(path));
        if (r == -EBUSY) {
                too_many(op, res,
                         "{\"detail\":\"a hang report is being "
                         "collected; ask again once it is "
                         "written\"}",
                         0);
                return;
        }
        if (r < 0) {
                respond_static(
                        op, res, 409, JSON_TYPE,
                        r == -ENOTSUP ? "{\"detail\":\"--hang-dump off: no "
                                        "reports\"}"
                        : r == -ENOENT
                                ? "{\"detail\":\"no log files (--log-dir "
                                  "/dev/null): no report file\"}"
                        : r == -ESRCH ? "{\"detail\":\"no worker group is "
                                        "running\"}"
                                      : "{\"detail\":\"the report could not "
                                        "start\"}");
                return;
        }
        hp_op_limit_note(&op->stacks_limit, now, STACKS_INTERVAL_MS);
        hp_log_info("POST /debug/stacks: stacks report to %s", path);
        doc = cJSON_CreateObject();
        if (doc == NULL ||
            cJSON_AddStringToObject(doc, "report", path) == NULL ||
            (body = cJSON_PrintUnformatted(doc)) == NULL) {
                cJSON_Delete(doc);
                respond_500(op, res, "out of memory");
                return;
        }
        cJSON_Delete(doc);
        respond(op, res, 202, JSON_TYPE, body);
}

/* The routes taking a validated body: parsed here, handled by fn. */
typedef void body_fn(struct hp_operator *op,
                     const struct hp_httpd_request *req,
                     struct hp_httpd_response *res,
                     struct hp_op_request *body);

static void with_body(struct hp_operator *op,
                      const struct hp_httpd_request *req,
                      struct hp_httpd_response *res, enum hp_op_route as,
                      body_fn *fn)
{
        struct hp_op_request body;
        cJSON *detail;
        int r = hp_op_request_parse(as, req->content_type, req->body,
                                    req->body_len, req->has_body, &body,
                                    &detail);

        if (r == -EINVAL) {
                respond_422(op, res, req, detail);
                return;
        }
        if (r < 0) {
                respond_500(op, res, "out of memory");
                return;
        }
        fn(op, req, res, &body);
        hp_op_request_free(&body);
}

static void route_start(struct hp_operator *op,
                        const struct hp_httpd_request *req,
                        struct hp_httpd_response *res)
{
        with_body(op, req, res, HP_OP_START, handle_start);
}

static void route_update(struct hp_operator *op,
                         const struct hp_httpd_request *req,
                         struct hp_httpd_response *res)
{
        with_body(op, req, res, HP_OP_UPDATE, handle_update);
}

static void route_stop(struct hp_operator *op,
                       const struct hp_httpd_request *req,
                       struct hp_httpd_response *res)
{
        with_body(op, req, res, HP_OP_STOP, handle_stop);
}

static void route_status(struct hp_operator *op,
                         const struct hp_httpd_request *req,
                         struct hp_httpd_response *res)
{
        respond_status(op, res);
}

static void route_shutdown(struct hp_operator *op,
                           const struct hp_httpd_request *req,
                           struct hp_httpd_response *res)
{
        handle_shutdown(op, res);
}

static void route_metrics(struct hp_operator *op,
                          const struct hp_httpd_request *req,
                          struct hp_httpd_response *res)
{
        size_t len;
        char *text = hp_op__metrics_render(op, &len);

        if (text == NULL) {
                respond_500(op, res, "out of memory");
                return;
        }
        respond(op, res, 200, METRICS_TYPE, text);
}

static void route_healthz(struct hp_operator *op,
                          const struct hp_httpd_request *req,
                          struct hp_httpd_response *res)
{
        /* Answered from the loop thread: a reply proves the loop is not
         * stuck. */
        respond_static(op, res, 200, "text/plain; charset=utf-8", "ok\n");
}

static void route_stacks(struct hp_operator *op,
                         const struct hp_httpd_request *req,
                         struct hp_httpd_response *res)
{
        handle_stacks(op, res);
}

typedef void route_fn(struct hp_operator *op,
                      const struct hp_httpd_request *req,
                      struct hp_httpd_response *res);

/* The API: a new endpoint is one row here and its handler. A control
 * route is refused (409) in self-driven mode, where the agent runs the
 * job itself. */
static const struct route {
        enum http_method method;
        const char *path;
        route_fn *handle;
        bool control;
} routes[] = {
        { HTTP_POST, "/start", route_start, true },
        { HTTP_POST, "/update", route_update, true },
        { HTTP_POST, "/stop", route_stop, true },
        { HTTP_GET, "/status", route_status, false },
        { HTTP_POST, "/shutdown", route_shutdown, true },
        { HTTP_GET, "/metrics", route_metrics, false },
        { HTTP_GET, "/healthz", route_healthz, false },
        { HTTP_POST, "/debug/stacks", route_stacks, false },
};

/* "GET, POST": the methods path takes, for a 405's Allow. */
static void allowed_methods(const char *path, char *buf, size_t len)
{
        size_t used = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < HP_ARRAY_SIZE(routes) && used < len; i++)
                if (strcmp(routes[i].path, path) == 0)
                        used += (size_t)snprintf(buf + used, len - used,
                                                 "%s%s", used ? ", " : "",
                                                 http_method_str(
                                                         routes[i].method));
}

static void route_request(struct hp_operator *op,
                          const struct hp_httpd_request *req,
                          struct hp_httpd_response *res)
{
        const struct route *route = NULL;
        bool path_known = false;

        for (size_t i = 0; i < HP_ARRAY_SIZE(routes); i++) {
                if (strcmp(routes[i].path, req->path) != 0)
                        continue;
                path_known = true;
                if (routes[i].method == req->method)
                        route = &routes[i];
        }
        if (route == NULL) {
                char allow[48];

                respond_static(op, res, path_known ? 405 : 404, JSON_TYPE,
                               path_known ? "{\"detail\":\"Method Not "
                                            "Allowed\"}"
                                          : "{\"detail\":\"Not Found\"}");
                if (path_known) {
                        allowed_methods(req->path, allow, sizeof(allow));
                        add_header(op, res, "Allow", allow);
                }
                return;
        }
        if (op->observer && route->control) {
                respond_static(op, res, 409, JSON_TYPE,
                               "{\"detail\":\"self-driven mode (--standalone "
                               "or --rdzv-backend static, slurm or "
                               "resource-config): the agent runs the job "
                               "itself, so it takes no /start, /update, "
                               "/stop or /shutdown; stop it with "
                               "SIGTERM\"}");
                return;
        }
        route->handle(op, req, res);
}

/* With --server-token-file, every request but /healthz (the kubelet's
 * probes carry no secret) needs the token: 401 otherwise, logged at 1,
 * 2, 4, 8... so that a flood cannot fill the log. */
static bool authorized(struct hp_operator *op,
                       const struct hp_httpd_request *req,
                       struct hp_httpd_response *res)
{
        if (op->token == NULL || strcmp(req->path, "/healthz") == 0 ||
            hp_op_token_matches(op->token, op->token_len, req->authorization))
                return true;
        op->unauthorized++;
        if ((op->unauthorized & (op->unauthorized - 1)) == 0)
                hp_log_warn("%s %s from %s: 401, %s (%llu such request%s so "
                            "far)",
                            req->method_name, req->path, req->peer,
                            req->authorization ? "a wrong token"
                                               : "no Authorization header",
                            (unsigned long long)op->unauthorized,
                            op->unauthorized == 1 ? "" : "s");
        respond_static(op, res, 401, JSON_TYPE,
                       "{\"detail\":\"Not authenticated: this agent needs "
                       "'Authorization: Bearer <token>' "
                       "(--server-token-file)\"}");
        add_header(op, res, "WWW-Authenticate", "Bearer");
        return false;
}

void hp_op__metrics_handle(void *ctx, const struct hp_httpd_request *req,
                           struct hp_httpd_response *res)
{
        struct hp_operator *op = ctx;
        size_t len;
        char *text;

        if (!authorized(op, req, res)) {
                /* answered 401 */
        } else if (strcmp(req->path, "/metrics") != 0) {
                respond_static(op, res, 404, JSON_TYPE,
                               "{\"detail\":\"Not Found: --metrics-port "
                               "serves GET /metrics only\"}");
        } else if (req->method != HTTP_GET) {
                respond_static(op, res, 405, JSON_TYPE,
                               "{\"detail\":\"Method Not Allowed\"}");
                add_header(op, res, "Allow", "GET");
        } else if ((text = hp_op__metrics_render(op, &len)) == NULL) {
                respond_500(op, res, "out of memory");
        } else {
                respond(op, res, 200, METRICS_TYPE, text);
        }
        if (op->log_requests)
                hp_log_info("%s %s from %s (--metrics-port): %d",
                            req->method_name, req->path, req->peer,
                            res->status);
}

void hp_operator_handle(void *ctx, const struct hp_httpd_request *req,
                        struct hp_httpd_response *res)
{
        struct hp_operator *op = ctx;

        if (authorized(op, req, res))
                route_request(op, req, res);
        /* The access log of --server-log-level debug or trace; the
         * operator polls /status often, so it is off by default. */
        if (op->log_requests)
                hp_log_info("%s %s from %s: %d", req->method_name, req->path,
                            req->peer, res->status);
}
