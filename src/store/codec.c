/* SPDX-License-Identifier: Apache-2.0 */
/* The TCPStore wire format: the two dialects' query numbers and the
 * parser, pure (no allocation, no I/O), so that the server, the tests and
 * the fuzzer all run the same code. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hyperpod/common.h"
#include "store-private.h"

static const char *const op_names[] = {
#define XX(name, text) text,
        HP_STORE_OP_MAP(XX)
#undef XX
};

const char *hp_store_op_name(enum hp_store_op op)
{
        if ((unsigned)op >= HP_STORE_OP_COUNT)
                return "?";
        return op_names[op];
}

/* Wire number → op, per dialect; the index is the number. */
static const enum hp_store_op legacy_ops[] = {
        HP_STORE_OP_SET,         HP_STORE_OP_COMPARE_SET,
        HP_STORE_OP_GET,         HP_STORE_OP_ADD,
        HP_STORE_OP_CHECK,       HP_STORE_OP_WAIT,
        HP_STORE_OP_GETNUMKEYS,  HP_STORE_OP_WATCH_KEY,
        HP_STORE_OP_DELETE_KEY,  HP_STORE_OP_APPEND,
        HP_STORE_OP_MULTI_GET,   HP_STORE_OP_MULTI_SET,
        HP_STORE_OP_CANCEL_WAIT,
};

static const enum hp_store_op validated_ops[] = {
        HP_STORE_OP_VALIDATE,    HP_STORE_OP_SET,
        HP_STORE_OP_COMPARE_SET, HP_STORE_OP_GET,
        HP_STORE_OP_ADD,         HP_STORE_OP_CHECK,
        HP_STORE_OP_WAIT,        HP_STORE_OP_GETNUMKEYS,
        HP_STORE_OP_DELETE_KEY,  HP_STORE_OP_APPEND,
        HP_STORE_OP_MULTI_GET,   HP_STORE_OP_MULTI_SET,
        HP_STORE_OP_CANCEL_WAIT, HP_STORE_OP_PING,
        HP_STORE_OP_QUEUE_PUSH,  HP_STORE_OP_QUEUE_POP,
        HP_STORE_OP_QUEUE_LEN,   HP_STORE_OP_LIST,
};

int hp_store_op_code(enum hp_store_dialect d, enum hp_store_op op)
{
        const enum hp_store_op *t = d == HP_STORE_DIALECT_LEGACY
                                            ? legacy_ops
                                            : validated_ops;
        size_t n = d == HP_STORE_DIALECT_LEGACY
                           ? HP_ARRAY_SIZE(legacy_ops)
                           : HP_ARRAY_SIZE(validated_ops);

        if (d == HP_STORE_DIALECT_UNKNOWN)
                return -1;
        for (size_t i = 0; i < n; i++)
                if (t[i] == op)
                        return (int)i;
        return -1;
}

void hp_store_limits_default(struct hp_store_limits *l)
{
        *l = (struct hp_store_limits){
                .key_max = HP_STORE_KEY_MAX,
                .value_max = HP_STORE_VALUE_MAX,
                .keys_per_query = HP_STORE_KEYS_PER_QUERY,
                .query_max = HP_STORE_QUERY_MAX,
                .keys_max = HP_STORE_KEYS_MAX,
                .memory_max = HP_STORE_MEMORY_MAX,
                .out_max = HP_STORE_OUT_MAX,
                .connections_max = HP_STORE_CONNECTIONS_MAX,
                .watches_max = HP_STORE_WATCHES_MAX,
        };
}

uint64_t hp_store__get_u64(const uint8_t *p)
{
        uint64_t v = 0;

        for (int i = 7; i >= 0; i--)
                v = (v << 8) | p[i];
        return v;
}

uint32_t hp_store__get_u32(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
}

void hp_store__put_u64(uint8_t *p, uint64_t v)
{
        for (int i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

void hp_store__put_u32(uint8_t *p, uint32_t v)
{
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

/* A cursor over the bytes of one query. A field past the end is "more
 * needed" (0), one over a limit is HP_ETOOBIG, with the reason written. */
struct cursor {
        const uint8_t *buf;
        size_t len;
        size_t off;
        const struct hp_store_limits *l;
        char *err;
        size_t errlen;
};

static void say(struct cursor *c, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static void say(struct cursor *c, const char *fmt, ...)
{
        va_list ap;

        if (c->err == NULL || c->errlen == 0)
                return;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
}

static int take_u64(struct cursor *c, uint64_t *v)
{
        if (c->len - c->off < 8)
                return 0;
        *v = hp_store__get_u64(c->buf + c->off);
        c->off += 8;
        return 1;
}

static int take_u32(struct cursor *c, uint32_t *v)
{
        if (c->len - c->off < 4)
                return 0;
        *v = hp_store__get_u32(c->buf + c->off);
        c->off += 4;
        return 1;
}

/* A u64 length and its bytes, at most max of them. */
static int take_bytes(struct cursor *c, size_t max, const char *what,
                      const uint8_t **p, size_t *n)
{
        size_t at = c->off;
        uint64_t len;

        if (!take_u64(c, &len))
                return 0;
        if (len > max) {
                say(c,
                    "%s of %llu bytes at offset %zu, over the limit of "
                    "%zu",
                    what, (unsigned long long)len, at, max);
                return HP_ETOOBIG;
        }
        if (c->off + len > c->l->query_max) {
                say(c,
                    "query of more than %zu bytes (the limit) at offset "
                    "%zu",
                    c->l->query_max, at);
                return HP_ETOOBIG;
        }
        if (c->len - c->off < len)
                return 0;
        *p = c->buf + c->off;
        *n = (size_t)len;
        c->off += (size_t)len;
        return 1;
}

static int take_key(struct cursor *c, const uint8_t **p, size_t *n)
{
        return take_bytes(c, c->l->key_max, "key", p, n);
}

static int take_value(struct cursor *c, const uint8_t **p, size_t *n)
{
        return take_bytes(c, c->l->value_max, "value", p, n);
}

/* A count of items, then that many keys (with values when pairs). */
static int take_items(struct cursor *c, bool pairs, struct hp_store_query *q)
{
        size_t at = c->off;
        const uint8_t *p;
        size_t n;
        int r;

        if (!take_u64(c, &q->count))
                return 0;
        if (q->count > c->l->keys_per_query) {
                say(c,
                    "%llu keys in one query at offset %zu, over the limit "
                    "of %llu",
                    (unsigned long long)q->count, at,
                    (unsigned long long)c->l->keys_per_query);
                return HP_ETOOBIG;
        }
        q->items = c->buf + c->off;
        for (uint64_t i = 0; i < q->count; i++) {
                r = take_key(c, &p, &n);
                if (r <= 0)
                        return r;
                if (pairs) {
                        r = take_value(c, &p, &n);
                        if (r <= 0)
                                return r;
                }
        }
        q->items_len = (size_t)(c->buf + c->off - q->items);
        return 1;
}

/* The fields after the query's number. */
static int take_fields(struct cursor *c, struct hp_store_query *q)
{
        uint64_t v = 0;
        int r;

        switch (q->op) {
        case HP_STORE_OP_VALIDATE:
        case HP_STORE_OP_PING:
                return take_u32(c, &q->u32);
        case HP_STORE_OP_SET:
        case HP_STORE_OP_APPEND:
        case HP_STORE_OP_QUEUE_PUSH:
                r = take_key(c, &q->key, &q->key_len);
                if (r <= 0)
                        return r;
                return take_value(c, &q->val, &q->val_len);
        case HP_STORE_OP_COMPARE_SET:
                r = take_key(c, &q->key, &q->key_len);
                if (r <= 0)
                        return r;
                r = take_value(c, &q->val, &q->val_len);
                if (r <= 0)
                        return r;
                return take_value(c, &q->val2, &q->val2_len);
        case HP_STORE_OP_GET:
        case HP_STORE_OP_WATCH_KEY:
        case HP_STORE_OP_DELETE_KEY:
        case HP_STORE_OP_QUEUE_POP:
        case HP_STORE_OP_QUEUE_LEN:
                return take_key(c, &q->key, &q->key_len);
        case HP_STORE_OP_ADD:
                r = take_key(c, &q->key, &q->key_len);
                if (r <= 0)
                        return r;
                r = take_u64(c, &v);
                q->delta = (int64_t)v;
                return r;
        case HP_STORE_OP_CHECK:
        case HP_STORE_OP_WAIT:
        case HP_STORE_OP_MULTI_GET:
                return take_items(c, false, q);
        case HP_STORE_OP_MULTI_SET:
                return take_items(c, true, q);
        case HP_STORE_OP_GETNUMKEYS:
        case HP_STORE_OP_CANCEL_WAIT:
        case HP_STORE_OP_LIST:
        case HP_STORE_OP_COUNT:
                break;
        }
        return 1;
}

int hp_store_parse(enum hp_store_dialect *dialect,
                   const struct hp_store_limits *l, const uint8_t *buf,
                   size_t len, struct hp_store_query *q, size_t *used,
                   char *err, size_t errlen)
{
        struct cursor c = { .buf = buf,
                            .len = len,
                            .off = 1,
                            .l = l,
                            .err = err,
                            .errlen = errlen };
        enum hp_store_dialect d = *dialect;
        uint8_t code;
        int r;

        if (len == 0)
                return 0;
        code = buf[0];
        if (d == HP_STORE_DIALECT_UNKNOWN) {
                /* VALIDATE and legacy SET are both 0: the magic after it
                 * tells them apart, and a legacy key length whose first
                 * four bytes were the magic would be over any key limit. */
                if (code != 0) {
                        d = HP_STORE_DIALECT_LEGACY;
                } else if (len < 5) {
                        return 0;
                } else {
                        d = hp_store__get_u32(buf + 1) == HP_STORE_MAGIC
                                    ? HP_STORE_DIALECT_VALIDATED
                                    : HP_STORE_DIALECT_LEGACY;
                }
        }
        if (d == HP_STORE_DIALECT_LEGACY) {
                if (code >= HP_ARRAY_SIZE(legacy_ops)) {
                        say(&c, "unknown query type 0x%02x", code);
                        return -EPROTO;
                }
                *q = (struct hp_store_query){ .op = legacy_ops[code] };
        } else {
                if (code >= HP_ARRAY_SIZE(validated_ops)) {
                        say(&c, "unknown query type 0x%02x", code);
                        return -EPROTO;
                }
                *q = (struct hp_store_query){ .op = validated_ops[code] };
                if ((q->op == HP_STORE_OP_VALIDATE) !=
                    (*dialect == HP_STORE_DIALECT_UNKNOWN)) {
                        say(&c, q->op == HP_STORE_OP_VALIDATE
                                        ? "a second VALIDATE"
                                        : "a first query that is not "
                                          "VALIDATE");
                        return -EPROTO;
                }
        }
        r = take_fields(&c, q);
        if (r <= 0)
                return r;
        if (q->op == HP_STORE_OP_VALIDATE && q->u32 != HP_STORE_MAGIC) {
                say(&c, "VALIDATE with magic 0x%08x, not 0x%08x", q->u32,
                    HP_STORE_MAGIC);
                return -EPROTO;
        }
        *dialect = d;
        *used = c.off;
        return 1;
}

bool hp_store_items_next(const struct hp_store_query *q, size_t *off,
                         struct hp_store_item *it)
{
        const uint8_t *p = q->items + *off;
        uint64_t n;

        if (*off >= q->items_len)
                return false;
        n = hp_store__get_u64(p);
        it->key = p + 8;
        it->key_len = (size_t)n;
        p += 8 + n;
        if (q->op == HP_STORE_OP_MULTI_SET) {
                n = hp_store__get_u64(p);
                it->val = p + 8;
                it->val_len = (size_t)n;
                p += 8 + n;
        } else {
                it->val = NULL;
                it->val_len = 0;
        }
        *off = (size_t)(p - q->items);
        return true;
}
