/* SPDX-License-Identifier: Apache-2.0 */
/* Inside the kmsg module. */
#ifndef HP_KMSG_PRIVATE_H
#define HP_KMSG_PRIVATE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "hyperpod/kmsg.h"

struct kmsg_rule {
        enum kmsg_rule_type type;
        char *reason;
        char *condition;
        pcre2_code *code; /* "(?:pattern)\z" */
        pcre2_match_data *match;
        char *warning; /* why text a user writes could match, or
                                  * NULL */
};

struct kmsg_rules {
        struct kmsg_rule *rules;
        size_t count;
        size_t buffer_size; /* lines kept for multi-line patterns */
        uint64_t lookback_us;
        char *source;
};

int kmsg__parse_duration(const char *text, uint64_t *out_us);

#endif
