/* SPDX-License-Identifier: Apache-2.0 */
/* For the table-driven unit tests. */
#ifndef HYPERPOD_TESTS_TABLE_H
#define HYPERPOD_TESTS_TABLE_H

/* Table loops report every failing case, then fail once at the end, so
 * that one broken case does not hide the others. */
#define CASE_FAILED(failures, ...)                                           \
        do {                                                                 \
                print_error(__VA_ARGS__);                                    \
                print_error("\n");                                           \
                (failures)++;                                                \
        } while (0)

#endif
