/* SPDX-License-Identifier: Apache-2.0 */
/* Shared inside the config module: raw values and their parsers. */
#ifndef HP_CONFIG_PRIVATE_H
#define HP_CONFIG_PRIVATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hyperpod/config.h"
#include "options.h"

/* A raw value and where it came from, kept until every option is known so
 * that cross-checks can name their sources too. */
struct raw_value {
        const char *text;
        char source[80];
};

/* Converts option id, or the options converted with it, from raw. */
typedef int (*convert_fn)(struct hp_config *cfg, const struct raw_value *raw,
                          enum hp_option_id id, char *errbuf, size_t errlen);

#define ERR(...)                                                             \
        do {                                                                 \
                snprintf(errbuf, errlen, __VA_ARGS__);                       \
                return HP_EUSAGE;                                            \
        } while (0)

/* probe.c: --nproc-per-node, counting GPUs, NeuronCores or CPUs. */
int config__parse_nproc(const struct raw_value *v, int *out, char *errbuf,
                        size_t errlen);

/* values.c: one raw value into a number, a choice or a list. */
int config__parse_nnodes(const struct raw_value *v, int *min, int *max,
                         char *errbuf, size_t errlen);
int config__parse_ranks_filter(const struct raw_value *v, int nproc,
                               bool strict, bool *out, char *errbuf,
                               size_t errlen);
int config__parse_seconds(const struct raw_value *v, uint64_t *out,
                          char *errbuf, size_t errlen);
int config__parse_int_value(const struct raw_value *v, int min, int max,
                            int *out, char *errbuf, size_t errlen);
int config__parse_choice(const struct raw_value *v,
                         const char *const *choices, size_t n, int *index,
                         char *errbuf, size_t errlen);
int config__parse_double_value(const struct raw_value *v, double min,
                               double max, double *out, char *errbuf,
                               size_t errlen);

/* convert.c: every raw value into struct hp_config, then the defaults
 * and cross-checks that depend on several. */
int config__convert_values(struct hp_config *cfg, struct raw_value *raw,
                           char *errbuf, size_t errlen);

#endif
