/* SPDX-License-Identifier: Apache-2.0 */
/* The store's table: keys, values and queues in one hash table, every
 * byte counted against the server's memory ceiling. No loop, no socket:
 * server.c asks and answers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hyperpod/common.h"

#include "server-private.h"

/* ---- memory ---- */

bool store__mem_take(struct hp_store_server *s, size_t n)
{
        if (s->stats.memory + n > s->l.memory_max)
                return false;
        s->stats.memory += n;
        return true;
}

void store__mem_give(struct hp_store_server *s, size_t n)
{
        s->stats.memory -= n;
}

/* Grows *buf to hold want bytes, charged to the server. */
bool store__buf_grow(struct hp_store_server *s, uint8_t **buf, size_t *cap,
                     size_t want)
{
        size_t ncap = *cap ? *cap : 256;
        uint8_t *nb;

        if (want <= *cap)
                return true;
        while (ncap < want)
                ncap *= 2;
        if (!store__mem_take(s, ncap - *cap))
                return false;
        nb = realloc(*buf, ncap);
        if (nb == NULL) {
                store__mem_give(s, ncap - *cap);
                return false;
        }
        *buf = nb;
        *cap = ncap;
        return true;
}

void store__buf_free(struct hp_store_server *s, uint8_t **buf, size_t *cap)
{
        store__mem_give(s, *cap);
        free(*buf);
        *buf = NULL;
        *cap = 0;
}

/* ---- the table ---- */

static uint64_t hash_key(const uint8_t *k, size_t n)
{
        uint64_t h = 1469598103934665603ull;

        for (size_t i = 0; i < n; i++) {
                h ^= k[i];
                h *= 1099511628211ull;
        }
        return h;
}

struct entry *store__entry_find(struct hp_store_server *s, const uint8_t *k,
                                size_t n)
{
        uint64_t h = hash_key(k, n);
        struct entry *e;

        if (s->nbuckets == 0)
                return NULL;
        for (e = s->buckets[h & (s->nbuckets - 1)]; e; e = e->next)
                if (e->hash == h && e->key_len == n &&
                    memcmp(e->key, k, n) == 0)
                        return e;
        return NULL;
}

static bool table_grow(struct hp_store_server *s)
{
        size_t n = s->nbuckets ? s->nbuckets * 2 : 64;
        struct entry **nb;

        if (!store__mem_take(s, n * sizeof(*nb)))
                return false;
        nb = calloc(n, sizeof(*nb));
        if (nb == NULL) {
                store__mem_give(s, n * sizeof(*nb));
                return false;
        }
        for (size_t i = 0; i < s->nbuckets; i++) {
                struct entry *e = s->buckets[i], *next;

                for (; e; e = next) {
                        next = e->next;
                        e->next = nb[e->hash & (n - 1)];
                        nb[e->hash & (n - 1)] = e;
                }
        }
        store__mem_give(s, s->nbuckets * sizeof(*nb));
        free(s->buckets);
        s->buckets = nb;
        s->nbuckets = n;
        return true;
}

/* The entry of k, made when missing; NULL (with *why) over a limit. */
struct entry *store__entry_get(struct hp_store_server *s, const uint8_t *k,
                               size_t n, const char **why)
{
        struct entry *e = store__entry_find(s, k, n);

        if (e != NULL)
                return e;
        if (s->nentries >= s->l.keys_max) {
                *why = "the store holds the most keys it may";
                return NULL;
        }
        if (s->nentries >= s->nbuckets && !table_grow(s)) {
                *why = "the store's memory is used up";
                return NULL;
        }
        if (!store__mem_take(s, sizeof(*e) + n)) {
                *why = "the store's memory is used up";
                return NULL;
        }
        e = calloc(1, sizeof(*e) + n);
        if (e == NULL) {
                store__mem_give(s, sizeof(*e) + n);
                *why = "out of memory";
                return NULL;
        }
        e->hash = hash_key(k, n);
        e->key_len = n;
        memcpy(e->key, k, n);
        e->next = s->buckets[e->hash & (s->nbuckets - 1)];
        s->buckets[e->hash & (s->nbuckets - 1)] = e;
        s->nentries++;
        s->stats.keys = s->nentries;
        return e;
}

/* Frees e when nothing holds it any more. */
void store__entry_gc(struct hp_store_server *s, struct entry *e)
{
        struct entry **pp;

        if (e->present || e->qlen > 0 || e->waiters || e->watchers)
                return;
        for (pp = &s->buckets[e->hash & (s->nbuckets - 1)]; *pp != e;
             pp = &(*pp)->next)
                ;
        *pp = e->next;
        s->nentries--;
        s->stats.keys = s->nentries;
        store__mem_give(s, sizeof(*e) + e->key_len);
        free(e);
}

bool store__entry_ready(const struct entry *e)
{
        return e != NULL && (e->present || e->qlen > 0);
}
