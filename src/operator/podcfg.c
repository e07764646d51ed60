/* SPDX-License-Identifier: Apache-2.0 */
/* pod_resourceconfig.json: the node IP table the operator sends with
 * /start and /update, kept on disk for the training framework
 * (docs/operator-api.md, "pod_resourceconfig.json"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/operator.h"

/* The file is small (one address per node); anything bigger is not ours. */
#define PODCFG_MAX_BYTES (16u << 20)

static cJSON *ensure_ips(cJSON *doc, int nnodes, bool resize)
{
        cJSON *ips = cJSON_GetObjectItemCaseSensitive(doc, "ips");
        int have;

        if (!cJSON_IsArray(ips)) {
                /* A missing (or foreign) list starts as nnodes nulls. */
                ips = cJSON_CreateArray();
                if (ips == NULL)
                        return NULL;
                if (cJSON_GetObjectItemCaseSensitive(doc, "ips") != NULL)
                        cJSON_ReplaceItemInObjectCaseSensitive(doc, "ips",
                                                               ips);
                else
                        cJSON_AddItemToObject(doc, "ips", ips);
                resize = true;
        }
        if (!resize)
                return ips;
        have = cJSON_GetArraySize(ips);
        for (; have < nnodes; have++)
                cJSON_AddItemToArray(ips, cJSON_CreateNull());
        for (; have > nnodes; have--)
                cJSON_DeleteItemFromArray(ips, have - 1);
        return cJSON_GetArraySize(ips) == nnodes ? ips : NULL;
}

int hp_podcfg_apply(cJSON *doc, int rank, int nnodes, const cJSON *rank_ips,
                    const char *ip_version, cJSON **out)
{
        bool empty = cJSON_GetArraySize(rank_ips) == 0;
        cJSON *ips, *current;

        *out = NULL;
        if (doc == NULL)
                doc = cJSON_CreateObject();
        if (doc == NULL)
                return -ENOMEM;
        /* An empty rankIps keeps the list as it is, not resized (the
         * reference's behaviour, pinned by its tests). */
        ips = ensure_ips(doc, nnodes, !empty);
        if (ips == NULL)
                goto oom;
        for (const cJSON *item = rank_ips ? rank_ips->child : NULL; item;
             item = item->next) {
                const cJSON *r = cJSON_GetObjectItemCaseSensitive(item,
                                                                  "rank");
                const cJSON *ip = cJSON_GetObjectItemCaseSensitive(item,
                                                                   "ip");
                double d = cJSON_IsString(r) ? strtod(r->valuestring, NULL)
                           : cJSON_IsBool(r) ? (cJSON_IsTrue(r) ? 1 : 0)
                                             : r->valuedouble;
                cJSON *copy;

                /* Ranks past nnodes are ignored. */
                if (d < 0 || d >= nnodes)
                        continue;
                copy = cJSON_Duplicate(ip, true);
                if (copy == NULL ||
                    !cJSON_ReplaceItemInArray(ips, (int)d, copy)) {
                        cJSON_Delete(copy);
                        goto oom;
                }
        }
        current = rank < nnodes && rank < cJSON_GetArraySize(ips)
                          ? cJSON_Duplicate(cJSON_GetArrayItem(ips, rank),
                                            true)
                          : cJSON_CreateNull();
        if (current == NULL)
                goto oom;
        cJSON_DeleteItemFromObjectCaseSensitive(doc, "current_pod_ip");
        cJSON_AddItemToObject(doc, "current_pod_ip", current);
        cJSON_DeleteItemFromObjectCaseSensitive(doc, "ips_timestamp");
        if (cJSON_AddStringToObject(doc, "ips_timestamp",
                                    ip_version ? ip_version : "") == NULL)
                goto oom;
        *out = doc;
        return 0;
oom:
        cJSON_Delete(doc);
        return -ENOMEM;
}

int hp_podcfg_read(const char *dir, cJSON **out, char *errbuf, size_t len)
{
        char path[4096];
        char *data;
        size_t n;
        int r;

        *out = NULL;
        if (hp_snprintf(path, sizeof(path), "%s/%s", dir, HP_OP_PODCFG_NAME) <
            0)
                return -ENAMETOOLONG;
        r = hp_read_file(path, PODCFG_MAX_BYTES, &data, &n);
        if (r == -ENOENT)
                return 0;
        if (r == -EFBIG || r == -ENODEV) {
                snprintf(errbuf, len, "%s: not a regular file under %u bytes",
                         path, PODCFG_MAX_BYTES);
                return HP_ECONFIG;
        }
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                snprintf(errbuf, len, "cannot read %s: %s", path,
                         strerror(-r));
                return r;
        }
        *out = cJSON_ParseWithLength(data, n);
        free(data);
        if (*out == NULL || !cJSON_IsObject(*out)) {
                cJSON_Delete(*out);
                *out = NULL;
                snprintf(errbuf, len, "%s is not a JSON object", path);
                return HP_ECONFIG;
        }
        return 0;
}

int hp_podcfg_write(const char *dir, const cJSON *doc, char *errbuf,
                    size_t len)
{
        char path[4096];
        char *text = cJSON_PrintUnformatted(doc);
        int r;

        if (text == NULL)
                return -ENOMEM;
        /* Made at start too; again here, in case it was removed since. */
        r = hp_mkdir_p(dir, 0755);
        if (r < 0) {
                free(text);
                snprintf(errbuf, len,
                         "cannot create the resource config directory '%s': "
                         "%s",
                         dir, strerror(-r));
                return r;
        }
        if (hp_snprintf(path, sizeof(path), "%s/%s", dir, HP_OP_PODCFG_NAME) <
            0) {
                free(text);
                return -ENAMETOOLONG;
        }
        /* fsync before the rename: a crash must leave the old file or the
         * new one, never an empty one. */
        r = hp_write_file_atomic(path, text, strlen(text), 0644,
                                 HP_WRITE_FSYNC);
        free(text);
        if (r < 0)
                snprintf(errbuf, len, "cannot write %s: %s", path,
                         strerror(-r));
        return r;
}
