/* SPDX-License-Identifier: Apache-2.0 */
/* --version's report (version.c). */
#ifndef HP_CMD_VERSION_H
#define HP_CMD_VERSION_H

#include <stdio.h>

/* The version, the commit, static or dynamic, and the library versions,
 * one per line. */
void hp_version_print(FILE *out);

#endif
