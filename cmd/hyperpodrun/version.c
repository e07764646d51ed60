/* SPDX-License-Identifier: Apache-2.0 */
/* --version: what this binary is and what it carries. A bug report or a
 * "does this image's binary have JIT" question needs the libraries' own
 * versions, which a static binary no longer gets from the system. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <http_parser.h>
#include <pcre2.h>
#include <uv.h>
#include <yaml.h>

#include "hp-commit.h"
#include "hp-config.h"
#include "version.h"

/* PCRE2 was built with JIT support and this process may map executable
 * memory (a hardened kernel or seccomp policy may refuse it): the rules are
 * then matched by the JIT, otherwise by the interpreter. */
static bool pcre2_jit_works(void)
{
        uint32_t built_in = 0;
        pcre2_code *code;
        int err;
        PCRE2_SIZE offset;
        bool ok;

        if (pcre2_config(PCRE2_CONFIG_JIT, &built_in) < 0 || !built_in)
                return false;
        code = pcre2_compile((PCRE2_SPTR) "NCCL (error|timeout)",
                             PCRE2_ZERO_TERMINATED, 0, &err, &offset, NULL);
        if (code == NULL)
                return false;
        ok = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
        pcre2_code_free(code);
        return ok;
}

void hp_version_print(FILE *out)
{
        char pcre2_version[64] = "unknown";
        unsigned long hp = http_parser_version();

        (void)pcre2_config(PCRE2_CONFIG_VERSION, pcre2_version);
        fprintf(out, "hyperpodrun %s (commit %s, %s)\n", HP_VERSION,
                HP_COMMIT, HP_STATIC ? "static" : "dynamic");
        fprintf(out, "libuv %s\n", uv_version_string());
        fprintf(out, "PCRE2 %s (JIT %s)\n", pcre2_version,
                pcre2_jit_works() ? "yes" : "no");
        fprintf(out, "cJSON %s\n", cJSON_Version());
        fprintf(out, "libyaml %s\n", yaml_get_version_string());
        fprintf(out, "http-parser %lu.%lu.%lu\n", (hp >> 16) & 255,
                (hp >> 8) & 255, hp & 255);
}
