/* SPDX-License-Identifier: Apache-2.0 */
/* Rendezvous: the run id, and the rounds of the backends that need no
 * network peer: standalone and static here, slurm (slurm.c) and
 * resource-config (resource_config.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/rendezvous.h"
#include "rendezvous-private.h"

static void uuid4(char *out, size_t len)
{
        unsigned char b[16];
        size_t got = 0;

        while (got < sizeof(b)) {
                ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        memset(b + got, 0x5a, sizeof(b) - got);
                        break;
                }
                got += (size_t)n;
        }
        b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
        b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
        snprintf(out, len,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                 "%02x%02x%02x%02x%02x%02x",
                 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
                 b[10], b[11], b[12], b[13], b[14], b[15]);
}

int hp_rdzv_init(struct hp_rdzv *rdzv, const struct hp_config *cfg,
                 char *errbuf, size_t errlen)
{
        rdzv->cfg = cfg;
        if (cfg->standalone)
                uuid4(rdzv->run_id, sizeof(rdzv->run_id));
        else if (hp_snprintf(rdzv->run_id, sizeof(rdzv->run_id), "%s",
                             cfg->rdzv_id) < 0) {
                snprintf(errbuf, errlen, "--rdzv-id '%s' is too long",
                         cfg->rdzv_id);
                return HP_ECONFIG;
        }
        if (cfg->rdzv_backend == HP_RDZV_ETCD_V2 && !cfg->standalone &&
            (rdzv->run_id[0] == '_' || rdzv->run_id[0] == '.')) {
                /* etcd hides keys that start with '_' from listings, and
                 * takes "." and ".." for path steps. */
                snprintf(errbuf, errlen,
                         "--rdzv-id '%s' cannot name an etcd directory: "
                         "with --rdzv-backend etcd-v2 it must not start "
                         "with '_' or '.'",
                         rdzv->run_id);
                return HP_ECONFIG;
        }
        if (gethostname(rdzv->hostname, sizeof(rdzv->hostname) - 1) < 0)
                rdzv->hostname[0] = '\0';
        rdzv->hostname[sizeof(rdzv->hostname) - 1] = '\0';
        return hp_rdzv__options_parse(rdzv, errbuf, errlen);
}

void hp_rdzv_close(struct hp_rdzv *rdzv, bool succeeded)
{
        hp_rdzv__c10d_close(rdzv, succeeded);
}

/* A port nobody listens on now, as torchrun's standalone mode picks one. */
static int pick_free_port(int *port)
{
        struct sockaddr_in addr = { .sin_family = AF_INET };
        socklen_t len = sizeof(addr);
        int fd, r = 0;

        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
            getsockname(fd, (struct sockaddr *)&addr, &len) < 0)
                r = -errno;
        else
                *port = ntohs(addr.sin_port);
        close(fd);
        return r;
}

int hp_rdzv_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out, char *errbuf,
                 size_t errlen)
{
        const struct hp_config *cfg = rdzv->cfg;
        int r;

        memset(out, 0, sizeof(*out));
        out->nproc = cfg->nproc;
        if (cfg->standalone) {
                out->nnodes = 1;
                out->node_rank = 0;
                snprintf(out->master_addr, sizeof(out->master_addr), "%s",
                         "127.0.0.1");
                r = pick_free_port(&out->master_port);
                if (r < 0) {
                        snprintf(
                                errbuf, errlen,
                                "--standalone: no free port on 127.0.0.1: %s",
                                hp_strerror(r));
                        return HP_ERDZV;
                }
        } else if (cfg->rdzv_backend == HP_RDZV_STATIC) {
                out->nnodes = cfg->nnodes;
                out->node_rank = cfg->node_rank;
                out->master_port = cfg->master_port;
                snprintf(out->master_addr, sizeof(out->master_addr), "%s",
                         cfg->master_addr);
                /* torchrun's static backend takes the master from the
                 * endpoint when one is given. */
                if (cfg->rdzv_endpoint[0] != '\0' &&
                    hp_rdzv_parse_endpoint(cfg->rdzv_endpoint,
                                           out->master_addr,
                                           sizeof(out->master_addr),
                                           cfg->master_port,
                                           &out->master_port) < 0) {
                        snprintf(errbuf, errlen,
                                 "invalid --rdzv-endpoint '%s': expected "
                                 "HOST[:PORT] or [IPV6]:PORT",
                                 cfg->rdzv_endpoint);
                        return HP_ECONFIG;
                }
        } else if (cfg->rdzv_backend == HP_RDZV_SLURM) {
                r = hp_rdzv__slurm_next(rdzv, out, errbuf, errlen);
                if (r < 0)
                        return r;
        } else if (cfg->rdzv_backend == HP_RDZV_RESOURCE_CONFIG) {
                r = hp_rdzv__resource_config_next(rdzv, out, errbuf, errlen);
                if (r < 0)
                        return r;
        } else if (cfg->rdzv_backend == HP_RDZV_C10D ||
                   cfg->rdzv_backend == HP_RDZV_ETCD_V2) {
                r = hp_rdzv__c10d_next(rdzv, out, errbuf, errlen);
                if (r < 0)
                        return r;
        } else {
                /* hyperpod: the operator's /start is the rendezvous
                 * (src/operator); there is no round to run here. */
                snprintf(errbuf, errlen,
                         "--rdzv-backend %s gets its rendezvous from the "
                         "operator's /start, not from a round",
                         cfg->rdzv_backend_name);
                return HP_ENOTSUP;
        }
        if (rdzv->opt.coordinate_port != 0 && out->nnodes > 1) {
                r = hp_rdzv__coord_round(rdzv, out, errbuf, errlen);
                if (r < 0)
                        return r;
        }
        out->world_size = out->nnodes * out->nproc;
        out->group_world_size = out->nnodes;
        out->base_rank = out->node_rank * out->nproc;
        return 0;
}
