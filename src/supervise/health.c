/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Node health: the kernel log read with node-problem-detector's rules, and
 * what a permanent rule (a hardware fault) does. Self-driven, the workers
 * are stopped and the agent exits HP_EXIT_NODE_FAULT with no restart on
 * this node; driven by the operator, the node is FAULTED with
 * NodeFault_<reason>. Under Slurm, --node-fault-action also asks HyperPod
 * to reboot or replace the node through scontrol.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

static double wall_now(void)
{
        struct timeval tv;

        gettimeofday(&tv, NULL);
        return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void action_closed_cb(uv_handle_t *handle)
{
        struct hp_node_health *h = handle->data;

        h->action_running = false;
        if (h->finish_pending) {
                h->finish_pending = false;
                hp_agent_finish(h->agent, HP_EXIT_NODE_FAULT);
        }
}

static void action_exit_cb(uv_process_t *proc, int64_t status, int signum)
{
        struct hp_node_health *h = proc->data;

        uv_timer_stop(&h->action_timer);
        if (status == 0 && signum == 0)
                snprintf(h->action_result, sizeof(h->action_result),
                         "scontrol succeeded");
        else if (signum != 0)
                snprintf(h->action_result, sizeof(h->action_result),
                         "scontrol was killed by %s%s",
                         hp_signal_name(signum),
                         h->action_result[0] == 't' ? " (timed out)" : "");
        else
                snprintf(h->action_result, sizeof(h->action_result),
                         "scontrol failed with exit status %lld",
                         (long long)status);
        if (status == 0 && signum == 0)
                hp_log_info("--node-fault-action: %s", h->action_result);
        else
                hp_log_error("--node-fault-action: %s; the node was not "
                             "marked for HyperPod",
                             h->action_result);
        uv_close((uv_handle_t *)proc, action_closed_cb);
}

static void action_timeout_cb(uv_timer_t *timer)
{
        struct hp_node_health *h = timer->data;

        /* Marked so the exit callback can say why it was killed. */
        snprintf(h->action_result, sizeof(h->action_result), "timed out");
        if (uv_process_kill(&h->action_proc, SIGKILL) < 0) {
                /* Gone without an exit seen: end the wait all the same. */
                hp_log_error("--node-fault-action: scontrol timed out after "
                             "%.3g s",
                             (double)h->agent->rdzv.opt.scontrol_timeout_ms /
                                     1000.0);
                uv_close((uv_handle_t *)&h->action_proc, action_closed_cb);
        }
}

/* scontrol update nodename=NODE state=fail reason="Action:Replace": what
 * HyperPod's Slurm integration reads as a request for a new node. */
static void start_action(struct hp_node_health *h)
{
        struct hp_agent *a = h->agent;
        const struct hp_config *cfg = a->cfg;
        const char *scontrol = a->rdzv.opt.scontrol;
        const char *node = getenv("SLURMD_NODENAME");
        char nodearg[320], reason[64];
        char *argv[6];
        uv_process_options_t opts;
        uv_stdio_container_t stdio[3];
        int r;

        if (cfg->node_fault_action == HP_NODE_FAULT_NONE)
                return;
        if (getenv("SLURM_JOB_ID") == NULL && node == NULL) {
                hp_log_warn("--node-fault-action %s: not under Slurm "
                            "(SLURM_JOB_ID is not set); nothing asked",
                            cfg->node_fault_action == HP_NODE_FAULT_REPLACE
                                    ? "replace"
                                    : "reboot");
                return;
        }
        if (strcmp(scontrol, "off") == 0) {
                hp_log_warn("--node-fault-action: --rdzv-conf scontrol=off; "
                            "nothing asked");
                return;
        }
        if (node == NULL || *node == '\0')
                node = a->rdzv.hostname;
        snprintf(nodearg, sizeof(nodearg), "nodename=%s", node);
        snprintf(reason, sizeof(reason), "reason=Action:%s",
                 cfg->node_fault_action == HP_NODE_FAULT_REPLACE ? "Replace"
                                                                 : "Reboot");
        argv[0] = (char *)(*scontrol ? scontrol : "scontrol");
        argv[1] = (char *)"update";
        argv[2] = nodearg;
        argv[3] = (char *)"state=fail";
        argv[4] = reason;
        argv[5] = NULL;
        memset(&opts, 0, sizeof(opts));
        memset(stdio, 0, sizeof(stdio));
        stdio[0].flags = UV_IGNORE;
        stdio[1].flags = UV_INHERIT_FD;
        stdio[1].data.fd = STDERR_FILENO;
        stdio[2].flags = UV_INHERIT_FD;
        stdio[2].data.fd = STDERR_FILENO;
        opts.file = argv[0];
        opts.args = argv;
        opts.exit_cb = action_exit_cb;
        opts.stdio = stdio;
        opts.stdio_count = 3;
        h->action_proc.data = h;
        h->action_result[0] = '\0';
        hp_log_warn("--node-fault-action: %s update %s state=fail %s",
                    argv[0], nodearg, reason);
        r = uv_spawn(a->loop, &h->action_proc, &opts);
        if (r < 0) {
                snprintf(h->action_result, sizeof(h->action_result),
                         "cannot run %s: %s", argv[0], uv_strerror(r));
                hp_log_error("--node-fault-action: %s", h->action_result);
                /* libuv wants a failed uv_spawn closed too. */
                uv_close((uv_handle_t *)&h->action_proc, NULL);
                return;
        }
        h->action_running = true;
        uv_timer_start(&h->action_timer, action_timeout_cb,
                       a->rdzv.opt.scontrol_timeout_ms, 0);
}

static void node_faulted(struct hp_node_health *h);

static void hit_cb(struct kmsg_watch *w, size_t config,
                   const struct kmsg_hit *hit)
{
        struct hp_node_health
                *h = (struct hp_node_health *)((char *)w -
                                               offsetof(struct hp_node_health,
                                                        watch));

        if (hit->type == KMSG_TEMPORARY) {
                h->temporary++;
                hp_log_warn("kernel log: %s (temporary): %s", hit->reason,
                            hit->message);
                return;
        }
        if (h->fault[0] != '\0') {
                hp_log_warn("kernel log: %s (permanent, condition %s) after "
                            "%s: %s",
                            hit->reason, hit->condition, h->fault,
                            hit->message);
                return;
        }
        snprintf(h->fault, sizeof(h->fault), "NodeFault_%s", hit->reason);
        snprintf(h->fault_line, sizeof(h->fault_line), "%s", hit->message);
        h->fault_wall = wall_now();
        hp_log_error("%s: the kernel log reports a hardware fault on this "
                     "node (condition %s): %s",
                     h->fault, hit->condition, hit->message);
        node_faulted(h);
}

/* What a node fault does, whoever found it. */
static void node_faulted(struct hp_node_health *h)
{
        struct hp_agent *a = h->agent;

        start_action(h);
        hp_agent__node_fault(a);
}

void hp_agent__health_finish(struct hp_agent *a)
{
        struct hp_node_health *h = &a->health;

        if (h->action_running)
                h->finish_pending = true;
        else
                hp_agent_finish(a, HP_EXIT_NODE_FAULT);
}

static void preflight_cb(struct hp_preflight *pf,
                         const struct hp_preflight_result *res)
{
        struct hp_node_health
                *h = (struct hp_node_health *)((char *)pf -
                                               offsetof(struct hp_node_health,
                                                        preflight));
        struct hp_agent *a = h->agent;

        h->preflight_running = false;
        h->preflight_finished = true;
        h->preflight_result = *res;
        if (a->state == HP_AGENT_FINISHED)
                return;
        if (a->state == HP_AGENT_PREFLIGHT)
                hp_agent__set_state(a, HP_AGENT_IDLE, "preflight ended");
        for (size_t i = 0; i < res->nsizes; i++)
                hp_log_info("preflight: all-reduce of %llu bytes: %.1f us, "
                            "%.3f GB/s algorithm, %.3f GB/s bus bandwidth",
                            (unsigned long long)res->sizes[i].bytes,
                            res->sizes[i].time_us, res->sizes[i].algbw,
                            res->sizes[i].busbw);
        if (res->passed) {
                hp_log_info("preflight passed: %s", res->reason);
                hp_agent__preflight_passed(a);
                return;
        }
        if (res->unavailable &&
            hp_agent__preflight_unavailable(a, res->reason))
                return;
        if (h->fault[0] != '\0')
                return;
        snprintf(h->fault, sizeof(h->fault), "NodeFault_NCCLPreflight");
        snprintf(h->fault_line, sizeof(h->fault_line), "%s", res->reason);
        h->fault_wall = wall_now();
        hp_log_error("%s: %s", h->fault, res->reason);
        node_faulted(h);
}

int hp_agent_preflight_start(struct hp_agent *a, char *errbuf, size_t len)
{
        struct hp_node_health *h = &a->health;
        const struct hp_config *cfg = a->cfg;
        struct hp_preflight_opts opts;
        char helper[4096];
        int r;

        h->agent = a;
        r = hp_preflight_find_helper(helper, sizeof(helper), errbuf, len);
        if (r < 0)
                return r;
        opts.helper = helper;
        opts.library = cfg->preflight_library;
        opts.max_bytes = cfg->preflight_max_bytes;
        opts.min_busbw = cfg->preflight_min_busbw;
        opts.timeout_ms = cfg->preflight_timeout_ms;
        r = hp_preflight_start(&h->preflight, a->loop, &opts, preflight_cb,
                               errbuf, len);
        if (r < 0)
                return r;
        h->preflight_running = true;
        hp_agent__set_state(a, HP_AGENT_PREFLIGHT, "preflight started");
        hp_log_info("preflight: NCCL all-reduce over this node's GPUs, up to "
                    "%llu bytes, at most %.3g s%s%s",
                    (unsigned long long)opts.max_bytes,
                    (double)opts.timeout_ms / 1000.0,
                    opts.library ? ", with " : "",
                    opts.library ? opts.library : "");
        return 0;
}

bool hp_agent_preflight_pending(const struct hp_agent *a)
{
        return a->cfg->preflight_nccl && !a->health.preflight_finished;
}

/* Splits "A,B" into the configs, each loaded and checked. */
static int load_configs(const char *list, struct kmsg_rules **rules,
                        size_t *n, char *errbuf, size_t len)
{
        char *copy = strdup(list), *save = NULL, *tok;
        int r = 0;

        *n = 0;
        if (copy == NULL)
                return -ENOMEM;
        for (tok = strtok_r(copy, ",", &save); tok != NULL;
             tok = strtok_r(NULL, ",", &save)) {
                if (*n == KMSG_WATCH_MAX_CONFIGS) {
                        snprintf(errbuf, len,
                                 "--node-problem-config '%s': at most %d "
                                 "configs",
                                 list, KMSG_WATCH_MAX_CONFIGS);
                        r = HP_ECONFIG;
                        break;
                }
                r = kmsg_rules_load(tok, &rules[*n], errbuf, len);
                if (r < 0)
                        break;
                /* Said at start, where the one who wrote the rules looks:
                 * the rule still runs, as NPD would run it. */
                for (size_t i = 0; i < kmsg_rules_count(rules[*n]); i++) {
                        const char *w = kmsg_rules_warning(rules[*n], i);
                        if (w != NULL)
                                hp_log_warn("%s", w);
                }
                (*n)++;
        }
        free(copy);
        if (r < 0) {
                for (size_t i = 0; i < *n; i++)
                        kmsg_rules_free(rules[i]);
                *n = 0;
        }
        return r;
}

int hp_agent__health_init(struct hp_agent *a, char *errbuf, size_t len)
{
        struct hp_node_health *h = &a->health;
        struct kmsg_rules *rules[KMSG_WATCH_MAX_CONFIGS];
        char why[1024];
        size_t n;
        int r;

        h->agent = a;
        if (a->cfg->node_problem_config == NULL)
                return 0;
        r = load_configs(a->cfg->node_problem_config, rules, &n, errbuf, len);
        if (r < 0)
                return r;
        uv_timer_init(a->loop, &h->action_timer);
        h->action_timer.data = h;
        h->action_timer_ready = true;
        r = kmsg_watch_start(&h->watch, a->loop, a->cfg->kmsg, rules, n,
                             kmsg_boottime_us(), hit_cb, why, sizeof(why));
        if (r < 0 && a->cfg->kmsg_given) {
                snprintf(errbuf, len, "--kmsg: %s", why);
                return HP_ECONFIG;
        }
        if (r < 0) {
                /* The job runs on: the kernel log is a second opinion, and
                 * an unprivileged container cannot read it. */
                hp_log_warn("%s; node faults will not be detected", why);
                return 0;
        }
        h->watching = true;
        hp_log_info("watching the kernel log '%s' with %zu node problem "
                    "config%s",
                    a->cfg->kmsg, n, n == 1 ? "" : "s");
        return 0;
}

void hp_agent__health_close(struct hp_agent *a)
{
        struct hp_node_health *h = &a->health;

        if (h->watching)
                kmsg_watch_close(&h->watch);
        h->watching = false;
        if (h->preflight_running)
                hp_preflight_cancel(&h->preflight);
        if (h->action_running) {
                uv_timer_stop(&h->action_timer);
                uv_process_kill(&h->action_proc, SIGKILL);
        }
        if (h->action_timer_ready)
                uv_close((uv_handle_t *)&h->action_timer, NULL);
        h->action_timer_ready = false;
}
