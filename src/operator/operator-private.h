/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside src/operator only. */
#ifndef HP_OPERATOR_PRIVATE_H
#define HP_OPERATOR_PRIVATE_H

#include "hyperpod/operator.h"

struct hp_op_driver;

struct hp_operator {
        struct hp_agent *agent; /* borrowed */
        /* The worker socket and checkpoint discovery, handed over at init
         * (borrowed): the operator does not reach for them through the
         * agent. */
        struct hp_ipc_server *ipc;
        struct hp_ckpt *ckpt;
        const struct hp_op_driver *drv; /* the mode: PLR or IPR */
        const struct hp_config *cfg;
        struct hp_httpd httpd;
        struct hp_httpd metrics_httpd; /* --metrics-port: GET /metrics only */
        struct hp_plr plr;
        uv_timer_t kick;   /* acts on the state after a request */
        uv_timer_t retry;  /* listen retries */
        uv_timer_t remind; /* "still waiting for /start" */
        int listen_tries;
        int listen_max_tries;
        uint64_t listen_delay_ms;
        bool listening;
        bool closing;
        char resource_dir[4096];
        char ip_version[256]; /* "" when unknown */
        int assigned_rank;    /* -1 until /start */
        /* The last /start's data, applied when workers start. */
        struct hp_op_request job;
        bool have_job;
        bool can_start;
        bool start_pending;      /* RUNNING, workers not started yet */
        bool next_stage_pending; /* a stage succeeded; start the next */
        bool rules_changed;      /* an /update brought other rules */
        bool log_requests;       /* --server-log-level debug or trace */
        bool observer;           /* self-driven: read-only routes */
        bool httpd_ready;
        bool metrics_httpd_ready;
        bool timers_ready;
        /* The last /stop's graceful flag and timeout: sticky, as in the
         * reference. */
        int stop_graceful;
        int64_t stop_timeout_s;
        /* The last attempt ended in a worker failure with this status. */
        int last_failure_code;
        /* For /metrics. */
        double start_time_s; /* wall clock, when the agent started */
        uint64_t attempts_started;
        uint64_t faults[HP_FAULT_CAUSE_COUNT]; /* times FAULTED, by cause */
        double last_detection_latency_s;       /* -1: none yet */
        char *response; /* the last response body (malloc'd) */
        char *token;    /* --server-token-file's, or NULL */
        size_t token_len;
        uint64_t unauthorized;           /* requests answered 401 */
        struct hp_op_limit stacks_limit; /* POST /debug/stacks */
        char headers[96]; /* extra header lines of a response */
        char *detail_log; /* scratch for logging bad requests */
        /* --inprocess-restart (driver_ipr.c): the worker group as the
         * reference's main loop sees it, the barrier wait, and the flags
         * /start, /update and /stop set. */
        struct hp_op_ipr {
                enum hp_ipr_group group;
                enum hp_ipr_wait wait;
                uint64_t deadline; /* loop ms, 0: none */
                uv_timer_t timer;  /* fires at the deadline */
                bool timer_ready;
                bool plr_armed; /* a full stop is due */
                bool priority;
                bool spare;   /* "True" until a request says */
                bool holding; /* HOLD was logged */
                bool deciding;
                bool verdict; /* a rule verdict since the start */
                char failure[HP_OP_MESSAGE_MAX]; /* the group's, or "" */
                char failure_reason[HP_OP_REASON_MAX];
        } ipr;
};

/* ---- core.c ---- */

/* Moves the state machine and logs it; false (logged) when the table
 * refuses the transition. */
bool hp_op__set_state(struct hp_operator *op, enum hp_op_state to,
                      const char *reason, const char *message);
/* Acts on the current state from the loop, after the response. */
void hp_op__kick(struct hp_operator *op);
/* The FAULTED message for a node fault, whichever driver reports it,
 * naming its source: the NCCL pre-flight check and its figures, or the
 * kernel log's path and the line that matched. */
void hp_op__node_fault_message(const struct hp_operator *op,
                               const char *reason, const char *line,
                               char *msg, size_t len);
/* The FAULTED reason and message for a rule's verdict, and the message
 * for a worker's failure, whichever driver reports them: both end with
 * who went silent, so the operator's /status names the first silent
 * rank as the agent's log does. */
void hp_op__verdict_message(struct hp_agent *a, const struct hp_verdict *v,
                            char *reason, size_t reason_len, char *msg,
                            size_t len);
void hp_op__failure_message(struct hp_agent *a, const struct hp_group *g,
                            char *msg, size_t len);
void hp_op__round_from_job(const struct hp_operator *op,
                           struct hp_rdzv_info *round);
/* The Prometheus text exposition of the agent (malloc'd), or NULL. */
char *hp_op__metrics_render(const struct hp_operator *op, size_t *len);
/* --metrics-port's handler: GET /metrics, nothing else. */
void hp_op__metrics_handle(void *ctx, const struct hp_httpd_request *req,
                           struct hp_httpd_response *res);

/* ---------------------------------------------------------------------
 * The operator's two modes as drivers behind one interface. routes.c
 * validates a request, stores the IP table and calls the driver;
 * operator.c owns the server, the timers and /shutdown and calls the
 * driver's kick while the agent is not shutting down. Each driver keeps
 * its own agent-event table.
 *
 *   driver_plr.c  process-level restart: /start spawns the stages,
 *                 a fault waits for /stop, which stops the workers.
 *   driver_ipr.c  in-process restart (--inprocess-restart): the
 *                 processes wait at a barrier on the worker socket;
 *                 /start sends job_start, a fault sends job_fault.
 */
struct hp_op_driver {
        const char *mode; /* /metrics' mode label */
        /* What the agent reports (worker failure, stage end, verdict, node
         * fault, pre-flight): set on the agent at init. */
        const struct hp_agent_events *events;
        /* After the listener and the events, before the pre-flight check;
         * errors go to errbuf. */
        int (*open)(struct hp_operator *op, char *errbuf, size_t len);
        /* After the pre-flight check started: the first state. */
        void (*ready)(struct hp_operator *op);
        /* POST /start with a validated body (taken on success): 0, or a
         * negative errno with err saying why (answered 500). */
        int (*start)(struct hp_operator *op, struct hp_op_request *body,
                     char *err, size_t len);
        /* POST /update, after the IP table is stored: takes the body. */
        void (*update)(struct hp_operator *op, struct hp_op_request *body);
        /* POST /stop, after its graceful flag and timeout are stored. */
        void (*stop)(struct hp_operator *op,
                     const struct hp_op_request *body);
        /* The driver's keys of /status; *owned is for the caller to
         * cJSON_Delete. */
        void (*status)(const struct hp_operator *op, struct hp_op_status *st,
                       cJSON **owned);
        /* Acts on the state the requests and events left (kick timer),
         * but for SHUTDOWN, which operator.c handles. Idempotent. */
        void (*kick)(struct hp_operator *op);
        /* Releases what open made (timers, the worker socket's hook). */
        void (*close)(struct hp_operator *op);
};

extern const struct hp_op_driver hp_op__driver_plr;
extern const struct hp_op_driver hp_op__driver_ipr;

/* What the routes and the drivers share (core.c). */
/* rankIps and ipVersion to pod_resourceconfig.json when a request carries
 * both; 0, or a negative errno with err saying why. */
int hp_op__store_ip_table(struct hp_operator *op,
                          const struct hp_op_request *req, char *err,
                          size_t len);
/* Takes the request's job data (rendezvous, rules, progress). /start
 * (keep_progress false) assigns the rank, hands the progress to
 * checkpoint discovery and allows a start. */
void hp_op__store_job(struct hp_operator *op, struct hp_op_request *req,
                      bool keep_progress);
/* FAULTED with reason and message, counted for /metrics and logged. */
void hp_op__fault(struct hp_operator *op, const char *reason,
                  const char *message);
/* The wall clock in microseconds since the epoch. */
int64_t hp_op__wall_us(void);

#endif
