/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: the HyperPod operator's control API on :8080.
 *
 * The HyperPod training operator drives one agent per pod over HTTP:
 *
 *   POST /start {rank, nnodes, faultCount, master_addr, master_port, ...}
 *        → RUNNING: pre-train, train, post-train with that rendezvous
 *   GET  /status → {"status":"running","transitions":{...},...}
 *   POST /stop  → STOPPING, the workers are stopped, then READY
 *   POST /update, POST /shutdown, and beyond the reference GET /metrics
 *   (Prometheus) and GET /healthz.
 *
 * The pure parts (state machine, request validation, /status body, the
 * pod_resourceconfig.json update) are exposed here for table tests; the
 * glue (struct hp_operator) owns the HTTP server and drives the agent.
 */
#ifndef HYPERPOD_OPERATOR_H
#define HYPERPOD_OPERATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "hyperpod/httpd.h"
#include "hyperpod/logmon.h"
#include "hyperpod/supervise.h"

/* ---------------------------------------------------------------------
 * The agent state machine (docs/operator-api.md, "States"; in-process
 * restart's table in docs/inprocess-restart-and-checkpoints.md)
 */

enum hp_op_state {
        HP_OP_INIT = 0,
        HP_OP_READY,
        HP_OP_RUNNING,
        HP_OP_COMPLETED,
        HP_OP_FAULTED,
        HP_OP_STOPPING,
        HP_OP_SHUTDOWN,
        HP_OP_STATE_COUNT
};

/* "READY" (the transitions keys) and "ready" (the status value). */
const char *hp_op_state_name(enum hp_op_state state);
const char *hp_op_state_lower(enum hp_op_state state);

#define HP_OP_REASON_MAX 256
#define HP_OP_MESSAGE_MAX 4096

struct hp_plr {
        enum hp_op_state state;
        /* When each state was last entered, wall clock in microseconds
         * since the epoch; -1 for never. */
        int64_t entered_us[HP_OP_STATE_COUNT];
        /* The states in the order they were first entered: the order of
         * the keys of "transitions". */
        uint8_t first_order[HP_OP_STATE_COUNT];
        size_t first_count;
        uint64_t entries[HP_OP_STATE_COUNT]; /* for /metrics */
        char reason[HP_OP_REASON_MAX];
        char message[HP_OP_MESSAGE_MAX];
        bool inprocess; /* the IPR table rules (set after hp_plr_init) */
};

/* INIT at now_us. */
void hp_plr_init(struct hp_plr *plr, int64_t now_us);
/* Whether the table allows from → to. Re-entering a state is refused. */
bool hp_plr_allowed(enum hp_op_state from, enum hp_op_state to);
/* The same for the in-process-restart agent's table. */
bool hp_ipr_allowed(enum hp_op_state from, enum hp_op_state to);
/* Moves to `to` with a reason and message (NULL: none), or returns -EPERM
 * and changes nothing when the table forbids it. */
int hp_plr_transition(struct hp_plr *plr, enum hp_op_state to, int64_t now_us,
                      const char *reason, const char *message);

/* Python's datetime.isoformat() of a UTC time, as the reference's
 * transitions carry it: 2024-11-20T23:37:17.855065+00:00, with the
 * microseconds left out when they are zero. */
int hp_isoformat_utc(int64_t us, char *buf, size_t len);

/* ---------------------------------------------------------------------
 * In-process restart's main loop
 * (docs/inprocess-restart-and-checkpoints.md), as a pure decision: given
 * what the agent, its workers and the worker socket say, and the time, what
 * to do next. The driver (driver_ipr.c) does it, updates the view and asks
 * again until the answer is HP_IPR_NONE.
 */

/* The worker group as the reference's main loop sees it. */
enum hp_ipr_group {
        HP_IPR_GROUP_INIT = 0,  /* nothing started since the last full stop */
        HP_IPR_GROUP_HEALTHY,   /* a stage runs */
        HP_IPR_GROUP_UNHEALTHY, /* a stage runs, a log rule gave a verdict */
        HP_IPR_GROUP_FAILED, /* a process failed, or a stage did not start */
        HP_IPR_GROUP_SUCCEEDED, /* the stage's processes exited 0 */
        HP_IPR_GROUP_STOPPING,  /* a full stop waits for the processes */
        HP_IPR_GROUP_COUNT
};

/* What the agent waits for at the barrier. */
enum hp_ipr_wait {
        HP_IPR_WAIT_NONE = 0,
        HP_IPR_WAIT_INIT,  /* training just started: READY once all are in */
        HP_IPR_WAIT_PAUSE, /* /stop: job_fault sent, READY once all are in */
};

struct hp_ipr_view {
        enum hp_op_state state;
        enum hp_ipr_group group;
        enum hp_stage stage; /* of the last group started */
        bool has_post_train; /* --post-train-script */
        enum hp_ipr_wait wait;
        uint64_t wait_deadline; /* loop ms; 0: no limit */
        bool all_at_barrier;
        bool any_failed;          /* a rank sent job_fault */
        bool local_plr_requested; /* ... asking local_process_level_restart */
        bool clients_missing;     /* a local rank has no client */
        bool can_start;           /* a /start since the last /stop */
        bool plr_armed;           /* a local process-level restart is due */
        bool ip_table_complete;   /* no null in pod_resourceconfig.json */
};

enum hp_ipr_action {
        HP_IPR_NONE = 0,
        HP_IPR_FULL_STOP,      /* stop every process, INIT, pre-train again */
        HP_IPR_START_FIRST,    /* the first stage (pre-train or training) */
        HP_IPR_START_TRAINING, /* after pre-train: training, rules suspended,
                                 * wait for the barrier */
        HP_IPR_READY,          /* every rank is at the barrier */
        HP_IPR_SEND_START,     /* job_start to every rank, rules resumed */
        HP_IPR_HOLD,           /* job_start waits: the IP table has a null */
        HP_IPR_FAULT,          /* → FAULTED (first failed rank's reason) */
        HP_IPR_PAUSE,          /* job_fault to every rank, wait for them */
        HP_IPR_POST_TRAIN,     /* training ended: post-train */
        HP_IPR_COMPLETE,       /* → COMPLETED */
        HP_IPR_ACTION_COUNT
};

struct hp_ipr_decision {
        enum hp_ipr_action action;
        bool arm_local_plr; /* with HP_IPR_FAULT: a full stop follows */
        const char *why;    /* one sentence for the log */
};

const char *hp_ipr_action_name(enum hp_ipr_action action);
const char *hp_ipr_group_name(enum hp_ipr_group group);
struct hp_ipr_decision hp_ipr_decide(const struct hp_ipr_view *v,
                                     uint64_t now_ms);

/* ---------------------------------------------------------------------
 * Requests and their validation errors (docs/operator-api.md,
 * "Validation")
 */

enum hp_op_route {
        HP_OP_START = 0,
        HP_OP_UPDATE,
        HP_OP_STOP,
};

/* The absurdity limit the reference enforces on rankIps ranks (a Python
 * list cannot be indexed that far). */
#define HP_OP_RANK_IPS_MAX 100000
/* Upper bound on nnodes: far above any cluster, low enough that the IP
 * list stays small. */
#define HP_OP_NNODES_MAX 100000

/* A 422 answers with what was wrong, not the request again: an "input"
 * that would print over HP_OP_ECHO_MAX bytes is replaced by a string
 * saying what it was, and past HP_OP_ERRORS_MAX errors one entry counts
 * the rest. */
#define HP_OP_ECHO_MAX 1024
#define HP_OP_ERRORS_MAX 64

/* A validated /start, /update or /stop body. cJSON members are owned. */
struct hp_op_request {
        /* StartRequest and UpdateRequest */
        int rank;
        int nnodes;
        int fault_count;
        char master_addr[256];
        int master_port;
        cJSON *rules; /* log_monitoring_configuration, or NULL */
        struct logmon_ruleset *ruleset; /* compiled from rules, or NULL */
        char *ip_version;               /* NULL when absent or null */
        cJSON *rank_ips; /* [{"rank":int,"ip":str|int}], or NULL */
        bool spare;
        cJSON *worker_data; /* any JSON, or NULL when absent or null */
        cJSON *progress;    /* StartRequest only; NULL when absent */
        /* StopRequest */
        char *restart_mode; /* "ipr" when absent or null */
        int is_graceful;    /* -1 null, 0 false, 1 true */
        int64_t timeout_s;  /* -1 null */
};

void hp_op_request_free(struct hp_op_request *req);

/*
 * Validates a request body the way the reference's FastAPI/pydantic models
 * do: JSON when the content type is absent, application/json or
 * application/<x>+json; numeric strings accepted for ints; unknown fields
 * ignored. On success returns 0 and fills out (free it with
 * hp_op_request_free). On failure returns -EINVAL and *detail receives the
 * 422 body's "detail" array (one entry per bad field); the caller owns it.
 * Beyond the reference, values that cannot make a job (a negative rank, a
 * rank not below nnodes, a port outside 1..65535, rules that do not
 * compile) are refused here, so nothing changes on a bad request.
 */
int hp_op_request_parse(enum hp_op_route route, const char *content_type,
                        const char *body, size_t body_len, bool has_body,
                        struct hp_op_request *out, cJSON **detail);

/* ---------------------------------------------------------------------
 * pod_resourceconfig.json (docs/operator-api.md)
 */

#define HP_OP_PODCFG_NAME "pod_resourceconfig.json"

/*
 * Applies a request's rankIps to the file's document (ownership of doc is
 * taken; NULL: no file yet) and returns the new document in *out: the IP
 * list padded or cut to nnodes unless rankIps is empty, listed ranks below
 * nnodes replaced, current_pod_ip and ips_timestamp set, other keys kept.
 */
int hp_podcfg_apply(cJSON *doc, int rank, int nnodes, const cJSON *rank_ips,
                    const char *ip_version, cJSON **out);
/* Reads dir/pod_resourceconfig.json: *out is NULL when there is none. A
 * file that is not a JSON object is an error (errbuf says why). */
int hp_podcfg_read(const char *dir, cJSON **out, char *errbuf, size_t len);
/* Writes doc to dir/pod_resourceconfig.json through a .tmp file and a
 * rename, so a reader never sees half a file. */
int hp_podcfg_write(const char *dir, const cJSON *doc, char *errbuf,
                    size_t len);

/* ---------------------------------------------------------------------
 * /status (docs/operator-api.md, GET /status)
 */

struct hp_op_status {
        const struct hp_plr *plr;
        const char *ip_version; /* NULL: absent */
        const cJSON *progress;  /* NULL: absent; borrowed */
        const char *agent_version;
        int assigned_rank; /* -1: absent */
        bool spare;
        /* The in-process-restart agent's keys (inprocess true): */
        bool inprocess;
        const char *restart_mode; /* NULL: in_process_restart */
        const cJSON *worker_data; /* NULL: absent; borrowed */
        const cJSON *rank_labels; /* NULL: {}; borrowed */
        bool priority;            /* "priority":"True", else absent */
};

/* The compact /status body, keys in the reference's order. Returns a
 * malloc'd string or NULL (ENOMEM). */
char *hp_op_status_render(const struct hp_op_status *st);

/* ---- Who may call, and how often (auth.c) ---- */

/* The most a --server-token-file may hold. */
#define HP_OP_TOKEN_MAX 4096

/* --server-token-file: reads the token from path, which must be a
 * regular file of at most HP_OP_TOKEN_MAX bytes, owned by this user or
 * root, neither readable nor writable by others nor writable by its
 * group, holding one line of visible ASCII (a final newline is dropped).
 * *out (malloc'd, NUL-terminated) and *len on success; otherwise a
 * negative errno (-EPERM for the owner or the mode) and the reason, naming
 * the path, in errbuf. */
int hp_op_token_load(const char *path, char **out, size_t *len, char *errbuf,
                     size_t errlen);
/* Whether an Authorization value (NULL: none) is "Bearer <token>" (the
 * scheme in any case, blanks around the token ignored), compared in a
 * time that does not depend on where a wrong one differs. */
bool hp_op_token_matches(const char *token, size_t len,
                         const char *authorization);

/* At most one thing per interval (POST /debug/stacks). Pure: the caller
 * passes the loop's time. Zeroed: nothing done yet. */
struct hp_op_limit {
        bool used;
        uint64_t next_ms; /* loop ms from which the next is allowed */
};

/* 0 when allowed at now_ms, else how many ms are left to wait. */
uint64_t hp_op_limit_wait(const struct hp_op_limit *l, uint64_t now_ms);
/* It was done at now_ms: the next waits interval_ms. */
void hp_op_limit_note(struct hp_op_limit *l, uint64_t now_ms,
                      uint64_t interval_ms);

/* ---------------------------------------------------------------------
 * The control server
 */

/* The server's state is private to src/operator. The caller allocates
 * it with hp_operator_new, as it does the agent, and frees it with
 * hp_operator_free once hp_operator_close's handles are closed (after
 * the loop ran). */
struct hp_operator;

struct hp_operator *hp_operator_new(void);
void hp_operator_free(struct hp_operator *op);

/*
 * Creates the resource config directory, reads the saved ipversion, goes
 * INIT → READY and starts listening on --server-host:--server-port
 * (retrying while the port is in use, as the reference does:
 * HYPERPOD_ELASTICAGENT_SERVER_MAX_RETRY attempts,
 * HYPERPOD_ELASTICAGENT_SERVER_DELAY seconds apart). Errors go to errbuf.
 */
int hp_operator_init(struct hp_operator *op, struct hp_agent *agent,
                     struct hp_ipc_server *ipc, struct hp_ckpt *ckpt,
                     const struct hp_config *cfg, char *errbuf, size_t len);
/* Self-driven mode with --server-port: serves /status, /metrics and
 * /healthz on --server-host:--server-port, and answers the control routes
 * 409; the agent runs itself. With --metrics-port, GET /metrics on that
 * port as well (or alone, without --server-port). Errors go to errbuf. */
int hp_operator_observe(struct hp_operator *op, struct hp_agent *agent,
                        struct hp_ipc_server *ipc, struct hp_ckpt *ckpt,
                        const struct hp_config *cfg, char *errbuf,
                        size_t len);
/* Runs the loop until /shutdown or a signal ends the agent; returns the
 * exit status. */
int hp_operator_run(struct hp_operator *op);
/* Closes the server and the timers (the loop must then run to finish). */
void hp_operator_close(struct hp_operator *op);

/* The HTTP handler (exposed for tests that drive it without a socket). */
void hp_operator_handle(void *ctx, const struct hp_httpd_request *req,
                        struct hp_httpd_response *res);

#endif
