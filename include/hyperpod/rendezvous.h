/* SPDX-License-Identifier: Apache-2.0 */
/* hyperpodrun: where this node stands in the job, read again per attempt. */
#ifndef HYPERPOD_RENDEZVOUS_H
#define HYPERPOD_RENDEZVOUS_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "hyperpod/config.h"

/* The outcome of one rendezvous round: what the workers' environment is
 * made of. */
struct hp_rdzv_info {
        int nnodes;
        int node_rank;        /* GROUP_RANK */
        int nproc;            /* LOCAL_WORLD_SIZE */
        int world_size;       /* nnodes * nproc */
        int group_world_size; /* nnodes: torchrun's meaning */
        int base_rank;        /* node_rank * nproc */
        char master_addr[256];
        int master_port;
        /* c10d: MASTER_ADDR:MASTER_PORT is the agents' store, which the
         * workers share (TORCHELASTIC_USE_AGENT_STORE=True). */
        bool agent_store;
};

/* The --rdzv-conf keys the self-driven backends read, parsed once by
 * hp_rdzv_init. Empty strings mean "not given". */
struct hp_rdzv_options {
        /* slurm */
        char scontrol[4096]; /* "off", a path, or "" for PATH */
        uint64_t scontrol_timeout_ms;
        bool port_from_job_id; /* master_port=jobid */
        /* resource-config */
        char resource_config[4096];
        char resource_config_source[64]; /* where the path came from */
        char instance_group[256];
        /* hyperpod: where pod_resourceconfig.json is kept */
        char resource_config_dir[4096];
        bool resource_config_dir_given; /* by --rdzv-conf, not the default */
        /* c10d */
        int is_host; /* 1, 0, or -1: host when the endpoint
                                    * can be bound here */
        uint64_t join_timeout_ms;
        uint64_t last_call_timeout_ms; /* c10d, with --nnodes MIN:MAX */
        /* Every agent of a round at a store adds to its beat key every
         * keep_alive_interval; a node whose key stood still for
         * keep_alive_max_attempt intervals is gone, and so is a store
         * that answered none of that many beats. */
        uint64_t keep_alive_interval_ms;
        int keep_alive_max_attempt;
        /* How long an agent that does not host spends telling the store
         * it has finished (torchrun's close_timeout); read_timeout is
         * accepted and checked, and bounds nothing the waits above do not
         * (the docs say so). */
        uint64_t close_timeout_ms;
        uint64_t read_timeout_ms;
        /* static, slurm, resource-config: coordinated restarts through a
         * store on node 0's agent (--rdzv-conf coordinate): 0 off, -1 on
         * at the master port + 1, or the port. */
        int coordinate_port;
};

struct hp_rdzv_c10d;  /* private to src/rendezvous */
struct hp_rdzv_watch; /* private to src/rendezvous */

struct hp_rdzv {
        const struct hp_config *cfg; /* borrowed */
        char run_id[128];            /* fixed for the agent's life */
        struct hp_rdzv_options opt;
        char hostname[256]; /* this machine's, for the self-driven
                                      * backends */
        /* c10d: the store this agent hosts (NULL when another does), and
         * the round, which restarts keep. */
        struct hp_rdzv_c10d *c10d;
        bool have_round;
        struct hp_rdzv_info round;
        /* c10d: the round's number (TORCHELASTIC_RESTART_COUNT, the same
         * on every node), whether this agent joined it without it
         * closing, the store's numeric address, and the watch on the
         * round's end. */
        int gen;
        bool round_open;
        char store_addr[64];
        int store_port;
        struct hp_rdzv_watch *watch;
        /* The watch found the store gone or silent: the end says nothing
         * more to it. */
        bool store_lost;
        /* This agent's keep-alive found a node gone: the next round ends
         * this one with "lost", which the others take for LOST too. */
        bool lost_node;
};

/* hp_rdzv_next's answer when another node left the job (failed with no
 * restart left, stopped, faulty): this one exits too. */
#define HP_RDZV_PEER_EXIT (-ECONNABORTED)

/* Fixes the run id (a random UUID with --standalone) and checks the
 * --rdzv-conf keys of the slurm and resource-config backends. Errors are
 * HP_ECONFIG with the reason in errbuf. */
int hp_rdzv_init(struct hp_rdzv *rdzv, const struct hp_config *cfg,
                 char *errbuf, size_t errlen);

/* Runs one round. Self-driven backends answer at once (the slurm backend
 * may wait up to scontrol_timeout for scontrol); a backend that is not
 * available returns HP_ENOTSUP with the reason in errbuf. Bad input (a
 * missing or malformed variable or file, this node not in the list) is
 * HP_ECONFIG, with the source and the value named in errbuf. */
int hp_rdzv_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out, char *errbuf,
                 size_t errlen);

/* Ends what hp_rdzv_init and the rounds started: the store a c10d agent
 * hosts (its workers' store too) is closed. A c10d agent first passes the
 * exit barrier: it says it has finished, and the host, when its job
 * succeeded (torchrun's rule), keeps the store until every node has.
 * Safe to call more than once and on a zeroed struct. */
void hp_rdzv_close(struct hp_rdzv *rdzv, bool succeeded);

/* ---- The round coordinator: restarts that move every node together ----
 *
 * With a backend whose nodes share a store (c10d), a round ends for every
 * node when one ends it: a node whose workers failed (or were judged by a
 * rule) runs hp_rdzv_next again, which ends the round at the store before
 * joining the next; one that leaves the job (no restart left, a signal, a
 * node fault) ends it with "exit" in hp_rdzv_close. The others learn it by
 * push: hp_rdzv_watch keeps a WAIT on the round's end key on the agent's
 * loop and calls cb once: RESTART or JOIN (stop the workers and run
 * hp_rdzv_next; a JOIN, a node that came to a --nnodes MIN:MAX job, is no
 * failure), LOST (a node's keep-alive stood still for
 * keep_alive_interval × keep_alive_max_attempt: stop the workers and run
 * hp_rdzv_next, which ends the round for the others, as after a failure
 * of this node's) or EXIT (another node left, or the store went away or
 * stopped answering the keep-alive: stop the workers and exit). */
enum hp_rdzv_end {
        HP_RDZV_END_RESTART, /* a node failed: restart with it */
        HP_RDZV_END_JOIN,    /* a node joined (MIN:MAX): no failure */
        HP_RDZV_END_EXIT,    /* a node left the job, or the store went */
        HP_RDZV_END_LOST,    /* a node sent no keep-alive: restart
                              * without it, as after a failure */
};
typedef void (*hp_rdzv_round_end_cb)(void *ctx, enum hp_rdzv_end end,
                                     const char *why);

/* True when this backend's rounds are coordinated (the restart count is
 * then job-wide: the round number). */
bool hp_rdzv_coordinated(const struct hp_rdzv *rdzv);

/* Watches the current round's end on loop; 0 (nothing to watch when the
 * backend is not coordinated) or a negative errno. A second call replaces
 * the first. */
int hp_rdzv_watch(struct hp_rdzv *rdzv, uv_loop_t *loop,
                  hp_rdzv_round_end_cb cb, void *ctx);

/* Drops the watch (no callback after this); its connection closes on the
 * loop's next turn. hp_rdzv_next and hp_rdzv_close drop it too. */
void hp_rdzv_unwatch(struct hp_rdzv *rdzv);

/* Splits "host[:port]" or "[v6]:port"; port stays default_port when
 * absent. Exposed for tests. */
int hp_rdzv_parse_endpoint(const char *text, char *host, size_t host_len,
                           int default_port, int *port);

/* ---- Slurm hostlists ---- */

/*
 * Caps on what one hostlist may expand to. Slurm itself refuses a range of
 * more than 64 Ki hosts; a larger expansion can only be a typo or hostile,
 * and would cost 16 MiB of names. HP_ETOOBIG past either cap.
 */
#define HP_HOSTLIST_MAX_HOSTS 65536
#define HP_HOSTLIST_MAX_NAME 255

struct hp_hostlist {
        size_t count;
        char **names; /* count names, in Slurm's order; owned */
};

/*
 * Expands a Slurm hostlist as `scontrol show hostnames` does:
 * "ip-10-1-[2-4,7]", "node[001-003]", "a[1-2],b3", "rack[1-2]-n[01-02]".
 * Items are separated by commas outside brackets; a bracket group holds
 * comma-separated numbers or LO-HI ranges, zero-padded to the width of LO;
 * several groups in one name expand to every combination, in Slurm's order
 * (the last group fastest, then the first, the second, ...). Text may
 * follow the last group. Malformed lists (unbalanced or nested brackets,
 * empty items or groups, reversed or non-numeric ranges, blanks) give
 * HP_ECONFIG and a reason with the byte offset in errbuf; expansions past
 * the caps give HP_ETOOBIG. On success free the list with hp_hostlist_free.
 */
int hp_hostlist_expand(const char *text, struct hp_hostlist *out,
                       char *errbuf, size_t errlen);
void hp_hostlist_free(struct hp_hostlist *list);

/* ---- The self-driven backends' pure parts, exposed for tests ---- */

/*
 * Where this node sits in a Slurm step, from environment strings ("K=V",
 * NULL-terminated, as environ) and, when scontrol answered, the job's
 * current NodeList (fresh_list; NULL when not asked or it failed), which
 * wins over the environment's possibly stale list. hostname stands in for
 * SLURMD_NODENAME when that is unset. Fills nnodes, node_rank and
 * master_addr of out. Writes to what a short account of the sources, for
 * the log.
 */
int hp_rdzv_slurm_place(char *const *envp, const char *hostname,
                        const char *fresh_list, const char *fresh_source,
                        struct hp_rdzv_info *out, char *what, size_t what_len,
                        char *errbuf, size_t errlen);

/* Finds the job's NodeList=... in `scontrol --oneliner show job` output.
 * Returns 0, or HP_ECONFIG when there is none (or it is "(null)"). */
int hp_rdzv_scontrol_nodelist(const char *output, char *list, size_t len);

/* This node, as the resource-config backend matches it. */
struct hp_rdzv_identity {
        const char *const *addrs; /* this node's addresses */
        size_t naddrs;
        const char *addrs_source; /* "--local-addr", "network interfaces" */
        const char *hostname;     /* matched against InstanceName; or NULL */
};

/*
 * Where this node sits in resource_config.json (json, read from path):
 * the instances of one group, in file order (group NULL: the group that
 * holds this node), master = the first's CustomerIpAddress, rank = this
 * node's position. Fills nnodes, node_rank and master_addr of out.
 */
int hp_rdzv_resource_config_place(const char *json, size_t json_len,
                                  const char *path, const char *group,
                                  const struct hp_rdzv_identity *me,
                                  struct hp_rdzv_info *out, char *what,
                                  size_t what_len, char *errbuf,
                                  size_t errlen);

#endif
