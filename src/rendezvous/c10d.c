/* SPDX-License-Identifier: Apache-2.0 */
/* The c10d backend: the agents meet at a TCPStore on --rdzv-endpoint.
 *
 * The agent that can bind the endpoint (or is told is_host=true) hosts the
 * store (src/store) on a thread of its own, for the agents' round and then
 * for the workers, who share it as torchrun's do
 * (TORCHELASTIC_USE_AGENT_STORE=True, MASTER_ADDR:MASTER_PORT the store).
 * Every agent then joins the round with its own client: an ADD on the
 * round's key gives it its node rank in the order of arrival, the
 * --nnodes-th sets the round's "closed" key, and a WAIT on that key ends
 * the round for everyone. The round runs on a loop of its own, before the
 * agent starts anything, bounded by join_timeout and ended by a stop
 * signal (seen, and left pending for the agent, through a signalfd). */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <uv.h>

#include "hyperpod/common.h"
#include "hyperpod/store.h"
#include "rendezvous-private.h"

/* How long a refused connection waits before the next try: the host's
 * agent may not listen yet, and nothing tells us when it does. */
#define RETRY_MS 100
/* How long the hosting agent, at its end, keeps the store up for the
 * other nodes' workers (torchrun's exit_barrier_timeout). */
#define EXIT_BARRIER_MS 300000

struct hp_rdzv_c10d {
        uv_loop_t loop; /* the store's, run by thread */
        uv_async_t stop;
        uv_thread_t thread;
        struct hp_store_server *server;
};

/* ---- the store this agent hosts ---- */

static void store_closed_cb(void *ctx)
{
        struct hp_rdzv_c10d *h = ctx;

        uv_close((uv_handle_t *)&h->stop, NULL);
}

static void stop_cb(uv_async_t *a)
{
        struct hp_rdzv_c10d *h = hp_container_of(a, struct hp_rdzv_c10d, stop);

        hp_store_server_close(h->server, store_closed_cb, h);
}

static void store_thread(void *arg)
{
        struct hp_rdzv_c10d *h = arg;

        uv_run(&h->loop, UV_RUN_DEFAULT);
}

/* Binds host:port for the store; 0, or a negative errno with err. */
static int host_start(struct hp_rdzv *rdzv, const char *bind_host, int port,
                      char *err, size_t errlen)
{
        struct hp_rdzv_c10d *h = calloc(1, sizeof(*h));
        int r;

        if (h == NULL)
                return -ENOMEM;
        r = uv_loop_init(&h->loop);
        if (r < 0) {
                free(h);
                return r;
        }
        r = hp_store_server_new(&h->loop, NULL, &h->server);
        if (r == 0) {
                r = hp_store_server_listen(h->server, bind_host, port, err,
                                           errlen);
                if (r < 0) {
                        hp_store_server_close(h->server, NULL, NULL);
                        uv_run(&h->loop, UV_RUN_DEFAULT);
                }
        }
        if (r == 0) {
                uv_async_init(&h->loop, &h->stop, stop_cb);
                /* The thread inherits this one's signal mask: the agent
                 * holds its signals while it starts, and they stay with
                 * the loop thread. */
                r = uv_thread_create(&h->thread, store_thread, h);
                if (r < 0) {
                        uv_close((uv_handle_t *)&h->stop, NULL);
                        hp_store_server_close(h->server, NULL, NULL);
                        uv_run(&h->loop, UV_RUN_DEFAULT);
                }
        }
        if (r < 0) {
                uv_loop_close(&h->loop);
                free(h);
                return r;
        }
        rdzv->c10d = h;
        return 0;
}

/* The endpoint's address, numeric, for binding and connecting. */
static int resolve(const char *host, char *addr, size_t len, char *err,
                   size_t errlen)
{
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
        struct addrinfo *res;
        int r = getaddrinfo(host, NULL, &hints, &res);

        if (r != 0) {
                snprintf(err, errlen, "cannot resolve --rdzv-endpoint host "
                                      "'%s': %s", host, gai_strerror(r));
                return HP_ERDZV;
        }
        r = getnameinfo(res->ai_addr, res->ai_addrlen, addr, (socklen_t)len,
                        NULL, 0, NI_NUMERICHOST);
        freeaddrinfo(res);
        if (r != 0) {
                snprintf(err, errlen, "cannot resolve --rdzv-endpoint host "
                                      "'%s': %s", host, gai_strerror(r));
                return HP_ERDZV;
        }
        return 0;
}

/* ---- the round ---- */

enum round_state {
        ROUND_CONNECTING,
        ROUND_JOINING,
        ROUND_WAITING,
        ROUND_DONE,
        ROUND_FAILED,
};

struct round {
        uv_loop_t loop;
        uv_timer_t deadline;
        uv_timer_t retry;
        uv_poll_t signals;
        int sigfd;
        struct hp_store_client *client;
        enum round_state state;
        const char *addr; /* numeric */
        int port;
        int nnodes;
        int64_t joined; /* this agent's place, 1-based */
        bool finishing; /* the exit barrier, not the join */
        bool hosting;   /* this agent holds the store */
        /* TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: node 0's worker rank 0
         * hosts the workers' store, at the address node 0 publishes. */
        bool own_store;
        char key_master[300];
        char master_addr[INET6_ADDRSTRLEN];
        int master_port;
        char key_joined[300];
        char key_closed[300];
        const char *endpoint;
        const char *run_id;
        uint64_t join_timeout_ms;
        char *err;
        size_t errlen;
};

static void round_fail(struct round *rd, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static void round_fail(struct round *rd, const char *fmt, ...)
{
        va_list ap;

        if (rd->state == ROUND_DONE || rd->state == ROUND_FAILED)
                return;
        va_start(ap, fmt);
        vsnprintf(rd->err, rd->errlen, fmt, ap);
        va_end(ap);
        rd->state = ROUND_FAILED;
        uv_stop(&rd->loop);
}

static void connect_now(struct round *rd);

static void retry_cb(uv_timer_t *t)
{
        connect_now(hp_container_of(t, struct round, retry));
}

static void closed_set_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;

        if (r->status < 0)
                round_fail(rd, "rendezvous '%s' at %s: cannot write to the "
                               "store: %s",
                           rd->run_id, rd->endpoint, hp_strerror(r->status));
}

static void master_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        char text[300];

        if (r->status < 0 || r->val_len == 0 || r->val_len >= sizeof(text)) {
                round_fail(rd, "rendezvous '%s' at %s: node 0 published no "
                               "master address",
                           rd->run_id, rd->endpoint);
                return;
        }
        memcpy(text, r->val, r->val_len);
        text[r->val_len] = '\0';
        if (hp_rdzv_parse_endpoint(text, rd->master_addr,
                                   sizeof(rd->master_addr), 0,
                                   &rd->master_port) < 0 ||
            rd->master_port == 0) {
                round_fail(rd, "rendezvous '%s' at %s: node 0 published the "
                               "master '%s', which is no HOST:PORT",
                           rd->run_id, rd->endpoint, text);
                return;
        }
        rd->state = ROUND_DONE;
        uv_stop(&rd->loop);
}

static void waited_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        int q;

        if (r->status < 0) {
                round_fail(rd, "rendezvous '%s' at %s: the store went away "
                               "while waiting for %d nodes: %s",
                           rd->run_id, rd->endpoint, rd->nnodes,
                           hp_strerror(r->status));
                return;
        }
        if (rd->own_store && !rd->finishing) {
                q = hp_store_client_get(rd->client, rd->key_master,
                                        strlen(rd->key_master), master_cb, rd);
                if (q < 0)
                        round_fail(rd, "%s", hp_strerror(q));
                return;
        }
        rd->state = ROUND_DONE;
        uv_stop(&rd->loop);
}

/* A port nobody listens on now on every address, for worker rank 0's
 * store, as torchrun picks one. */
static int free_port(int *port)
{
        struct sockaddr_in6 a = { .sin6_family = AF_INET6 };
        socklen_t len = sizeof(a);
        int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), r = 0;

        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) < 0)
                r = -errno;
        else
                *port = ntohs(a.sin6_port);
        close(fd);
        return r;
}

/* Node 0 says where its worker rank 0 will listen: this end's address of
 * the connection to the store (the one the others reach it by) and a free
 * port. */
static int publish_master(struct round *rd)
{
        char addr[INET6_ADDRSTRLEN], value[INET6_ADDRSTRLEN + 16];
        int port = 0, r;

        r = hp_store_client_local_addr(rd->client, addr, sizeof(addr));
        if (r == 0)
                r = free_port(&port);
        if (r < 0)
                return r;
        snprintf(value, sizeof(value), strchr(addr, ':') ? "[%s]:%d" : "%s:%d",
                 addr, port);
        hp_log_info("rendezvous '%s': TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: "
                    "worker rank 0 hosts the workers' store at %s",
                    rd->run_id, value);
        return hp_store_client_set(rd->client, rd->key_master,
                                   strlen(rd->key_master), value,
                                   strlen(value), closed_set_cb, rd);
}

static void joined_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        const char *keys[] = { rd->key_closed, rd->key_master };
        size_t nkeys = rd->own_store && !rd->finishing ? 2 : 1;
        int q;

        if (r->status < 0) {
                round_fail(rd, "rendezvous '%s' at %s: cannot join: %s",
                           rd->run_id, rd->endpoint, hp_strerror(r->status));
                return;
        }
        rd->joined = r->num;
        if (rd->finishing) {
                /* The last agent to finish says so; only the one that
                 * holds the store waits for it. */
                q = 0;
                if (rd->joined >= rd->nnodes)
                        q = hp_store_client_set(rd->client, rd->key_closed,
                                                strlen(rd->key_closed), "1", 1,
                                                closed_set_cb, rd);
                if (q == 0 && rd->hosting) {
                        rd->state = ROUND_WAITING;
                        q = hp_store_client_wait(rd->client, keys, 1, 0,
                                                 waited_cb, rd);
                } else if (q == 0) {
                        q = hp_store_client_ping(rd->client, 0, waited_cb, rd);
                }
                if (q < 0)
                        round_fail(rd, "%s", hp_strerror(q));
                return;
        }
        if (rd->joined > rd->nnodes) {
                round_fail(rd, "rendezvous '%s' at %s already has its %d "
                               "nodes (--nnodes %d); this agent came as node "
                               "%lld. A second job on the same endpoint "
                               "needs another --rdzv-id",
                           rd->run_id, rd->endpoint, rd->nnodes, rd->nnodes,
                           (long long)rd->joined);
                return;
        }
        hp_log_info("rendezvous '%s' at %s: joined as node %lld of %d",
                    rd->run_id, rd->endpoint, (long long)rd->joined - 1,
                    rd->nnodes);
        rd->state = ROUND_WAITING;
        q = 0;
        if (rd->own_store && rd->joined == 1)
                q = publish_master(rd);
        if (q == 0 && rd->joined == rd->nnodes)
                q = hp_store_client_set(rd->client, rd->key_closed,
                                        strlen(rd->key_closed), "1", 1,
                                        closed_set_cb, rd);
        if (q == 0)
                q = hp_store_client_wait(rd->client, keys, nkeys, 0,
                                         waited_cb, rd);
        if (q < 0)
                round_fail(rd, "rendezvous '%s' at %s: %s", rd->run_id,
                           rd->endpoint, hp_strerror(q));
}

static void client_gone_cb(void *ctx)
{
        (void)ctx;
}

static void connected_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        int q;

        if (rd->state != ROUND_CONNECTING)
                return;
        if (r->status < 0 && rd->finishing) {
                round_fail(rd, "no store at %s: %s", rd->endpoint,
                           hp_strerror(r->status));
                return;
        }
        if (r->status < 0) {
                /* Not there yet: the host's agent may start later. */
                hp_store_client_close(rd->client, client_gone_cb, NULL);
                rd->client = NULL;
                uv_timer_start(&rd->retry, retry_cb, RETRY_MS, 0);
                return;
        }
        rd->state = ROUND_JOINING;
        q = hp_store_client_add(rd->client, rd->key_joined,
                                strlen(rd->key_joined), 1, joined_cb, rd);
        if (q < 0)
                round_fail(rd, "rendezvous '%s' at %s: %s", rd->run_id,
                           rd->endpoint, hp_strerror(q));
}

static void connect_now(struct round *rd)
{
        int r = hp_store_client_connect(&rd->loop, rd->addr, rd->port,
                                        connected_cb, rd, &rd->client);

        if (r < 0) {
                rd->client = NULL;
                round_fail(rd, "rendezvous '%s': cannot connect to %s: %s",
                           rd->run_id, rd->endpoint, hp_strerror(r));
        }
}

static void deadline_cb(uv_timer_t *t)
{
        struct round *rd = hp_container_of(t, struct round, deadline);
        double s = (double)rd->join_timeout_ms / 1000.0;

        if (rd->finishing)
                round_fail(rd, "not every node finished within %g s", s);
        else if (rd->state == ROUND_CONNECTING)
                round_fail(rd, "rendezvous '%s': no store answered at %s "
                               "within join_timeout (%g s)",
                           rd->run_id, rd->endpoint, s);
        else
                round_fail(rd, "rendezvous '%s' at %s: fewer than %d nodes "
                               "(--nnodes) joined within join_timeout (%g s)",
                           rd->run_id, rd->endpoint, rd->nnodes, s);
}

static void signal_cb(uv_poll_t *p, int status, int events)
{
        struct round *rd = hp_container_of(p, struct round, signals);
        sigset_t pending;
        const char *name = "a stop signal";

        /* The signal is not read: it stays pending for the agent, which
         * answers it as soon as its handlers are in place. */
        if (sigpending(&pending) == 0) {
                if (sigismember(&pending, SIGTERM))
                        name = "SIGTERM";
                else if (sigismember(&pending, SIGINT))
                        name = "SIGINT";
        }
        round_fail(rd, "rendezvous '%s' at %s: stopped by %s while waiting "
                       "for %d nodes",
                   rd->run_id, rd->endpoint, name, rd->nnodes);
}

static void nothing_cb(uv_handle_t *h)
{
        (void)h;
}

static int run_round(struct round *rd)
{
        sigset_t stops;
        int r;

        r = uv_loop_init(&rd->loop);
        if (r < 0)
                return r;
        uv_timer_init(&rd->loop, &rd->deadline);
        uv_timer_init(&rd->loop, &rd->retry);
        sigemptyset(&stops);
        sigaddset(&stops, SIGTERM);
        sigaddset(&stops, SIGINT);
        sigaddset(&stops, SIGHUP);
        sigaddset(&stops, SIGQUIT);
        rd->sigfd = signalfd(-1, &stops, SFD_NONBLOCK | SFD_CLOEXEC);
        if (rd->sigfd >= 0) {
                uv_poll_init(&rd->loop, &rd->signals, rd->sigfd);
                uv_poll_start(&rd->signals, UV_READABLE, signal_cb);
        }
        uv_timer_start(&rd->deadline, deadline_cb, rd->join_timeout_ms, 0);
        connect_now(rd);
        if (rd->state == ROUND_CONNECTING || rd->state == ROUND_JOINING ||
            rd->state == ROUND_WAITING)
                uv_run(&rd->loop, UV_RUN_DEFAULT);
        if (rd->client)
                hp_store_client_close(rd->client, client_gone_cb, NULL);
        uv_close((uv_handle_t *)&rd->deadline, nothing_cb);
        uv_close((uv_handle_t *)&rd->retry, nothing_cb);
        if (rd->sigfd >= 0)
                uv_close((uv_handle_t *)&rd->signals, nothing_cb);
        uv_run(&rd->loop, UV_RUN_DEFAULT);
        if (rd->sigfd >= 0)
                close(rd->sigfd);
        if (uv_loop_close(&rd->loop) != 0)
                hp_log_warn("rendezvous: the round's loop closed with handles "
                            "open");
        return rd->state == ROUND_DONE ? 0 : HP_ERDZV;
}

int hp_rdzv__c10d_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out,
                       char *errbuf, size_t errlen)
{
        const struct hp_config *cfg = rdzv->cfg;
        struct round rd = { .state = ROUND_CONNECTING };
        char host[256], addr[INET6_ADDRSTRLEN], why[300];
        const char *env;
        int r;

        /* One round per agent: a restart keeps its node rank (coordinated
         * re-rendezvous of every node is not done yet). */
        if (rdzv->have_round) {
                *out = rdzv->round;
                return 0;
        }
        if (hp_rdzv_parse_endpoint(cfg->rdzv_endpoint, host, sizeof(host),
                                   HP_RDZV_C10D_PORT, &rd.port) < 0) {
                snprintf(errbuf, errlen,
                         "invalid --rdzv-endpoint '%s': expected HOST[:PORT] "
                         "or [IPV6]:PORT",
                         cfg->rdzv_endpoint);
                return HP_ECONFIG;
        }
        r = resolve(host, addr, sizeof(addr), errbuf, errlen);
        if (r < 0)
                return r;
        /* What torchrun's c10d backend does not read either, said rather
         * than ignored in silence. */
        if (cfg->node_rank_given)
                hp_log_warn("--node-rank %d is not read by the c10d backend: "
                            "node ranks go by order of arrival",
                            cfg->node_rank);
        if (cfg->master_addr_given || cfg->master_port_given)
                hp_log_warn("--master-addr and --master-port are not read by "
                            "the c10d backend: the workers' MASTER_ADDR:"
                            "MASTER_PORT is the store on --rdzv-endpoint");
        if (cfg->max_restarts > 0 && cfg->nnodes > 1)
                hp_log_warn("--max-restarts %d with c10d: a restart restarts "
                            "this node's workers only, in the same round; the "
                            "other nodes' are not restarted with them",
                            cfg->max_restarts);
        if (rdzv->c10d == NULL && rdzv->opt.is_host != 0) {
                /* is_host=true binds every address, as torchrun does; by
                 * default the endpoint's own, which only its machine can. */
                const char *bind_host = rdzv->opt.is_host == 1
                                                ? (strchr(addr, ':') ? "::"
                                                                     : "0.0.0.0")
                                                : addr;

                r = host_start(rdzv, bind_host, rd.port, why, sizeof(why));
                if (r == 0)
                        hp_log_info("rendezvous '%s': hosting the store on "
                                    "%s:%d",
                                    rdzv->run_id, bind_host, rd.port);
                else if (rdzv->opt.is_host == 1) {
                        snprintf(errbuf, errlen,
                                 "--rdzv-conf is_host=true: %s", why);
                        return HP_ERDZV;
                } else
                        hp_log_debug("rendezvous: not hosting: %s", why);
        }
        rd.addr = addr;
        rd.nnodes = cfg->nnodes;
        rd.endpoint = cfg->rdzv_endpoint;
        rd.run_id = rdzv->run_id;
        rd.join_timeout_ms = rdzv->opt.join_timeout_ms;
        rd.err = errbuf;
        rd.errlen = errlen;
        snprintf(rd.key_joined, sizeof(rd.key_joined),
                 "/hyperpodrun/rdzv/%s/joined", rdzv->run_id);
        snprintf(rd.key_closed, sizeof(rd.key_closed),
                 "/hyperpodrun/rdzv/%s/closed", rdzv->run_id);
        snprintf(rd.key_master, sizeof(rd.key_master),
                 "/hyperpodrun/rdzv/%s/master", rdzv->run_id);
        /* torchrun's switch back to worker rank 0 hosting the workers'
         * store, read as torchrun reads it. */
        env = getenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
        rd.own_store = env != NULL && strcmp(env, "1") == 0;
        r = run_round(&rd);
        if (r < 0) {
                if (rd.state != ROUND_FAILED)
                        snprintf(errbuf, errlen, "rendezvous '%s' at %s: %s",
                                 rdzv->run_id, cfg->rdzv_endpoint,
                                 hp_strerror(r));
                return HP_ERDZV;
        }
        out->nnodes = cfg->nnodes;
        out->node_rank = (int)rd.joined - 1;
        if (rd.own_store) {
                snprintf(out->master_addr, sizeof(out->master_addr), "%s",
                         rd.master_addr);
                out->master_port = rd.master_port;
        } else {
                snprintf(out->master_addr, sizeof(out->master_addr), "%s",
                         host);
                out->master_port = rd.port;
                out->agent_store = true;
        }
        rdzv->round = *out;
        rdzv->round.nproc = cfg->nproc;
        rdzv->round.world_size = out->nnodes * cfg->nproc;
        rdzv->round.group_world_size = out->nnodes;
        rdzv->round.base_rank = out->node_rank * cfg->nproc;
        rdzv->have_round = true;
        return 0;
}

/* The exit barrier: every agent says it is done, whatever its end; the
 * one that holds the store, when its job succeeded, keeps it until all
 * have (or EXIT_BARRIER_MS passed), so that no node's workers lose their
 * store because this node's ended first. An agent that failed still
 * counts, so that the host does not wait for it. */
static void exit_barrier(struct hp_rdzv *rdzv, bool succeeded)
{
        const struct hp_config *cfg = rdzv->cfg;
        struct round rd = { .state = ROUND_CONNECTING, .finishing = true };
        char host[256], addr[INET6_ADDRSTRLEN], err[512];

        if (hp_rdzv_parse_endpoint(cfg->rdzv_endpoint, host, sizeof(host),
                                   HP_RDZV_C10D_PORT, &rd.port) < 0 ||
            resolve(host, addr, sizeof(addr), err, sizeof(err)) < 0)
                return;
        rd.addr = addr;
        rd.hosting = rdzv->c10d != NULL && succeeded;
        rd.nnodes = rdzv->round.nnodes;
        rd.endpoint = cfg->rdzv_endpoint;
        rd.run_id = rdzv->run_id;
        rd.join_timeout_ms = EXIT_BARRIER_MS;
        rd.err = err;
        rd.errlen = sizeof(err);
        snprintf(rd.key_joined, sizeof(rd.key_joined),
                 "/hyperpodrun/rdzv/%s/finished", rdzv->run_id);
        snprintf(rd.key_closed, sizeof(rd.key_closed),
                 "/hyperpodrun/rdzv/%s/all_finished", rdzv->run_id);
        if (run_round(&rd) < 0)
                hp_log_warn("rendezvous '%s': at the end: %s", rdzv->run_id,
                            err);
}

void hp_rdzv__c10d_close(struct hp_rdzv *rdzv, bool succeeded)
{
        struct hp_rdzv_c10d *h = rdzv->c10d;

        if (rdzv->have_round)
                exit_barrier(rdzv, succeeded);
        rdzv->have_round = false;
        if (h == NULL)
                return;
        uv_async_send(&h->stop);
        uv_thread_join(&h->thread);
        if (uv_loop_close(&h->loop) != 0)
                hp_log_warn("rendezvous: the store's loop closed with handles "
                            "open");
        free(h);
        rdzv->c10d = NULL;
}
