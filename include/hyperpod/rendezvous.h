/* hyperpodrun: where this node stands in the job, read again per attempt. */
#ifndef HYPERPOD_RENDEZVOUS_H
#define HYPERPOD_RENDEZVOUS_H

#include <stddef.h>

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
};

struct hp_rdzv {
        const struct hp_config *cfg; /* borrowed */
        char run_id[128];            /* fixed for the agent's life */
};

/* Fixes the run id (a random UUID with --standalone). */
int hp_rdzv_init(struct hp_rdzv *rdzv, const struct hp_config *cfg,
                 char *errbuf, size_t errlen);

/* Runs one round. Self-driven backends answer at once; a backend that is
 * not available returns HP_ENOTSUP with the reason in errbuf. */
int hp_rdzv_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out, char *errbuf,
                 size_t errlen);

/* Splits "host[:port]" or "[v6]:port"; port stays default_port when
 * absent. Exposed for tests. */
int hp_rdzv_parse_endpoint(const char *text, char *host, size_t host_len,
                           int default_port, int *port);

#endif
