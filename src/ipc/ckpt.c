/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoint discovery (docs/inprocess-restart-and-checkpoints.md,
 * "Checkpoint discovery"): which steps every local rank has saved,
 * and the latest one that all of them completed. Pure: the caller passes
 * the time, nothing here touches the loop. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"

#include "ipc-private.h"

/* Integers above 2^53 do not survive a JSON double. */
#define JSON_INT_MAX 9007199254740992.0

int hp_ckpt_init(struct hp_ckpt *t, int nranks)
{
        memset(t, 0, sizeof(*t));
        if (nranks < 1)
                return -EINVAL;
        t->nranks = nranks;
        t->words = ((size_t)nranks + 63) / 64;
        return 0;
}

static void step_free(struct hp_ckpt_step *s)
{
        free(s->path);
        free(s->ranks);
}

static void steps_clear(struct hp_ckpt *t)
{
        for (size_t i = 0; i < t->nsteps; i++)
                step_free(&t->steps[i]);
        free(t->steps);
        t->steps = NULL;
        t->nsteps = 0;
}

static void seeds_clear(struct hp_ckpt *t)
{
        for (size_t i = 0; i < t->nseeds; i++) {
                free(t->seeds[i].prefix);
                free(t->seeds[i].path);
        }
        free(t->seeds);
        t->seeds = NULL;
        t->nseeds = 0;
}

void hp_ckpt_free(struct hp_ckpt *t)
{
        steps_clear(t);
        seeds_clear(t);
        free(t->prefix);
        free(t->max_path);
        t->prefix = NULL;
        t->max_path = NULL;
}

/* Forgets the steps above `above`. */
static void steps_filter(struct hp_ckpt *t, int64_t above)
{
        size_t n = 0;

        for (size_t i = 0; i < t->nsteps; i++) {
                if (t->steps[i].step > above)
                        step_free(&t->steps[i]);
                else
                        t->steps[n++] = t->steps[i];
        }
        t->nsteps = n;
}

/* Forgets the steps at or below `upto`. */
static void steps_drop_upto(struct hp_ckpt *t, int64_t upto)
{
        size_t n = 0;

        for (size_t i = 0; i < t->nsteps; i++) {
                if (t->steps[i].step <= upto)
                        step_free(&t->steps[i]);
                else
                        t->steps[n++] = t->steps[i];
        }
        t->nsteps = n;
}

static int set_max(struct hp_ckpt *t, int64_t step, const char *path,
                   uint64_t now_ms)
{
        char *copy = NULL;

        if (path != NULL && (copy = strdup(path)) == NULL)
                return -ENOMEM;
        free(t->max_path);
        t->max_path = copy;
        t->max_step = step;
        t->have_max = true;
        t->max_at_ms = now_ms;
        return 0;
}

bool hp_ipc__json_int(const cJSON *v, int64_t *out)
{
        double d;

        if (!cJSON_IsNumber(v))
                return false;
        d = v->valuedouble;
        if (d != d || d > JSON_INT_MAX || d < -JSON_INT_MAX ||
            d != (double)(int64_t)d)
                return false;
        *out = (int64_t)d;
        return true;
}

int hp_ckpt_set_progress(struct hp_ckpt *t, const cJSON *progress)
{
        const cJSON *entry;
        size_t n = 0;

        /* Each /start replaces the last one's progress, even when it
         * brings none. */
        seeds_clear(t);
        if (progress == NULL || !cJSON_IsObject(progress))
                return 0;
        t->seeds = calloc((size_t)cJSON_GetArraySize(progress) + 1,
                          sizeof(*t->seeds));
        if (t->seeds == NULL)
                return -ENOMEM;
        cJSON_ArrayForEach (entry, progress) {
                const cJSON *count = cJSON_GetObjectItemCaseSensitive(
                        entry, "progressCount");
                const cJSON *data = cJSON_GetObjectItemCaseSensitive(
                        entry, "progressData");
                struct hp_ckpt_seed *s = &t->seeds[n];
                int64_t step;

                /* As Python's int(): a numeric string counts too. */
                if (cJSON_IsString(count) &&
                    hp_parse_u64(count->valuestring, INT64_MAX,
                                 (uint64_t *)&step) == 0) {
                        /* parsed */
                } else if (!hp_ipc__json_int(count, &step)) {
                        hp_log_warn("/start progress[\"%s\"]: progressCount "
                                    "is not an integer; entry ignored",
                                    entry->string);
                        continue;
                }
                if (!cJSON_IsString(data) && !cJSON_IsNull(data)) {
                        hp_log_warn("/start progress[\"%s\"]: progressData "
                                    "is not a string; entry ignored",
                                    entry->string);
                        continue;
                }
                s->prefix = strdup(entry->string);
                s->path = cJSON_IsString(data) ? strdup(data->valuestring)
                                               : NULL;
                if (s->prefix == NULL ||
                    (cJSON_IsString(data) && s->path == NULL)) {
                        free(s->prefix);
                        free(s->path);
                        seeds_clear(t);
                        return -ENOMEM;
                }
                s->step = step;
                s->fresh = true;
                n++;
        }
        t->nseeds = n;
        return 0;
}

static struct hp_ckpt_seed *find_seed(struct hp_ckpt *t, const char *prefix)
{
        for (size_t i = 0; i < t->nseeds; i++)
                if (strcmp(t->seeds[i].prefix, prefix) == 0)
                        return &t->seeds[i];
        return NULL;
}

static int find_type(const struct hp_ckpt *t, const char *name)
{
        for (int i = 0; i < t->ntypes; i++)
                if (strcmp(t->type_name[i], name) == 0)
                        return i;
        return -1;
}

int hp_ckpt_begin(struct hp_ckpt *t, const char *prefix,
                  const struct hp_ckpt_type_count *types, int ntypes,
                  uint64_t now_ms, char *errbuf, size_t errlen)
{
        struct hp_ckpt_seed *seed;
        bool same = t->prefix != NULL && strcmp(t->prefix, prefix) == 0;
        int r;

        if (strlen(prefix) >= HP_CKPT_PREFIX_MAX) {
                snprintf(errbuf, errlen, "prefix is longer than %d bytes",
                         HP_CKPT_PREFIX_MAX - 1);
                return HP_ECONFIG;
        }
        for (int i = 0; i < ntypes; i++) {
                if (strlen(types[i].name) >= HP_CKPT_TYPE_NAME_MAX) {
                        snprintf(errbuf, errlen,
                                 "checkpoint type name is longer than %d "
                                 "bytes",
                                 HP_CKPT_TYPE_NAME_MAX - 1);
                        return HP_ECONFIG;
                }
                if (types[i].expected < -1 || types[i].expected > t->nranks) {
                        snprintf(errbuf, errlen,
                                 "checkpoint_types[\"%s\"] = %d: expected 0 "
                                 "to %d ranks (the node's local ranks) or "
                                 "null",
                                 types[i].name, types[i].expected, t->nranks);
                        return HP_ECONFIG;
                }
        }
        if (!same) {
                char *copy = strdup(prefix);
                if (copy == NULL)
                        return -ENOMEM;
                free(t->prefix);
                t->prefix = copy;
                t->ntypes = 0;
                steps_clear(t);
                free(t->max_path);
                t->max_path = NULL;
                t->have_max = false;
        }
        for (int i = 0; i < ntypes; i++) {
                int k = find_type(t, types[i].name);
                if (k < 0) {
                        if (t->ntypes == HP_CKPT_TYPES_MAX) {
                                snprintf(errbuf, errlen,
                                         "more than %d checkpoint types",
                                         HP_CKPT_TYPES_MAX);
                                return HP_ECONFIG;
                        }
                        k = t->ntypes++;
                        snprintf(t->type_name[k], sizeof(t->type_name[k]),
                                 "%s", types[i].name);
                        t->expected[k] = -1;
                }
                /* A new prefix takes every count; the same one keeps a
                 * count that this client leaves null. */
                if (!same || types[i].expected >= 0)
                        t->expected[k] = types[i].expected;
        }
        /* /start's progress for this prefix: the job resumes from it, so
         * it is where this node stands, once per /start. */
        seed = find_seed(t, prefix);
        if (seed != NULL && (seed->fresh || !same)) {
                seed->fresh = false;
                r = set_max(t, seed->step, seed->path, now_ms);
                if (r < 0)
                        return r;
                /* Steps of the run it rolls back from are void. */
                steps_clear(t);
        }
        return 0;
}

static bool step_complete(const struct hp_ckpt *t,
                          const struct hp_ckpt_step *s)
{
        for (int k = 0; k < t->ntypes; k++)
                if (t->expected[k] < 0 || s->count[k] != t->expected[k])
                        return false;
        return true;
}

static struct hp_ckpt_step *step_get(struct hp_ckpt *t, int64_t step)
{
        struct hp_ckpt_step *s;

        for (size_t i = 0; i < t->nsteps; i++)
                if (t->steps[i].step == step)
                        return &t->steps[i];
        if (t->nsteps == HP_CKPT_STEPS_MAX) {
                size_t low = 0;
                for (size_t i = 1; i < t->nsteps; i++)
                        if (t->steps[i].step < t->steps[low].step)
                                low = i;
                hp_log_warn("checkpoint discovery: %d incomplete steps; "
                            "forgetting step %" PRId64,
                            HP_CKPT_STEPS_MAX, t->steps[low].step);
                step_free(&t->steps[low]);
                t->steps[low] = t->steps[--t->nsteps];
        }
        if (t->nsteps % 16 == 0) {
                void *grown = realloc(t->steps,
                                      (t->nsteps + 16) * sizeof(*t->steps));
                if (grown == NULL)
                        return NULL;
                t->steps = grown;
        }
        s = &t->steps[t->nsteps];
        memset(s, 0, sizeof(*s));
        s->step = step;
        s->ranks = calloc(HP_CKPT_TYPES_MAX * t->words, sizeof(uint64_t));
        if (s->ranks == NULL)
                return NULL;
        t->nsteps++;
        return s;
}

int hp_ckpt_update(struct hp_ckpt *t, int rank, int64_t step,
                   const char *path, const char *type, uint64_t now_ms,
                   char *errbuf, size_t errlen)
{
        struct hp_ckpt_step *s;
        uint64_t *bits, bit;
        int k, r;

        if (t->prefix == NULL) {
                snprintf(errbuf, errlen, "no ckpt_init has been received");
                return HP_ECONFIG;
        }
        if (rank < 0 || rank >= t->nranks) {
                snprintf(errbuf, errlen,
                         "local rank %d is not on this node (0 to %d)", rank,
                         t->nranks - 1);
                return HP_ECONFIG;
        }
        k = find_type(t, type);
        if (k < 0) {
                snprintf(errbuf, errlen,
                         "checkpoint_type \"%s\" was not declared by "
                         "ckpt_init for prefix \"%s\"",
                         type, t->prefix);
                return HP_ECONFIG;
        }
        if (path != NULL && strlen(path) >= HP_CKPT_PATH_MAX) {
                snprintf(errbuf, errlen, "path is longer than %d bytes",
                         HP_CKPT_PATH_MAX - 1);
                return HP_ECONFIG;
        }
        /* A step at or below the latest complete one cannot change it. */
        if (t->have_max && step <= t->max_step)
                return 0;
        s = step_get(t, step);
        if (s == NULL)
                return -ENOMEM;
        if (path != NULL && (s->path == NULL || strcmp(s->path, path) != 0)) {
                char *copy = strdup(path);
                if (copy == NULL)
                        return -ENOMEM;
                if (s->path != NULL)
                        hp_log_warn("checkpoint step %" PRId64 ": path %s "
                                    "replaces %s",
                                    step, path, s->path);
                free(s->path);
                s->path = copy;
        }
        bits = &s->ranks[(size_t)k * t->words + (size_t)rank / 64];
        bit = UINT64_C(1) << (rank % 64);
        if (*bits & bit) {
                hp_log_debug("checkpoint step %" PRId64 ": local rank %d "
                             "reported %s again",
                             step, rank, type);
                return 0;
        }
        *bits |= bit;
        s->count[k]++;
        if (!step_complete(t, s))
                return 0;
        r = set_max(t, step, s->path, now_ms);
        if (r < 0)
                return r;
        /* Steps at or below it can no longer change it. */
        steps_drop_upto(t, step);
        return 1;
}

const char *hp_ckpt_latest(struct hp_ckpt *t)
{
        if (!t->have_max) {
                steps_clear(t);
                return NULL;
        }
        steps_filter(t, t->max_step);
        return t->max_path;
}

cJSON *hp_ckpt_progress(const struct hp_ckpt *t)
{
        cJSON *doc, *entry;

        if (!t->have_max || t->prefix == NULL)
                return NULL;
        doc = cJSON_CreateObject();
        if (doc == NULL)
                return NULL;
        entry = cJSON_AddObjectToObject(doc, t->prefix);
        if (entry == NULL ||
            (t->max_path != NULL
                     ? cJSON_AddStringToObject(entry, "progressData",
                                               t->max_path)
                     : cJSON_AddNullToObject(entry, "progressData")) ==
                    NULL ||
            cJSON_AddNumberToObject(entry, "progressCount",
                                    (double)t->max_step) == NULL) {
                cJSON_Delete(doc);
                return NULL;
        }
        return doc;
}
