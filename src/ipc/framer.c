/* SPDX-License-Identifier: Apache-2.0 */
/* The worker socket's framing: a 4-byte unsigned big-endian length, then
 * that many bytes of UTF-8 JSON. Pure: partial prefixes and bodies are
 * kept until the rest arrives, and nothing else (f->alloc is 0 between
 * frames). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"

void hp_ipc_framer_init(struct hp_ipc_framer *f, size_t max)
{
        memset(f, 0, sizeof(*f));
        f->max = max;
}

void hp_ipc_framer_free(struct hp_ipc_framer *f)
{
        free(f->body);
        f->body = NULL;
        f->alloc = 0;
}

void hp_ipc_frame_head(uint8_t head[4], uint32_t len)
{
        head[0] = (uint8_t)(len >> 24);
        head[1] = (uint8_t)(len >> 16);
        head[2] = (uint8_t)(len >> 8);
        head[3] = (uint8_t)len;
}

/* Grows the body buffer as bytes arrive, not to the announced length: a
 * client that announces 4 MiB and sends nothing costs nothing. */
static int reserve(struct hp_ipc_framer *f, size_t want)
{
        size_t n = f->alloc ? f->alloc : 256;
        char *grown;

        if (want <= f->alloc)
                return 0;
        while (n < want)
                n *= 2;
        if (n > f->need)
                n = f->need;
        grown = realloc(f->body, n);
        if (grown == NULL)
                return -ENOMEM;
        f->body = grown;
        f->alloc = n;
        return 0;
}

int hp_ipc_framer_feed(struct hp_ipc_framer *f, const char *data, size_t len,
                       int (*on_frame)(void *ctx, const char *body,
                                       size_t len),
                       void *ctx, uint32_t *too_big)
{
        while (len > 0) {
                size_t take;
                int r;

                if (f->head_have < 4) {
                        take = 4 - f->head_have;
                        if (take > len)
                                take = len;
                        memcpy(f->head + f->head_have, data, take);
                        f->head_have += take;
                        data += take;
                        len -= take;
                        if (f->head_have < 4)
                                return 0;
                        f->need = (uint32_t)f->head[0] << 24 |
                                  (uint32_t)f->head[1] << 16 |
                                  (uint32_t)f->head[2] << 8 | f->head[3];
                        f->have = 0;
                        if (f->need > f->max) {
                                if (too_big != NULL)
                                        *too_big = f->need;
                                return HP_ETOOBIG;
                        }
                }
                /* A length prefix that ends the data: the body comes in
                 * a later read. */
                if (len == 0 && f->need > 0)
                        return 0;
                take = f->need - f->have;
                if (take > len)
                        take = len;
                /* A whole frame already in data needs no copy. */
                if (f->have == 0 && take == f->need) {
                        f->head_have = 0;
                        data += take;
                        len -= take;
                        r = on_frame(ctx, data - take, take);
                        if (r != 0)
                                return r;
                        continue;
                }
                r = reserve(f, f->have + take);
                if (r < 0)
                        return r;
                memcpy(f->body + f->have, data, take);
                f->have += take;
                data += take;
                len -= take;
                if (f->have < f->need)
                        return 0;
                f->head_have = 0;
                r = on_frame(ctx, f->body, f->need);
                /* No buffer is kept between frames: what a connection
                 * holds is then its unfinished frame, which the server
                 * counts against its cap. */
                free(f->body);
                f->body = NULL;
                f->alloc = 0;
                if (r != 0)
                        return r;
        }
        return 0;
}
