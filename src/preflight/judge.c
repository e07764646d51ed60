/* SPDX-License-Identifier: Apache-2.0 */
/* The verdict on hyperpodrun-nccl-check's output: pure, for the tests. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hyperpod/preflight.h"

/* The program's exit status for a missing library. */
#define HELPER_EXIT_MISSING 3

static double number(const cJSON *o, const char *key)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int hp_preflight_judge(const char *output, size_t len, int64_t exit_status,
                       int term_signal, bool timed_out, double timeout_s,
                       double min_busbw, struct hp_preflight_result *res)
{
        const char *p = output, *end = output + len;
        const char *error = NULL;
        bool ok = false;
        cJSON *last = NULL;

        memset(res, 0, sizeof(*res));
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = (size_t)((nl ? nl : end) - p);
                cJSON *o = cJSON_ParseWithLength(p, n);

                p += n + 1;
                if (!cJSON_IsObject(o)) {
                        cJSON_Delete(o);
                        continue;
                }
                if (cJSON_GetObjectItemCaseSensitive(o, "size") != NULL) {
                        if (res->nsizes < HP_PREFLIGHT_MAX_SIZES) {
                                struct hp_preflight_size
                                        *s = &res->sizes[res->nsizes++];
                                s->bytes = (uint64_t)number(o, "size");
                                s->time_us = number(o, "time_us");
                                s->algbw = number(o, "algbw");
                                s->busbw = number(o, "busbw");
                        }
                        cJSON_Delete(o);
                        continue;
                }
                cJSON_Delete(last);
                last = o;
        }
        if (last != NULL) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(last, "ok");
                const cJSON *e = cJSON_GetObjectItemCaseSensitive(last,
                                                                  "error");
                ok = cJSON_IsTrue(v);
                error = cJSON_IsString(e) ? e->valuestring : NULL;
                if (ok) {
                        res->gpus = (int)number(last, "gpus");
                        res->algbw = number(last, "algbw");
                        res->busbw = number(last, "busbw");
                }
        }
        if (timed_out) {
                snprintf(res->reason, sizeof(res->reason),
                         "the NCCL all-reduce did not finish within %.3g s "
                         "(--preflight-timeout)%s",
                         timeout_s,
                         res->nsizes == 0 ? " and measured nothing" : "");
        } else if (term_signal != 0) {
                snprintf(res->reason, sizeof(res->reason),
                         "the NCCL check was killed by signal %d",
                         term_signal);
        } else if (exit_status == HELPER_EXIT_MISSING) {
                res->unavailable = true;
                snprintf(res->reason, sizeof(res->reason), "%s",
                         error ? error
                               : "NCCL or the CUDA runtime is missing");
        } else if (exit_status != 0 || !ok) {
                snprintf(res->reason, sizeof(res->reason),
                         "the NCCL all-reduce failed: %s",
                         error ? error
                               : "the check exited without a verdict");
                if (exit_status == 0 && error == NULL)
                        snprintf(res->reason, sizeof(res->reason),
                                 "the NCCL check exited 0 without a verdict");
        } else if (res->busbw < min_busbw) {
                snprintf(
                        res->reason, sizeof(res->reason),
                        "the NCCL all-reduce over %d GPU%s reached %.3f GB/s "
                        "bus bandwidth (%.3f GB/s algorithm), under "
                        "--preflight-min-busbw %.3f",
                        res->gpus, res->gpus == 1 ? "" : "s", res->busbw,
                        res->algbw, min_busbw);
        } else {
                res->passed = true;
                snprintf(res->reason, sizeof(res->reason),
                         "NCCL all-reduce over %d GPU%s: %.3f GB/s bus "
                         "bandwidth, %.3f GB/s algorithm, %zu sizes",
                         res->gpus, res->gpus == 1 ? "" : "s", res->busbw,
                         res->algbw, res->nsizes);
        }
        cJSON_Delete(last);
        return 0;
}
