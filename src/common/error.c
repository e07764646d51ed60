/* SPDX-License-Identifier: Apache-2.0 */
/* Error names and texts, generated from the one table in common.h. */
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "hyperpod/common.h"

const char *hp_strerror(int err)
{
        switch (err) {
#define XX(name, value, text)                                                \
        case name:                                                           \
                return text;
                HP_ERRNO_MAP(XX)
#undef XX
        default:
                break;
        }
        /* libuv's codes are negative errno on Linux, so its table covers
         * every errno we pass through. */
        return uv_strerror(err);
}

const char *hp_err_name(int err)
{
        switch (err) {
#define XX(name, value, text)                                                \
        case name:                                                           \
                return #name;
                HP_ERRNO_MAP(XX)
#undef XX
        default:
                break;
        }
        return uv_err_name(err);
}
