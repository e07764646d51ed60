/* SPDX-License-Identifier: Apache-2.0 */
/* One raw option value into a number, a choice, a rank list or a spec. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "config-private.h"

int config__parse_nnodes(const struct raw_value *v, int *out_min, int *out,
                         char *errbuf, size_t errlen)
{
        const char *colon = strchr(v->text, ':');
        char min_text[32];
        int min, max;

        if (colon == NULL) {
                if (hp_parse_int(v->text, 1, 1 << 20, &min) < 0)
                        ERR("invalid value '%s' for %s: expected a node count "
                            "N or MIN:MAX",
                            v->text, v->source);
                *out = min;
                *out_min = 0;
                return 0;
        }
        if ((size_t)(colon - v->text) >= sizeof(min_text))
                ERR("invalid value '%s' for %s: expected MIN:MAX", v->text,
                    v->source);
        memcpy(min_text, v->text, (size_t)(colon - v->text));
        min_text[colon - v->text] = '\0';
        if (hp_parse_int(min_text, 1, 1 << 20, &min) < 0 ||
            hp_parse_int(colon + 1, 1, 1 << 20, &max) < 0)
                ERR("invalid value '%s' for %s: expected MIN:MAX with two "
                    "node counts",
                    v->text, v->source);
        if (min > max)
                ERR("invalid value '%s' for %s: MIN %d is above MAX %d",
                    v->text, v->source, min, max);
        *out = max;
        *out_min = min == max ? 0 : min;
        return 0;
}

int hp_config_parse_std_spec(const char *text, int nproc, uint8_t *out,
                             char *errbuf, size_t errlen)
{
        int value;

        if (strchr(text, ':') == NULL) {
                if (hp_parse_int(text, 0, 3, &value) < 0) {
                        snprintf(errbuf, errlen,
                                 "'%s': expected 0 (none), 1 (stdout), "
                                 "2 (stderr), 3 (both) or a map like 0:3,1:1",
                                 text);
                        return HP_EUSAGE;
                }
                for (int i = 0; i < nproc; i++)
                        out[i] = (uint8_t)value;
                return 0;
        }
        /* The map form: local ranks that are not listed get 0. 0xff marks
         * a rank already given: a second value for it is a mistake that
         * would otherwise be settled silently by order. */
        for (int i = 0; i < nproc; i++)
                out[i] = 0xff;
        for (const char *p = text; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                char item[32], *colon;
                int rank;

                if (len == 0 || len >= sizeof(item))
                        goto bad_item;
                memcpy(item, p, len);
                item[len] = '\0';
                colon = strchr(item, ':');
                if (colon == NULL)
                        goto bad_item;
                *colon = '\0';
                if (hp_parse_int(item, 0, INT_MAX, &rank) < 0 ||
                    hp_parse_int(colon + 1, 0, 3, &value) < 0)
                        goto bad_item;
                if (rank >= nproc) {
                        snprintf(errbuf, errlen,
                                 "'%s': local rank %d is not below "
                                 "--nproc-per-node %d",
                                 text, rank, nproc);
                        return HP_EUSAGE;
                }
                if (out[rank] != 0xff) {
                        snprintf(errbuf, errlen,
                                 "'%s': local rank %d is given twice", text,
                                 rank);
                        return HP_EUSAGE;
                }
                out[rank] = (uint8_t)value;
                p += len;
                if (*p == ',') {
                        p++;
                        if (*p == '\0')
                                goto bad_item;
                }
                continue;
bad_item:
                snprintf(errbuf, errlen,
                         "'%s': expected LOCAL_RANK:VALUE items such as "
                         "0:3,1:1 with values 0 to 3",
                         text);
                return HP_EUSAGE;
        }
        for (int i = 0; i < nproc; i++)
                if (out[i] == 0xff)
                        out[i] = 0;
        return 0;
}

/* strict: a rank at or past nproc is an error. torchrun's
 * --local-ranks-filter takes such ranks and shows nothing for them, so
 * that one command line fits nodes of different sizes. */
int config__parse_ranks_filter(const struct raw_value *v, int nproc,
                               bool strict, bool *shown, char *errbuf,
                               size_t errlen)
{
        for (int i = 0; i < nproc; i++)
                shown[i] = false;
        for (const char *p = v->text; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                char item[16];
                int rank;

                if (len == 0 || len >= sizeof(item))
                        ERR("invalid value '%s' for %s: expected a list of "
                            "local ranks like 0,3",
                            v->text, v->source);
                memcpy(item, p, len);
                item[len] = '\0';
                if (hp_parse_int(item, 0, INT_MAX, &rank) < 0)
                        ERR("invalid value '%s' for %s: '%s' is not a local "
                            "rank",
                            v->text, v->source, item);
                if (rank >= nproc && strict)
                        ERR("invalid value '%s' for %s: local rank %d is not "
                            "below --nproc-per-node %d",
                            v->text, v->source, rank, nproc);
                if (rank < nproc)
                        shown[rank] = true;
                p += len;
                if (*p == ',')
                        p++;
        }
        return 0;
}

int hp_config_check_template(const char *tmpl, char *errbuf, size_t errlen)
{
        static const struct hp_template_var probe[] = {
                { "role_name", "r" },     { "rank", "0" },
                { "local_rank", "0" },    { "group_rank", "0" },
                { "restart_count", "0" }, { "hostname", "h" },
                { "pid", "1" },           { "time", "\x01" },
        };
        char out[4096];
        int r;

        r = hp_template_expand(tmpl, probe, HP_ARRAY_SIZE(probe), out,
                               sizeof(out), NULL, errbuf, errlen);
        /* Each line's time is written into one place in its prefix. */
        if (r == 0 && strchr(out, '\x01') != strrchr(out, '\x01')) {
                snprintf(errbuf, errlen,
                         "${time} appears more than once in "
                         "template '%s'",
                         tmpl);
                return HP_ECONFIG;
        }
        return r;
}

int config__parse_seconds(const struct raw_value *v, uint64_t *out,
                          char *errbuf, size_t errlen)
{
        if (hp_parse_seconds_ms(v->text, out) < 0)
                ERR("invalid value '%s' for %s: expected seconds, e.g. 15 or "
                    "0.5",
                    v->text, v->source);
        return 0;
}

int config__parse_int_value(const struct raw_value *v, int min, int max,
                            int *out, char *errbuf, size_t errlen)
{
        if (hp_parse_int(v->text, min, max, out) < 0)
                ERR("invalid value '%s' for %s: expected an integer from %d "
                    "to %d",
                    v->text, v->source, min, max);
        return 0;
}

int config__parse_choice(const struct raw_value *v,
                         const char *const *choices, size_t n, int *index,
                         char *errbuf, size_t errlen)
{
        char list[256] = "";

        for (size_t i = 0; i < n; i++) {
                if (strcmp(v->text, choices[i]) == 0) {
                        *index = (int)i;
                        return 0;
                }
                if (i > 0)
                        strncat(list, ", ", sizeof(list) - strlen(list) - 1);
                strncat(list, choices[i], sizeof(list) - strlen(list) - 1);
        }
        ERR("invalid value '%s' for %s: expected one of %s", v->text,
            v->source, list);
}

int hp_config_parse_dup_filters(const char *text, struct hp_dup_filters *out,
                                char *errbuf, size_t errlen)
{
        size_t used = 0;

        /* As torchrun's comma_separated_list: ",," becomes a comma (read
         * left to right), then the text splits at each comma. */
        out->count = 1;
        out->at[0] = 0;
        out->len[0] = 0;
        for (const char *p = text; *p; p++) {
                if (*p == ',' && p[1] != ',') {
                        if (out->count == HP_DUP_FILTERS_MAX) {
                                snprintf(errbuf, errlen,
                                         "'%.100s': more than %d filters",
                                         text, HP_DUP_FILTERS_MAX);
                                return HP_EUSAGE;
                        }
                        out->at[out->count] = (uint16_t)used;
                        out->len[out->count++] = 0;
                        continue;
                }
                if (used + 1 >= sizeof(out->text)) {
                        snprintf(errbuf, errlen,
                                 "'%.100s...': the filters hold more than "
                                 "%zu bytes",
                                 text, sizeof(out->text) - 1);
                        return HP_EUSAGE;
                }
                out->text[used++] = *p;
                out->len[out->count - 1]++;
                if (*p == ',')
                        p++; /* the second of ",," */
        }
        out->text[used] = '\0';
        return 0;
}

/* A number in (min, max]. */
int config__parse_double_value(const struct raw_value *v, double min,
                               double max, double *out, char *errbuf,
                               size_t errlen)
{
        char *end;
        double d;

        errno = 0;
        d = strtod(v->text, &end);
        if (v->text[0] == '\0' || *end != '\0' || errno != 0 || !(d > min) ||
            d > max)
                ERR("invalid value '%s' for %s: expected a number above %g, "
                    "at most %g",
                    v->text, v->source, min, max);
        *out = d;
        return 0;
}

/* Here, with the values: the conversions ask it, and so does main. */
bool hp_config_operator_mode(const struct hp_config *cfg)
{
        return cfg->rdzv_backend == HP_RDZV_HYPERPOD && !cfg->standalone;
}
