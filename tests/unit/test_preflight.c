/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the --preflight nccl verdict (src/preflight/judge.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/preflight.h"

#define SIZE(b, bw)                                                          \
        "{\"size\":" #b ",\"time_us\":10.0,\"algbw\":" #bw ",\"busbw\":" #bw \
        "}\n"

struct judge_case {
        const char *output;
        int64_t status;
        int signal;
        bool timed_out;
        double min_busbw;
        bool passed, unavailable;
        size_t nsizes;
        double busbw;
        const char *reason; /* substring */
};

/* A table of its own shape: a row's output is SIZE() lines and text. */
/* clang-format off */
static const struct judge_case cases[] = {
        { SIZE(1048576, 10.5) SIZE(2097152, 20.25)
          "{\"ok\":true,\"gpus\":8,\"algbw\":12,\"busbw\":20.25}\n",
          0, 0, false, 20, true, false, 2, 20.25,
          "over 8 GPUs: 20.250 GB/s bus bandwidth" },
        { SIZE(1048576, 1.5)
          "{\"ok\":true,\"gpus\":2,\"algbw\":1.5,\"busbw\":1.5}\n",
          0, 0, false, 20, false, false, 1, 1.5,
          "reached 1.500 GB/s bus bandwidth (1.500 GB/s algorithm), under "
          "--preflight-min-busbw 20.000" },
        { "{\"ok\":false,\"exit\":1,\"error\":"
          "\"ncclAllReduce: unhandled system error\"}\n",
          1, 0, false, 0, false, false, 0, 0,
          "the NCCL all-reduce failed: ncclAllReduce: unhandled system error" },
        { "{\"ok\":false,\"exit\":3,\"error\":"
          "\"cannot load libnccl.so.2 (NCCL): x\"}\n",
          3, 0, false, 0, false, true, 0, 0, "cannot load libnccl.so.2" },
        { "", 0, 9, true, 0, false, false, 0, 0,
          "did not finish within 2 s (--preflight-timeout) and measured "
          "nothing" },
        { SIZE(1048576, 3), 0, 9, true, 0, false, false, 1, 0,
          "did not finish within 2 s (--preflight-timeout)" },
        { "", 0, 11, false, 0, false, false, 0, 0, "killed by signal 11" },
        { "garbage\n{\"size\":", 0, 0, false, 0, false, false, 0, 0,
          "exited 0 without a verdict" },
        { SIZE(1048576, 3), 1, 0, false, 0, false, false, 1, 0,
          "failed: the check exited without a verdict" },
};
/* clang-format on */

static void test_judge(void **state)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                const struct judge_case *c = &cases[i];
                struct hp_preflight_result r;

                hp_preflight_judge(c->output, strlen(c->output), c->status,
                                   c->signal, c->timed_out, 2.0, c->min_busbw,
                                   &r);
                if (r.passed != c->passed ||
                    r.unavailable != c->unavailable ||
                    r.nsizes != c->nsizes || r.busbw != c->busbw ||
                    strstr(r.reason, c->reason) == NULL)
                        fail_msg(
                                "case %zu: passed %d unavailable %d sizes %zu "
                                "busbw %g reason '%s'",
                                i, r.passed, r.unavailable, r.nsizes, r.busbw,
                                r.reason);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_judge),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
