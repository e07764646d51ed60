/* SPDX-License-Identifier: Apache-2.0 */
/* The resource-config backend: this node's place in HyperPod's
 * resource_config.json.
 *
 * HyperPod's lifecycle scripts find /opt/ml/config/resource_config.json on
 * every node:
 *
 *   {"ClusterConfig": {"ClusterArn": ..., "ClusterName": ...},
 *    "InstanceGroups": [{"Name": ..., "InstanceType": ...,
 *      "Instances": [{"InstanceName": ..., "AgentIpAddress": ...,
 *                     "CustomerIpAddress": ..., "InstanceId": ...}]}]}
 *
 * The nodes of the job are the instances of one group, in file order. The
 * address that counts is CustomerIpAddress: it is the instance's address
 * in the customer's VPC, which training traffic and Slurm use, and the one
 * the lifecycle scripts match a node by; AgentIpAddress belongs to
 * SageMaker's own agent network. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "rendezvous-private.h"

/* A real file is a few KiB per hundred instances. */
#define RESOURCE_CONFIG_MAX (16u << 20)
/* Addresses of this machine compared with the file. */
#define MAX_LOCAL_ADDRS 64

static bool same_address(const char *a, const char *b)
{
        unsigned char x[sizeof(struct in6_addr)], y[sizeof(struct in6_addr)];

        if (inet_pton(AF_INET, a, x) == 1 && inet_pton(AF_INET, b, y) == 1)
                return memcmp(x, y, sizeof(struct in_addr)) == 0;
        if (inet_pton(AF_INET6, a, x) == 1 && inet_pton(AF_INET6, b, y) == 1)
                return memcmp(x, y, sizeof(struct in6_addr)) == 0;
        return strcmp(a, b) == 0;
}

static const char *string_field(const cJSON *object, const char *name)
{
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);

        if (!cJSON_IsString(item) || item->valuestring[0] == '\0')
                return NULL;
        return item->valuestring;
}

static bool is_me(const cJSON *instance, const struct hp_rdzv_identity *me)
{
        const char *addr = string_field(instance, "CustomerIpAddress");
        const char *name = string_field(instance, "InstanceName");

        for (size_t i = 0; addr != NULL && i < me->naddrs; i++)
                if (same_address(addr, me->addrs[i]))
                        return true;
        return name != NULL && me->hostname != NULL &&
               hp_rdzv__same_host(name, me->hostname);
}

/* Who this node is, in words, for an error. */
static void describe_me(const struct hp_rdzv_identity *me, char *buf,
                        size_t len)
{
        size_t used;

        used = (size_t)snprintf(buf, len, "this node (%s ", me->addrs_source);
        for (size_t i = 0; i < me->naddrs && used < len; i++)
                used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                         i ? ", " : "", me->addrs[i]);
        if (me->naddrs == 0 && used < len)
                used += (size_t)snprintf(buf + used, len - used, "none");
        if (me->hostname != NULL && used < len)
                used += (size_t)snprintf(buf + used, len - used,
                                         "; hostname %s", me->hostname);
        if (used < len)
                snprintf(buf + used, len - used, ")");
}

static void group_names(const cJSON *groups, char *buf, size_t len)
{
        const cJSON *g;

        buf[0] = '\0';
        cJSON_ArrayForEach (g, groups) {
                const char *name = string_field(g, "Name");

                if (buf[0] != '\0')
                        strncat(buf, ", ", len - strlen(buf) - 1);
                strncat(buf, name ? name : "(unnamed)",
                        len - strlen(buf) - 1);
        }
}

/* Checks one group's instances: each has a CustomerIpAddress, no two the
 * same (two nodes would take one rank, and the job would wait forever for
 * the missing one). */
static int check_group(const cJSON *group, const char *name, const char *path,
                       char *errbuf, size_t errlen)
{
        const cJSON *instances = cJSON_GetObjectItemCaseSensitive(
                group, "Instances");
        int n = cJSON_GetArraySize(instances);

        if (!cJSON_IsArray(instances) || n == 0) {
                snprintf(errbuf, errlen,
                         "resource config '%s': instance group '%s' has no "
                         "Instances list",
                         path, name);
                return HP_ECONFIG;
        }
        for (int i = 0; i < n; i++) {
                const char *addr = string_field(cJSON_GetArrayItem(instances,
                                                                   i),
                                                "CustomerIpAddress");

                if (addr == NULL) {
                        snprintf(errbuf, errlen,
                                 "resource config '%s': instance %d of group "
                                 "'%s' has no CustomerIpAddress string",
                                 path, i, name);
                        return HP_ECONFIG;
                }
                for (int j = 0; j < i; j++) {
                        const char *other = string_field(
                                cJSON_GetArrayItem(instances, j),
                                "CustomerIpAddress");

                        if (same_address(addr, other)) {
                                snprintf(errbuf, errlen,
                                         "resource config '%s': instances "
                                         "%d and %d of group '%s' have the "
                                         "same CustomerIpAddress %s",
                                         path, j, i, name, addr);
                                return HP_ECONFIG;
                        }
                }
        }
        return 0;
}

static void syntax_error(const char *json, size_t json_len, const char *at,
                         const char *path, char *errbuf, size_t errlen)
{
        size_t offset = at != NULL && at >= json ? (size_t)(at - json) : 0;
        int line = 1, column = 1;

        if (offset > json_len)
                offset = json_len;
        for (size_t i = 0; i < offset; i++) {
                column++;
                if (json[i] == '\n') {
                        line++;
                        column = 1;
                }
        }
        snprintf(
                errbuf, errlen,
                "resource config '%s' is not valid JSON (line %d, column %d)",
                path, line, column);
}

int hp_rdzv_resource_config_place(const char *json, size_t json_len,
                                  const char *path, const char *group,
                                  const struct hp_rdzv_identity *me,
                                  struct hp_rdzv_info *out, char *what,
                                  size_t what_len, char *errbuf,
                                  size_t errlen)
{
        const cJSON *groups, *g, *chosen = NULL, *instances;
        const char *chosen_name = NULL, *end = NULL, *master;
        char who[512], names[512];
        cJSON *root;
        int rank = -1, n, r;

        root = cJSON_ParseWithLengthOpts(json, json_len, &end, false);
        if (root == NULL) {
                syntax_error(json, json_len, end, path, errbuf, errlen);
                return HP_ECONFIG;
        }
        groups = cJSON_GetObjectItemCaseSensitive(root, "InstanceGroups");
        if (!cJSON_IsObject(root) || !cJSON_IsArray(groups)) {
                FAIL_OUT("resource config '%s' has no InstanceGroups list",
                         path);
        }
        describe_me(me, who, sizeof(who));
        cJSON_ArrayForEach (g, groups) {
                const char *name = string_field(g, "Name");
                const cJSON *inst;
                int i = 0;

                if (name == NULL) {
                        FAIL_OUT("resource config '%s': an instance group "
                                 "has no Name string",
                                 path);
                }
                if (group != NULL) {
                        if (strcmp(name, group) != 0)
                                continue;
                        chosen = g;
                        chosen_name = name;
                }
                /* Without a group named, the group is the one holding
                 * this node; with one, this finds the rank. */
                instances = cJSON_GetObjectItemCaseSensitive(g, "Instances");
                cJSON_ArrayForEach (inst, instances) {
                        if (is_me(inst, me)) {
                                rank = i;
                                break;
                        }
                        i++;
                }
                if (rank >= 0 && chosen == NULL) {
                        chosen = g;
                        chosen_name = name;
                }
                if (chosen != NULL)
                        break;
        }
        if (chosen == NULL) {
                group_names(groups, names, sizeof(names));
                if (group != NULL)
                        snprintf(errbuf, errlen,
                                 "instance group '%s' (--rdzv-conf "
                                 "instance_group) is not in resource config "
                                 "'%s', which has: %s",
                                 group, path, names[0] ? names : "none");
                else
                        snprintf(errbuf, errlen,
                                 "%s is in no instance group of resource "
                                 "config '%s' (groups: %s); give "
                                 "--local-addr or --rdzv-conf "
                                 "instance_group",
                                 who, path, names[0] ? names : "none");
                r = HP_ECONFIG;
                goto out;
        }
        r = check_group(chosen, chosen_name, path, errbuf, errlen);
        if (r < 0)
                goto out;
        if (rank < 0) {
                FAIL_OUT("%s is not an instance of group '%s' in resource "
                         "config '%s'",
                         who, chosen_name, path);
        }
        instances = cJSON_GetObjectItemCaseSensitive(chosen, "Instances");
        n = cJSON_GetArraySize(instances);
        if (n > HP_HOSTLIST_MAX_HOSTS) {
                FAIL_OUT("resource config '%s': group '%s' has %d instances, "
                         "more than %d",
                         path, chosen_name, n, HP_HOSTLIST_MAX_HOSTS);
        }
        master = string_field(cJSON_GetArrayItem(instances, 0),
                              "CustomerIpAddress");
        out->nnodes = n;
        out->node_rank = rank;
        if (hp_snprintf(out->master_addr, sizeof(out->master_addr), "%s",
                        master) < 0) {
                FAIL_OUT("resource config '%s': the first address of group "
                         "'%s' is too long",
                         path, chosen_name);
        }
        snprintf(what, what_len, "resource config '%s', group '%s'", path,
                 chosen_name);
        r = 0;
out:
        cJSON_Delete(root);
        return r;
}

/* This machine's IPv4 and IPv6 addresses, as text in addrs (each
 * INET6_ADDRSTRLEN bytes). */
static size_t local_addresses(char (*addrs)[INET6_ADDRSTRLEN], size_t max)
{
        struct ifaddrs *list, *ifa;
        size_t n = 0;

        if (getifaddrs(&list) < 0)
                return 0;
        for (ifa = list; ifa != NULL && n < max; ifa = ifa->ifa_next) {
                const void *bytes;
                int family;

                if (ifa->ifa_addr == NULL)
                        continue;
                family = ifa->ifa_addr->sa_family;
                if (family == AF_INET)
                        bytes = &((struct sockaddr_in *)(void *)ifa->ifa_addr)
                                         ->sin_addr;
                else if (family == AF_INET6)
                        bytes = &((struct sockaddr_in6 *)(void *)
                                          ifa->ifa_addr)
                                         ->sin6_addr;
                else
                        continue;
                if (inet_ntop(family, bytes, addrs[n], INET6_ADDRSTRLEN))
                        n++;
        }
        freeifaddrs(list);
        return n;
}

int hp_rdzv__resource_config_next(struct hp_rdzv *rdzv,
                                  struct hp_rdzv_info *out, char *errbuf,
                                  size_t errlen)
{
        const struct hp_rdzv_options *opt = &rdzv->opt;
        const struct hp_config *cfg = rdzv->cfg;
        char addr_text[MAX_LOCAL_ADDRS][INET6_ADDRSTRLEN];
        const char *addrs[MAX_LOCAL_ADDRS];
        struct hp_rdzv_identity me = { .addrs = addrs };
        char what[4096 + 512];
        size_t json_len = 0;
        char *json = NULL;
        int r;

        if (cfg->local_addr != NULL && cfg->local_addr[0] != '\0') {
                /* The address the user says is ours, and only that: on one
                 * machine running two "nodes", every address is local. */
                addrs[0] = cfg->local_addr;
                me.naddrs = 1;
                me.addrs_source = "--local-addr";
        } else {
                me.naddrs = local_addresses(addr_text, MAX_LOCAL_ADDRS);
                for (size_t i = 0; i < me.naddrs; i++)
                        addrs[i] = addr_text[i];
                me.addrs_source = "network interfaces";
                me.hostname = rdzv->hostname;
        }

        r = hp_read_file(opt->resource_config, RESOURCE_CONFIG_MAX, &json,
                         &json_len);
        if (r < 0) {
                snprintf(errbuf, errlen,
                         "cannot read resource config '%s' (from %s): %s",
                         opt->resource_config, opt->resource_config_source,
                         r == -EFBIG    ? "larger than 16 MiB"
                         : r == -EISDIR ? "a directory"
                         : r == -ENODEV
                                 ? "not a regular file (a FIFO or a device)"
                                 : hp_strerror(r));
                return HP_ECONFIG;
        }
        r = hp_rdzv_resource_config_place(
                json, json_len, opt->resource_config,
                opt->instance_group[0] ? opt->instance_group : NULL, &me, out,
                what, sizeof(what), errbuf, errlen);
        free(json);
        if (r < 0)
                return r;
        r = hp_rdzv__check_flags(cfg, what, out, errbuf, errlen);
        if (r < 0)
                return r;
        out->master_port = cfg->master_port;
        hp_log_info("rendezvous: resource-config: node %d of %d, master "
                    "%s:%d, from %s",
                    out->node_rank, out->nnodes, out->master_addr,
                    out->master_port, what);
        return 0;
}
