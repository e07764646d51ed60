/* SPDX-License-Identifier: Apache-2.0 */
/* What the routes and both drivers share: the state machine in motion
 * (each move logged), the kick timer that acts on it from the loop, the
 * operator's job data (rendezvous, rules, progress, the IP table on
 * disk) and the FAULTED messages. The kick calls the driver through its
 * table, so this file calls no other file of the module but the pure
 * ones (plr.c, podcfg.c, request.c). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

#include "hp-config.h"
#include "operator-private.h"

int64_t hp_op__wall_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const char *state_sentence(enum hp_op_state s)
{
        switch (s) {
        case HP_OP_READY:
                return "waiting for /start";
        case HP_OP_RUNNING:
                return "running the stages";
        case HP_OP_COMPLETED:
                return "every stage succeeded; waiting for /shutdown or "
                       "/stop";
        case HP_OP_FAULTED:
                return "waiting for the operator's /stop";
        case HP_OP_STOPPING:
                return "stopping the workers";
        case HP_OP_SHUTDOWN:
                return "stopping the workers, then exiting";
        default:
                return "";
        }
}

bool hp_op__set_state(struct hp_operator *op, enum hp_op_state to,
                      const char *reason, const char *message)
{
        enum hp_op_state from = op->plr.state;

        if (hp_plr_transition(&op->plr, to, hp_op__wall_us(), reason,
                              message) < 0) {
                hp_log_info("agent state stays %s: %s → %s is not a valid "
                            "transition",
                            hp_op_state_name(from), hp_op_state_name(from),
                            hp_op_state_name(to));
                return false;
        }
        hp_log_info("agent state %s → %s%s%s: %s", hp_op_state_name(from),
                    hp_op_state_name(to), reason && *reason ? " " : "",
                    reason ? reason : "", state_sentence(to));
        return true;
}

/* Acts on the state the requests and events left: /shutdown here, the
 * rest in the driver. Idempotent. */
static void kick_cb(uv_timer_t *timer)
{
        struct hp_operator *op = hp_container_of(timer, struct hp_operator,
                                                 kick);
        struct hp_agent *a = op->agent;

        if (op->plr.state != HP_OP_SHUTDOWN) {
                op->drv->kick(op);
                return;
        }
        if (!hp_agent_workers_active(a))
                hp_agent_finish(a, op->last_failure_code);
        else if (!hp_agent_workers_stopping(a))
                /* torch's final shutdown: SIGTERM, then SIGKILL. */
                hp_agent_stop_workers(a, SIGTERM,
                                      op->cfg->shutdown_timeout_ms);
}

void hp_op__kick(struct hp_operator *op)
{
        if (!op->closing)
                uv_timer_start(&op->kick, kick_cb, 0, 0);
}

/* The hyperpod rendezvous: everything comes from the operator. GROUP_
 * WORLD_SIZE is the number of nodes, torchrun's meaning (the reference
 * agent puts the world size there; nothing in torch reads it, and users
 * who do expect the node count). */
void hp_op__round_from_job(const struct hp_operator *op,
                           struct hp_rdzv_info *round)
{
        const struct hp_op_request *job = &op->job;

        memset(round, 0, sizeof(*round));
        round->nproc = op->cfg->nproc;
        round->nnodes = job->nnodes;
        round->node_rank = job->rank;
        round->world_size = job->nnodes * op->cfg->nproc;
        round->group_world_size = job->nnodes;
        round->base_rank = job->rank * op->cfg->nproc;
        snprintf(round->master_addr, sizeof(round->master_addr), "%s",
                 job->master_addr);
        round->master_port = job->master_port;
}

void hp_op__fault(struct hp_operator *op, const char *reason,
                  const char *message)
{
        if (hp_op__set_state(op, HP_OP_FAULTED, reason, message)) {
                op->faults[hp_fault_cause_of(reason)]++;
                hp_log_error("%s: %s", reason, message);
        }
}

/* ---- The messages both drivers report ---- */

void hp_op__failure_message(struct hp_agent *a, const struct hp_group *g,
                            char *msg, size_t len)
{
        const char *silence = hp_agent_silence(a);

        hp_agent_failure_message(a, g, msg, len);
        if (silence[0] != '\0') {
                size_t used = strlen(msg);
                snprintf(msg + used, len - used, "\n%s", silence);
        }
}

void hp_op__verdict_message(struct hp_agent *a, const struct hp_verdict *v,
                            char *reason, size_t reason_len, char *msg,
                            size_t len)
{
        const char *silence = hp_agent_silence(a);

        (void)hp_verdict_reason(v, reason, reason_len);
        (void)hp_verdict_describe(v, msg, len);
        if (silence[0] != '\0') {
                size_t used = strlen(msg);
                snprintf(msg + used, len - used, "; %s", silence);
        }
}

void hp_op__node_fault_message(const struct hp_operator *op,
                               const char *reason, const char *line,
                               char *msg, size_t len)
{
        if (strcmp(reason, "NodeFault_NCCLPreflight") == 0)
                snprintf(msg, len,
                         "The NCCL pre-flight check failed on this node "
                         "(--preflight nccl): %s",
                         line);
        else
                snprintf(msg, len,
                         "The kernel log reports a hardware fault on this "
                         "node (%s): %s",
                         op->cfg->kmsg, line);
}

/* Applies rankIps and ipVersion to pod_resourceconfig.json when a request
 * carries both (docs/operator-api.md, "pod_resourceconfig.json"). Done
 * before anything else changes, so that a disk error leaves the agent as
 * it was. */
int hp_op__store_ip_table(struct hp_operator *op,
                          const struct hp_op_request *req, char *err,
                          size_t len)
{
        cJSON *doc = NULL, *updated = NULL;
        int r;

        if (req->ip_version == NULL || req->rank_ips == NULL)
                return 0;
        r = hp_podcfg_read(op->resource_dir, &doc, err, len);
        if (r < 0)
                /* A damaged file is replaced rather than kept forever. */
                hp_log_warn("replacing it: %s", err);
        r = hp_podcfg_apply(doc, req->rank, req->nnodes, req->rank_ips,
                            req->ip_version, &updated);
        if (r < 0) {
                snprintf(err, len, "cannot update the IP table: %s",
                         hp_strerror(r));
                return r;
        }
        r = hp_podcfg_write(op->resource_dir, updated, err, len);
        cJSON_Delete(updated);
        if (r < 0)
                return r;
        snprintf(op->ip_version, sizeof(op->ip_version), "%s",
                 req->ip_version);
        return 0;
}

void hp_op__store_job(struct hp_operator *op, struct hp_op_request *req,
                      bool keep_progress)
{
        /* The next stage of a running attempt picks up new rules (see
         * next_stage); the same rules again leave the rule state alone. */
        bool same_rules = op->job.rules == NULL || req->rules == NULL
                                  ? op->job.rules == req->rules
                                  : cJSON_Compare(op->job.rules, req->rules,
                                                  true);

        if (keep_progress && !same_rules)
                op->rules_changed = true;
        cJSON *progress = NULL;

        if (keep_progress) {
                progress = op->job.progress;
                op->job.progress = NULL;
        }
        hp_op_request_free(&op->job);
        op->job = *req;
        memset(req, 0, sizeof(*req));
        if (keep_progress) {
                cJSON_Delete(op->job.progress);
                op->job.progress = progress;
        }
        op->have_job = true;
        if (keep_progress)
                return;
        /* Only /start assigns the rank, as in the reference's PLR agent. */
        op->assigned_rank = op->job.rank;
        /* Checkpoint discovery resumes from where the operator says. */
        if (hp_ckpt_set_progress(op->ckpt, op->job.progress) < 0)
                hp_log_error("/start: out of memory for its progress");
        op->can_start = true;
}
