/* SPDX-License-Identifier: Apache-2.0 */
/* The store a c10d agent hosts, on a thread and loop of its own so that
 * the agent's loop never waits for the other nodes' queries; and the
 * endpoint's name resolved to an address to bind and to connect to. */
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

struct hp_rdzv_c10d {
        uv_loop_t loop; /* the store's, run by thread */
        uv_async_t stop;
        uv_thread_t thread;
        struct hp_store_server *server;
};

static void store_closed_cb(void *ctx)
{
        struct hp_rdzv_c10d *h = ctx;

        uv_close((uv_handle_t *)&h->stop, NULL);
}

static void stop_cb(uv_async_t *a)
{
        struct hp_rdzv_c10d *h = hp_container_of(a, struct hp_rdzv_c10d,
                                                 stop);

        hp_store_server_close(h->server, store_closed_cb, h);
}

static void store_thread(void *arg)
{
        struct hp_rdzv_c10d *h = arg;

        uv_run(&h->loop, UV_RUN_DEFAULT);
}

/* Binds host:port for the store; 0, or a negative errno with err. */
int hp_rdzv__host_start(struct hp_rdzv *rdzv, const char *bind_host, int port,
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
        if (r == 0)
                /* A torchrun agent that joins by mistake fails at once
                 * (its store connection is dropped) rather than waiting
                 * for a round it cannot read. torch's clients put "/"
                 * before every key. */
                hp_store_server_refuse_prefix(
                        h->server, "/torch.rendezvous.",
                        "a torchrun agent's c10d rendezvous; hyperpodrun's "
                        "rounds are not torchrun's: run hyperpodrun on every "
                        "node");
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
int hp_rdzv__resolve_what(const char *what, const char *host, char *addr,
                          size_t len, char *err, size_t errlen)
{
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
        struct addrinfo *res;
        int r = getaddrinfo(host, NULL, &hints, &res);

        if (r != 0) {
                snprintf(err, errlen, "cannot resolve %s '%s': %s", what,
                         host, gai_strerror(r));
                return HP_ERDZV;
        }
        r = getnameinfo(res->ai_addr, res->ai_addrlen, addr, (socklen_t)len,
                        NULL, 0, NI_NUMERICHOST);
        freeaddrinfo(res);
        if (r != 0) {
                snprintf(err, errlen, "cannot resolve %s '%s': %s", what,
                         host, gai_strerror(r));
                return HP_ERDZV;
        }
        return 0;
}

int hp_rdzv__resolve(const char *host, char *addr, size_t len, char *err,
                     size_t errlen)
{
        return hp_rdzv__resolve_what("--rdzv-endpoint host", host, addr, len,
                                     err, errlen);
}

void hp_rdzv__host_stop(struct hp_rdzv *rdzv)
{
        struct hp_rdzv_c10d *h = rdzv->c10d;

        uv_async_send(&h->stop);
        uv_thread_join(&h->thread);
        if (uv_loop_close(&h->loop) != 0)
                hp_log_warn(
                        "rendezvous: the store's loop closed with handles "
                        "open");
        free(h);
        rdzv->c10d = NULL;
}
