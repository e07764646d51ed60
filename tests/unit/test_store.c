/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the TCPStore module (src/store).
 *
 * - The parser, table-driven over the wire encoding: each case is the hex
 *   of a query in one dialect and what the parser must say of it; every
 *   proper prefix of a complete query must ask for more.
 * - The server, table-driven over conversations: a server on 127.0.0.1,
 *   port 0, on a loop of its own thread, and blocking sockets on the test
 *   thread that send hex and must read back exactly the expected hex (or
 *   the end of the connection). SO_RCVTIMEO is only a safety bound.
 * - The client against the server on one loop, each request run until its
 *   callback has been called.
 */
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
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/store.h"
#include "table.h"

#define SAFETY_TIMEOUT_S 20

/* ---- hex ---- */

/* Appends the bytes of hex (spaces ignored; "'text'" is literal text) to
 * out; returns the new length. */
static size_t unhex(const char *hex, uint8_t *out, size_t len)
{
        while (*hex) {
                if (*hex == ' ') {
                        hex++;
                } else if (*hex == '\'') {
                        for (hex++; *hex && *hex != '\''; hex++)
                                out[len++] = (uint8_t)*hex;
                        if (*hex)
                                hex++;
                } else {
                        unsigned v;

                        sscanf(hex, "%2x", &v);
                        out[len++] = (uint8_t)v;
                        hex += 2;
                }
        }
        return len;
}

/* Lengths and integers as they go on the wire (little-endian u64). */
#define L0 "0000000000000000"
#define L1 "0100000000000000"
#define L2 "0200000000000000"
#define L3 "0300000000000000"
#define L5 "0500000000000000"
#define MAGIC "cef7853c"

/* ---- the parser ---- */

struct parse_case {
        const char *name;
        enum hp_store_dialect dialect;
        const char *hex;
        int result;
        enum hp_store_op op;
        enum hp_store_dialect after;
        const char *err; /* a part of the message, for errors */
};

#define U HP_STORE_DIALECT_UNKNOWN
#define LEG HP_STORE_DIALECT_LEGACY
#define VAL HP_STORE_DIALECT_VALIDATED
#define OP(x) HP_STORE_OP_##x

static const struct parse_case parse_cases[] = {
        { "legacy SET", U, "00 " L1 "'k' " L1 "'v'", 1, OP(SET), LEG, NULL },
        { "legacy COMPARE_SET", LEG, "01 " L1 "'k' " L0 L1 "'v'", 1,
          OP(COMPARE_SET), LEG, NULL },
        { "legacy GET", U, "02 " L1 "'k'", 1, OP(GET), LEG, NULL },
        { "legacy ADD", LEG, "03 " L1 "'n' fbffffffffffffff", 1, OP(ADD), LEG,
          NULL },
        { "legacy CHECK", LEG, "04 " L2 L1 "'a' " L1 "'b'", 1, OP(CHECK), LEG,
          NULL },
        { "legacy WAIT", LEG, "05 " L1 L1 "'a'", 1, OP(WAIT), LEG, NULL },
        { "legacy GETNUMKEYS", LEG, "06", 1, OP(GETNUMKEYS), LEG, NULL },
        { "legacy WATCH_KEY", LEG, "07 " L1 "'w'", 1, OP(WATCH_KEY), LEG,
          NULL },
        { "legacy DELETE_KEY", LEG, "08 " L1 "'k'", 1, OP(DELETE_KEY), LEG,
          NULL },
        { "legacy APPEND", LEG, "09 " L1 "'k' " L1 "'x'", 1, OP(APPEND), LEG,
          NULL },
        { "legacy MULTI_GET", LEG, "0a " L1 L1 "'k'", 1, OP(MULTI_GET), LEG,
          NULL },
        { "legacy MULTI_SET", LEG, "0b " L1 L1 "'k' " L1 "'v'", 1,
          OP(MULTI_SET), LEG, NULL },
        { "legacy CANCEL_WAIT", LEG, "0c", 1, OP(CANCEL_WAIT), LEG, NULL },
        { "legacy has no 0x0d", LEG, "0d", -EPROTO, 0, LEG,
          "unknown query type 0x0d" },
        { "HTTP is no query", U, "'GET / HTTP/1.1'", -EPROTO, 0, U,
          "unknown query type 0x47" },
        { "VALIDATE", U, "00 " MAGIC, 1, OP(VALIDATE), VAL, NULL },
        { "a second VALIDATE", VAL, "00 " MAGIC, -EPROTO, 0, VAL,
          "second VALIDATE" },
        { "SET", VAL, "01 " L1 "'k' " L1 "'v'", 1, OP(SET), VAL, NULL },
        { "COMPARE_SET", VAL, "02 " L1 "'k' " L1 "'a' " L1 "'b'", 1,
          OP(COMPARE_SET), VAL, NULL },
        { "GET", VAL, "03 " L1 "'k'", 1, OP(GET), VAL, NULL },
        { "ADD", VAL, "04 " L1 "'n' 0500000000000000", 1, OP(ADD), VAL,
          NULL },
        { "CHECK", VAL, "05 " L1 L1 "'k'", 1, OP(CHECK), VAL, NULL },
        { "WAIT", VAL, "06 " L2 L1 "'a' " L1 "'b'", 1, OP(WAIT), VAL, NULL },
        { "GETNUMKEYS", VAL, "07", 1, OP(GETNUMKEYS), VAL, NULL },
        { "DELETE_KEY", VAL, "08 " L1 "'k'", 1, OP(DELETE_KEY), VAL, NULL },
        { "APPEND", VAL, "09 " L1 "'k' " L1 "'x'", 1, OP(APPEND), VAL, NULL },
        { "MULTI_GET", VAL, "0a " L2 L1 "'a' " L1 "'b'", 1, OP(MULTI_GET),
          VAL, NULL },
        { "MULTI_SET", VAL, "0b " L1 L1 "'a' " L1 "'1'", 1, OP(MULTI_SET),
          VAL, NULL },
        { "CANCEL_WAIT", VAL, "0c", 1, OP(CANCEL_WAIT), VAL, NULL },
        { "PING", VAL, "0d 01020304", 1, OP(PING), VAL, NULL },
        { "QUEUE_PUSH", VAL, "0e " L1 "'q' " L1 "'x'", 1, OP(QUEUE_PUSH), VAL,
          NULL },
        { "QUEUE_POP", VAL, "0f " L1 "'q'", 1, OP(QUEUE_POP), VAL, NULL },
        { "QUEUE_LEN", VAL, "10 " L1 "'q'", 1, OP(QUEUE_LEN), VAL, NULL },
        { "LIST", VAL, "11", 1, OP(LIST), VAL, NULL },
        { "validated has no 0x12", VAL, "12", -EPROTO, 0, VAL,
          "unknown query type 0x12" },
        { "a key over the limit, before its bytes", VAL,
          "03 0120000000000000", HP_ETOOBIG, 0, VAL,
          "key of 8193 bytes at offset 1" },
        { "a value over the limit", VAL, "01 " L1 "'k' 0100800000000000",
          HP_ETOOBIG, 0, VAL, "value of 8388609 bytes" },
        { "too many keys", VAL, "06 0100020000000000", HP_ETOOBIG, 0, VAL,
          "131073 keys in one query" },
        { "legacy SET with a huge key length", U, "00 0102030400000000",
          HP_ETOOBIG, 0, U, "key of 67305985 bytes" },
        { "a short VALIDATE waits", U, "00 cef785", 0, 0, U, NULL },
        { "one zero byte waits", U, "00", 0, 0, U, NULL },
        { "empty", U, "", 0, 0, U, NULL },
        { "a GET in pieces waits", VAL, "03 " L5 "'ab'", 0, 0, VAL, NULL },
};

static void test_parse_table(void **state)
{
        struct hp_store_limits l;
        int failures = 0;

        hp_store_limits_default(&l);
        for (size_t i = 0; i < HP_ARRAY_SIZE(parse_cases); i++) {
                const struct parse_case *c = &parse_cases[i];
                enum hp_store_dialect d = c->dialect;
                struct hp_store_query q;
                uint8_t buf[256];
                size_t len = unhex(c->hex, buf, 0), used = 0;
                char err[256] = "";
                int r = hp_store_parse(&d, &l, buf, len, &q, &used, err,
                                       sizeof(err));

                if (r != c->result) {
                        CASE_FAILED(failures, "%s: returned %d, not %d (%s)",
                                    c->name, r, c->result, err);
                        continue;
                }
                if (d != c->after)
                        CASE_FAILED(failures, "%s: dialect %d, not %d",
                                    c->name, d, c->after);
                if (r < 0 && strstr(err, c->err) == NULL)
                        CASE_FAILED(failures, "%s: error '%s' lacks '%s'",
                                    c->name, err, c->err);
                if (r != 1)
                        continue;
                if (q.op != c->op)
                        CASE_FAILED(failures, "%s: op %s", c->name,
                                    hp_store_op_name(q.op));
                if (used != len)
                        CASE_FAILED(failures, "%s: used %zu of %zu", c->name,
                                    used, len);
                /* Every proper prefix asks for more and leaves the
                 * connection's dialect as it was. */
                for (size_t n = 0; n < len; n++) {
                        enum hp_store_dialect d2 = c->dialect;

                        r = hp_store_parse(&d2, &l, buf, n, &q, &used, NULL,
                                           0);
                        if (r != 0 || d2 != c->dialect)
                                CASE_FAILED(failures,
                                            "%s: prefix of %zu "
                                            "bytes gave %d",
                                            c->name, n, r);
                }
        }
        assert_int_equal(failures, 0);
}

static void test_parse_fields(void **state)
{
        struct hp_store_limits l;
        enum hp_store_dialect d = HP_STORE_DIALECT_VALIDATED;
        struct hp_store_query q;
        struct hp_store_item it;
        uint8_t buf[256];
        size_t len, used, off = 0;

        hp_store_limits_default(&l);
        len = unhex("02 " L1 "'k' " L2 "'ab' " L3 "'xyz'", buf, 0);
        assert_int_equal(hp_store_parse(&d, &l, buf, len, &q, &used, NULL, 0),
                         1);
        assert_memory_equal(q.key, "k", 1);
        assert_int_equal(q.val_len, 2);
        assert_memory_equal(q.val, "ab", 2);
        assert_int_equal(q.val2_len, 3);
        assert_memory_equal(q.val2, "xyz", 3);

        len = unhex("04 " L1 "'n' fbffffffffffffff", buf, 0);
        assert_int_equal(hp_store_parse(&d, &l, buf, len, &q, &used, NULL, 0),
                         1);
        assert_int_equal(q.delta, -5);

        len = unhex("0b " L2 L1 "'a' " L1 "'1' " L2 "'bb' " L0, buf, 0);
        assert_int_equal(hp_store_parse(&d, &l, buf, len, &q, &used, NULL, 0),
                         1);
        assert_int_equal(q.count, 2);
        assert_true(hp_store_items_next(&q, &off, &it));
        assert_memory_equal(it.key, "a", 1);
        assert_memory_equal(it.val, "1", 1);
        assert_true(hp_store_items_next(&q, &off, &it));
        assert_int_equal(it.key_len, 2);
        assert_int_equal(it.val_len, 0);
        assert_false(hp_store_items_next(&q, &off, &it));

        /* Two queries back to back: the first is used alone. */
        len = unhex("07 07", buf, 0);
        assert_int_equal(hp_store_parse(&d, &l, buf, len, &q, &used, NULL, 0),
                         1);
        assert_int_equal(used, 1);
}

static void test_op_codes(void **state)
{
        /* The numbers each dialect gives an op, both ways round. */
        assert_int_equal(hp_store_op_code(LEG, OP(WATCH_KEY)), 7);
        assert_int_equal(hp_store_op_code(LEG, OP(DELETE_KEY)), 8);
        assert_int_equal(hp_store_op_code(LEG, OP(VALIDATE)), -1);
        assert_int_equal(hp_store_op_code(LEG, OP(QUEUE_PUSH)), -1);
        assert_int_equal(hp_store_op_code(VAL, OP(DELETE_KEY)), 8);
        assert_int_equal(hp_store_op_code(VAL, OP(WATCH_KEY)), -1);
        assert_int_equal(hp_store_op_code(VAL, OP(LIST)), 17);
        assert_int_equal(hp_store_op_code(U, OP(SET)), -1);
        assert_string_equal(hp_store_op_name(OP(QUEUE_POP)), "QUEUE_POP");
}

/* ---- the server on its own thread ---- */

struct server {
        uv_loop_t loop;
        struct hp_store_server *store;
        uv_async_t stop;
        uv_thread_t thread;
        int port;
        struct hp_store_stats stats;
};

static void store_closed_cb(void *ctx)
{
        struct server *s = ctx;

        uv_close((uv_handle_t *)&s->stop, NULL);
}

static void stop_cb(uv_async_t *a)
{
        struct server *s = hp_container_of(a, struct server, stop);

        s->stats = *hp_store_server_stats(s->store);
        hp_store_server_close(s->store, store_closed_cb, s);
}

static void server_thread(void *arg)
{
        struct server *s = arg;

        uv_run(&s->loop, UV_RUN_DEFAULT);
}

/* The key prefix the next server_start refuses (NULL: none). */
static const char *next_refuse;

static struct server *server_start(const struct hp_store_limits *l)
{
        struct server *s = calloc(1, sizeof(*s));
        char err[128];

        assert_non_null(s);
        assert_int_equal(uv_loop_init(&s->loop), 0);
        assert_int_equal(hp_store_server_new(&s->loop, l, &s->store), 0);
        if (next_refuse != NULL)
                hp_store_server_refuse_prefix(s->store, next_refuse,
                                              "refused in the test");
        assert_int_equal(hp_store_server_listen(s->store, "127.0.0.1", 0, err,
                                                sizeof(err)),
                         0);
        s->port = hp_store_server_port(s->store);
        assert_true(s->port > 0);
        uv_async_init(&s->loop, &s->stop, stop_cb);
        assert_int_equal(uv_thread_create(&s->thread, server_thread, s), 0);
        return s;
}

/* Stops the server, checks that its loop ends with nothing left, and
 * leaves its counters in s->stats. */
static void server_stop(struct server *s)
{
        uv_async_send(&s->stop);
        uv_thread_join(&s->thread);
        assert_int_equal(uv_loop_close(&s->loop), 0);
}

static int dial(int port)
{
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        struct timeval tv = { .tv_sec = SAFETY_TIMEOUT_S };
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        assert_true(fd >= 0);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        return fd;
}

static void send_all(int fd, const uint8_t *b, size_t n)
{
        while (n > 0) {
                ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return; /* the server closed it: the reply says so */
                b += w;
                n -= (size_t)w;
        }
}

/* Reads exactly n bytes; returns how many came before the end. */
static size_t recv_n(int fd, uint8_t *b, size_t n)
{
        size_t got = 0;

        while (got < n) {
                ssize_t r = recv(fd, b + got, n - got, 0);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
                got += (size_t)r;
        }
        return got;
}

/* One step of a conversation: on connection conn, send hex, then read
 * exactly expect (or, with eof, the end of the connection). */
struct step {
        int conn;
        const char *send;
        const char *expect;
        bool eof;
};

struct talk_case {
        const char *name;
        struct step steps[8];
        uint64_t protocol_errors;
        uint64_t limit_errors;
};

#define END                                                                  \
        {                                                                    \
                -1, NULL, NULL, false                                        \
        }
/* A current torch client's first bytes. */
#define HELLO "00 " MAGIC

static const struct talk_case talks[] = {
        { "legacy set, get, add, num_keys, delete",
          { { 0, "00 " L2 "'/a' " L5 "'hello'", "", false },
            { 0, "02 " L2 "'/a'", L5 "'hello'", false },
            { 0, "03 " L2 "'/n' 0300000000000000", "0300000000000000",
              false },
            { 0, "03 " L2 "'/n' fbffffffffffffff", "feffffffffffffff",
              false },
            { 0, "06", "0200000000000000", false },
            { 0, "08 " L2 "'/a' 08 " L2 "'/a'",
              "0100000000000000 0000000000000000", false },
            { 0, "02 " L2 "'/n'", L2 "'-2'", false },
            END },
          0,
          0 },
        { "legacy compare_set: missing, expected, equal, different",
          { { 0, "01 " L1 "'k' " L1 "'x' " L1 "'y'", L1 "'x'", false },
            { 0, "01 " L1 "'k' " L0 L1 "'a'", L1 "'a'", false },
            { 0, "01 " L1 "'k' " L1 "'a' " L1 "'b'", L1 "'b'", false },
            { 0, "01 " L1 "'k' " L1 "'z' " L1 "'c'", L1 "'b'", false },
            END },
          0,
          0 },
        { "legacy wait: answered when another client sets the key",
          { { 0, "05 " L2 L1 "'a' " L1 "'b'", "", false },
            { 1, "00 " L1 "'a' " L1 "'1'", "", false },
            { 1, "04 " L2 L1 "'a' " L1 "'b'", "01", false },
            { 1, "00 " L1 "'b' " L1 "'2'", "", false },
            { 0, "", "00", false },
            { 0, "05 " L1 L1 "'a'", "00", false },
            END },
          0,
          0 },
        { "legacy watch_key: created, updated, appended, deleted",
          { { 0, "07 " L1 "'w'", "03", false },
            { 1, "00 " L1 "'w' " L1 "'1'", "", false },
            { 0, "", "01 " L1 "'w' " L0 L1 "'1'", false },
            { 1, "03 " L1 "'w' 0100000000000000", "0200000000000000", false },
            { 0, "", "00 " L1 "'w' " L1 "'1' " L1 "'2'", false },
            { 1, "09 " L1 "'w' " L1 "'x'", "", false },
            { 0, "", "04 " L1 "'w' " L0 L1 "'x'", false },
            { 1, "08 " L1 "'w'", "0100000000000000", false } },
          0,
          0 },
        { "legacy cancel_wait and multi_get/multi_set",
          { { 0, "05 " L1 L5 "'never' 0c", "01", false },
            { 0, "0b " L2 L1 "'a' " L1 "'1' " L1 "'b' " L0, "", false },
            { 0, "0a " L3 L1 "'a' " L1 "'b' " L1 "'c'", L1 "'1' " L0 L0,
              false },
            END },
          0,
          0 },
        { "validated: ping, set, get, queue, list",
          { { 0, HELLO " 0d 2a000000", "2a000000", false },
            { 0, "01 " L1 "'k' " L1 "'v' 03 " L1 "'k'", L1 "'v'", false },
            { 0, "0e " L1 "'q' " L1 "'x' 0e " L1 "'q' " L1 "'y' 10 " L1 "'q'",
              "0200000000000000", false },
            { 0, "0f " L1 "'q'", "0200000000000000 " L1 "'x'", false },
            { 0, "0f " L1 "'q' 0f " L1 "'q'",
              "0100000000000000 " L1 "'y' 0000000000000000", false },
            { 0, "11", "0100000000000000 " L1 "'k'", false },
            { 0, "07", "0100000000000000", false },
            END },
          0,
          0 },
        { "validated: a queue push wakes one waiter",
          { { 0, HELLO " 06 " L1 L1 "'q' 0d 01000000", "01000000", false },
            { 1, HELLO " 06 " L1 L1 "'q' 0d 02000000", "02000000", false },
            { 2, HELLO " 0e " L1 "'q' " L1 "'1'", "", false },
            { 0, "", "00", false },
            { 0, "0f " L1 "'q'", "0100000000000000 " L1 "'1'", false },
            { 1, "0c", "01", false },
            END },
          0,
          0 },
        { "validated: a wait cancelled after its key came",
          { { 0, HELLO " 06 " L1 L1 "'k'", "", false },
            { 1, HELLO " 01 " L1 "'k' " L0 " 03 " L1 "'k'", L0, false },
            { 0, "0c", "00 01", false },
            END },
          0,
          0 },
        { "HTTP is dropped",
          { { 0, "'GET / HTTP/1.1' 0d0a 0d0a", NULL, true },
            { 1, "06", "0000000000000000", false },
            END },
          1,
          0 },
        { "a second VALIDATE is dropped",
          { { 0, "00 " MAGIC " 00 00000000", NULL, true }, END },
          1,
          0 },
        { "a first query that is not VALIDATE gets the legacy numbers",
          { { 0, "11", NULL, true }, END },
          1,
          0 },
        { "a key over the limit is dropped",
          { { 0, HELLO " 03 0120000000000000", NULL, true },
            { 1, "06", "0000000000000000", false },
            END },
          0,
          1 },
        { "an ADD to text is dropped",
          { { 0, "00 " L1 "'t' " L1 "'x' 03 " L1 "'t' " L1, NULL, true },
            END },
          1,
          0 },
};

static int run_talks(const struct talk_case *cases, size_t ncases)
{
        int failures = 0;

        for (size_t i = 0; i < ncases; i++) {
                const struct talk_case *t = &cases[i];
                struct server *s = server_start(NULL);
                int fds[4] = { -1, -1, -1, -1 };

                for (size_t k = 0; k < HP_ARRAY_SIZE(t->steps); k++) {
                        const struct step *st = &t->steps[k];
                        uint8_t out[512], want[512], got[512];
                        size_t n, wn, gn;

                        if (st->conn < 0)
                                break;
                        if (fds[st->conn] < 0)
                                fds[st->conn] = dial(s->port);
                        n = unhex(st->send, out, 0);
                        send_all(fds[st->conn], out, n);
                        if (st->eof) {
                                gn = recv_n(fds[st->conn], got, 1);
                                if (gn != 0)
                                        CASE_FAILED(failures,
                                                    "%s: step %zu: "
                                                    "not closed",
                                                    t->name, k);
                                continue;
                        }
                        wn = unhex(st->expect, want, 0);
                        gn = recv_n(fds[st->conn], got, wn);
                        if (gn != wn || memcmp(got, want, wn) != 0)
                                CASE_FAILED(failures,
                                            "%s: step %zu: got %zu "
                                            "of %zu bytes, or others",
                                            t->name, k, gn, wn);
                }
                for (int k = 0; k < 4; k++)
                        if (fds[k] >= 0)
                                close(fds[k]);
                server_stop(s);
                if (s->stats.protocol_errors != t->protocol_errors ||
                    s->stats.limit_errors != t->limit_errors)
                        CASE_FAILED(
                                failures,
                                "%s: %llu protocol and %llu "
                                "limit errors counted",
                                t->name,
                                (unsigned long long)s->stats.protocol_errors,
                                (unsigned long long)s->stats.limit_errors);
                free(s);
        }
        return failures;
}

static void test_conversations(void **state)
{
        (void)state;
        next_refuse = NULL;
        assert_int_equal(run_talks(talks, HP_ARRAY_SIZE(talks)), 0);
}

/* A refused prefix (torchrun's rendezvous key) drops the client that
 * names it in any query, one key or many; other keys and clients go on. */
static const struct talk_case refusals[] = {
        { "a compare_set on a refused key is dropped",
          { { 0, "01 " L3 "'/tr' " L0 L1 "'x'", NULL, true },
            { 1, "06", "0000000000000000", false },
            END },
          1,
          0 },
        { "a wait naming a refused key among others is dropped",
          { { 0, "05 " L2 L1 "'a' " L3 "'/tr'", NULL, true }, END },
          1,
          0 },
        { "other keys are served",
          { { 0, "00 " L2 "'/a' " L1 "'1' 02 " L2 "'/a'", L1 "'1'", false },
            END },
          0,
          0 },
};

static void test_refused_prefix(void **state)
{
        (void)state;
        next_refuse = "/t";
        assert_int_equal(run_talks(refusals, HP_ARRAY_SIZE(refusals)), 0);
        next_refuse = NULL;
}

/* Past connections_max, a new connection is closed at once and counted;
 * the open ones go on. */
static void test_connection_limit(void **state)
{
        struct hp_store_limits l;
        struct server *s;
        uint8_t out[16], got[16];
        size_t n;
        int a, b, c;

        hp_store_limits_default(&l);
        l.connections_max = 2;
        s = server_start(&l);
        a = dial(s->port);
        b = dial(s->port);
        n = unhex("06", out, 0);
        send_all(a, out, n);
        assert_int_equal(recv_n(a, got, 8), 8);
        send_all(b, out, n);
        assert_int_equal(recv_n(b, got, 8), 8);
        c = dial(s->port);
        assert_int_equal(recv_n(c, got, 1), 0);
        send_all(a, out, n);
        assert_int_equal(recv_n(a, got, 8), 8);
        close(a);
        close(b);
        close(c);
        server_stop(s);
        assert_int_equal(s->stats.rejected_connections, 1);
        assert_int_equal(s->stats.connections_total, 2);
        free(s);
}

/* The memory ceiling holds whatever the clients send: a SET that would
 * pass it drops its client, and the server goes on. */
static void test_memory_limit(void **state)
{
        struct hp_store_limits l;
        struct server *s;
        uint8_t *big;
        uint8_t got[16], hdr[32];
        size_t n;
        int a, b;

        hp_store_limits_default(&l);
        l.memory_max = 512 * 1024;
        s = server_start(&l);
        big = calloc(1, 600 * 1024);
        assert_non_null(big);
        a = dial(s->port);
        n = unhex("00 " L1 "'b' 0000090000000000", hdr, 0);
        send_all(a, hdr, n);
        send_all(a, big, 9 * 65536);
        assert_int_equal(recv_n(a, got, 1), 0);
        b = dial(s->port);
        n = unhex("06", hdr, 0);
        send_all(b, hdr, n);
        assert_int_equal(recv_n(b, got, 8), 8);
        assert_int_equal(got[0], 0);
        close(a);
        close(b);
        server_stop(s);
        assert_int_equal(s->stats.limit_errors, 1);
        assert_true(s->stats.memory <= l.memory_max);
        free(big);
        free(s);
}

/* A client that asks and never reads has at most out_max bytes of
 * replies waiting for it; past that it is dropped. */
static void test_reply_limit(void **state)
{
        struct hp_store_limits l;
        struct server *s;
        uint8_t *val, hdr[64], sink[65536];
        size_t n, total = 0;
        ssize_t r;
        int a;

        hp_store_limits_default(&l);
        l.out_max = 1024 * 1024;
        s = server_start(&l);
        val = calloc(1, 512 * 1024);
        assert_non_null(val);
        a = dial(s->port);
        n = unhex(HELLO " 01 " L1 "'v' 0000080000000000", hdr, 0);
        send_all(a, hdr, n);
        send_all(a, val, 512 * 1024);
        /* 64 GETs of it: 32 MiB of replies, more than the socket buffers
         * and out_max together. */
        n = unhex("03 " L1 "'v'", hdr, 0);
        for (int i = 0; i < 64; i++)
                send_all(a, hdr, n);
        while ((r = recv(a, sink, sizeof(sink), 0)) > 0)
                total += (size_t)r;
        /* The end, or a reset when the server closed with queries of ours
         * still unread. */
        assert_true(r == 0 || (r < 0 && errno == ECONNRESET));
        assert_true(total < 64 * (512 * 1024 + 8));
        close(a);
        server_stop(s);
        assert_int_equal(s->stats.limit_errors, 1);
        free(val);
        free(s);
}

/* ---- the client, on the same loop as the server ---- */

struct sync {
        uv_loop_t *loop;
        bool done;
        struct hp_store_reply r;
        uint8_t val[256];
};

static void reply_cb(void *ctx, const struct hp_store_reply *r)
{
        struct sync *y = ctx;

        y->r = *r;
        if (r->val_len <= sizeof(y->val) && r->val)
                memcpy(y->val, r->val, r->val_len);
        if (r->items_len <= sizeof(y->val) && r->items) {
                memcpy(y->val, r->items, r->items_len);
                y->r.items = y->val;
        }
        y->done = true;
}

static void run_until_done(struct sync *y)
{
        while (!y->done)
                uv_run(y->loop, UV_RUN_ONCE);
}

#define SYNC(y, call)                                                        \
        do {                                                                 \
                (y)->done = false;                                           \
                assert_int_equal((call), 0);                                 \
                run_until_done(y);                                           \
        } while (0)

static void closed_cb(void *ctx)
{
        *(bool *)ctx = true;
}

static void test_client(void **state)
{
        uv_loop_t loop;
        struct hp_store_server *srv;
        struct hp_store_client *c, *c2;
        struct sync y = { .loop = &loop }, y2 = { .loop = &loop };
        const char *ab[] = { "a", "b" };
        const char *one[] = { "x" };
        const char *vals[] = { "1", "2" };
        bool closed = false, closed2 = false, sclosed = false;
        char err[128];
        int port;

        assert_int_equal(uv_loop_init(&loop), 0);
        assert_int_equal(hp_store_server_new(&loop, NULL, &srv), 0);
        assert_int_equal(hp_store_server_listen(srv, "127.0.0.1", 0, err,
                                                sizeof(err)),
                         0);
        port = hp_store_server_port(srv);

        y.done = false;
        assert_int_equal(hp_store_client_connect(&loop, "127.0.0.1", port,
                                                 reply_cb, &y, &c),
                         0);
        run_until_done(&y);
        assert_int_equal(y.r.status, 0);
        assert_int_equal(y.r.op, HP_STORE_OP_PING);
        assert_int_equal(y.r.num, (int64_t)uv_os_getpid());
        {
                char addr[64];

                assert_int_equal(hp_store_client_local_addr(c, addr,
                                                            sizeof(addr)),
                                 0);
                assert_string_equal(addr, "127.0.0.1");
        }

        SYNC(&y, hp_store_client_set(c, "k", 1, "v1", 2, reply_cb, &y));
        assert_int_equal(y.r.status, 0);
        SYNC(&y, hp_store_client_get(c, "k", 1, reply_cb, &y));
        assert_int_equal(y.r.val_len, 2);
        assert_memory_equal(y.val, "v1", 2);
        SYNC(&y, hp_store_client_add(c, "n", 1, 40, reply_cb, &y));
        SYNC(&y, hp_store_client_add(c, "n", 1, 2, reply_cb, &y));
        assert_int_equal(y.r.num, 42);
        SYNC(&y, hp_store_client_compare_set(c, "k", 1, "v1", 2, "v2", 2,
                                             reply_cb, &y));
        assert_memory_equal(y.val, "v2", 2);
        SYNC(&y, hp_store_client_check(c, ab, 2, reply_cb, &y));
        assert_false(y.r.ready);
        SYNC(&y, hp_store_client_num_keys(c, reply_cb, &y));
        assert_int_equal(y.r.num, 2);
        SYNC(&y, hp_store_client_append(c, "k", 1, "+", 1, reply_cb, &y));
        SYNC(&y, hp_store_client_get(c, "k", 1, reply_cb, &y));
        assert_memory_equal(y.val, "v2+", 3);
        SYNC(&y, hp_store_client_multi_set(c, ab, vals, 2, reply_cb, &y));
        SYNC(&y, hp_store_client_multi_get(c, ab, 2, reply_cb, &y));
        assert_int_equal(y.r.count, 2);
        assert_int_equal(y.r.items_len, 18);
        assert_int_equal(y.val[8], '1');
        assert_int_equal(y.val[17], '2');
        SYNC(&y, hp_store_client_delete(c, "k", 1, reply_cb, &y));
        assert_int_equal(y.r.num, 1);
        SYNC(&y, hp_store_client_queue_push(c, "q", 1, "i", 1, reply_cb, &y));
        SYNC(&y, hp_store_client_queue_len(c, "q", 1, reply_cb, &y));
        assert_int_equal(y.r.num, 1);
        SYNC(&y, hp_store_client_queue_pop(c, "q", 1, reply_cb, &y));
        assert_int_equal(y.r.num, 1);
        assert_memory_equal(y.val, "i", 1);
        SYNC(&y, hp_store_client_ping(c, 7, reply_cb, &y));
        assert_int_equal(y.r.num, 7);

        /* A WAIT answered by a second client's SET, then one that times
         * out and is cancelled. */
        y2.done = false;
        assert_int_equal(hp_store_client_connect(&loop, "127.0.0.1", port,
                                                 reply_cb, &y2, &c2),
                         0);
        run_until_done(&y2);
        y.done = false;
        assert_int_equal(hp_store_client_wait(c, one, 1, 0, reply_cb, &y), 0);
        SYNC(&y2, hp_store_client_set(c2, "x", 1, "", 0, reply_cb, &y2));
        run_until_done(&y);
        assert_int_equal(y.r.status, 0);
        assert_int_equal(y.r.op, HP_STORE_OP_WAIT);
        one[0] = "never";
        SYNC(&y, hp_store_client_wait(c, one, 1, 50, reply_cb, &y));
        assert_int_equal(y.r.status, -ETIMEDOUT);
        SYNC(&y, hp_store_client_ping(c, 8, reply_cb, &y));
        assert_int_equal(y.r.num, 8);

        /* Closing answers what is queued with -ECANCELED. */
        y.done = false;
        assert_int_equal(hp_store_client_get(c, "k", 1, reply_cb, &y), 0);
        hp_store_client_close(c, closed_cb, &closed);
        assert_true(y.done);
        assert_int_equal(y.r.status, -ECANCELED);
        assert_int_equal(hp_store_client_ping(c2, 1, reply_cb, &y2), 0);
        hp_store_client_close(c2, closed_cb, &closed2);
        hp_store_server_close(srv, closed_cb, &sclosed);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_true(closed && closed2 && sclosed);
        assert_int_equal(uv_loop_close(&loop), 0);
}

/* A client whose server is not there fails its first request. */
static void test_client_refused(void **state)
{
        uv_loop_t loop;
        struct hp_store_server *srv;
        struct hp_store_client *c;
        struct sync y = { .loop = &loop };
        bool closed = false, sclosed = false;
        char err[128];
        int port;

        assert_int_equal(uv_loop_init(&loop), 0);
        /* A port that was free a moment ago and is closed now. */
        assert_int_equal(hp_store_server_new(&loop, NULL, &srv), 0);
        assert_int_equal(hp_store_server_listen(srv, "127.0.0.1", 0, err,
                                                sizeof(err)),
                         0);
        port = hp_store_server_port(srv);
        hp_store_server_close(srv, closed_cb, &sclosed);
        uv_run(&loop, UV_RUN_DEFAULT);
        y.done = false;
        assert_int_equal(hp_store_client_connect(&loop, "127.0.0.1", port,
                                                 reply_cb, &y, &c),
                         0);
        run_until_done(&y);
        assert_int_equal(y.r.status, UV_ECONNREFUSED);
        assert_int_equal(hp_store_client_ping(c, 1, reply_cb, &y), -ENOTCONN);
        hp_store_client_close(c, closed_cb, &closed);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_true(closed);
        assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_listen_error(void **state)
{
        uv_loop_t loop;
        struct hp_store_server *srv;
        bool sclosed = false;
        char err[128];

        assert_int_equal(uv_loop_init(&loop), 0);
        assert_int_equal(hp_store_server_new(&loop, NULL, &srv), 0);
        assert_int_equal(hp_store_server_listen(srv, "not-an-address", 1, err,
                                                sizeof(err)),
                         UV_EINVAL);
        assert_non_null(strstr(err, "cannot listen on not-an-address:1"));
        hp_store_server_close(srv, closed_cb, &sclosed);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_true(sclosed);
        assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_table),
                cmocka_unit_test(test_parse_fields),
                cmocka_unit_test(test_op_codes),
                cmocka_unit_test(test_conversations),
                cmocka_unit_test(test_refused_prefix),
                cmocka_unit_test(test_connection_limit),
                cmocka_unit_test(test_memory_limit),
                cmocka_unit_test(test_reply_limit),
                cmocka_unit_test(test_client),
                cmocka_unit_test(test_client_refused),
                cmocka_unit_test(test_listen_error),
        };

        hp_log_set_level(HP_LOG_ERROR);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
