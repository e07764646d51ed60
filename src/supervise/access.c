/* SPDX-License-Identifier: Apache-2.0 */
/* What a driver may read of the agent and of a group in a callback: the
 * public header keeps both opaque, so that the agent's fields are the
 * module's own. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

struct hp_agent *hp_agent_new(void)
{
        return calloc(1, sizeof(struct hp_agent));
}

void hp_agent_free(struct hp_agent *a)
{
        if (a != NULL)
                free(a->ended_stats);
        free(a);
}

const char *hp_fault_cause_name(enum hp_fault_cause cause)
{
        static const char *const names[] = {
                [HP_FAULT_WORKER] = "worker",
                [HP_FAULT_RULE] = "rule",
                [HP_FAULT_NODE] = "node",
                [HP_FAULT_RANK] = "rank",
        };
        return (unsigned)cause < HP_ARRAY_SIZE(names) ? names[cause] : "?";
}

enum hp_fault_cause hp_fault_cause_of(const char *reason)
{
        static const char *const rule_prefixes[] = { "LogSlow_", "LogHang_",
                                                     "LogFault_" };
        static const char *const rank_reasons[] = {
                "RankHeartbeatTimeout",
                "RankInitialHeartbeatTimeout",
                "RankOutOfSectionTimeout",
                "RankStraggler",
        };

        if (reason == NULL)
                return HP_FAULT_WORKER;
        if (strncmp(reason, "NodeFault_", 10) == 0)
                return HP_FAULT_NODE;
        for (size_t i = 0; i < HP_ARRAY_SIZE(rule_prefixes); i++)
                if (strncmp(reason, rule_prefixes[i],
                            strlen(rule_prefixes[i])) == 0)
                        return HP_FAULT_RULE;
        if (strncmp(reason, "RankSectionTimeout_", 19) == 0)
                return HP_FAULT_RANK;
        for (size_t i = 0; i < HP_ARRAY_SIZE(rank_reasons); i++)
                if (strcmp(reason, rank_reasons[i]) == 0)
                        return HP_FAULT_RANK;
        return HP_FAULT_WORKER;
}

const struct hp_agent_counts *hp_agent_counts(const struct hp_agent *a)
{
        return &a->counts;
}

void hp_agent_verdict_counts(const struct hp_agent *a,
                             void (*visit)(void *ctx, const char *rule,
                                           const uint64_t n[3]),
                             void *ctx)
{
        static const uint64_t none[3];
        const struct logmon_ruleset *rs = hp_rulewatch__ruleset(&a->rules);

        for (size_t i = 0; i < a->nverdict_counts; i++)
                visit(ctx, a->verdict_counts[i].rule, a->verdict_counts[i].n);
        /* The rules in use that never fired, from 0. */
        for (size_t r = 0; rs != NULL && r < logmon_ruleset_count(rs); r++) {
                const char *name = logmon_ruleset_rule_name(rs, r);
                bool counted = false;

                for (size_t i = 0; i < a->nverdict_counts && !counted; i++)
                        counted = strcmp(a->verdict_counts[i].rule, name) ==
                                  0;
                /* A name twice in the set (accepted, warned) once. */
                for (size_t p = 0; p < r && !counted; p++)
                        counted = strcmp(logmon_ruleset_rule_name(rs, p),
                                         name) == 0;
                if (!counted)
                        visit(ctx, name, none);
        }
}

const char *hp_agent_run_id(const struct hp_agent *a)
{
        return a->rdzv.run_id;
}

uv_loop_t *hp_agent_loop(const struct hp_agent *a)
{
        return a->loop;
}

enum hp_agent_state hp_agent_state(const struct hp_agent *a)
{
        return a->state;
}

int hp_agent_exit_code(const struct hp_agent *a)
{
        return a->exit_code;
}

const struct hp_rdzv_info *hp_agent_round(const struct hp_agent *a)
{
        return &a->round;
}

void hp_agent_set_round(struct hp_agent *a, const struct hp_rdzv_info *round)
{
        if (round != &a->round)
                a->round = *round;
}

void hp_agent_set_restart_count(struct hp_agent *a, int restart_count)
{
        a->restart_count = restart_count;
}

void hp_agent_rerank(struct hp_agent *a, const struct hp_rdzv_info *round)
{
        hp_agent_set_round(a, round);
        if (a->group.workers == NULL)
                return;
        for (int i = 0; i < a->group.count; i++) {
                struct hp_worker *w = &a->group.workers[i];
                w->rank = round->base_rank + w->local_rank;
        }
}

const struct hp_rdzv_options *hp_agent_rdzv_options(const struct hp_agent *a)
{
        return &a->rdzv.opt;
}

enum hp_stage hp_agent_stage(const struct hp_agent *a)
{
        return a->stage;
}

bool hp_agent_workers_stopping(const struct hp_agent *a)
{
        return hp_group__active(&a->group) && a->group.stopping;
}

int hp_agent_workers_running(const struct hp_agent *a)
{
        return hp_group__active(&a->group) ? a->group.count - a->group.exited
                                           : 0;
}

const char *hp_agent_silence(const struct hp_agent *a)
{
        return hp_forensics_silence(a->forensics);
}

const struct hp_verdict *hp_agent_verdict(const struct hp_agent *a)
{
        return a->verdict.state != LOGMON_WAITING ? &a->verdict : NULL;
}

const char *hp_agent_node_fault(const struct hp_agent *a, const char **line,
                                double *wall)
{
        if (line != NULL)
                *line = a->health.fault_line;
        if (wall != NULL)
                *wall = a->health.fault_wall;
        return a->health.fault[0] != '\0' ? a->health.fault : NULL;
}

const struct hp_preflight_result *
hp_agent_preflight_result(const struct hp_agent *a)
{
        return a->health.preflight_finished ? &a->health.preflight_result
                                            : NULL;
}

const struct kmsg_watch *hp_agent_kmsg_watch(const struct hp_agent *a)
{
        return a->health.watching ? &a->health.watch : NULL;
}

const struct hp_ftmon *hp_agent_ftmon(const struct hp_agent *a)
{
        return &a->ft;
}

struct hp_ipc_server *hp_agent_ipc(struct hp_agent *a)
{
        return &a->ipc;
}

struct hp_ckpt *hp_agent_ckpt(struct hp_agent *a)
{
        return &a->ipc.ckpt;
}

uint64_t hp_agent_console_dropped(struct hp_agent *a, int fd)
{
        int error;

        return hp_console_lost_lines(fd == STDOUT_FILENO ? a->console_out
                                                         : a->console_err,
                                     &error);
}

void hp_agent_stream_stats(const struct hp_agent *a, hp_stream_stats_cb visit,
                           void *ctx)
{
        if (a->ended_stats != NULL)
                for (int i = 0; i < a->cfg->nproc; i++)
                        visit(ctx, i, &a->ended_stats[i][0],
                              &a->ended_stats[i][1]);
        if (hp_group__active(&a->group))
                hp_group_stream_stats(&a->group, visit, ctx);
}

bool hp_agent_rule_streams(const struct hp_agent *a,
                           void (*visit)(void *ctx, int local_rank,
                                         const struct logmon_stream *rules,
                                         const struct logmon_ruleset *rs),
                           void *ctx)
{
        const struct logmon_ruleset *rs = hp_rulewatch__ruleset(&a->rules);

        if (rs == NULL)
                return false;
        for (int i = 0; visit != NULL && i < a->round.nproc; i++) {
                const struct logmon_stream *s = hp_rulewatch__stream(
                        &a->rules, i);
                if (s != NULL)
                        visit(ctx, i, s, rs);
        }
        return true;
}

bool hp_group_failure(const struct hp_group *g, struct hp_failure *out)
{
        const struct hp_worker *w = g->first_failure;

        if (w == NULL)
                return false;
        *out = (struct hp_failure){
                .local_rank = w->local_rank,
                .rank = w->rank,
                .start_failed = w->start_error != 0,
                .exit_time = w->exit_time,
        };
        return true;
}

void hp_group_stream_stats(const struct hp_group *g, hp_stream_stats_cb visit,
                           void *ctx)
{
        for (int i = 0; i < g->count; i++) {
                const struct hp_worker *w = &g->workers[i];

                visit(ctx, hp_stage_local_rank(g->stage, w->local_rank),
                      &w->out.stats, &w->err.stats);
        }
}
