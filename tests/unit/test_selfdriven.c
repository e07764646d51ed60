/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the self-driven rendezvous backends: slurm
 * (src/rendezvous/slurm.c) and resource-config
 * (src/rendezvous/resource_config.c), their --rdzv-conf keys
 * (src/rendezvous/options.c), and what hp_rdzv_next makes of them.
 *
 * The derivations are table-driven on environment strings and on the
 * resource_config.json files in tests/unit/fixtures. scontrol is played by
 * small shell scripts the tests write, so that the stale-list, failure and
 * timeout paths run for real.
 *
 * Also self-driven mode's restart policy (src/supervise/selfdriven.c):
 * what comes after a stage, one case at a time and over whole runs played
 * by a fake driver. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/config.h"
#include "hyperpod/rendezvous.h"
#include "supervise-private.h"

#include "table.h"

extern char **environ;

#define FIXTURE(name) HP_TEST_FIXTURES "/" name

/* What a derivation should give: a place, or an error that mentions
 * something. On success, mention (if any) must be in the source account. */
struct place_expect {
        int result;
        int nnodes, rank;
        const char *master;
        const char *mention;
};

static void check_place(const char *name, int r, const struct place_expect *e,
                        const struct hp_rdzv_info *info, const char *errbuf,
                        const char *what)
{
        if (r != e->result)
                fail_msg("%s: returned %d, expected %d (%s)", name, r,
                         e->result, errbuf);
        if (r != 0) {
                if (strstr(errbuf, e->mention) == NULL)
                        fail_msg("%s: message '%s' lacks '%s'", name, errbuf,
                                 e->mention);
                return;
        }
        if (info->nnodes != e->nnodes || info->node_rank != e->rank ||
            strcmp(info->master_addr, e->master) != 0)
                fail_msg("%s: node %d of %d, master '%s'; expected node %d "
                         "of %d, master '%s'",
                         name, info->node_rank, info->nnodes,
                         info->master_addr, e->rank, e->nnodes, e->master);
        if (e->mention != NULL && strstr(what, e->mention) == NULL)
                fail_msg("%s: the source '%s' lacks '%s'", name, what,
                         e->mention);
}

/* ---- Slurm: the derivation ---- */

struct slurm_case {
        const char *name;
        const char *env[12];
        const char *hostname;
        const char *fresh; /* scontrol's NodeList, or NULL */
        struct place_expect expect;
};

#define FRESH_SOURCE "scontrol show job 42"

static const struct slurm_case slurm_cases[] = {
        {
                .name = "an srun step of 4 nodes, this one third",
                .env = { "SLURM_STEP_NUM_NODES=4",
                         "SLURM_STEP_NODELIST=ip-10-1-[2-4,7]",
                         "SLURM_NODEID=2", "SLURMD_NODENAME=ip-10-1-4",
                         "SLURM_NNODES=4",
                         "SLURM_JOB_NODELIST=ip-10-1-[2-4,7]" },
                .expect = {
                        .nnodes = 4, .rank = 2, .master = "ip-10-1-2",
                        .mention = "SLURM_STEP_NODELIST=ip-10-1-[2-4,7]",
                },
        },
        {
                .name = "only the job's variables (the batch script)",
                .env = { "SLURM_NNODES=3", "SLURM_JOB_NODELIST=node[001-003]",
                         "SLURM_NODEID=0", "SLURMD_NODENAME=node001" },
                .expect = {
                        .nnodes = 3, .rank = 0, .master = "node001",
                        .mention = "SLURM_JOB_NODELIST=node[001-003]",
                },
        },
        {
                .name = "the older spellings SLURM_JOB_NUM_NODES and "
                        "SLURM_NODELIST",
                .env = { "SLURM_JOB_NUM_NODES=2", "SLURM_NODELIST=a,b",
                         "SLURM_NODEID=1", "SLURMD_NODENAME=b" },
                .expect = {
                        .nnodes = 2, .rank = 1, .master = "a",
                        .mention = "SLURM_NODELIST=a,b",
                },
        },
        {
                .name = "a step on part of the job: the step's variables win",
                .env = { "SLURM_NNODES=8", "SLURM_JOB_NODELIST=n[1-8]",
                         "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[3-4]", "SLURM_NODEID=1",
                         "SLURMD_NODENAME=n4" },
                .expect = {
                        .nnodes = 2, .rank = 1, .master = "n3",
                        .mention = "SLURM_STEP_NODELIST=n[3-4]",
                },
        },
        {
                .name = "no SLURM_NODEID: the position of SLURMD_NODENAME",
                .env = { "SLURM_STEP_NUM_NODES=3",
                         "SLURM_STEP_NODELIST=n[1-3]",
                         "SLURMD_NODENAME=n3" },
                .expect = {
                        .nnodes = 3, .rank = 2, .master = "n1",
                },
        },
        {
                .name = "neither: the hostname, whose domain is ignored",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=ip-10-1-[2-3]" },
                .hostname = "ip-10-1-3.ec2.internal",
                .expect = {
                        .nnodes = 2, .rank = 1, .master = "ip-10-1-2",
                },
        },
        {
                .name = "SLURM_NODEID without SLURMD_NODENAME is trusted",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=a[1-2]", "SLURM_NODEID=1" },
                .hostname = "elsewhere",
                .expect = {
                        .nnodes = 2, .rank = 1, .master = "a1",
                },
        },
        {
                .name = "two bracket groups",
                .env = { "SLURM_STEP_NUM_NODES=4",
                         "SLURM_STEP_NODELIST=rack[1-2]-n[01-02]",
                         "SLURM_NODEID=3", "SLURMD_NODENAME=rack2-n02" },
                .expect = {
                        .nnodes = 4, .rank = 3, .master = "rack1-n01",
                },
        },
        {
                .name = "scontrol's list wins over a stale environment",
                /* n2 was replaced by n9 after the step started. */
                .env = { "SLURM_STEP_NUM_NODES=4",
                         "SLURM_STEP_NODELIST=n[1-4]", "SLURM_NODEID=2",
                         "SLURMD_NODENAME=n3" },
                .fresh = "n[1,3-4,9]",
                .expect = {
                        .nnodes = 4, .rank = 1, .master = "n1",
                        .mention = FRESH_SOURCE " (NodeList=n[1,3-4,9])",
                },
        },
        {
                .name = "scontrol's list gives a new master",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[1-2]", "SLURM_NODEID=1",
                         "SLURMD_NODENAME=n6" },
                .fresh = "n[5-6]",
                .expect = {
                        .nnodes = 2, .rank = 1, .master = "n5",
                        .mention = FRESH_SOURCE,
                },
        },
        {
                .name = "scontrol's job list is longer than the step: the "
                        "environment serves",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[3-4]", "SLURM_NODEID=0",
                         "SLURMD_NODENAME=n3" },
                .fresh = "n[1-8]",
                .expect = {
                        .nnodes = 2, .rank = 0, .master = "n3",
                        .mention = "SLURM_STEP_NODELIST=n[3-4]",
                },
        },
        {
                .name = "scontrol's list is malformed: the environment "
                        "serves",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[3-4]", "SLURM_NODEID=1",
                         "SLURMD_NODENAME=n4" },
                .fresh = "n[3-",
                .expect = {
                        .nnodes = 2, .rank = 1, .master = "n3",
                        .mention = "SLURM_STEP_NODELIST=n[3-4]",
                },
        },

        /* Bad input: each error names the variable and its value. */
        {
                .name = "not under Slurm",
                .env = { "HOME=/root" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "none of SLURM_STEP_NUM_NODES, "
                                   "SLURM_NNODES, "
                                   "SLURM_JOB_NUM_NODES is set",
                },
        },
        {
                .name = "a node count that is not a number",
                .env = { "SLURM_NNODES=four", "SLURM_JOB_NODELIST=n1" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "invalid value 'four' for SLURM_NNODES "
                                   "(environment)",
                },
        },
        {
                .name = "a node count of zero",
                .env = { "SLURM_STEP_NUM_NODES=0",
                         "SLURM_STEP_NODELIST=n1" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "invalid value '0' for SLURM_STEP_NUM_NODES",
                },
        },
        {
                .name = "no node list",
                .env = { "SLURM_STEP_NUM_NODES=2", "SLURM_NODEID=0" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "none of SLURM_STEP_NODELIST, "
                                   "SLURM_JOB_NODELIST, "
                                   "SLURM_NODELIST is set",
                },
        },
        {
                .name = "a malformed node list",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[2-1]", "SLURM_NODEID=0" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "invalid host list 'n[2-1]' in "
                                   "SLURM_STEP_NODELIST "
                                   "(environment): reversed range '2-1'",
                },
        },
        {
                .name = "a list shorter than the count",
                .env = { "SLURM_STEP_NUM_NODES=4",
                         "SLURM_STEP_NODELIST=n[1-3]", "SLURM_NODEID=0" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "SLURM_STEP_NUM_NODES is 4 but "
                                   "SLURM_STEP_NODELIST "
                                   "'n[1-3]' holds 3 hosts",
                },
        },
        {
                .name = "a node id out of range",
                .env = { "SLURM_STEP_NUM_NODES=4",
                         "SLURM_STEP_NODELIST=n[1-4]", "SLURM_NODEID=4" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "SLURM_NODEID 4 (environment) is out of "
                                   "range: "
                                   "SLURM_STEP_NUM_NODES is 4, so node ids go "
                                   "from "
                                   "0 to 3",
                },
        },
        {
                .name = "a node id that is not a number",
                .env = { "SLURM_STEP_NUM_NODES=4",
                         "SLURM_STEP_NODELIST=n[1-4]", "SLURM_NODEID=x1" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "invalid value 'x1' for SLURM_NODEID",
                },
        },
        {
                .name = "a negative node id",
                .env = { "SLURM_STEP_NUM_NODES=4",
                         "SLURM_STEP_NODELIST=n[1-4]", "SLURM_NODEID=-1" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "invalid value '-1' for SLURM_NODEID",
                },
        },
        {
                .name = "a node id that points at another node",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[1-2]", "SLURM_NODEID=0",
                         "SLURMD_NODENAME=n2" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "SLURM_NODEID 0 points at 'n1' in "
                                   "SLURM_STEP_NODELIST 'n[1-2]', but this "
                                   "node is "
                                   "'n2' (SLURMD_NODENAME)",
                },
        },
        {
                .name = "no node id and this node not in the list",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[1-2]",
                         "SLURMD_NODENAME=n7" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "SLURM_NODEID is not set and this node 'n7' "
                                   "(SLURMD_NODENAME) is not in "
                                   "SLURM_STEP_NODELIST "
                                   "'n[1-2]'",
                },
        },
        {
                .name = "this node not in scontrol's list",
                .env = { "SLURM_STEP_NUM_NODES=2",
                         "SLURM_STEP_NODELIST=n[1-2]", "SLURM_NODEID=1",
                         "SLURMD_NODENAME=n2" },
                .fresh = "n[5-6]",
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "this node 'n2' (SLURMD_NODENAME) is not in "
                                   "the "
                                   "job's current node list 'n[5-6]' (from "
                                   FRESH_SOURCE ")",
                },
        },
};

static void test_slurm_place(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(slurm_cases); k++) {
                const struct slurm_case *c = &slurm_cases[k];
                struct hp_rdzv_info info;
                char errbuf[512] = "", what[512] = "";
                int r;

                memset(&info, 0x5a, sizeof(info));
                r = hp_rdzv_slurm_place((char *const *)c->env,
                                        c->hostname ? c->hostname : "nohost",
                                        c->fresh, FRESH_SOURCE, &info, what,
                                        sizeof(what), errbuf, sizeof(errbuf));
                check_place(c->name, r, &c->expect, &info, errbuf, what);
        }
}

static void test_scontrol_nodelist(void **state)
{
        static const struct {
                const char *output;
                const char *list; /* NULL: none found */
        } cases[] = {
                /* What Slurm 22.05 printed for a one-node srun. */
                { "JobId=3 JobName=bash UserId=root(0) JobState=RUNNING "
                  "Partition=debug AllocNode:Sid=localhost:11599 "
                  "ReqNodeList=(null) ExcNodeList=(null) NodeList=vm "
                  "BatchHost=vm NumNodes=1 NumCPUs=1\n",
                  "vm" },
                { "ReqNodeList=a ExcNodeList=b NodeList=n[1-2] BatchHost=n1",
                  "n[1-2]" },
                /* The multi-line form, without --oneliner. */
                { "JobId=7 JobName=x\n   ReqNodeList=(null) "
                  "ExcNodeList=(null)\n   NodeList=ip-10-1-[2-3]\n   "
                  "BatchHost=ip-10-1-2\n",
                  "ip-10-1-[2-3]" },
                { "NodeList=gpu[01-04]", "gpu[01-04]" },
                { "JobId=9 JobState=PENDING NodeList=(null) BatchHost=",
                  NULL },
                { "JobId=9 ReqNodeList=n1 ExcNodeList=n2", NULL },
                { "JobId=9 NodeList= BatchHost=x", NULL },
                { "slurm_load_jobs error: Invalid job id specified", NULL },
                { "", NULL },
        };

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(cases); k++) {
                char list[64] = "";
                int r = hp_rdzv_scontrol_nodelist(cases[k].output, list,
                                                  sizeof(list));

                if (cases[k].list == NULL) {
                        if (r != HP_ECONFIG)
                                fail_msg("'%s': found '%s'", cases[k].output,
                                         list);
                        continue;
                }
                if (r != 0 || strcmp(list, cases[k].list) != 0)
                        fail_msg("'%s': gave %d '%s', expected '%s'",
                                 cases[k].output, r, list, cases[k].list);
        }
}

/* ---- resource_config.json: the derivation ---- */

struct resource_case {
        const char *name;
        const char *file;
        const char *group;
        const char *addrs[4];
        const char *hostname;
        struct place_expect expect;
};

static const struct resource_case resource_cases[] = {
        {
                .name = "the group that holds this address",
                .file = "resource_config_4node.json",
                .addrs = { "127.0.0.1", "10.1.1.14" },
                .expect = {
                        .nnodes = 4, .rank = 2, .master = "10.1.1.13",
                        .mention = "group 'worker-group-1'",
                },
        },
        {
                .name = "a named group; file order, not address order",
                .file = "resource_config_4node.json",
                .group = "worker-group-1",
                .addrs = { "10.1.1.12" },
                .expect = {
                        .nnodes = 4, .rank = 3, .master = "10.1.1.13",
                },
        },
        {
                .name = "the controller's own group of one",
                .file = "resource_config_4node.json",
                .addrs = { "10.1.0.10" },
                .expect = {
                        .nnodes = 1, .rank = 0, .master = "10.1.0.10",
                        .mention = "group 'controller-machine'",
                },
        },
        {
                .name = "AgentIpAddress is not this node's training address",
                .file = "resource_config_4node.json",
                .addrs = { "172.16.1.11" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "this node (network interfaces 172.16.1.11) "
                                   "is in "
                                   "no instance group of resource config",
                },
        },
        {
                .name = "found by InstanceName",
                .file = "resource_config_4node.json",
                .hostname = "worker-group-1-2",
                .expect = {
                        .nnodes = 4, .rank = 1, .master = "10.1.1.13",
                },
        },
        {
                .name = "found by InstanceName, the hostname with a domain",
                .file = "resource_config_4node.json",
                .addrs = { "192.168.0.1" },
                .hostname = "worker-group-1-4.cluster.local",
                .expect = {
                        .nnodes = 4, .rank = 3, .master = "10.1.1.13",
                },
        },
        {
                .name = "IPv6 addresses compare as addresses",
                .file = "resource_config_ipv6.json",
                .addrs = { "fd00::a" },
                .expect = {
                        .nnodes = 2, .rank = 0, .master = "fd00:0:0:0::a",
                },
        },

        /* Bad input: each error names the file. */
        {
                .name = "bad JSON",
                .file = "resource_config_bad_json.json",
                .addrs = { "10.2.0.1" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "resource_config_bad_json.json' is not "
                                   "valid JSON "
                                   "(line 5, column 76)",
                },
        },
        {
                .name = "no InstanceGroups",
                .file = "resource_config_no_groups.json",
                .addrs = { "10.2.0.1" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "resource_config_no_groups.json' has no "
                                   "InstanceGroups list",
                },
        },
        {
                .name = "an instance group that is not there",
                .file = "resource_config_4node.json",
                .group = "gpu-workers",
                .addrs = { "10.1.1.11" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "instance group 'gpu-workers' (--rdzv-conf "
                                   "instance_group) is not in resource config",
                },
        },
        {
                .name = "the message lists the groups there are",
                .file = "resource_config_4node.json",
                .group = "gpu-workers",
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "which has: controller-machine, "
                                   "login-group, "
                                   "worker-group-1",
                },
        },
        {
                .name = "this node in no group",
                .file = "resource_config_4node.json",
                .addrs = { "10.9.9.9" },
                .hostname = "vm",
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "this node (network interfaces 10.9.9.9; "
                                   "hostname "
                                   "vm) is in no instance group",
                },
        },
        {
                .name = "this node not in the named group",
                .file = "resource_config_4node.json",
                .group = "worker-group-1",
                .addrs = { "10.1.0.10" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "is not an instance of group "
                                   "'worker-group-1'",
                },
        },
        {
                .name = "an instance without CustomerIpAddress",
                .file = "resource_config_no_address.json",
                .addrs = { "10.2.0.1" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "instance 1 of group 'workers' has no "
                                   "CustomerIpAddress string",
                },
        },
        {
                .name = "two instances with one address",
                .file = "resource_config_duplicate.json",
                .addrs = { "10.2.0.2" },
                .expect = {
                        .result = HP_ECONFIG,
                        .mention = "instances 0 and 2 of group 'workers' have "
                                   "the "
                                   "same CustomerIpAddress 10.2.0.1",
                },
        },
};

static char *read_fixture(const char *name, size_t *len)
{
        char path[4096];
        FILE *f;
        char *text;
        long size;

        snprintf(path, sizeof(path), "%s/%s", HP_TEST_FIXTURES, name);
        f = fopen(path, "rb");
        if (f == NULL)
                fail_msg("cannot open fixture %s", path);
        assert_int_equal(fseek(f, 0, SEEK_END), 0);
        size = ftell(f);
        assert_true(size >= 0);
        rewind(f);
        text = test_malloc((size_t)size + 1);
        assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
        text[size] = '\0';
        fclose(f);
        *len = (size_t)size;
        return text;
}

static void test_resource_config_place(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(resource_cases); k++) {
                const struct resource_case *c = &resource_cases[k];
                struct hp_rdzv_identity me = {
                        .addrs = c->addrs,
                        .addrs_source = "network interfaces",
                        .hostname = c->hostname,
                };
                struct hp_rdzv_info info;
                char errbuf[512] = "", what[512] = "";
                size_t len;
                char *json = read_fixture(c->file, &len);
                int r;

                while (me.naddrs < HP_ARRAY_SIZE(c->addrs) &&
                       c->addrs[me.naddrs] != NULL)
                        me.naddrs++;
                r = hp_rdzv_resource_config_place(json, len, c->file,
                                                  c->group, &me, &info, what,
                                                  sizeof(what), errbuf,
                                                  sizeof(errbuf));
                test_free(json);
                check_place(c->name, r, &c->expect, &info, errbuf, what);
        }
}

/* ---- Whole rounds through hp_rdzv_init and hp_rdzv_next ---- */

/* Every variable the backends and the parser read that a case may set, or
 * that the machine running the tests may have: each case starts without
 * them. */
static const char *const case_variables[] = {
        "SLURM_STEP_NUM_NODES",
        "SLURM_NNODES",
        "SLURM_JOB_NUM_NODES",
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "SLURM_NODEID",
        "SLURMD_NODENAME",
        "SLURM_JOB_ID",
        "SLURM_JOBID",
        "SAGEMAKER_RESOURCE_CONFIG_PATH",
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "PET_RDZV_BACKEND",
        "PET_RDZV_ENDPOINT",
        "PET_RDZV_ID",
        "PET_RDZV_CONF",
        "PET_STANDALONE",
        "PET_LOCAL_ADDR",
        "PET_NPROC_PER_NODE",
};

static void unset_case_variables(void)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(case_variables); i++)
                assert_int_equal(unsetenv(case_variables[i]), 0);
}

struct round {
        struct hp_config *cfg;
        struct hp_rdzv rdzv;
        struct hp_rdzv_info info;
        char errbuf[1024];
        int init_result;
};

/* Parses argv (up to a NULL) with env ("K=V", up to a NULL) as the whole
 * Slurm/SageMaker environment, then runs hp_rdzv_init. */
static struct round *round_setup(const char *const *args,
                                 const char *const *env)
{
        struct round *t = test_calloc(1, sizeof(*t));
        char *argv[32];
        int argc = 0;

        assert_non_null(t);
        t->cfg = test_calloc(1, sizeof(*t->cfg));
        assert_non_null(t->cfg);
        unset_case_variables();
        for (size_t i = 0; env != NULL && env[i] != NULL; i++)
                assert_int_equal(putenv((char *)env[i]), 0);
        while (args[argc] != NULL) {
                assert_true((size_t)argc + 1 < HP_ARRAY_SIZE(argv));
                argv[argc] = (char *)args[argc];
                argc++;
        }
        argv[argc] = NULL;
        if (hp_config_parse(t->cfg, argc, argv, t->errbuf,
                            sizeof(t->errbuf)) != 0)
                fail_msg("the test's command line was refused: %s",
                         t->errbuf);
        t->init_result = hp_rdzv_init(&t->rdzv, t->cfg, t->errbuf,
                                      sizeof(t->errbuf));
        return t;
}

static int round_next(struct round *t)
{
        assert_int_equal(t->init_result, 0);
        t->errbuf[0] = '\0';
        return hp_rdzv_next(&t->rdzv, &t->info, t->errbuf, sizeof(t->errbuf));
}

static void round_free(struct round *t)
{
        unset_case_variables();
        test_free(t->cfg);
        test_free(t);
}

static void expect_round(struct round *t, int nnodes, int rank, int nproc,
                         const char *master, int port)
{
        int r = round_next(t);

        if (r != 0)
                fail_msg("the round failed: %s", t->errbuf);
        assert_int_equal(t->info.nnodes, nnodes);
        assert_int_equal(t->info.node_rank, rank);
        assert_int_equal(t->info.nproc, nproc);
        assert_int_equal(t->info.world_size, nnodes * nproc);
        assert_int_equal(t->info.group_world_size, nnodes);
        assert_int_equal(t->info.base_rank, rank * nproc);
        assert_string_equal(t->info.master_addr, master);
        assert_int_equal(t->info.master_port, port);
}

static void expect_failure(struct round *t, bool at_init, const char *mention)
{
        int r = at_init ? t->init_result : round_next(t);

        if (r != HP_ECONFIG)
                fail_msg("expected HP_ECONFIG mentioning '%s', got %d (%s)",
                         mention, r, t->errbuf);
        if (strstr(t->errbuf, mention) == NULL)
                fail_msg("the message '%s' lacks '%s'", t->errbuf, mention);
}

#define STEP_ENV                                                             \
        "SLURM_STEP_NUM_NODES=4", "SLURM_STEP_NODELIST=n[1-4]",              \
                "SLURM_NODEID=2", "SLURMD_NODENAME=n3",                      \
                "SLURM_JOB_ID=123456"

static void test_slurm_rounds(void **state)
{
        static const char *const env[] = { STEP_ENV, NULL };
        struct round *t;

        (void)state;
        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "slurm", "--rdzv-conf",
                                          "scontrol=off", "--nproc-per-node",
                                          "8", "t.py", NULL },
                        env);
        expect_round(t, 4, 2, 8, "n1", 29500);
        round_free(t);

        /* Matching --nnodes and --node-rank are fine; --master-addr and
         * --master-port win. */
        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "slurm", "--rdzv-conf",
                                          "scontrol=off", "--nnodes", "4",
                                          "--node-rank", "2", "--master-addr",
                                          "10.0.0.1", "--master-port", "1234",
                                          "t.py", NULL },
                        env);
        expect_round(t, 4, 2, 1, "10.0.0.1", 1234);
        round_free(t);

        /* Lightning's port: 15000 + the job id's last four digits. */
        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "slurm", "--rdzv-conf",
                                          "scontrol=off,master_port=jobid",
                                          "t.py", NULL },
                        env);
        expect_round(t, 4, 2, 1, "n1", 18456);
        round_free(t);
}

static void test_slurm_bad_flags_and_keys(void **state)
{
        static const char *const env[] = { STEP_ENV, NULL };
        static const char *const no_job_env[] = { "SLURM_STEP_NUM_NODES=1",
                                                  "SLURM_STEP_NODELIST=n1",
                                                  "SLURM_NODEID=0", NULL };
        static const struct {
                const char *argv[12];
                const char *const *env;
                bool at_init;
                const char *mention;
        } cases[] = {
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "scontrol=off", "--nnodes", "2", "t.py" },
                  env,
                  false,
                  "--nnodes 2 disagrees with SLURM_STEP_NODELIST=n[1-4], "
                  "which has 4 nodes" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "scontrol=off", "--node-rank", "0", "t.py" },
                  env,
                  false,
                  "--node-rank 0 disagrees with SLURM_STEP_NODELIST=n[1-4], "
                  "which makes this node rank 2" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "colour=blue", "t.py" },
                  env,
                  true,
                  "--rdzv-conf key 'colour' is not one of the slurm "
                  "backend's: scontrol, scontrol_timeout, master_port" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "instance_group=x", "t.py" },
                  env,
                  true,
                  "key 'instance_group' is not one of the slurm" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "scontrol=off,scontrol=off", "t.py" },
                  env,
                  true,
                  "--rdzv-conf key 'scontrol' is given twice" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "scontrol=", "t.py" },
                  env,
                  true,
                  "--rdzv-conf scontrol: the value must be" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "scontrol_timeout=0", "t.py" },
                  env,
                  true,
                  "invalid value '0' for --rdzv-conf scontrol_timeout" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "scontrol_timeout=soon", "t.py" },
                  env,
                  true,
                  "invalid value 'soon' for --rdzv-conf scontrol_timeout" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "master_port=29501", "t.py" },
                  env,
                  true,
                  "invalid value '29501' for --rdzv-conf master_port: the "
                  "only value is jobid" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "master_port=jobid", "--master-port", "29501", "t.py" },
                  env,
                  true,
                  "--rdzv-conf master_port=jobid and --master-port 29501 "
                  "both choose the port" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "master_port=jobid,scontrol=off", "t.py" },
                  no_job_env,
                  false,
                  "--rdzv-conf master_port=jobid: SLURM_JOB_ID is not set" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "scontrol=/nonexistent/scontrol", "t.py" },
                  env,
                  false,
                  "--rdzv-conf scontrol '/nonexistent/scontrol' cannot be "
                  "run" },
                { { "hyperpodrun", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "127.0.0.1", "--rdzv-conf",
                    "colour=blue", "t.py" },
                  env,
                  true,
                  "--rdzv-conf key 'colour' is not one of the c10d "
                  "backend's: is_host, join_timeout, last_call_timeout" },
                { { "hyperpodrun", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "127.0.0.1", "--rdzv-conf",
                    "is_host=maybe", "t.py" },
                  env,
                  true,
                  "invalid value 'maybe' for --rdzv-conf is_host" },
                { { "hyperpodrun", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "127.0.0.1", "--rdzv-conf",
                    "join_timeout=0", "t.py" },
                  env,
                  true,
                  "invalid value '0' for --rdzv-conf join_timeout" },
                { { "hyperpodrun", "--rdzv-backend", "static", "--nnodes",
                    "1:2", "t.py" },
                  env,
                  true,
                  "--nnodes 1:2: an elastic node count needs "
                  "--rdzv-backend c10d (or etcd-v2); static takes a "
                  "fixed one" },
                { { "hyperpodrun", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "127.0.0.1", "--rdzv-conf",
                    "last_call_timeout=soon", "t.py" },
                  env,
                  true,
                  "invalid value 'soon' for --rdzv-conf last_call_timeout" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "coordinate=maybe", "t.py" },
                  env,
                  true,
                  "invalid value 'maybe' for --rdzv-conf coordinate: "
                  "expected on, off or a port (1 to 65535)" },
                { { "hyperpodrun", "--rdzv-backend", "slurm", "--rdzv-conf",
                    "coordinate=65536", "t.py" },
                  env,
                  true,
                  "invalid value '65536' for --rdzv-conf coordinate" },
                { { "hyperpodrun", "--rdzv-backend", "resource-config",
                    "--rdzv-conf", "coordinate=0", "t.py" },
                  env,
                  true,
                  "invalid value '0' for --rdzv-conf coordinate" },
                { { "hyperpodrun", "--rdzv-backend", "static", "--nnodes",
                    "2", "--rdzv-conf", "colour=blue,join_timeout=soon",
                    "t.py" },
                  env,
                  true,
                  "invalid value 'soon' for --rdzv-conf join_timeout" },
                { { "hyperpodrun", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "127.0.0.1:bad", "t.py" },
                  env,
                  false,
                  "invalid --rdzv-endpoint '127.0.0.1:bad'" },
        };

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(cases); k++) {
                struct round *t = round_setup(cases[k].argv, cases[k].env);

                expect_failure(t, cases[k].at_init, cases[k].mention);
                round_free(t);
        }
}

/* ---- A stand-in for scontrol ---- */

struct fake_dir {
        char path[64];
        char script[128];
};

static void fake_dir_make(struct fake_dir *d)
{
        char *made;

        snprintf(d->path, sizeof(d->path), "/tmp/hp-test-scontrol-XXXXXX");
        made = mkdtemp(d->path);
        assert_non_null(made);
        snprintf(d->script, sizeof(d->script), "%s/scontrol", d->path);
}

/* Writes the fake scontrol: it checks its arguments, then runs body. */
static void fake_write(struct fake_dir *d, const char *body)
{
        char tmp[160];
        FILE *f;

        /* Written beside the old one and renamed over it, so that no run
         * ever sees half a script. */
        snprintf(tmp, sizeof(tmp), "%s.tmp", d->script);
        f = fopen(tmp, "w");
        assert_non_null(f);
        fprintf(f,
                "#!/bin/sh\n"
                "[ \"$1 $2 $3 $4\" = \"--oneliner show job 123456\" ] || "
                "{ echo \"bad arguments: $*\"; exit 9; }\n"
                "%s\n",
                body);
        assert_int_equal(fclose(f), 0);
        assert_int_equal(chmod(tmp, 0755), 0);
        assert_int_equal(rename(tmp, d->script), 0);
}

static void fake_dir_remove(struct fake_dir *d)
{
        unlink(d->script);
        assert_int_equal(rmdir(d->path), 0);
}

static void test_slurm_asks_scontrol(void **state)
{
        static const char *const env[] = { STEP_ENV, NULL };
        struct fake_dir d;
        char conf[256];
        struct round *t;
        const char *argv[] = { "hyperpodrun", "--rdzv-backend",
                               "slurm",       "--rdzv-conf",
                               conf,          "t.py",
                               NULL };

        (void)state;
        fake_dir_make(&d);
        snprintf(conf, sizeof(conf), "scontrol=%s", d.script);

        /* n2 was replaced by n7: scontrol knows, the environment not. */
        fake_write(&d,
                   "echo 'JobId=123456 JobName=train ReqNodeList=(null) "
                   "ExcNodeList=(null) NodeList=n[1,3-4,7] BatchHost=n1'");
        t = round_setup(argv, env);
        expect_round(t, 4, 1, 1, "n1", 29500);

        /* The next round asks again: a restart sees the new list. */
        fake_write(&d,
                   "echo 'JobId=123456 NodeList=n[3-4,7-8] BatchHost=n3'");
        expect_round(t, 4, 0, 1, "n3", 29500);

        /* A failing scontrol: the environment serves. */
        fake_write(&d, "echo 'slurm_load_jobs error: Socket timed out'; "
                       "exit 1");
        expect_round(t, 4, 2, 1, "n1", 29500);

        /* An answer without a node list: the environment serves. */
        fake_write(&d,
                   "echo 'JobId=123456 JobState=PENDING NodeList=(null)'");
        expect_round(t, 4, 2, 1, "n1", 29500);
        round_free(t);

        /* A hanging scontrol is killed at the timeout, and reaped. */
        snprintf(conf, sizeof(conf), "scontrol=%s,scontrol_timeout=0.2",
                 d.script);
        fake_write(&d, "exec sleep 30");
        t = round_setup(argv, env);
        expect_round(t, 4, 2, 1, "n1", 29500);
        errno = 0;
        assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
        assert_int_equal(errno, ECHILD);
        round_free(t);

        /* scontrol's list without this node is an error, not a guess. */
        snprintf(conf, sizeof(conf), "scontrol=%s", d.script);
        fake_write(&d, "echo 'JobId=123456 NodeList=n[5-8]'");
        t = round_setup(argv, env);
        expect_failure(t, false,
                       "this node 'n3' (SLURMD_NODENAME) is not in the job's "
                       "current node list 'n[5-8]' (from scontrol show job "
                       "123456)");
        round_free(t);
        fake_dir_remove(&d);
}

/* A fragmented list of 1500 nodes is longer than a page: scontrol's answer
 * is read whole, and the list it gives is used. */
static void test_slurm_long_node_list(void **state)
{
        static const char *const env[] = { "SLURM_STEP_NUM_NODES=1500",
                                           "SLURM_STEP_NODELIST=n[1-1500]",
                                           "SLURM_NODEID=2",
                                           "SLURMD_NODENAME=n3",
                                           "SLURM_JOB_ID=123456",
                                           NULL };
        size_t len = 64 + 1500 * 8, used;
        char *body = test_malloc(len), conf[256];
        const char *argv[] = { "hyperpodrun", "--rdzv-backend",
                               "slurm",       "--rdzv-conf",
                               conf,          "t.py",
                               NULL };
        struct fake_dir d;
        struct round *t;

        (void)state;
        /* Odd numbers only: n1,n3,n5,... puts n3 at position 1. */
        used = (size_t)snprintf(body, len, "echo 'JobId=123456 NodeList=");
        for (int i = 0; i < 1500; i++)
                used += (size_t)snprintf(body + used, len - used, "%sn%d",
                                         i ? "," : "", 2 * i + 1);
        snprintf(body + used, len - used, " BatchHost=n1'");
        assert_true(strlen(body) > 8192);
        fake_dir_make(&d);
        fake_write(&d, body);
        snprintf(conf, sizeof(conf), "scontrol=%s", d.script);
        t = round_setup(argv, env);
        expect_round(t, 1500, 1, 1, "n1", 29500);
        round_free(t);
        fake_dir_remove(&d);
        test_free(body);
}

/* scontrol found in PATH, as on a Slurm node. */
static void test_slurm_finds_scontrol_in_path(void **state)
{
        static const char *const env[] = { STEP_ENV, NULL };
        char *old_path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
        struct fake_dir d;
        struct round *t;

        (void)state;
        fake_dir_make(&d);
        fake_write(&d, "echo 'JobId=123456 NodeList=m[1-4]'");
        assert_int_equal(setenv("PATH", d.path, 1), 0);
        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "slurm", "t.py", NULL },
                        env);
        /* SLURMD_NODENAME n3 is not in m[1-4]: the fresh list was used. */
        expect_failure(t, false,
                       "not in the job's current node list "
                       "'m[1-4]'");
        round_free(t);

        /* Without scontrol in PATH the environment serves. */
        assert_int_equal(setenv("PATH", "/nonexistent", 1), 0);
        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "slurm", "t.py", NULL },
                        env);
        expect_round(t, 4, 2, 1, "n1", 29500);
        round_free(t);

        if (old_path != NULL)
                assert_int_equal(setenv("PATH", old_path, 1), 0);
        free(old_path);
        fake_dir_remove(&d);
}

static void test_resource_config_rounds(void **state)
{
        static const char *const fixture_env[] = {
                "SAGEMAKER_RESOURCE_CONFIG_PATH=" FIXTURE(
                        "resource_config_4node.json"),
                NULL
        };
        static const char *const missing_env[] = {
                "SAGEMAKER_RESOURCE_CONFIG_PATH=/nonexistent/rc.json", NULL
        };
        struct round *t;

        (void)state;
        t = round_setup(
                (const char *[]){
                        "hyperpodrun", "--rdzv-backend", "resource-config",
                        "--rdzv-conf",
                        "resource_config=" FIXTURE(
                                "resource_config_4node.json") ",instance_group="
                                                              "worker-group-1",
                        "--local-addr", "10.1.1.11", "--nproc-per-node", "2",
                        "--master-port", "29600", "t.py", NULL },
                NULL);
        expect_round(t, 4, 1, 2, "10.1.1.13", 29600);
        round_free(t);

        /* The path from the environment, the group from the address. */
        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "resource-config", "--local-addr",
                                          "10.1.1.12", "t.py", NULL },
                        fixture_env);
        expect_round(t, 4, 3, 1, "10.1.1.13", 29500);
        round_free(t);

        /* The key wins over the variable. */
        t = round_setup(
                (const char *[]){ "hyperpodrun", "--rdzv-backend",
                                  "resource-config", "--rdzv-conf",
                                  "resource_config=/nonexistent/k.json",
                                  "--local-addr", "10.1.1.12", "t.py", NULL },
                fixture_env);
        expect_failure(t, false,
                       "cannot read resource config '/nonexistent/k.json' "
                       "(from --rdzv-conf resource_config): no such file or "
                       "directory");
        round_free(t);

        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "resource-config", "--local-addr",
                                          "10.1.1.12", "t.py", NULL },
                        missing_env);
        expect_failure(t, false,
                       "cannot read resource config '/nonexistent/rc.json' "
                       "(from SAGEMAKER_RESOURCE_CONFIG_PATH)");
        round_free(t);

        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "resource-config", "--rdzv-conf",
                                          "resource_config=" HP_TEST_FIXTURES,
                                          "t.py", NULL },
                        NULL);
        expect_failure(t, false,
                       "(from --rdzv-conf resource_config): a "
                       "directory");
        round_free(t);

        /* With neither, the path HyperPod uses. The test machine is no
         * HyperPod node, so the file is not there. */
        if (access("/opt/ml/config/resource_config.json", F_OK) != 0) {
                t = round_setup((const char *[]){ "hyperpodrun",
                                                  "--rdzv-backend",
                                                  "resource-config", "t.py",
                                                  NULL },
                                NULL);
                expect_failure(t, false,
                               "cannot read resource config "
                               "'/opt/ml/config/resource_config.json' (from "
                               "the default path)");
                round_free(t);
        }

        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "resource-config", "--rdzv-conf",
                                          "scontrol=off", "t.py", NULL },
                        fixture_env);
        expect_failure(t, true,
                       "--rdzv-conf key 'scontrol' is not one of the "
                       "resource-config backend's: resource_config, "
                       "instance_group");
        round_free(t);

        /* --local-addr is ours and only it: a file address that is only
         * on an interface of this machine does not count. */
        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "resource-config", "--local-addr",
                                          "10.9.9.9", "t.py", NULL },
                        fixture_env);
        expect_failure(t, false,
                       "this node (--local-addr 10.9.9.9) is in no "
                       "instance group");
        round_free(t);

        t = round_setup((const char *[]){ "hyperpodrun", "--rdzv-backend",
                                          "resource-config", "--local-addr",
                                          "10.1.1.14", "--nnodes", "8",
                                          "t.py", NULL },
                        fixture_env);
        expect_failure(t, false, "--nnodes 8 disagrees with resource config");
        round_free(t);
}

/* ---- The restart policy ---- */

#define FAILED HP_GROUP_FAILED
#define STOPPED HP_GROUP_STOPPED
#define OK HP_GROUP_SUCCEEDED

static const struct {
        const char *name;
        struct hp_attempt_end end;
        enum hp_next what;
        int exit_code;
} policy_cases[] = {
        { "success with a stage left",
          { .result = OK, .more_stages = true },
          HP_NEXT_STAGE,
          0 },
        { "success of the last stage", { .result = OK }, HP_NEXT_EXIT, 0 },
        { "a failure with restarts left",
          { .result = FAILED,
            .restart_count = 0,
            .max_restarts = 2,
            .failure_exit = 3 },
          HP_NEXT_RESTART,
          0 },
        { "a failure on the last restart",
          { .result = FAILED,
            .restart_count = 2,
            .max_restarts = 2,
            .failure_exit = 3 },
          HP_NEXT_EXIT,
          3 },
        { "a failure without --max-restarts: the root cause's status",
          { .result = FAILED, .failure_exit = 137 },
          HP_NEXT_EXIT,
          137 },
        { "a failure in pre-train with more stages: no next stage",
          { .result = FAILED, .more_stages = true, .failure_exit = 1 },
          HP_NEXT_EXIT,
          1 },
        { "a verdict with restarts left",
          { .result = STOPPED, .verdict = true, .max_restarts = 1 },
          HP_NEXT_RESTART,
          0 },
        { "a verdict with none left: timeout(1)'s status",
          { .result = STOPPED,
            .verdict = true,
            .restart_count = 1,
            .max_restarts = 1 },
          HP_NEXT_EXIT,
          HP_EXIT_RULE_VERDICT },
        { "a verdict whatever the workers' statuses say",
          { .result = FAILED, .verdict = true, .failure_exit = 1 },
          HP_NEXT_EXIT,
          HP_EXIT_RULE_VERDICT },
        { "a verdict on a stage that succeeded still fails the attempt",
          { .result = OK, .verdict = true, .more_stages = true },
          HP_NEXT_EXIT,
          HP_EXIT_RULE_VERDICT },
        { "a node fault: no restart even with restarts left",
          { .result = STOPPED, .node_fault = true, .max_restarts = 5 },
          HP_NEXT_NODE_FAULT,
          HP_EXIT_NODE_FAULT },
        { "a node fault wins over a verdict",
          { .result = FAILED,
            .node_fault = true,
            .verdict = true,
            .max_restarts = 5 },
          HP_NEXT_NODE_FAULT,
          HP_EXIT_NODE_FAULT },
        { "a stop nobody asked for",
          { .result = STOPPED },
          HP_NEXT_EXIT,
          128 },
        { "SIGTERM to the agent: 128+15, no restart",
          { .result = FAILED,
            .signal = 15,
            .max_restarts = 3,
            .failure_exit = 1 },
          HP_NEXT_EXIT,
          143 },
        { "SIGINT wins over a node fault and a verdict",
          { .result = STOPPED,
            .signal = 2,
            .node_fault = true,
            .verdict = true },
          HP_NEXT_EXIT,
          130 },
};

/* A c10d round of one node hosts the store on the endpoint, and a
 * restart keeps the round; an endpoint where nobody answers fails after
 * join_timeout (port 1 refuses at once on loopback: the agent tries again
 * until then). */
static void test_c10d_rounds(void **state)
{
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof(a);
        const char *one[] = {
                "hyperpodrun", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                NULL,          "--rdzv-id",      "j1",   "--nproc-per-node",
                "3",           "t.py",           NULL
        };
        const char *none[] = { "hyperpodrun",
                               "--rdzv-backend",
                               "c10d",
                               "--rdzv-endpoint",
                               "127.0.0.1:1",
                               "--rdzv-id",
                               "j",
                               "--rdzv-conf",
                               "is_host=false,join_timeout=0.3",
                               "t.py",
                               NULL };
        char endpoint[64];
        struct round *t;
        int fd, port, r;

        (void)state;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
        port = ntohs(a.sin_port);
        close(fd);
        snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", port);
        one[4] = endpoint;
        t = round_setup(one, NULL);
        expect_round(t, 1, 0, 3, "127.0.0.1", port);
        assert_true(t->info.agent_store);
        assert_non_null(t->rdzv.c10d);
        expect_round(t, 1, 0, 3, "127.0.0.1", port);
        hp_rdzv_close(&t->rdzv, true);
        assert_null(t->rdzv.c10d);
        round_free(t);

        t = round_setup(none, NULL);
        r = round_next(t);
        assert_int_equal(r, HP_ERDZV);
        assert_string_equal(t->errbuf, "rendezvous 'j': no store answered at "
                                       "127.0.0.1:1 within join_timeout "
                                       "(0.3 s)");
        assert_null(t->rdzv.c10d);
        round_free(t);
}

static void test_restart_policy(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(policy_cases); k++) {
                struct hp_next_step got = hp_selfdriven__next(
                        &policy_cases[k].end);

                bool exits = got.what == HP_NEXT_EXIT ||
                             got.what == HP_NEXT_NODE_FAULT;

                if (got.what != policy_cases[k].what ||
                    (exits && got.exit_code != policy_cases[k].exit_code))
                        CASE_FAILED(failures,
                                    "%s: %s with %d, expected %s with %d",
                                    policy_cases[k].name,
                                    hp_selfdriven__next_name(got.what),
                                    got.exit_code,
                                    hp_selfdriven__next_name(
                                            policy_cases[k].what),
                                    policy_cases[k].exit_code);
        }
        assert_int_equal(failures, 0);
}

/* What one stage that runs ends with, for the fake driver. */
struct fake_end {
        enum hp_group_result result;
        bool verdict;
        bool node_fault;
        int failure_exit;
};

/* A whole self-driven run, played by a driver that does what
 * selfdriven.c does with each decision: the stages that ran ("pre",
 * "train", "post", "|" for a restart) and how it ended. */
static const struct {
        const char *name;
        bool pre, post; /* the hooks configured */
        int max_restarts;
        struct fake_end ends[12];
        int nends;
        const char *trace;
        int exit_code;
} runs[] = {
        { "three stages succeed",
          true,
          true,
          0,
          { { .result = OK }, { .result = OK }, { .result = OK } },
          3,
          "pre train post",
          0 },
        { "train only",
          false,
          false,
          0,
          { { .result = OK } },
          1,
          "train",
          0 },
        { "train fails once, then succeeds",
          false,
          true,
          1,
          { { .result = FAILED, .failure_exit = 1 },
            { .result = OK },
            { .result = OK } },
          3,
          "train | train post",
          0 },
        { "a restart starts over from pre-train",
          true,
          false,
          2,
          { { .result = OK },
            { .result = FAILED, .failure_exit = 1 },
            { .result = OK },
            { .result = OK } },
          4,
          "pre train | pre train",
          0 },
        { "restarts run out",
          false,
          false,
          2,
          { { .result = FAILED, .failure_exit = 7 },
            { .result = FAILED, .failure_exit = 7 },
            { .result = FAILED, .failure_exit = 9 } },
          3,
          "train | train | train",
          9 },
        { "post-train fails with no restarts",
          false,
          true,
          0,
          { { .result = OK }, { .result = FAILED, .failure_exit = 2 } },
          2,
          "train post",
          2 },
        { "a hang restarts, then the job succeeds",
          false,
          false,
          1,
          { { .result = STOPPED, .verdict = true }, { .result = OK } },
          2,
          "train | train",
          0 },
        { "hangs until no restart is left",
          false,
          false,
          1,
          { { .result = STOPPED, .verdict = true },
            { .result = STOPPED, .verdict = true } },
          2,
          "train | train",
          HP_EXIT_RULE_VERDICT },
        { "a node fault in train ends the job at once",
          true,
          true,
          3,
          { { .result = OK }, { .result = STOPPED, .node_fault = true } },
          2,
          "pre train",
          HP_EXIT_NODE_FAULT },
};

static void test_restart_runs(void **state)
{
        int failures = 0;

        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(runs); k++) {
                static const char *const names[] = { "pre", "train", "post" };
                bool enabled[3] = { runs[k].pre, true, runs[k].post };
                int first = runs[k].pre ? 0 : 1;
                int stage = first, restarts = 0, exit_code = -1, i;
                char trace[256] = "";
                size_t n = 0;

                for (i = 0; i < runs[k].nends && exit_code < 0; i++) {
                        const struct fake_end *f = &runs[k].ends[i];
                        struct hp_attempt_end e = {
                                .result = f->result,
                                .verdict = f->verdict,
                                .node_fault = f->node_fault,
                                .failure_exit = f->failure_exit,
                                .more_stages = stage == 0 ||
                                               (stage == 1 && enabled[2]),
                                .restart_count = restarts,
                                .max_restarts = runs[k].max_restarts,
                        };
                        struct hp_next_step next = hp_selfdriven__next(&e);

                        n += (size_t)snprintf(trace + n, sizeof(trace) - n,
                                              "%s%s", n ? " " : "",
                                              names[stage]);
                        switch (next.what) {
                        case HP_NEXT_STAGE:
                                do
                                        stage++;
                                while (!enabled[stage]);
                                break;
                        case HP_NEXT_RESTART:
                                restarts++;
                                stage = first;
                                n += (size_t)snprintf(trace + n,
                                                      sizeof(trace) - n,
                                                      " |");
                                break;
                        case HP_NEXT_EXIT:
                        case HP_NEXT_NODE_FAULT:
                                exit_code = next.exit_code;
                                break;
                        }
                }
                if (exit_code < 0 || i != runs[k].nends)
                        CASE_FAILED(failures,
                                    "%s: ended after %d of %d "
                                    "stages with %d",
                                    runs[k].name, i, runs[k].nends,
                                    exit_code);
                else if (strcmp(trace, runs[k].trace) != 0 ||
                         exit_code != runs[k].exit_code)
                        CASE_FAILED(failures,
                                    "%s: '%s', exit %d; expected "
                                    "'%s', exit %d",
                                    runs[k].name, trace, exit_code,
                                    runs[k].trace, runs[k].exit_code);
        }
        assert_int_equal(failures, 0);
}

/* /metrics' hyperpodrun_faults_total{cause}: the cause a FAULTED reason
 * names, in every mode. */
static void test_fault_cause(void **state)
{
        static const struct {
                const char *reason;
                enum hp_fault_cause cause;
                const char *name;
        } cases[] = {
                { "WorkerCrash", HP_FAULT_WORKER, "worker" },
                { "WorkerStartFailed", HP_FAULT_WORKER, "worker" },
                { "WorkerFault", HP_FAULT_WORKER, "worker" },
                { "LogSlow_Throughput", HP_FAULT_RULE, "rule" },
                { "LogHang_Heartbeat", HP_FAULT_RULE, "rule" },
                { "LogFault_NaNLoss", HP_FAULT_RULE, "rule" },
                { "NodeFault_Xid79FallenOffTheBus", HP_FAULT_NODE, "node" },
                { "NodeFault_NCCLPreflight", HP_FAULT_NODE, "node" },
                { "RankHeartbeatTimeout", HP_FAULT_RANK, "rank" },
                { "RankInitialHeartbeatTimeout", HP_FAULT_RANK, "rank" },
                { "RankSectionTimeout_forward", HP_FAULT_RANK, "rank" },
                { "RankOutOfSectionTimeout", HP_FAULT_RANK, "rank" },
                { "RankStraggler", HP_FAULT_RANK, "rank" },
                { "RankSomethingElse", HP_FAULT_WORKER, "worker" },
                /* A reason a worker sent over the socket, or none. */
                { "Log", HP_FAULT_WORKER, "worker" },
                { "NodeFault", HP_FAULT_WORKER, "worker" },
                { "", HP_FAULT_WORKER, "worker" },
                { NULL, HP_FAULT_WORKER, "worker" },
        };
        int failures = 0;

        (void)state;
        for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                enum hp_fault_cause got = hp_fault_cause_of(cases[i].reason);
                if (got != cases[i].cause ||
                    strcmp(hp_fault_cause_name(got), cases[i].name) != 0)
                        CASE_FAILED(failures, "%s: %s, expected %s",
                                    cases[i].reason ? cases[i].reason
                                                    : "(null)",
                                    hp_fault_cause_name(got), cases[i].name);
        }
        assert_string_equal(hp_fault_cause_name(HP_FAULT_CAUSE_COUNT), "?");
        assert_int_equal(failures, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_slurm_place),
                cmocka_unit_test(test_scontrol_nodelist),
                cmocka_unit_test(test_resource_config_place),
                cmocka_unit_test(test_slurm_rounds),
                cmocka_unit_test(test_slurm_bad_flags_and_keys),
                cmocka_unit_test(test_slurm_asks_scontrol),
                cmocka_unit_test(test_slurm_long_node_list),
                cmocka_unit_test(test_slurm_finds_scontrol_in_path),
                cmocka_unit_test(test_resource_config_rounds),
                cmocka_unit_test(test_c10d_rounds),
                cmocka_unit_test(test_restart_policy),
                cmocka_unit_test(test_restart_runs),
                cmocka_unit_test(test_fault_cause),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
