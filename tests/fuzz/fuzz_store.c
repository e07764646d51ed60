/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the TCPStore parser (src/store/codec.c).
 *
 * Input: one byte that picks the connection's dialect (unknown, legacy,
 * validated) and whether the limits are the defaults or small ones, then
 * the bytes a client sends. They are parsed as the server does, query
 * after query, first whole and then fed one byte more at a time.
 * Invariants: a query is used whole and is never longer than query_max;
 * every length is within its limit; the items walk ends exactly at the
 * end of the items; a dialect once known never changes; an incomplete
 * query is reported as incomplete on every prefix; and feeding the stream
 * byte by byte finds the same queries as parsing it whole. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/store.h"

#define FUZZ_ASSERT(cond)                                                    \
        do {                                                                 \
                if (!(cond)) {                                               \
                        fprintf(stderr, "%s:%d: invariant broken: %s\n",     \
                                __FILE__, __LINE__, #cond);                  \
                        abort();                                             \
                }                                                            \
        } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_query(const struct hp_store_limits *l,
                        const struct hp_store_query *q, size_t used)
{
        struct hp_store_item it;
        size_t off = 0;
        uint64_t n = 0;

        FUZZ_ASSERT(used > 0 && used <= l->query_max);
        FUZZ_ASSERT((unsigned)q->op < HP_STORE_OP_COUNT);
        FUZZ_ASSERT(q->key_len <= l->key_max);
        FUZZ_ASSERT(q->val_len <= l->value_max);
        FUZZ_ASSERT(q->val2_len <= l->value_max);
        FUZZ_ASSERT(q->count <= l->keys_per_query);
        if (q->op == HP_STORE_OP_VALIDATE)
                FUZZ_ASSERT(q->u32 == HP_STORE_MAGIC);
        if (q->op != HP_STORE_OP_CHECK && q->op != HP_STORE_OP_WAIT &&
            q->op != HP_STORE_OP_MULTI_GET && q->op != HP_STORE_OP_MULTI_SET)
                return;
        while (hp_store_items_next(q, &off, &it)) {
                FUZZ_ASSERT(it.key_len <= l->key_max);
                FUZZ_ASSERT(it.val_len <= l->value_max);
                FUZZ_ASSERT(off <= q->items_len);
                n++;
        }
        FUZZ_ASSERT(off == q->items_len);
        FUZZ_ASSERT(n == q->count);
}

/* The queries of the stream, parsed whole: their ops and lengths, and
 * where parsing stopped and why. */
struct run {
        enum hp_store_op ops[256];
        size_t used[256];
        size_t n;
        size_t end;
        int last;
};

static void parse_whole(const struct hp_store_limits *l,
                        enum hp_store_dialect d, const uint8_t *p, size_t len,
                        struct run *out)
{
        size_t off = 0;

        out->n = 0;
        out->last = 0;
        while (off < len && out->n < 256) {
                enum hp_store_dialect before = d;
                struct hp_store_query q;
                size_t used = 0;
                char err[256];
                int r = hp_store_parse(&d, l, p + off, len - off, &q, &used,
                                       err, sizeof(err));

                out->last = r;
                if (before != HP_STORE_DIALECT_UNKNOWN)
                        FUZZ_ASSERT(d == before);
                if (r <= 0) {
                        if (r < 0)
                                FUZZ_ASSERT(r == -EPROTO || r == HP_ETOOBIG);
                        else
                                FUZZ_ASSERT(d == before);
                        break;
                }
                FUZZ_ASSERT(d != HP_STORE_DIALECT_UNKNOWN);
                check_query(l, &q, used);
                out->ops[out->n] = q.op;
                out->used[out->n++] = used;
                off += used;
        }
        out->end = off;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct run whole, fed;
        struct hp_store_limits l;
        enum hp_store_dialect d;
        size_t start = 0, len;

        if (size == 0)
                return 0;
        hp_store_limits_default(&l);
        if (data[0] & 4) {
                l.key_max = 16;
                l.value_max = 64;
                l.keys_per_query = 8;
                l.query_max = 256;
        }
        d = (enum hp_store_dialect)(data[0] % 3);
        data++;
        size--;
        parse_whole(&l, d, data, size, &whole);

        /* Byte by byte, as reads of one byte would deliver it. */
        fed.n = 0;
        for (len = 1; len <= size && fed.n < whole.n; len++) {
                struct hp_store_query q;
                size_t used = 0;
                int r = hp_store_parse(&d, &l, data + start, len - start, &q,
                                       &used, NULL, 0);

                if (r < 0)
                        break;
                if (r == 1) {
                        FUZZ_ASSERT(used == len - start);
                        FUZZ_ASSERT(q.op == whole.ops[fed.n]);
                        FUZZ_ASSERT(used == whole.used[fed.n]);
                        fed.n++;
                        start = len;
                }
        }
        FUZZ_ASSERT(fed.n == whole.n);
        return 0;
}
