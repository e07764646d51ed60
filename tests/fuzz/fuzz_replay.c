/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: replay, the code behind --replay, on any log. The
 * first byte picks the options (layout, a rate, a tail or --replay-until
 * verdict, rank 0 alone or every rank, text output, the log as two
 * per-rank files), the rest is the log: timestamps, console prefixes,
 * srun labels, the agent's own lines, the lookahead, the line splitter and
 * the JSON writer. Every output line must be valid JSON, the last one the
 * summary, and an expectation check on the result must work.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"

static const char expectation[] =
        "{\"final\": {\"JobStart\": \"HEALTHY\", \"TFLOPs\": \"SLOW\"},"
        " \"state\": \"HANGING\","
        " \"transitions\": [{\"rule\": \"JobStart\", \"state\": \"HEALTHY\","
        "   \"line_no\": 1, \"time\": 0},"
        "  {\"rule\": \"Fault\", \"state\": \"FAULTED\", \"line_no\": null,"
        "   \"stream\": null}]}";

static void check_output(const char *out, size_t len)
{
        const char *p = out, *nl;
        bool summary = false;
        cJSON *line;

        FUZZ_ASSERT(len > 0 && out[len - 1] == '\n');
        while (p < out + len) {
                nl = memchr(p, '\n', (size_t)(out + len - p));
                FUZZ_ASSERT(nl != NULL && !summary);
                line = cJSON_ParseWithLength(p, (size_t)(nl - p));
                FUZZ_ASSERT(cJSON_IsObject(line));
                summary = cJSON_HasObjectItem(line, "summary");
                cJSON_Delete(line);
                p = nl + 1;
        }
        FUZZ_ASSERT(summary);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const bool rank0[1] = { true };
        struct logmon_replay_opts opts = { 0 };
        bool text = false, files = false;
        struct logmon_replay *r = NULL;
        struct logmon_replay_info info;
        char errbuf[256], *out = NULL;
        size_t out_len = 0;
        cJSON *expect;
        FILE *f;
        int err;

        if (size > 0) {
                opts.layout = (enum logmon_replay_layout)(data[0] % 4);
                opts.rate = data[0] & 4 ? 2.5 : 0;
                opts.tail_ms = data[0] & 8 ? 700000 : 0;
                if (data[0] & 16) {
                        opts.monitored = rank0;
                        opts.nmonitored = 1;
                }
                if (data[0] & 32)
                        opts.until = LOGMON_UNTIL_VERDICT;
                text = opts.text = (data[0] & 64) != 0;
                files = (data[0] & 128) != 0;
                data++;
                size--;
        }
        f = open_memstream(&out, &out_len);
        FUZZ_ASSERT(f != NULL);
        if (files && size > 2) {
                /* Two per-rank files, split at the middle. */
                static const char *const names[] = { "0", "1" };
                FILE *in[2];

                in[0] = fmemopen((void *)data, size / 2, "rb");
                in[1] = fmemopen((void *)(data + size / 2), size - size / 2,
                                 "rb");
                FUZZ_ASSERT(in[0] != NULL && in[1] != NULL);
                err = logmon_replay_files(fuzz_fixed_ruleset(), in, names, 2,
                                          &opts, f, &r);
                fclose(in[0]);
                fclose(in[1]);
        } else {
                err = logmon_replay_buffer(fuzz_fixed_ruleset(),
                                           (const char *)data, size, &opts, f,
                                           &r);
        }
        fclose(f);
        /* --replay-until verdict on a log without the agent's verdict. */
        if (err == -ENOENT && opts.until == LOGMON_UNTIL_VERDICT) {
                free(out);
                return 0;
        }
        FUZZ_ASSERT(err == 0);
        if (!text)
                check_output(out, out_len);
        free(out);

        logmon_replay_get_info(r, &info);
        FUZZ_ASSERT(info.unprefixed <= info.lines);
        expect = cJSON_Parse(expectation);
        FUZZ_ASSERT(expect != NULL);
        f = fopen("/dev/null", "w");
        FUZZ_ASSERT(f != NULL);
        FUZZ_ASSERT(logmon_expect_check(r, expect, f, errbuf,
                                        sizeof(errbuf)) >= 0);
        fclose(f);
        cJSON_Delete(expect);
        logmon_replay_free(r);
        return 0;
}
