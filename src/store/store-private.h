/* SPDX-License-Identifier: Apache-2.0 */
/* Internal to src/store. */
#ifndef HP_STORE_PRIVATE_H
#define HP_STORE_PRIVATE_H

#include <stdint.h>

#include "hyperpod/store.h"

/* The default limits (hp_store_limits_default()). Key, value and keys per
 * query are those of torch's libuv server (TCPStoreLibUvBackend.cpp), so
 * that what torch accepts is accepted here. */
#define HP_STORE_KEY_MAX ((size_t)8 * 1024)
#define HP_STORE_VALUE_MAX ((size_t)8 * 1024 * 1024)
#define HP_STORE_KEYS_PER_QUERY ((uint64_t)128 * 1024)
#define HP_STORE_QUERY_MAX (2 * HP_STORE_VALUE_MAX + 1024 * 1024)
#define HP_STORE_KEYS_MAX ((size_t)1024 * 1024)
#define HP_STORE_MEMORY_MAX ((size_t)1024 * 1024 * 1024)
#define HP_STORE_OUT_MAX ((size_t)32 * 1024 * 1024)
#define HP_STORE_CONNECTIONS_MAX 65536
#define HP_STORE_WATCHES_MAX ((size_t)4096)

uint64_t hp_store__get_u64(const uint8_t *p);
uint32_t hp_store__get_u32(const uint8_t *p);
void hp_store__put_u64(uint8_t *p, uint64_t v);
void hp_store__put_u32(uint8_t *p, uint32_t v);

#endif
