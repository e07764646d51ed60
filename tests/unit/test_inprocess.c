/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for in-process restart's pure parts: the IPR transition
 * table, the main loop's decision (src/operator/ipr.c), the worker
 * socket's per-rank table (src/ipc/ranks.c) and the IPR keys of
 * /status. Time is passed in; nothing sleeps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"
#include "hyperpod/operator.h"

#include "table.h"

/* ---- The IPR table (docs/inprocess-restart-and-checkpoints.md,
 * "States"), pair by pair ---- */

static const char *const ipr_allowed[] = {
        "INIT>READY",         "INIT>SHUTDOWN",      "INIT>FAULTED",
        "READY>INIT",         "READY>RUNNING",      "READY>SHUTDOWN",
        "READY>FAULTED",      "RUNNING>INIT",       "RUNNING>COMPLETED",
        "RUNNING>FAULTED",    "RUNNING>STOPPING",   "RUNNING>SHUTDOWN",
        "FAULTED>INIT",       "FAULTED>STOPPING",   "FAULTED>SHUTDOWN",
        "STOPPING>READY",     "STOPPING>INIT",      "STOPPING>SHUTDOWN",
        "COMPLETED>SHUTDOWN", "COMPLETED>STOPPING",
};

static void test_ipr_table(void **state)
{
        int failures = 0;

        (void)state;
        for (int from = 0; from < HP_OP_STATE_COUNT; from++) {
                for (int to = 0; to < HP_OP_STATE_COUNT; to++) {
                        char pair[64];
                        bool expect = false;

                        snprintf(pair, sizeof(pair), "%s>%s",
                                 hp_op_state_name((enum hp_op_state)from),
                                 hp_op_state_name((enum hp_op_state)to));
                        for (size_t i = 0; i < HP_ARRAY_SIZE(ipr_allowed);
                             i++)
                                if (strcmp(ipr_allowed[i], pair) == 0)
                                        expect = true;
                        if (hp_ipr_allowed((enum hp_op_state)from,
                                           (enum hp_op_state)to) != expect)
                                CASE_FAILED(failures, "%s: expected %s", pair,
                                            expect ? "allowed" : "refused");
                }
        }
        assert_int_equal(failures, 0);
}

/* The flag picks the table: INIT → FAULTED is IPR only. */
static void test_ipr_flag_picks_the_table(void **state)
{
        struct hp_plr plr;

        (void)state;
        hp_plr_init(&plr, 0);
        assert_int_equal(hp_plr_transition(&plr, HP_OP_FAULTED, 1, "x", "y"),
                         -EPERM);
        plr.inprocess = true;
        assert_int_equal(hp_plr_transition(&plr, HP_OP_FAULTED, 1, "x", "y"),
                         0);
        assert_int_equal(hp_plr_transition(&plr, HP_OP_INIT, 2, NULL, NULL),
                         0);
        assert_string_equal(plr.reason, "");
        /* INIT keeps its first place among the transitions' keys. */
        assert_int_equal(plr.first_count, 2);
        assert_int_equal(plr.entered_us[HP_OP_INIT], 2);
}

/* ---- The main loop's decision ---- */

static const struct decide_case {
        const char *name;
        struct hp_ipr_view view;
        uint64_t now;
        enum hp_ipr_action action;
        bool arm;
        bool ip_null; /* the view's IP table has a null */
} decide_cases[] = {
        /* Start-up: pre-train at once, then training and the barrier. */
        { .name = "nothing runs: start",
          .view = { .state = HP_OP_INIT },
          .now = 0,
          .action = HP_IPR_START_FIRST },
        { .name = "pre-train runs",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_PRE_TRAIN },
          .now = 0,
          .action = HP_IPR_NONE },
        { .name = "pre-train succeeded: training",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_PRE_TRAIN },
          .now = 0,
          .action = HP_IPR_START_TRAINING },
        { .name = "waiting at the barrier",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_INIT,
                    .wait_deadline = 5000 },
          .now = 4999,
          .action = HP_IPR_NONE },
        { .name = "all at the barrier: READY",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_INIT,
                    .all_at_barrier = true,
                    .wait_deadline = 5000 },
          .now = 4999,
          .action = HP_IPR_READY },
        { .name = "barrier timeout at start: full stop",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_INIT,
                    .wait_deadline = 5000 },
          .now = 5000,
          .action = HP_IPR_FULL_STOP },
        { .name = "no timeout: waits forever",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_INIT },
          .now = UINT64_MAX,
          .action = HP_IPR_NONE },
        { .name = "a dropped client at start is not a full stop",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_INIT,
                    .clients_missing = true },
          .now = 0,
          .action = HP_IPR_NONE },
        { .name = "training crashed before READY: FAULTED",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_FAILED,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_INIT },
          .now = 0,
          .action = HP_IPR_FAULT },
        { .name = "pre-train failed: FAULTED",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_FAILED,
                    .stage = HP_STAGE_PRE_TRAIN },
          .now = 0,
          .action = HP_IPR_FAULT },
        { .name = "training exited 0 before /start: FAULTED",
          .view = { .state = HP_OP_READY,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_FAULT },
        /* /start releases the barrier. */
        { .name = "READY: nothing until /start",
          .view = { .state = HP_OP_READY,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .all_at_barrier = true },
          .now = 0,
          .action = HP_IPR_NONE },
        { .name = "/start: job_start",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .all_at_barrier = true,
                    .can_start = true },
          .now = 0,
          .action = HP_IPR_SEND_START },
        { .name = "/start without can_start: nothing",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .all_at_barrier = true },
          .now = 0,
          .action = HP_IPR_NONE },
        { .name = "/start with a null in the IP table: hold",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .all_at_barrier = true,
                    .can_start = true },
          .now = 0,
          .action = HP_IPR_HOLD,
          .ip_null = true },
        { .name = "training runs",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .can_start = true },
          .now = 0,
          .action = HP_IPR_NONE },
        /* Faults while training. */
        { .name = "job_fault: FAULTED",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .any_failed = true },
          .now = 0,
          .action = HP_IPR_FAULT },
        { .name = "job_fault asking local PLR: FAULTED, armed",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .any_failed = true,
                    .local_plr_requested = true },
          .now = 0,
          .action = HP_IPR_FAULT,
          .arm = true },
        { .name = "job_fault in READY waits for /start",
          .view = { .state = HP_OP_READY,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .any_failed = true },
          .now = 0,
          .action = HP_IPR_NONE },
        { .name = "a crash: FAULTED",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_FAILED,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_FAULT },
        { .name = "a verdict: FAULTED",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_UNHEALTHY,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_FAULT },
        { .name = "FAULTED waits for /stop",
          .view = { .state = HP_OP_FAULTED,
                    .group = HP_IPR_GROUP_FAILED,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_NONE },
        { .name = "armed: full stop first",
          .view = { .state = HP_OP_FAULTED,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .plr_armed = true },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        { .name = "armed while stopping: wait for the stop",
          .view = { .state = HP_OP_INIT,
                    .group = HP_IPR_GROUP_STOPPING,
                    .plr_armed = true },
          .now = 0,
          .action = HP_IPR_NONE },
        /* /stop. */
        { .name = "/stop while training: pause",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_PAUSE },
        { .name = "pausing: waiting",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_PAUSE,
                    .wait_deadline = 100 },
          .now = 50,
          .action = HP_IPR_NONE },
        { .name = "paused: READY",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_PAUSE,
                    .all_at_barrier = true },
          .now = 0,
          .action = HP_IPR_READY },
        { .name = "pause with a dropped client: full stop",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_PAUSE,
                    .clients_missing = true,
                    .all_at_barrier = true },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        { .name = "pause timeout: full stop",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_TRAIN,
                    .wait = HP_IPR_WAIT_PAUSE,
                    .wait_deadline = 100 },
          .now = 100,
          .action = HP_IPR_FULL_STOP },
        { .name = "/stop with a crashed process: full stop",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_FAILED,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        { .name = "/stop with a verdict: full stop",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_UNHEALTHY,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        { .name = "/stop during pre-train: full stop (the reference is stuck)",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_PRE_TRAIN },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        { .name = "/stop after pre-train ended: full stop",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_PRE_TRAIN },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        { .name = "/stop during post-train: full stop",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_HEALTHY,
                    .stage = HP_STAGE_POST_TRAIN },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        { .name = "/stop after COMPLETED: full stop",
          .view = { .state = HP_OP_STOPPING,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_FULL_STOP },
        /* The end. */
        { .name = "training succeeded: post-train",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_TRAIN,
                    .has_post_train = true },
          .now = 0,
          .action = HP_IPR_POST_TRAIN },
        { .name = "training succeeded: COMPLETED",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_COMPLETE },
        { .name = "post-train succeeded: COMPLETED",
          .view = { .state = HP_OP_RUNNING,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_POST_TRAIN },
          .now = 0,
          .action = HP_IPR_COMPLETE },
        { .name = "COMPLETED: nothing",
          .view = { .state = HP_OP_COMPLETED,
                    .group = HP_IPR_GROUP_SUCCEEDED,
                    .stage = HP_STAGE_TRAIN },
          .now = 0,
          .action = HP_IPR_NONE },
        { .name = "SHUTDOWN: the operator's own path",
          .view = { .state = HP_OP_SHUTDOWN, .plr_armed = true },
          .now = 0,
          .action = HP_IPR_NONE },
};

static void test_decide(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(decide_cases); i++) {
                const struct decide_case *c = &decide_cases[i];
                struct hp_ipr_view v = c->view;
                struct hp_ipr_decision d;

                v.ip_table_complete = !c->ip_null;
                d = hp_ipr_decide(&v, c->now);

                if (d.action != c->action || d.arm_local_plr != c->arm)
                        CASE_FAILED(failures, "%s: %s%s, expected %s%s",
                                    c->name, hp_ipr_action_name(d.action),
                                    d.arm_local_plr ? " (armed)" : "",
                                    hp_ipr_action_name(c->action),
                                    c->arm ? " (armed)" : "");
                if (d.why == NULL || d.why[0] == '\0')
                        CASE_FAILED(failures, "%s: no reason given", c->name);
        }
        assert_int_equal(failures, 0);
}

/* ---- The per-rank table ---- */

static char *print(const cJSON *v)
{
        char *s = v ? cJSON_PrintUnformatted(v) : NULL;

        assert_non_null(s);
        return s;
}

static void test_ranks_barrier_queue(void **state)
{
        struct hp_ipc_ranks t;

        (void)state;
        assert_int_equal(hp_ipc_ranks_init(&t, 2), 0);
        assert_false(hp_ipc_ranks_all_at_barrier(&t));
        /* Before the agent waits, at_rcb_barrier is queued. */
        hp_ipc_ranks_at_barrier(&t, 0);
        assert_int_equal(t.ranks[0].state, HP_IPC_RANK_HEALTHY);
        hp_ipc_ranks_wait_begin(&t);
        assert_int_equal(t.ranks[0].state, HP_IPC_RANK_AT_BARRIER);
        assert_false(hp_ipc_ranks_all_at_barrier(&t));
        /* While waiting it counts at once. */
        hp_ipc_ranks_at_barrier(&t, 1);
        assert_true(hp_ipc_ranks_all_at_barrier(&t));
        hp_ipc_ranks_wait_end(&t);
        /* A job_start forgets the queue and the states. */
        hp_ipc_ranks_at_barrier(&t, 1);
        hp_ipc_ranks_reset(&t, false);
        hp_ipc_ranks_wait_begin(&t);
        assert_int_equal(t.ranks[1].state, HP_IPC_RANK_HEALTHY);
        hp_ipc_ranks_free(&t);
}

/* A rank waiting at the barrier: held until a job_start releases it;
 * only a released rank may say it passed, and a held one counts at the
 * next wait whatever it said since (a stray job_fault). */
static void test_ranks_held_and_released(void **state)
{
        struct hp_ipc_ranks t;
        char list[64];

        (void)state;
        assert_int_equal(hp_ipc_ranks_init(&t, 3), 0);
        /* Before any job_start: past_rcb_barrier changes nothing. */
        assert_int_equal(hp_ipc_ranks_past_barrier(&t, 0), -EPROTO);
        assert_int_equal(t.ranks[0].state, HP_IPC_RANK_HEALTHY);
        assert_int_equal(hp_ipc_ranks_wait_begin(&t), 0);
        hp_ipc_ranks_at_barrier(&t, 0);
        hp_ipc_ranks_at_barrier(&t, 1);
        hp_ipc_ranks_at_barrier(&t, 2);
        assert_true(hp_ipc_ranks_all_at_barrier(&t));
        hp_ipc_ranks_wait_end(&t);
        /* READY: a stray past_rcb_barrier from a held rank is refused
         * and the rank still counts at the barrier. */
        assert_int_equal(hp_ipc_ranks_past_barrier(&t, 1), -EPROTO);
        assert_true(hp_ipc_ranks_all_at_barrier(&t));
        /* A stray job_fault fails the rank, yet a pause counts it at
         * the barrier at once: it never answers the pause. */
        assert_int_equal(hp_ipc_ranks_fail(&t, 0, 0, HP_RESTART_IN_PROCESS,
                                           "Stray", NULL),
                         0);
        assert_false(hp_ipc_ranks_all_at_barrier(&t));
        assert_int_equal(hp_ipc_ranks_wait_begin(&t), 3);
        assert_true(hp_ipc_ranks_all_at_barrier(&t));
        hp_ipc_ranks_wait_end(&t);
        /* job_start: released, so past_rcb_barrier counts; no longer
         * held, so a pause waits for the rank to come back. */
        hp_ipc_ranks_reset(&t, false);
        for (int lr = 0; lr < 3; lr++)
                hp_ipc_ranks_release(&t, lr);
        assert_int_equal(hp_ipc_ranks_past_barrier(&t, 0), 0);
        assert_int_equal(hp_ipc_ranks_past_barrier(&t, 0), 0);
        assert_int_equal(hp_ipc_ranks_past_barrier(&t, 1), 0);
        assert_int_equal(t.ranks[0].state, HP_IPC_RANK_PAST_BARRIER);
        /* Rank 2 is back before the pause begins, rank 0 during it. */
        hp_ipc_ranks_at_barrier(&t, 2);
        assert_int_equal(hp_ipc_ranks_wait_begin(&t), 1);
        assert_int_equal(hp_ipc_ranks_list(&t, HP_IPC_RANK_AT_BARRIER, true,
                                           list, sizeof(list)),
                         1);
        assert_string_equal(list, "2");
        assert_int_equal(hp_ipc_ranks_list(&t, HP_IPC_RANK_AT_BARRIER, false,
                                           list, sizeof(list)),
                         2);
        assert_string_equal(list, "0, 1");
        hp_ipc_ranks_at_barrier(&t, 0);
        /* Back at the barrier: no longer released. */
        assert_int_equal(hp_ipc_ranks_past_barrier(&t, 0), -EPROTO);
        assert_int_equal(t.ranks[0].state, HP_IPC_RANK_AT_BARRIER);
        assert_false(hp_ipc_ranks_all_at_barrier(&t));
        hp_ipc_ranks_at_barrier(&t, 1);
        assert_true(hp_ipc_ranks_all_at_barrier(&t));
        /* A full stop forgets both. */
        hp_ipc_ranks_reset(&t, true);
        assert_false(t.ranks[1].held);
        assert_false(t.ranks[1].released);
        assert_int_equal(hp_ipc_ranks_wait_begin(&t), 0);
        hp_ipc_ranks_free(&t);
}

static void test_ranks_faults_and_data(void **state)
{
        struct hp_ipc_ranks t;
        char reason[64], message[256];
        cJSON *data = cJSON_Parse("{\"step\":7}");
        cJSON *list;
        char *text;

        (void)state;
        assert_int_equal(hp_ipc_ranks_init(&t, 4), 0);
        assert_int_equal(hp_ipc_ranks_fault(&t, reason, sizeof(reason),
                                            message, sizeof(message)),
                         -ENOENT);
        assert_null(hp_ipc_ranks_worker_data(&t));
        assert_int_equal(hp_ipc_ranks_operator_mode(&t), -1);

        /* Node 1 of nproc 4: rank 6 is local rank 2, group rank 1. */
        assert_int_equal(hp_ipc_ranks_set_data(&t, 2, 6, data), 0);
        assert_int_equal(hp_ipc_ranks_fail(&t, 2, 6, HP_RESTART_IN_PROCESS,
                                           NULL, NULL),
                         0);
        assert_int_equal(hp_ipc_ranks_fail(&t, 3, 7, HP_RESTART_JOB_LEVEL, "",
                                           "empty reason"),
                         0);
        assert_true(hp_ipc_ranks_any_failed(&t));
        assert_false(hp_ipc_ranks_local_plr(&t));
        assert_int_equal(hp_ipc_ranks_operator_mode(&t),
                         HP_RESTART_JOB_LEVEL);
        /* No rank gave a reason: the default names the global ranks. */
        assert_int_equal(hp_ipc_ranks_fault(&t, reason, sizeof(reason),
                                            message, sizeof(message)),
                         0);
        assert_string_equal(reason, "WorkerReportedFault");
        assert_string_equal(message,
                            "The processes reported a failure on ranks 6, 7");
        /* The first rank in local-rank order with a reason wins. */
        assert_int_equal(hp_ipc_ranks_fail(&t, 1, 5,
                                           HP_RESTART_LOCAL_PROCESS_LEVEL,
                                           "OOM", "out of memory"),
                         0);
        assert_int_equal(hp_ipc_ranks_fault(&t, reason, sizeof(reason),
                                            message, sizeof(message)),
                         0);
        assert_string_equal(reason, "OOM");
        assert_string_equal(message, "out of memory");
        assert_true(hp_ipc_ranks_local_plr(&t));

        list = hp_ipc_ranks_worker_data(&t);
        text = print(list);
        assert_string_equal(text, "[{\"rank\":6,\"group_rank\":1,"
                                  "\"local_rank\":2,\"failed\":true,"
                                  "\"data\":{\"step\":7}}]");
        free(text);
        cJSON_Delete(list);

        /* A reset keeps the data, forgets the fault and the ranks. */
        hp_ipc_ranks_reset(&t, false);
        assert_false(hp_ipc_ranks_any_failed(&t));
        assert_int_equal(hp_ipc_ranks_operator_mode(&t), -1);
        list = hp_ipc_ranks_worker_data(&t);
        text = print(list);
        assert_string_equal(text, "[{\"rank\":-1,\"group_rank\":-1,"
                                  "\"local_rank\":2,\"failed\":false,"
                                  "\"data\":{\"step\":7}}]");
        free(text);
        cJSON_Delete(list);
        /* Past the barrier the data goes, once a job_start let the rank
         * through. */
        hp_ipc_ranks_release(&t, 2);
        assert_int_equal(hp_ipc_ranks_past_barrier(&t, 2), 0);
        assert_null(hp_ipc_ranks_worker_data(&t));
        /* null data is no data; a fault without rank is group -1. */
        assert_int_equal(hp_ipc_ranks_set_data(&t, 0, -1, NULL), 0);
        assert_int_equal(hp_ipc_ranks_fail(&t, 0, -1, HP_RESTART_IN_PROCESS,
                                           NULL, NULL),
                         0);
        assert_int_equal(t.ranks[0].group_rank, -1);
        assert_null(hp_ipc_ranks_worker_data(&t));
        /* The message names it by its local rank, not as rank -1. */
        assert_int_equal(hp_ipc_ranks_fault(&t, reason, sizeof(reason),
                                            message, sizeof(message)),
                         0);
        assert_string_equal(message, "The processes reported a failure on "
                                     "ranks (local rank 0)");
        hp_ipc_ranks_reset(&t, true);
        hp_ipc_ranks_free(&t);
        cJSON_Delete(data);
}

static void test_ranks_labels(void **state)
{
        struct hp_ipc_ranks t;
        cJSON *labels = cJSON_Parse("{\"TP\":\"1\"}");
        char *text;

        (void)state;
        assert_int_equal(hp_ipc_ranks_init(&t, 1), 0);
        text = print(t.labels);
        assert_string_equal(text, "{}");
        free(text);
        assert_int_equal(hp_ipc_ranks_set_labels(&t, labels), 0);
        hp_ipc_ranks_reset(&t, true);
        text = print(t.labels);
        assert_string_equal(text, "{\"TP\":\"1\"}");
        free(text);
        hp_ipc_ranks_free(&t);
        cJSON_Delete(labels);
}

static void test_restart_modes(void **state)
{
        static const char *const names[] = {
                "in_process_restart",
                "process_level_restart",
                "job_level_restart",
                "local_process_level_restart",
        };
        enum hp_restart_mode m;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(names); i++) {
                assert_int_equal(hp_restart_mode_parse(names[i], &m), 0);
                assert_int_equal(m, (enum hp_restart_mode)i);
                assert_string_equal(hp_restart_mode_name(m), names[i]);
        }
        assert_int_equal(hp_restart_mode_parse("PROCESS_LEVEL_RESTART", &m),
                         -EINVAL);
        assert_int_equal(hp_restart_mode_parse("local_prl", &m), -EINVAL);
        assert_int_equal(hp_restart_mode_parse("", &m), -EINVAL);
}

/* ---- /status in IPR mode ---- */

static void test_status_ipr_keys(void **state)
{
        struct hp_plr plr;
        cJSON *labels = cJSON_Parse("{\"PP\":\"0\"}");
        cJSON *data = cJSON_Parse("[{\"rank\":1,\"group_rank\":0,"
                                  "\"local_rank\":1,\"failed\":true,"
                                  "\"data\":\"x\"}]");
        struct hp_op_status st = {
                .plr = &plr,
                .agent_version = "1.2.3",
                .assigned_rank = -1,
                .spare = true,
                .inprocess = true,
        };
        char *text;

        (void)state;
        hp_plr_init(&plr, 1732145837000000LL);
        plr.inprocess = true;
        text = hp_op_status_render(&st);
        assert_string_equal(
                text, "{\"status\":\"init\",\"transitions\":{\"INIT\":"
                      "\"2024-11-20T23:37:17+00:00\"},\"restartMode\":"
                      "\"in_process_restart\",\"rank_labels\":{},"
                      "\"agent_version\":\"1.2.3\",\"spare\":\"True\"}");
        free(text);

        hp_plr_transition(&plr, HP_OP_FAULTED, 1732145838000000LL, "OOM",
                          "m");
        st.restart_mode = "job_level_restart";
        st.worker_data = data;
        st.rank_labels = labels;
        st.priority = true;
        st.spare = false;
        st.assigned_rank = 0;
        st.ip_version = "v1";
        text = hp_op_status_render(&st);
        assert_string_equal(
                text, "{\"status\":\"faulted\",\"transitions\":{\"INIT\":"
                      "\"2024-11-20T23:37:17+00:00\",\"FAULTED\":\"2024-11-"
                      "20T23:37:18+00:00\"},\"reason\":\"OOM\",\"message\":"
                      "\"m\",\"restartMode\":\"job_level_restart\","
                      "\"worker_data\":[{\"rank\":1,\"group_rank\":0,"
                      "\"local_rank\":1,\"failed\":true,\"data\":\"x\"}],"
                      "\"rank_labels\":{\"PP\":\"0\"},\"ipversion\":\"v1\","
                      "\"agent_version\":\"1.2.3\",\"assigned_rank\":\"0\","
                      "\"spare\":\"False\",\"priority\":\"True\"}");
        free(text);

        /* PLR mode shows none of them, whatever the fields say. */
        st.inprocess = false;
        text = hp_op_status_render(&st);
        assert_null(strstr(text, "worker_data"));
        assert_null(strstr(text, "rank_labels"));
        assert_null(strstr(text, "priority"));
        assert_non_null(strstr(text, "\"restartMode\":"
                                     "\"process_level_restart\""));
        free(text);
        cJSON_Delete(labels);
        cJSON_Delete(data);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ipr_table),
                cmocka_unit_test(test_ipr_flag_picks_the_table),
                cmocka_unit_test(test_decide),
                cmocka_unit_test(test_ranks_barrier_queue),
                cmocka_unit_test(test_ranks_held_and_released),
                cmocka_unit_test(test_ranks_faults_and_data),
                cmocka_unit_test(test_ranks_labels),
                cmocka_unit_test(test_restart_modes),
                cmocka_unit_test(test_status_ipr_keys),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
