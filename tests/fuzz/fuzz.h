/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the libFuzzer targets: the invariant check and a rule set
 * that exercises every field, compiled once. */
#ifndef HP_FUZZ_H
#define HP_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hyperpod/logmon.h"

/* A broken invariant is a crash for libFuzzer, which keeps the input. */
#define FUZZ_ASSERT(cond)                                                    \
        do {                                                                 \
                if (!(cond)) {                                               \
                        fprintf(stderr, "%s:%d: invariant broken: %s\n",     \
                                __FILE__, __LINE__, #cond);                  \
                        abort();                                             \
                }                                                            \
        } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The six rules of examples/rules plus rules that use what those do not:
 * stopPattern, faultOnMatch, the other operators, zero data points, a
 * zero cut-off and a pattern that backtracks. */
static const char fuzz_rules_json[] =
        "[{\"name\": \"JobStart\", \"logPattern\": "
        "\".*Experiment configuration.*\", \"expectedStartCutOffInSeconds\": "
        "120},"
        "{\"name\": \"JobHangingDetection\", \"logPattern\": "
        "\".*\\\\[Epoch 0 Batch \\\\d+.*'training_loss_step': "
        "(\\\\d+(\\\\.\\\\d+)?).*\", \"expectedStartCutOffInSeconds\": 600, "
        "\"expectedRecurringFrequencyInSeconds\": 300},"
        "{\"name\": \"LowThroughputDetection\", \"logPattern\": "
        "\".*\\\\[Epoch 0 Batch \\\\d+.*'samples\\\\/sec': "
        "(\\\\d+(\\\\.\\\\d+)?).*\", \"metricThreshold\": 80, \"operator\": "
        "\"lteq\", \"metricEvaluationDataPoints\": 25},"
        "{\"name\": \"LossSpikeDetection\", \"logPattern\": "
        "\".*training_loss_step (\\\\d+(?:\\\\.\\\\d+)?).*\", "
        "\"metricThreshold\": 2.0, \"operator\": \"gt\", "
        "\"metricEvaluationDataPoints\": 5},"
        "{\"name\": \"TFLOPs\", \"logPattern\": \".* (.+)TFLOPs.*\", "
        "\"expectedRecurringFrequencyInSeconds\": 5, \"metricThreshold\": "
        "100, \"operator\": \"lt\", \"metricEvaluationDataPoints\": 5},"
        "{\"name\": \"Stop\", \"logPattern\": \"pre (\\\\S+)\", "
        "\"stopPattern\": \".*done.*\", \"metricThreshold\": \"1_000\", "
        "\"operator\": \"gteq\", \"expectedRecurringFrequencyInSeconds\": "
        "2.5},"
        "{\"name\": \"Fault\", \"logPattern\": \".*(CUDA error|NCCL).*\", "
        "\"faultOnMatch\": true},"
        "{\"name\": \"Eq\", \"logPattern\": \"(?P<v>[-+\\\\w.]+)=\", "
        "\"metricThreshold\": 0, \"operator\": \"eq\", "
        "\"metricEvaluationDataPoints\": 0, \"expectedStartCutOffInSeconds\":"
        " 0},"
        "{\"name\": \"Backtrack\", \"logPattern\": \"(a|aa)+$\"}]";

/* full_only: the same rules matched with their patterns as written only
 * (struct logmon_ruleset_opts), for targets that compare the two. */
static inline struct logmon_ruleset *fuzz_fixed_ruleset_opt(bool full_only)
{
        static struct logmon_ruleset *cache[2];
        const struct logmon_ruleset_opts opts = { .full_only = full_only };
        struct logmon_ruleset **rs = &cache[full_only];
        char errbuf[512];
        cJSON *rules;

        if (*rs != NULL)
                return *rs;
        rules = cJSON_Parse(fuzz_rules_json);
        if (rules == NULL ||
            logmon_ruleset_new(rules, &opts, rs, errbuf, sizeof(errbuf))) {
                fprintf(stderr, "fuzz: the fixed rules do not load: %s\n",
                        rules == NULL ? "invalid JSON" : errbuf);
                abort();
        }
        cJSON_Delete(rules);
        return *rs;
}

static inline struct logmon_ruleset *fuzz_fixed_ruleset(void)
{
        return fuzz_fixed_ruleset_opt(false);
}

#endif
