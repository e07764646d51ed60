/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's side of a hang report: describes the running group to the
 * forensics module (src/forensics) in plain values, and sends the stop
 * that waited for a report once it is out. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "hyperpod/common.h"
#include "hyperpod/forensics.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

/* The hang report collector (src/forensics), --hang-dump. */
int hp_agent__forensics_init(struct hp_agent *a, char *errbuf, size_t errlen)
{
        struct hp_forensics_params p = {
                .loop = a->loop,
                .enabled = a->cfg->hang_dump != HP_HANG_DUMP_OFF,
                .full = a->cfg->hang_dump == HP_HANG_DUMP_FULL,
                .no_files = a->no_files,
                .timeout_ms = a->cfg->hang_dump_timeout_ms,
                .ft = &a->ft,
                .stop = hp_agent__report_stop,
                .ctx = a,
        };

        return hp_forensics_new(&p, &a->forensics, errbuf, errlen);
}

static uint64_t worker_last(const struct hp_worker *w)
{
        return w->out.last_read > w->err.last_read ? w->out.last_read
                                                   : w->err.last_read;
}

int hp_agent__attempt(const struct hp_agent *a,
                      struct hp_forensics_attempt *at,
                      struct hp_forensics_rank **ranks)
{
        const struct hp_group *g = &a->group;

        *at = (struct hp_forensics_attempt){
                .stage = (int)a->stage,
                .stage_name = hp_stage_name(a->stage),
                .attempt = a->restart_count,
                .dir = a->attempt_dir[a->stage],
                .dirfd = a->attempt_fd[a->stage],
                .verdict_local_rank = -1,
        };
        *ranks = NULL;
        if (!hp_group__active(g) || g->count == 0)
                return 0;
        *ranks = calloc((size_t)g->count, sizeof(**ranks));
        if (*ranks == NULL)
                return -ENOMEM;
        for (int i = 0; i < g->count; i++) {
                const struct hp_worker *w = &g->workers[i];

                (*ranks)[i] = (struct hp_forensics_rank){
                        .local_rank = w->local_rank,
                        .rank = w->rank,
                        .pid = w->pid,
                        .state = hp_worker__state_name(w->state),
                        .last_ms = worker_last(w),
                        .wrote = w->out.stats.bytes + w->err.stats.bytes > 0,
                        .done = w->refs == 0 && w->state == HP_WORKER_DONE,
                        .exited = w->state >= HP_WORKER_EXITED,
                        .exit_code = (int)w->exit_status,
                        .exit_signal = w->term_signal,
                        .exit_wall = w->exit_time,
                };
        }
        at->ranks = *ranks;
        at->count = g->count;
        return 0;
}

void hp_agent__note_silence(struct hp_agent *a, const char *event)
{
        struct hp_forensics_attempt at;
        struct hp_forensics_rank *ranks;

        hp_forensics_clear_silence(a->forensics);
        if (a->forensics == NULL || hp_agent__attempt(a, &at, &ranks) < 0)
                return;
        hp_forensics_note_silence(a->forensics, &at, event);
        free(ranks);
}

int hp_agent__begin_report(struct hp_agent *a, bool on_request)
{
        char reason[HP_VERDICT_REASON_MAX] = "";
        struct hp_forensics_attempt at;
        struct hp_forensics_rank *ranks;
        int r;

        if (a->forensics == NULL)
                return -ENOTSUP;
        r = hp_agent__attempt(a, &at, &ranks);
        if (r < 0)
                return r;
        if (!on_request &&
            hp_verdict_reason(&a->verdict, reason, sizeof(reason)) >= 0) {
                at.verdict_reason = reason;
                at.verdict_rule = a->verdict.rule;
                at.verdict_local_rank = a->verdict.local_rank;
        }
        r = hp_forensics_begin(a->forensics, &at, on_request);
        free(ranks);
        return r;
}

bool hp_agent__defer_stop(struct hp_agent *a, int sig, uint64_t timeout_ms)
{
        return hp_forensics_defer_stop(a->forensics, sig, timeout_ms);
}

/* The forensics module's stop callback: the stop that waited for the
 * report, if its group still runs. */
void hp_agent__report_stop(void *ctx, int sig, uint64_t timeout_ms, int stage,
                           int attempt)
{
        struct hp_agent *a = ctx;

        if (hp_group__active(&a->group) && !a->group.stopping &&
            (int)a->stage == stage && a->restart_count == attempt)
                hp_group__stop(&a->group, sig, timeout_ms);
}

int hp_agent_stacks_report(struct hp_agent *a, char *path, size_t len)
{
        const char *dir = a->attempt_dir[a->stage];
        int r;

        if (a->cfg->hang_dump == HP_HANG_DUMP_OFF || a->forensics == NULL)
                return -ENOTSUP;
        r = hp_forensics_request_path(a->forensics, dir, path, len);
        if (r == -ENOTSUP || r == -EBUSY)
                return r;
        if (!hp_group__active(&a->group) || a->group.count == 0)
                return -ESRCH;
        if (a->no_files || dir[0] == '\0')
                return -ENOENT;
        if (r < 0)
                return r;
        return hp_agent__begin_report(a, true);
}
