/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the rule parser on any bytes, as JSON (fuzz-rules-json)
 * or as YAML (fuzz-rules-yaml, built from this file with FUZZ_YAML), then
 * validation and compilation of whatever parsed, then a few lines and a
 * deadline through the rules that compiled. Errors must be NUL-terminated
 * messages, success must hand over a list, and nothing may leak. */
#include <string.h>

#include "fuzz.h"
#include "logmon-private.h"

static const char *const lines[] = {
        "2025-06-17 05:51:29,300 INFO Experiment configuration: {}",
        ("[Epoch 0 Batch 7/100] {'training_loss_step': 2.5, "
         "'samples/sec': 79.0}"),
        "step 3 | 93.5 TFLOPs | training_loss_step 3.25",
        "",
        "\xff\xfe invalid UTF-8 \xc3",
};

static void exercise(struct logmon_ruleset *rs)
{
        struct logmon_stream *s = logmon_stream_new(rs);
        struct logmon_events ev;
        uint64_t now = 0, at;
        size_t i;

        FUZZ_ASSERT(s != NULL);
        logmon_stream_start(s, now);
        for (i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
                logmon_stream_feed(s, lines[i], strlen(lines[i]), now, &ev);
                FUZZ_ASSERT(ev.n <= LOGMON_EVENTS_MAX);
                now += 1000;
        }
        at = logmon_stream_next_deadline(s);
        if (at != UINT64_MAX) {
                logmon_stream_tick(s, at, &ev);
                FUZZ_ASSERT(logmon_stream_next_deadline(s) > at);
        }
        logmon_stream_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct logmon_ruleset *rs = NULL;
        cJSON *rules = NULL;
        char errbuf[1024];
        int err;

        memset(errbuf, 'x', sizeof(errbuf));
#ifdef FUZZ_YAML
        err = logmon__config_parse_yaml("fuzz.yaml", (const char *)data, size,
                                        &rules, errbuf, sizeof(errbuf));
#else
        err = logmon__config_parse_json("fuzz.json", (const char *)data, size,
                                        &rules, errbuf, sizeof(errbuf));
#endif
        if (err != 0) {
                FUZZ_ASSERT(err < 0 && rules == NULL);
                FUZZ_ASSERT(memchr(errbuf, '\0', sizeof(errbuf)) != NULL);
                return 0;
        }
        FUZZ_ASSERT(cJSON_IsArray(rules));
        memset(errbuf, 'x', sizeof(errbuf));
        err = logmon_ruleset_new(rules, NULL, &rs, errbuf, sizeof(errbuf));
        cJSON_Delete(rules);
        if (err != 0) {
                FUZZ_ASSERT(err < 0 && rs == NULL);
                FUZZ_ASSERT(memchr(errbuf, '\0', sizeof(errbuf)) != NULL);
                return 0;
        }
        exercise(rs);
        logmon_ruleset_unref(rs);
        return 0;
}
