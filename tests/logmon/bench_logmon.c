/* SPDX-License-Identifier: Apache-2.0 */
/* Lines per second through the rule engine: the AWS example rules (the
 * four that read metrics and progress, or all six with "all") over
 * 110-byte training log lines, one stream, JIT or not. Run by hand:
 *
 *   bench-logmon [lines] [jit|nojit] [four|all|pipeline] [KIND]
 *
 * "pipeline" is the set of bench/bench_pipeline.py: JobStart,
 * JobHangingDetection, NoS3CheckpointingDetection, LowThroughputDetection.
 * KIND (mixed, progress, info or nccl) runs that kind of line alone, for
 * perf stat.
 *
 *   bench-logmon [lines] floor
 *
 * is no engine: the least any engine must do with PCRE2 for the pipeline
 * set on a progress line. Two of its rules match every progress line, so
 * no prefilter can skip them: one JIT search each for the text after
 * their ".*" ('training_loss_step': and 'samples\/sec': with the
 * number), unanchored, from the line's start. That leaves out what the
 * patterns mean beyond it (the "[Epoch 0 Batch" part, greedy ".*"
 * taking the last occurrence), the number's parse, the two rules that do
 * not match and all bookkeeping: a floor, not an engine.
 *
 * Not a test: timings depend on the machine. It reads the clock, which
 * the engine itself never does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "hyperpod/logmon.h"

static const char *const seed_rules =
        "[{\"name\": \"JobStart\", \"logPattern\": "
        "\".*Experiment configuration.*\", "
        "\"expectedStartCutOffInSeconds\": 120},"
        "{\"name\": \"JobHangingDetection\", \"logPattern\": "
        "\".*\\\\[Epoch 0 Batch \\\\d+.*'training_loss_step': "
        "(\\\\d+(\\\\.\\\\d+)?).*\", \"expectedStartCutOffInSeconds\": 600, "
        "\"expectedRecurringFrequencyInSeconds\": 300},"
        "{\"name\": \"NoS3CheckpointingDetection\", \"logPattern\": "
        "\".*The checkpoint is finalized. All shards is written.*\", "
        "\"expectedStartCutOffInSeconds\": 1800, "
        "\"expectedRecurringFrequencyInSeconds\": 600},"
        "{\"name\": \"LowThroughputDetection\", \"logPattern\": "
        "\".*\\\\[Epoch 0 Batch \\\\d+.*'samples\\\\/sec': "
        "(\\\\d+(\\\\.\\\\d+)?).*\", \"metricThreshold\": 80, "
        "\"operator\": \"lteq\", \"metricEvaluationDataPoints\": 25},"
        "{\"name\": \"LossSpikeDetection\", \"logPattern\": "
        "\".*training_loss_step (\\\\d+(?:\\\\.\\\\d+)?).*\", "
        "\"metricThreshold\": 2.0, \"operator\": \"gt\", "
        "\"metricEvaluationDataPoints\": 5},"
        "{\"name\": \"TFLOPs\", \"logPattern\": \".* (.+)TFLOPs.*\", "
        "\"expectedRecurringFrequencyInSeconds\": 5, "
        "\"metricThreshold\": 100, \"operator\": \"lt\", "
        "\"metricEvaluationDataPoints\": 5}]";

/* Three kinds of 110-byte lines: a progress line the metric rules match,
 * and two that no rule matches (the common case in real logs). */
static const char *const lines[] = {
        "[Epoch 0 Batch 4711] {'training_loss_step': 1.2345, "
        "'samples/sec': 123.45, 'lr': 0.0001, 'grad_norm': 0.98765}",
        "2025-06-17 05:51:29,300 INFO rank0 dataloader worker 3 prefetched "
        "shard 00042 of 00128 (cache hit ratio 0.97)",
        "2025-06-17 05:51:29,301 WARNING NCCL INFO Channel 07/0 : 0[0] -> "
        "1[1] via P2P/IPC/read, bytes 1048576, ok",
};

static double seconds_since(const struct timespec *a)
{
        struct timespec b;

        clock_gettime(CLOCK_MONOTONIC, &b);
        return (double)(b.tv_sec - a->tv_sec) +
               (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

static int floor_run(long n)
{
        static const char *const tails[] = {
                "'training_loss_step': (\\d+(\\.\\d+)?)",
                "'samples\\/sec': (\\d+(\\.\\d+)?)",
        };
        pcre2_code *code[2];
        pcre2_match_data *md;
        size_t len = strlen(lines[0]);
        struct timespec a;
        double secs;
        long i, found = 0;
        PCRE2_SIZE offset;
        int k, err;

        for (k = 0; k < 2; k++) {
                code[k] = pcre2_compile((PCRE2_SPTR)tails[k],
                                        PCRE2_ZERO_TERMINATED, 0, &err,
                                        &offset, NULL);
                if (code[k] == NULL ||
                    pcre2_jit_compile(code[k], PCRE2_JIT_COMPLETE) != 0) {
                        fprintf(stderr, "floor: cannot compile %s\n",
                                tails[k]);
                        return 1;
                }
        }
        md = pcre2_match_data_create_from_pattern(code[0], NULL);
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (i = 0; i < n; i++)
                for (k = 0; k < 2; k++)
                        found += pcre2_jit_match(code[k],
                                                 (PCRE2_SPTR)lines[0], len, 0,
                                                 0, md, NULL) > 0;
        secs = seconds_since(&a);
        /* Both must have matched every line, or the floor measured the
         * wrong thing. */
        if (found != 2 * n) {
                fprintf(stderr, "floor: %ld matches for %ld lines\n", found,
                        n);
                return 1;
        }
        printf("floor 2 searches, jit: %.0f lines/s (%.0f ns/line)\n",
               (double)n / secs, secs * 1e9 / (double)n);
        pcre2_match_data_free(md);
        for (k = 0; k < 2; k++)
                pcre2_code_free(code[k]);
        return 0;
}

int main(int argc, char **argv)
{
        long n = argc > 1 ? atol(argv[1]) : 2000000;
        const char *set = argc > 3 ? argv[3] : "four";
        const char *only = argc > 4 ? argv[4] : NULL;
        /* Indices into the six seed rules. */
        static const int four[] = { 0, 1, 3, 4 }, pipeline[] = { 0, 1, 2, 3 };
        const int *pick = strcmp(set, "pipeline") == 0 ? pipeline : four;
        struct logmon_ruleset_opts opts = {
                .no_jit = argc > 2 && strcmp(argv[2], "nojit") == 0,
        };
        struct logmon_ruleset *rs;
        struct logmon_stream *s;
        struct logmon_events ev;
        struct timespec a;
        cJSON *rules, *six;
        char errbuf[512];
        double secs;
        size_t len[3];
        long i;
        int k;

        if (argc > 2 && strcmp(argv[2], "floor") == 0)
                return floor_run(n);
        six = cJSON_Parse(seed_rules);
        rules = six;
        if (strcmp(set, "all") != 0) {
                /* "four": start, hang, throughput and loss spike. */
                rules = cJSON_CreateArray();
                for (k = 0; k < 4; k++)
                        cJSON_AddItemToArray(
                                rules,
                                cJSON_Duplicate(cJSON_GetArrayItem(six,
                                                                   pick[k]),
                                                true));
                cJSON_Delete(six);
        }
        if (logmon_ruleset_new(rules, &opts, &rs, errbuf, sizeof(errbuf))) {
                fprintf(stderr, "%s\n", errbuf);
                return 1;
        }
        cJSON_Delete(rules);
        s = logmon_stream_new(rs);
        logmon_stream_start(s, 0);
        for (k = 0; k < 3; k++)
                len[k] = strlen(lines[k]);

        for (k = 0; k < 4; k++) {
                const char *which[] = { "mixed", "progress", "info", "nccl" };

                if (only != NULL && strcmp(only, which[k]) != 0)
                        continue;
                clock_gettime(CLOCK_MONOTONIC, &a);
                for (i = 0; i < n; i++) {
                        int l = k == 0 ? (int)(i % 3) : k - 1;

                        logmon_stream_feed(s, lines[l], len[l],
                                           (uint64_t)i / 1000, &ev);
                }
                secs = seconds_since(&a);
                printf("%-8s %zu rules, %s: %.0f lines/s (%.0f ns/line)\n",
                       which[k], logmon_ruleset_count(rs),
                       logmon_ruleset_jit(rs) ? "jit" : "interpreter",
                       (double)n / secs, secs * 1e9 / (double)n);
        }
        logmon_stream_free(s);
        logmon_ruleset_unref(rs);
        return 0;
}
