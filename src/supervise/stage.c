/* SPDX-License-Identifier: Apache-2.0 */
/* The stages of an attempt, and what a hook's single process counts as. */
#include "hyperpod/supervise.h"

const char *hp_stage_name(enum hp_stage stage)
{
        static const char *const names[] = {
                [HP_STAGE_PRE_TRAIN] = "pre_train",
                [HP_STAGE_TRAIN] = "train",
                [HP_STAGE_POST_TRAIN] = "post_train",
        };
        return names[stage];
}

int hp_stage_local_rank(enum hp_stage stage, int local_rank)
{
        return stage == HP_STAGE_TRAIN ? local_rank : 0;
}

int hp_stage_processes(enum hp_stage stage, int nproc)
{
        return stage == HP_STAGE_TRAIN ? nproc : 1;
}
