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
 * Not a test: timings depend on the machine. It reads the clock, which
 * the engine itself never does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        struct timespec a, b;
        cJSON *rules, *six;
        char errbuf[512];
        double secs;
        size_t len[3];
        long i;
        int k;

        six = cJSON_Parse(seed_rules);
        rules = six;
        if (strcmp(set, "all") != 0) {
                /* "four": start, hang, throughput and loss spike. */
                rules = cJSON_CreateArray();
                for (k = 0; k < 4; k++)
                        cJSON_AddItemToArray(rules, cJSON_Duplicate(
                                cJSON_GetArrayItem(six, pick[k]), true));
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
                clock_gettime(CLOCK_MONOTONIC, &b);
                secs = (double)(b.tv_sec - a.tv_sec) +
                       (double)(b.tv_nsec - a.tv_nsec) / 1e9;
                printf("%-8s %zu rules, %s: %.0f lines/s (%.0f ns/line)\n",
                       which[k], logmon_ruleset_count(rs),
                       logmon_ruleset_jit(rs) ? "jit" : "interpreter",
                       (double)n / secs, secs * 1e9 / (double)n);
        }
        logmon_stream_free(s);
        logmon_ruleset_unref(rs);
        return 0;
}
