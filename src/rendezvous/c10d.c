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
        /* Where this agent may still host the store, while nobody answers
         * on the endpoint (its port's holder may be gone); or NULL. */
        const char *bind_host;
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
        /* Written before joining: the previous round's end key when this
         * is a re-rendezvous ("restart", unless a node wrote "exit"
         * first); at the end of a failed job, "exit" to that key and the
         * next rounds' closed keys, so that nobody waits for this node. */
        char key_prev_end[300];
        const char *exit_keys[3];
        /* At the end of a job that succeeded: this node's beat key, set
         * to "done" (the keep-alive's sign that it finished). */
        char key_done[300];
        size_t nexit_keys;
        bool peer_exit; /* the round was closed by a node that left */
        int fixed_rank; /* the backend's node rank, or -1: by arrival */
        int gen;
        /* --nnodes MIN:MAX: the round closes at nnodes (MAX) joined, or
         * last_call_ms after MIN had; nnodes_min 0: a fixed count. */
        int nnodes_min;
        uint64_t last_call_ms;
        uv_timer_t last_call;
        bool last_call_on;
        /* The last call's own connection: the round's has a WAIT on the
         * wire, and a connection carries one request at a time. */
        struct hp_store_client *closer;
        int64_t size;  /* the nodes the round closed with */
        bool late;     /* it closed without this agent */
        bool find_gen; /* read the job's current round before joining */
        struct hp_rdzv *rdzv;
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
                round_fail(rd,
                           "rendezvous '%s' at %s: cannot write to the "
                           "store: %s",
                           rd->run_id, rd->endpoint, hp_strerror(r->status));
}

static void master_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        char text[300];

        if (r->status < 0 || r->val_len == 0 || r->val_len >= sizeof(text)) {
                round_fail(rd,
                           "rendezvous '%s' at %s: node 0 published no "
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
                round_fail(rd,
                           "rendezvous '%s' at %s: node 0 published the "
                           "master '%s', which is no HOST:PORT",
                           rd->run_id, rd->endpoint, text);
                return;
        }
        rd->state = ROUND_DONE;
        uv_stop(&rd->loop);
}

static void after_closed(struct round *rd);
static void round_late(struct round *rd);

/* The closed key's value: "1", or "exit" when a node that left the job
 * closed the round so that nobody waits for it. */
static void closed_value_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;

        char text[32];

        if (r->status == 0 && r->val_len == 4 &&
            memcmp(r->val, "exit", 4) == 0) {
                rd->peer_exit = true;
                round_fail(rd,
                           "rendezvous '%s' at %s: another node left the "
                           "job; no next round",
                           rd->run_id, rd->endpoint);
                return;
        }
        rd->size = rd->nnodes;
        if (r->status == 0 && r->val_len > 0 && r->val_len < sizeof(text)) {
                memcpy(text, r->val, r->val_len);
                text[r->val_len] = '\0';
                rd->size = strtoll(text, NULL, 10);
        }
        if (rd->size < 1 || rd->size > rd->nnodes)
                rd->size = rd->nnodes;
        if (rd->nnodes_min > 0 && rd->joined > rd->size) {
                round_late(rd);
                return;
        }
        after_closed(rd);
}

static void waited_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        int q;

        if (r->status == 0 && !rd->finishing) {
                q = hp_store_client_get(rd->client, rd->key_closed,
                                        strlen(rd->key_closed),
                                        closed_value_cb, rd);
                if (q < 0)
                        round_fail(rd, "%s", hp_strerror(q));
                return;
        }
        if (r->status < 0) {
                round_fail(rd,
                           "rendezvous '%s' at %s: the store went away "
                           "while waiting for %d nodes: %s",
                           rd->run_id, rd->endpoint, rd->nnodes,
                           hp_strerror(r->status));
                return;
        }
        rd->state = ROUND_DONE;
        uv_stop(&rd->loop);
}

static void after_closed(struct round *rd)
{
        int q;

        if (rd->own_store) {
                q = hp_store_client_get(rd->client, rd->key_master,
                                        strlen(rd->key_master), master_cb,
                                        rd);
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
        snprintf(value, sizeof(value),
                 strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
        hp_log_info("rendezvous '%s': TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: "
                    "worker rank 0 hosts the workers' store at %s",
                    rd->run_id, value);
        return hp_store_client_set(rd->client, rd->key_master,
                                   strlen(rd->key_master), value,
                                   strlen(value), closed_set_cb, rd);
}

/* Closes the round with n nodes, unless another agent closed it first
 * (or a node that left wrote "exit"). */
static int close_round(struct round *rd, int64_t n)
{
        char text[32];
        int len = snprintf(text, sizeof(text), "%lld", (long long)n);

        return hp_store_client_compare_set(rd->client, rd->key_closed,
                                           strlen(rd->key_closed), "", 0,
                                           text, (size_t)len, closed_set_cb,
                                           rd);
}

static void closer_set_cb(void *ctx, const struct hp_store_reply *r)
{
        (void)ctx;
        (void)r; /* a failure comes with the round's WAIT */
}

static void count_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        int64_t n = r->num > rd->nnodes ? rd->nnodes : r->num;
        char text[32];
        int len;

        if (r->status < 0 || rd->closer == NULL)
                return; /* the failure comes with the WAIT's reply */
        len = snprintf(text, sizeof(text), "%lld", (long long)n);
        (void)hp_store_client_compare_set(rd->closer, rd->key_closed,
                                          strlen(rd->key_closed), "", 0, text,
                                          (size_t)len, closer_set_cb, rd);
}

static void closer_up_cb(void *ctx, const struct hp_store_reply *r)
{
        (void)ctx;
        (void)r;
}

/* The last call ended: the round closes with the nodes it has. */
static void last_call_cb(uv_timer_t *t)
{
        struct round *rd = hp_container_of(t, struct round, last_call);
        int q;

        if (rd->state != ROUND_WAITING || rd->closer != NULL)
                return;
        q = hp_store_client_connect(&rd->loop, rd->addr, rd->port,
                                    closer_up_cb, rd, &rd->closer);
        if (q == 0)
                q = hp_store_client_add(rd->closer, rd->key_joined,
                                        strlen(rd->key_joined), 0, count_cb,
                                        rd);
        if (q < 0)
                round_fail(rd, "%s", hp_strerror(q));
}

/* The round closed without this agent (--nnodes MIN:MAX): it asks the
 * running nodes to re-rendezvous, which is no failure, and comes to the
 * next round. */
static void late_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;

        if (r->status < 0) {
                round_fail(rd, "rendezvous '%s' at %s: %s", rd->run_id,
                           rd->endpoint, hp_strerror(r->status));
                return;
        }
        rd->late = true;
        rd->state = ROUND_DONE;
        uv_stop(&rd->loop);
}

static void round_late(struct round *rd)
{
        char end[300];
        int q;

        hp_log_info("rendezvous '%s' at %s: round %d is running without this "
                    "node; asking its nodes to re-rendezvous",
                    rd->run_id, rd->endpoint, rd->gen);
        snprintf(end, sizeof(end), "/hyperpodrun/rdzv/%s/%d/end", rd->run_id,
                 rd->gen);
        q = hp_store_client_compare_set(rd->client, end, strlen(end), "", 0,
                                        "join", 4, late_cb, rd);
        if (q < 0)
                round_fail(rd, "%s", hp_strerror(q));
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
                                                strlen(rd->key_closed), "1",
                                                1, closed_set_cb, rd);
                if (q == 0 && rd->hosting) {
                        rd->state = ROUND_WAITING;
                        q = hp_store_client_wait(rd->client, keys, 1, 0,
                                                 waited_cb, rd);
                } else if (q == 0) {
                        q = hp_store_client_ping(rd->client, 0, waited_cb,
                                                 rd);
                }
                if (q < 0)
                        round_fail(rd, "%s", hp_strerror(q));
                return;
        }
        if (rd->joined > rd->nnodes && rd->nnodes_min > 0) {
                round_late(rd);
                return;
        }
        if (rd->joined > rd->nnodes) {
                round_fail(rd,
                           "rendezvous '%s' at %s already has its %d "
                           "nodes (--nnodes %d); this agent came as node "
                           "%lld. A second job on the same endpoint "
                           "needs another --rdzv-id",
                           rd->run_id, rd->endpoint, rd->nnodes, rd->nnodes,
                           (long long)rd->joined);
                return;
        }
        if (rd->fixed_rank >= 0)
                hp_log_info("rendezvous '%s' at %s: node %d joined round %d "
                            "(%lld of %d)",
                            rd->run_id, rd->endpoint, rd->fixed_rank, rd->gen,
                            (long long)rd->joined, rd->nnodes);
        else if (rd->nnodes_min > 0)
                hp_log_info("rendezvous '%s' at %s: joined round %d as the "
                            "%lld. node of %d to %d",
                            rd->run_id, rd->endpoint, rd->gen,
                            (long long)rd->joined, rd->nnodes_min,
                            rd->nnodes);
        else
                hp_log_info(
                        "rendezvous '%s' at %s: joined as node %lld of %d",
                        rd->run_id, rd->endpoint, (long long)rd->joined - 1,
                        rd->nnodes);
        rd->state = ROUND_WAITING;
        q = 0;
        if (rd->own_store && rd->joined == 1)
                q = publish_master(rd);
        if (q == 0 && rd->joined == rd->nnodes)
                q = close_round(rd, rd->nnodes);
        else if (q == 0 && rd->nnodes_min > 0 &&
                 rd->joined >= rd->nnodes_min && !rd->last_call_on) {
                /* The last call: more may come until it ends. */
                rd->last_call_on = true;
                uv_timer_start(&rd->last_call, last_call_cb, rd->last_call_ms,
                               0);
        }
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

static void join_now(struct round *rd);

/* The job's current round, for an agent that comes to a running job. */
static void gen_cb(void *ctx, const struct hp_store_reply *r)
{
        struct round *rd = ctx;
        char text[32];

        if (r->status == 0 && r->val_len > 0 && r->val_len < sizeof(text)) {
                memcpy(text, r->val, r->val_len);
                text[r->val_len] = '\0';
                rd->gen = (int)strtol(text, NULL, 10);
                if (rd->gen < 0)
                        rd->gen = 0;
        }
        hp_rdzv__round_key(rd->rdzv, rd->gen, "joined", rd->key_joined,
                           sizeof(rd->key_joined));
        hp_rdzv__round_key(rd->rdzv, rd->gen, "closed", rd->key_closed,
                           sizeof(rd->key_closed));
        hp_rdzv__round_key(rd->rdzv, rd->gen, "master", rd->key_master,
                           sizeof(rd->key_master));
        join_now(rd);
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
                /* Not there yet: the host's agent may start later. Or the
                 * endpoint's port was held when this agent tried it, by
                 * something now gone: then it hosts after all, or every
                 * agent would wait out join_timeout for a host. */
                char why[256];
                int delay = RETRY_MS;

                hp_store_client_close(rd->client, client_gone_cb, NULL);
                rd->client = NULL;
                if (rd->bind_host != NULL && rd->rdzv->c10d == NULL &&
                    hp_rdzv__host_start(rd->rdzv, rd->bind_host, rd->port,
                                        why, sizeof(why)) == 0) {
                        hp_log_info("rendezvous '%s': hosting the store on "
                                    "%s:%d (nobody answered there)",
                                    rd->run_id, rd->bind_host, rd->port);
                        rd->bind_host = NULL;
                        delay = 0;
                }
                uv_timer_start(&rd->retry, retry_cb, delay, 0);
                return;
        }
        rd->state = ROUND_JOINING;
        if (rd->find_gen) {
                char key[300];

                snprintf(key, sizeof(key), "/hyperpodrun/rdzv/%s/round",
                         rd->run_id);
                q = hp_store_client_get(rd->client, key, strlen(key), gen_cb,
                                        rd);
                if (q < 0)
                        round_fail(rd, "%s", hp_strerror(q));
                return;
        }
        join_now(rd);
}

static void join_now(struct round *rd)
{
        char key[300], text[32];
        int q = 0, len;

        if (rd->nnodes_min > 0 && !rd->finishing) {
                /* Where an agent that comes later finds the job. */
                snprintf(key, sizeof(key), "/hyperpodrun/rdzv/%s/round",
                         rd->run_id);
                len = snprintf(text, sizeof(text), "%d", rd->gen);
                q = hp_store_client_set(rd->client, key, strlen(key), text,
                                        (size_t)len, closed_set_cb, rd);
        }

        if (rd->key_prev_end[0] != '\0') {
                /* "lost": this node found another gone silent. */
                const char *why = rd->rdzv->lost_node ? "lost" : "restart";

                rd->rdzv->lost_node = false;
                q = hp_store_client_compare_set(rd->client, rd->key_prev_end,
                                                strlen(rd->key_prev_end), "",
                                                0, why, strlen(why),
                                                closed_set_cb, rd);
        }
        if (q == 0 && rd->key_done[0] != '\0')
                q = hp_store_client_set(rd->client, rd->key_done,
                                        strlen(rd->key_done), "done", 4,
                                        closed_set_cb, rd);
        for (size_t i = 0; q == 0 && i < rd->nexit_keys; i++)
                q = hp_store_client_set(rd->client, rd->exit_keys[i],
                                        strlen(rd->exit_keys[i]), "exit", 4,
                                        closed_set_cb, rd);
        if (q == 0)
                q = hp_store_client_add(rd->client, rd->key_joined,
                                        strlen(rd->key_joined), 1, joined_cb,
                                        rd);
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
                round_fail(rd,
                           "rendezvous '%s': no store answered at %s "
                           "within join_timeout (%g s)",
                           rd->run_id, rd->endpoint, s);
        else
                round_fail(rd,
                           "rendezvous '%s' at %s: fewer than %d nodes "
                           "(--nnodes%s) joined round %d within "
                           "join_timeout (%g s)",
                           rd->run_id, rd->endpoint,
                           rd->nnodes_min > 0 ? rd->nnodes_min : rd->nnodes,
                           rd->nnodes_min > 0 ? " MIN" : "", rd->gen, s);
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
        round_fail(rd,
                   "rendezvous '%s' at %s: stopped by %s while waiting "
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
        uv_timer_init(&rd->loop, &rd->last_call);
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
        if (rd->closer)
                hp_store_client_close(rd->closer, client_gone_cb, NULL);
        uv_close((uv_handle_t *)&rd->deadline, nothing_cb);
        uv_close((uv_handle_t *)&rd->retry, nothing_cb);
        uv_close((uv_handle_t *)&rd->last_call, nothing_cb);
        if (rd->sigfd >= 0)
                uv_close((uv_handle_t *)&rd->signals, nothing_cb);
        uv_run(&rd->loop, UV_RUN_DEFAULT);
        if (rd->sigfd >= 0)
                close(rd->sigfd);
        if (uv_loop_close(&rd->loop) != 0)
                hp_log_warn(
                        "rendezvous: the round's loop closed with handles "
                        "open");
        return rd->state == ROUND_DONE ? 0 : HP_ERDZV;
}

/* What torchrun's c10d backend does not read either, said rather than
 * ignored in silence. */
static void warn_unread(const struct hp_config *cfg)
{
        if (cfg->node_rank_given)
                hp_log_warn("--node-rank %d is not read by the c10d backend: "
                            "node ranks go by order of arrival",
                            cfg->node_rank);
        if (cfg->master_addr_given || cfg->master_port_given)
                hp_log_warn("--master-addr and --master-port are not read by "
                            "the c10d backend: the workers' MASTER_ADDR:"
                            "MASTER_PORT is the store on --rdzv-endpoint");
}

int hp_rdzv__c10d_next(struct hp_rdzv *rdzv, struct hp_rdzv_info *out,
                       char *errbuf, size_t errlen)
{
        const struct hp_config *cfg = rdzv->cfg;
        struct round rd = { .state = ROUND_CONNECTING, .fixed_rank = -1 };
        char host[256], addr[INET6_ADDRSTRLEN], why[300];
        const char *env, *retry_bind = NULL;
        bool own_store;
        int r;

        if (hp_rdzv_parse_endpoint(cfg->rdzv_endpoint, host, sizeof(host),
                                   HP_RDZV_C10D_PORT, &rd.port) < 0) {
                snprintf(errbuf, errlen,
                         "invalid --rdzv-endpoint '%s': expected HOST[:PORT] "
                         "or [IPV6]:PORT",
                         cfg->rdzv_endpoint);
                return HP_ECONFIG;
        }
        r = hp_rdzv__resolve(host, addr, sizeof(addr), errbuf, errlen);
        if (r < 0)
                return r;
        /* A re-rendezvous: every node comes to the next round together.
         * This one ends the last for all (its end key, which the others
         * watch), then joins the next. */
        if (rdzv->have_round) {
                hp_rdzv_unwatch(rdzv);
                hp_rdzv__round_key(rdzv, rdzv->gen, "end", rd.key_prev_end,
                                   sizeof(rd.key_prev_end));
                rdzv->gen++;
        } else
                warn_unread(cfg);
        if (rdzv->c10d == NULL && rdzv->gen == 0 && rdzv->opt.is_host != 0) {
                /* is_host=true binds every address, as torchrun does; by
                 * default the endpoint's own, which only its machine can. */
                const char *bind_host = rdzv->opt.is_host == 1
                                                ? (strchr(addr, ':')
                                                           ? "::"
                                                           : "0.0.0.0")
                                                : addr;

                r = hp_rdzv__host_start(rdzv, bind_host, rd.port, why,
                                        sizeof(why));
                if (r == 0)
                        hp_log_info("rendezvous '%s': hosting the store on "
                                    "%s:%d",
                                    rdzv->run_id, bind_host, rd.port);
                else if (rdzv->opt.is_host == 1) {
                        snprintf(errbuf, errlen,
                                 "--rdzv-conf is_host=true: %s", why);
                        return HP_ERDZV;
                } else {
                        hp_log_debug("rendezvous: not hosting: %s", why);
                        retry_bind = bind_host;
                }
        }
        snprintf(rdzv->store_addr, sizeof(rdzv->store_addr), "%s", addr);
        rdzv->store_port = rd.port;
        /* torchrun's switch back to worker rank 0 hosting the workers'
         * store, read as torchrun reads it. */
        env = getenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
        own_store = env != NULL && strcmp(env, "1") == 0;
        for (;;) {
                rd.addr = addr;
                rd.bind_host = retry_bind;
                rd.nnodes = cfg->nnodes;
                rd.nnodes_min = cfg->nnodes_min;
                rd.last_call_ms = rdzv->opt.last_call_timeout_ms;
                rd.find_gen = cfg->nnodes_min > 0 && !rdzv->have_round &&
                              rdzv->gen == 0;
                rd.rdzv = rdzv;
                rd.own_store = own_store;
                rd.endpoint = cfg->rdzv_endpoint;
                rd.run_id = rdzv->run_id;
                rd.join_timeout_ms = rdzv->opt.join_timeout_ms;
                rd.err = errbuf;
                rd.errlen = errlen;
                rd.gen = rdzv->gen;
                hp_rdzv__round_key(rdzv, rdzv->gen, "joined", rd.key_joined,
                                   sizeof(rd.key_joined));
                hp_rdzv__round_key(rdzv, rdzv->gen, "closed", rd.key_closed,
                                   sizeof(rd.key_closed));
                hp_rdzv__round_key(rdzv, rdzv->gen, "master", rd.key_master,
                                   sizeof(rd.key_master));
                rdzv->round_open = true;
                r = run_round(&rd);
                rdzv->gen = rd.gen;
                if (r < 0 || !rd.late)
                        break;
                /* Late: the next round, with the nodes it made stop. */
                rdzv->gen++;
                rdzv->round_open = false;
                rd = (struct round){ .state = ROUND_CONNECTING,
                                     .fixed_rank = -1,
                                     .port = rd.port };
        }
        if (r < 0 && rd.peer_exit)
                return HP_RDZV_PEER_EXIT;
        if (r < 0) {
                if (rd.state != ROUND_FAILED)
                        snprintf(errbuf, errlen, "rendezvous '%s' at %s: %s",
                                 rdzv->run_id, cfg->rdzv_endpoint,
                                 hp_strerror(r));
                return HP_ERDZV;
        }
        out->nnodes = rd.size > 0 ? (int)rd.size : cfg->nnodes;
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
        if (cfg->nnodes_min > 0)
                hp_log_info("rendezvous '%s': round %d closed with %d "
                            "node%s (--nnodes %d:%d); this is node %d",
                            rdzv->run_id, rdzv->gen, out->nnodes,
                            out->nnodes == 1 ? "" : "s", cfg->nnodes_min,
                            cfg->nnodes, out->node_rank);
        rdzv->round.group_world_size = out->nnodes;
        rdzv->round.base_rank = out->node_rank * cfg->nproc;
        rdzv->have_round = true;
        rdzv->round_open = false;
        return 0;
}

int hp_rdzv__coord_round(struct hp_rdzv *rdzv, const struct hp_rdzv_info *out,
                         char *errbuf, size_t errlen)
{
        struct round rd = { .state = ROUND_CONNECTING };
        char addr[INET6_ADDRSTRLEN], endpoint[300], why[300];
        int r;

        r = hp_rdzv__resolve_what("the master", out->master_addr, addr,
                                  sizeof(addr), errbuf, errlen);
        if (r < 0)
                return r;
        rd.port = rdzv->opt.coordinate_port > 0 ? rdzv->opt.coordinate_port
                                                : out->master_port + 1;
        if (rd.port > 65535) {
                snprintf(errbuf, errlen,
                         "--rdzv-conf coordinate=on: the restart store's "
                         "port, the master port %d + 1, is past 65535; give "
                         "coordinate=PORT",
                         out->master_port);
                return HP_ECONFIG;
        }
        snprintf(endpoint, sizeof(endpoint),
                 strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, rd.port);
        if (rdzv->have_round) {
                hp_rdzv_unwatch(rdzv);
                hp_rdzv__round_key(rdzv, rdzv->gen, "end", rd.key_prev_end,
                                   sizeof(rd.key_prev_end));
                rdzv->gen++;
        }
        /* Node 0's agent hosts the store, on every address. */
        if (rdzv->c10d == NULL && rdzv->gen == 0 && out->node_rank == 0) {
                const char *any = strchr(addr, ':') ? "::" : "0.0.0.0";

                r = hp_rdzv__host_start(rdzv, any, rd.port, why, sizeof(why));
                if (r < 0) {
                        snprintf(errbuf, errlen,
                                 "node 0 cannot host the restart store "
                                 "(--rdzv-conf coordinate): %s",
                                 why);
                        return HP_ERDZV;
                }
                hp_log_info("rendezvous '%s': hosting the restart store on "
                            "%s:%d",
                            rdzv->run_id, any, rd.port);
        }
        snprintf(rdzv->store_addr, sizeof(rdzv->store_addr), "%s", addr);
        rdzv->store_port = rd.port;
        rd.addr = addr;
        rd.rdzv = rdzv;
        rd.nnodes = out->nnodes;
        rd.fixed_rank = out->node_rank;
        rd.gen = rdzv->gen;
        rd.endpoint = endpoint;
        rd.run_id = rdzv->run_id;
        rd.join_timeout_ms = rdzv->opt.join_timeout_ms;
        rd.err = errbuf;
        rd.errlen = errlen;
        hp_rdzv__round_key(rdzv, rdzv->gen, "joined", rd.key_joined,
                           sizeof(rd.key_joined));
        hp_rdzv__round_key(rdzv, rdzv->gen, "closed", rd.key_closed,
                           sizeof(rd.key_closed));
        rdzv->round_open = true;
        r = run_round(&rd);
        if (r < 0 && rd.peer_exit)
                return HP_RDZV_PEER_EXIT;
        if (r < 0) {
                if (rd.state != ROUND_FAILED)
                        snprintf(errbuf, errlen, "rendezvous '%s' at %s: %s",
                                 rdzv->run_id, endpoint, hp_strerror(r));
                return HP_ERDZV;
        }
        rdzv->round.nnodes = out->nnodes;
        rdzv->round.node_rank = out->node_rank;
        rdzv->have_round = true;
        rdzv->round_open = false;
        return 0;
}

/* The exit barrier: every agent says it is done, whatever its end; the
 * one that holds the store, when its job succeeded, keeps it until all
 * have (or EXIT_BARRIER_MS passed), so that no node's workers lose their
 * store because this node's ended first. An agent that failed still
 * counts, so that the host does not wait for it. */
static void exit_barrier(struct hp_rdzv *rdzv, bool succeeded)
{
        struct round rd = { .state = ROUND_CONNECTING, .finishing = true };
        char endpoint[300], err[512];
        char end[300], next[300], open[300], beat[32];

        /* Nobody waits for this node: a failed job ends the round it ran
         * (the others exit too) and closes the next with "exit", as well
         * as the round it was joining; a node that succeeded closes the
         * next round only, which the others reach after a failure of
         * their own. */
        hp_rdzv__round_key(rdzv, rdzv->gen, "end", end, sizeof(end));
        hp_rdzv__round_key(rdzv, rdzv->gen + 1, "closed", next, sizeof(next));
        hp_rdzv__round_key(rdzv, rdzv->gen, "closed", open, sizeof(open));
        /* A node whose job succeeded stops beating: it says so, or the
         * others' keep-alive would take it for lost. */
        snprintf(beat, sizeof(beat), "beat/%d", rdzv->round.node_rank);
        if (succeeded && !rdzv->round_open) {
                hp_rdzv__round_key(rdzv, rdzv->gen, beat, rd.key_done,
                                   sizeof(rd.key_done));
        }
        rd.exit_keys[rd.nexit_keys++] = next;
        if (!succeeded)
                rd.exit_keys[rd.nexit_keys++] = end;
        if (!succeeded && rdzv->round_open)
                rd.exit_keys[rd.nexit_keys++] = open;
        snprintf(endpoint, sizeof(endpoint),
                 strchr(rdzv->store_addr, ':') ? "[%s]:%d" : "%s:%d",
                 rdzv->store_addr, rdzv->store_port);
        rd.port = rdzv->store_port;
        rd.addr = rdzv->store_addr;
        rd.rdzv = rdzv;
        rd.hosting = rdzv->c10d != NULL && succeeded;
        rd.nnodes = rdzv->round.nnodes;
        rd.endpoint = endpoint;
        rd.run_id = rdzv->run_id;
        /* Only the host waits for the others; an agent that does not
         * host spends at most close_timeout telling it. */
        rd.join_timeout_ms = rd.hosting ? EXIT_BARRIER_MS
                                        : rdzv->opt.close_timeout_ms;
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
        const struct hp_rdzv_c10d *h = rdzv->c10d;

        hp_rdzv_unwatch(rdzv);
        if (rdzv->have_round && !rdzv->store_lost)
                exit_barrier(rdzv, succeeded);
        rdzv->have_round = false;
        if (h == NULL)
                return;
        hp_rdzv__host_stop(rdzv);
}
