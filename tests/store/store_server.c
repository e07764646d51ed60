/* SPDX-License-Identifier: Apache-2.0 */
/* The store server on its own, for the integration tests and the
 * benchmark: binds HOST:PORT (port 0: a free one), prints "port N" on
 * stdout, serves until SIGTERM or SIGINT, and prints its counters as one
 * JSON line on SIGUSR1 and at the end.
 *
 *     hp-store-server [--host H] [--port P] [--connections-max N]
 *                     [--memory-max BYTES] [--value-max BYTES]
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "hyperpod/common.h"
#include "hyperpod/store.h"

struct app {
        uv_loop_t loop;
        uv_signal_t sigterm, sigint, sigusr1;
        struct hp_store_server *server;
};

static void print_stats(const struct hp_store_server *s)
{
        const struct hp_store_stats *st = hp_store_server_stats(s);

        printf("{\"connections_total\": %" PRIu64
               ", \"connections_current\": %" PRIu64
               ", \"rejected_connections\": %" PRIu64
               ", \"protocol_errors\": %" PRIu64
               ", \"limit_errors\": %" PRIu64 ", \"queries_total\": %" PRIu64
               ", \"keys\": %" PRIu64 ", \"memory\": %" PRIu64 "}\n",
               st->connections_total, st->connections_current,
               st->rejected_connections, st->protocol_errors,
               st->limit_errors, st->queries_total, st->keys, st->memory);
        fflush(stdout);
}

static void signal_cb(uv_signal_t *h, int signum)
{
        struct app *a = h->data;

        print_stats(a->server);
        if (signum == SIGUSR1)
                return;
        hp_store_server_close(a->server, NULL, NULL);
        uv_close((uv_handle_t *)&a->sigterm, NULL);
        uv_close((uv_handle_t *)&a->sigint, NULL);
        uv_close((uv_handle_t *)&a->sigusr1, NULL);
}

static int size_arg(const char *name, const char *v, size_t *out)
{
        uint64_t n;

        if (v == NULL || hp_parse_u64(v, SIZE_MAX, &n) < 0) {
                fprintf(stderr,
                        "hp-store-server: %s needs a number, got "
                        "'%s'\n",
                        name, v ? v : "");
                return -1;
        }
        *out = (size_t)n;
        return 0;
}

int main(int argc, char **argv)
{
        struct hp_store_limits l;
        const char *host = "127.0.0.1";
        struct app a;
        char err[256];
        size_t n;
        int port = 0;
        int r;

        hp_store_limits_default(&l);
        for (int i = 1; i < argc; i += 2) {
                const char *v = i + 1 < argc ? argv[i + 1] : NULL;

                if (strcmp(argv[i], "--host") == 0 && v) {
                        host = v;
                } else if (strcmp(argv[i], "--port") == 0 && v) {
                        if (hp_parse_int(v, 0, 65535, &port) < 0) {
                                fprintf(stderr,
                                        "hp-store-server: bad --port "
                                        "'%s'\n",
                                        v);
                                return 2;
                        }
                } else if (strcmp(argv[i], "--connections-max") == 0) {
                        if (size_arg(argv[i], v, &n) < 0)
                                return 2;
                        l.connections_max = (int)n;
                } else if (strcmp(argv[i], "--memory-max") == 0) {
                        if (size_arg(argv[i], v, &l.memory_max) < 0)
                                return 2;
                } else if (strcmp(argv[i], "--value-max") == 0) {
                        if (size_arg(argv[i], v, &l.value_max) < 0)
                                return 2;
                } else {
                        fprintf(stderr,
                                "hp-store-server: unknown argument "
                                "'%s'\n",
                                argv[i]);
                        return 2;
                }
        }
        signal(SIGPIPE, SIG_IGN);
        uv_loop_init(&a.loop);
        r = hp_store_server_new(&a.loop, &l, &a.server);
        if (r < 0) {
                fprintf(stderr, "hp-store-server: %s\n", hp_strerror(r));
                return 1;
        }
        r = hp_store_server_listen(a.server, host, port, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "hp-store-server: %s\n", err);
                hp_store_server_close(a.server, NULL, NULL);
                uv_run(&a.loop, UV_RUN_DEFAULT);
                uv_loop_close(&a.loop);
                return 1;
        }
        /* The handlers first: a caller may signal as soon as it has read
         * the port. */
        uv_signal_init(&a.loop, &a.sigterm);
        uv_signal_init(&a.loop, &a.sigint);
        uv_signal_init(&a.loop, &a.sigusr1);
        a.sigterm.data = a.sigint.data = a.sigusr1.data = &a;
        uv_signal_start(&a.sigterm, signal_cb, SIGTERM);
        uv_signal_start(&a.sigint, signal_cb, SIGINT);
        uv_signal_start(&a.sigusr1, signal_cb, SIGUSR1);
        printf("port %d\n", hp_store_server_port(a.server));
        fflush(stdout);
        uv_run(&a.loop, UV_RUN_DEFAULT);
        return uv_loop_close(&a.loop) == 0 ? 0 : 1;
}
