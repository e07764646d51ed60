/* SPDX-License-Identifier: Apache-2.0 */
/* The operator's control API: its life from init to close
 * (docs/operator-api.md; docs/multi-node.md, "The backends").
 *
 * Init opens the resource config directory, the HTTP listeners (routes.c
 * answers) and the timers, picks the driver of the mode (driver_plr.c or
 * driver_ipr.c), hands it the agent's events and lets it take the first
 * state. Requests only record what the operator asked and move the state
 * machine; the `kick` timer (core.c) then has the driver act on the new
 * state from the loop, so every response is written before anything slow
 * happens.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

#include "hp-config.h"
#include "operator-private.h"

/* ---- Startup ---- */

static int env_int(const char *name, int def, int min, int max, int *out,
                   char *errbuf, size_t len)
{
        const char *v = getenv(name);

        *out = def;
        if (v == NULL || *v == '\0')
                return 0;
        if (hp_parse_int(v, min, max, out) < 0) {
                snprintf(errbuf, len,
                         "%s='%s' is not a whole number from %d to %d", name,
                         v, min, max);
                return HP_ECONFIG;
        }
        return 0;
}

/* The resource config directory is made at start, and an agent that
 * cannot make it does not start, as the reference's: a training script
 * that reads pod_resourceconfig.json finds its directory, and a bad path
 * is told at once rather than at the first /start. An agent restarted on
 * the same file system reports the saved IP table version at once. */
static int open_resource_dir(struct hp_operator *op, char *errbuf, size_t len)
{
        const struct hp_rdzv_options *opt = hp_agent_rdzv_options(op->agent);
        char err[512];
        cJSON *doc = NULL;
        const cJSON *ts;
        int r;

        snprintf(op->resource_dir, sizeof(op->resource_dir), "%s",
                 opt->resource_config_dir);
        r = hp_mkdir_p(op->resource_dir, 0755);
        if (r < 0) {
                snprintf(errbuf, len,
                         "cannot create the resource config directory '%s' "
                         "(--rdzv-conf resource_config_dir=DIR): %s",
                         op->resource_dir, strerror(-r));
                return r;
        }
        if (hp_podcfg_read(op->resource_dir, &doc, err, sizeof(err)) < 0) {
                hp_log_warn("ignoring the saved IP table: %s", err);
                return 0;
        }
        ts = cJSON_GetObjectItemCaseSensitive(doc, "ips_timestamp");
        if (cJSON_IsString(ts))
                snprintf(op->ip_version, sizeof(op->ip_version), "%s",
                         ts->valuestring);
        cJSON_Delete(doc);
        return 0;
}

static void retry_cb(uv_timer_t *timer);

static int try_listen(struct hp_operator *op, char *errbuf, size_t len)
{
        const char *host = op->cfg->server_host;
        bool v6 = strchr(host, ':') != NULL;
        int r;

        op->listen_tries++;
        r = hp_httpd_listen(&op->httpd, host, op->cfg->server_port, errbuf,
                            len);
        if (r == 0) {
                op->listening = true;
                hp_log_info("%s listening on http://%s%s%s:%d%s",
                            op->observer ? "read-only API (/status, "
                                           "/metrics, /healthz)"
                                         : "operator API",
                            v6 ? "[" : "", host, v6 ? "]" : "",
                            hp_httpd_port(&op->httpd),
                            op->token ? ", a token required but for "
                                        "/healthz (--server-token-file)"
                                      : "");
        }
        return r;
}

static void retry_cb(uv_timer_t *timer)
{
        struct hp_operator *op = hp_container_of(timer, struct hp_operator,
                                                 retry);
        char err[512];
        int r = try_listen(op, err, sizeof(err));

        if (r == 0)
                return;
        if (r == -EADDRINUSE && op->listen_tries < op->listen_max_tries) {
                hp_log_warn("%s; retrying in %.3g s (attempt %d of %d)", err,
                            (double)op->listen_delay_ms / 1000.0,
                            op->listen_tries + 1, op->listen_max_tries);
                uv_timer_start(&op->retry, retry_cb, op->listen_delay_ms, 0);
                return;
        }
        hp_log_error("%s (after %d attempts)", err, op->listen_tries);
        hp_agent_finish(op->agent, 2);
}

/* --metrics-port: GET /metrics alone, on --server-host, so that a
 * network policy can let Prometheus reach it and nothing else. No retry:
 * a port that cannot be had is an error before any worker starts. */
static int start_metrics_listener(struct hp_operator *op, char *errbuf,
                                  size_t len)
{
        const char *host = op->cfg->server_host;
        bool v6 = strchr(host, ':') != NULL;
        struct hp_httpd_limits limits;
        char err[512];
        int r;

        if (!op->cfg->metrics_port_given)
                return 0;
        hp_httpd_limits_default(&limits);
        r = hp_httpd_init(&op->metrics_httpd, hp_agent_loop(op->agent),
                          &limits, hp_op__metrics_handle, op);
        if (r < 0) {
                snprintf(errbuf, len, "cannot start the metrics server: %s",
                         hp_strerror(r));
                return r;
        }
        op->metrics_httpd_ready = true;
        r = hp_httpd_listen(&op->metrics_httpd, host, op->cfg->metrics_port,
                            err, sizeof(err));
        if (r < 0) {
                snprintf(errbuf, len, "--metrics-port %d: %s",
                         op->cfg->metrics_port, err);
                return r;
        }
        hp_log_info("metrics (GET /metrics only) listening on "
                    "http://%s%s%s:%d%s",
                    v6 ? "[" : "", host, v6 ? "]" : "",
                    hp_httpd_port(&op->metrics_httpd),
                    op->token ? ", a token required (--server-token-file)"
                              : "");
        return 0;
}

/* What both ways of serving start from: nothing stopping, no fault yet. */
static void init_fields(struct hp_operator *op, struct hp_agent *agent,
                        struct hp_ipc_server *ipc, struct hp_ckpt *ckpt,
                        const struct hp_config *cfg, int64_t now)
{
        memset(op, 0, sizeof(*op));
        op->agent = agent;
        op->ipc = ipc;
        op->ckpt = ckpt;
        /* The one place the mode is chosen (the observer is never
         * --inprocess-restart: the config refuses it). */
        op->drv = cfg->inprocess_restart ? &hp_op__driver_ipr
                                         : &hp_op__driver_plr;
        op->cfg = cfg;
        op->stop_graceful = -1;
        op->stop_timeout_s = -1;
        op->last_detection_latency_s = -1;
        op->start_time_s = (double)now / 1e6;
        op->log_requests = strcmp(cfg->server_log_level, "debug") == 0 ||
                           strcmp(cfg->server_log_level, "trace") == 0;
        hp_plr_init(&op->plr, now);
}

/* The per-rank stream totals, the HTTP server and the timers, not yet
 * listening. */
static int init_server(struct hp_operator *op, char *errbuf, size_t len)
{
        struct hp_httpd_limits limits;
        int r;

        if (op->cfg->server_token_file != NULL) {
                r = hp_op_token_load(op->cfg->server_token_file, &op->token,
                                     &op->token_len, errbuf, len);
                if (r < 0)
                        return r;
        }

        hp_httpd_limits_default(&limits);
        r = hp_httpd_init(&op->httpd, hp_agent_loop(op->agent), &limits,
                          hp_operator_handle, op);
        if (r < 0) {
                snprintf(errbuf, len, "cannot start the HTTP server: %s",
                         hp_strerror(r));
                return r;
        }
        op->httpd_ready = true;
        uv_timer_init(hp_agent_loop(op->agent), &op->kick);
        uv_timer_init(hp_agent_loop(op->agent), &op->retry);
        uv_timer_init(hp_agent_loop(op->agent), &op->remind);
        op->timers_ready = true;
        return 0;
}

/* Self-driven mode with --server-port: the read-only routes for whoever
 * watches the job (Prometheus, a liveness probe). Nothing drives the
 * state machine, which says RUNNING for as long as the agent runs; the
 * node rank is the assigned rank. A port that cannot be had is an error
 * before any worker starts, with no retry. */
int hp_operator_observe(struct hp_operator *op, struct hp_agent *agent,
                        struct hp_ipc_server *ipc, struct hp_ckpt *ckpt,
                        const struct hp_config *cfg, char *errbuf, size_t len)
{
        int64_t now = hp_op__wall_us();
        int r;

        init_fields(op, agent, ipc, ckpt, cfg, now);
        op->observer = true;
        op->assigned_rank = hp_agent_round(agent)->node_rank;
        hp_plr_transition(&op->plr, HP_OP_READY, now, NULL, NULL);
        hp_plr_transition(&op->plr, HP_OP_RUNNING, now, NULL, NULL);
        r = init_server(op, errbuf, len);
        if (r < 0)
                return r;
        r = start_metrics_listener(op, errbuf, len);
        if (r < 0 || !cfg->server_port_given)
                return r;
        return try_listen(op, errbuf, len);
}

struct hp_operator *hp_operator_new(void)
{
        return calloc(1, sizeof(struct hp_operator));
}

void hp_operator_free(struct hp_operator *op)
{
        free(op);
}

int hp_operator_init(struct hp_operator *op, struct hp_agent *agent,
                     struct hp_ipc_server *ipc, struct hp_ckpt *ckpt,
                     const struct hp_config *cfg, char *errbuf, size_t len)
{
        const char *delay;
        int r;

        init_fields(op, agent, ipc, ckpt, cfg, hp_op__wall_us());
        op->assigned_rank = -1;

        r = env_int("HYPERPOD_ELASTICAGENT_SERVER_MAX_RETRY", 5, 1, 1000,
                    &op->listen_max_tries, errbuf, len);
        if (r < 0)
                return r;
        delay = getenv("HYPERPOD_ELASTICAGENT_SERVER_DELAY");
        op->listen_delay_ms = 5000;
        if (delay != NULL && *delay != '\0' &&
            hp_parse_seconds_ms(delay, &op->listen_delay_ms) < 0) {
                snprintf(errbuf, len,
                         "HYPERPOD_ELASTICAGENT_SERVER_DELAY='%s' is not a "
                         "number of seconds",
                         delay);
                return HP_ECONFIG;
        }
        r = open_resource_dir(op, errbuf, len);
        if (r < 0)
                return r;
        r = init_server(op, errbuf, len);
        if (r < 0)
                return r;
        r = start_metrics_listener(op, errbuf, len);
        if (r < 0)
                return r;

        r = try_listen(op, errbuf, len);
        if (r == -EADDRINUSE && op->listen_max_tries > 1) {
                hp_log_warn("%s; retrying in %.3g s (attempt 2 of %d)",
                            errbuf, (double)op->listen_delay_ms / 1000.0,
                            op->listen_max_tries);
                uv_timer_start(&op->retry, retry_cb, op->listen_delay_ms, 0);
        } else if (r < 0) {
                return r;
        }

        hp_agent_set_events(agent, op->drv->events, op);
        r = op->drv->open(op, errbuf, len);
        if (r < 0)
                return r;
        if (cfg->preflight_nccl) {
                char why[1024];
                r = hp_agent_preflight_start(agent, why, sizeof(why));
                if (r < 0) {
                        snprintf(errbuf, len, "--preflight nccl: %s", why);
                        return r;
                }
        }
        op->drv->ready(op);
        return 0;
}

int hp_operator_run(struct hp_operator *op)
{
        struct hp_agent *a = op->agent;

        uv_run(hp_agent_loop(a), UV_RUN_DEFAULT);
        return hp_agent_exit_code(a);
}

void hp_operator_close(struct hp_operator *op)
{
        op->closing = true;
        if (op->drv != NULL)
                op->drv->close(op);
        if (op->timers_ready) {
                uv_close((uv_handle_t *)&op->kick, NULL);
                uv_close((uv_handle_t *)&op->retry, NULL);
                uv_close((uv_handle_t *)&op->remind, NULL);
                op->timers_ready = false;
        }
        if (op->httpd_ready) {
                hp_httpd_close(&op->httpd, NULL);
                op->httpd_ready = false;
        }
        if (op->metrics_httpd_ready) {
                hp_httpd_close(&op->metrics_httpd, NULL);
                op->metrics_httpd_ready = false;
        }
        hp_agent_set_events(op->agent, NULL, NULL);
        hp_op_request_free(&op->job);
        free(op->response);
        op->response = NULL;
        if (op->token != NULL) {
                explicit_bzero(op->token, op->token_len);
                free(op->token);
                op->token = NULL;
        }
}
