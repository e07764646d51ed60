/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the Slurm hostlist expander (src/rendezvous/hostlist.c).
 *
 * The expected names of the valid lists are what `scontrol show hostnames`
 * of Slurm 22.05.8 (Debian 12) printed for the same text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/rendezvous.h"

struct valid_case {
        const char *text;
        const char *names; /* space-separated */
};

static const struct valid_case valid_cases[] = {
        { "n1", "n1" },
        { "ip-10-1-[2-4,7]", "ip-10-1-2 ip-10-1-3 ip-10-1-4 ip-10-1-7" },
        { "node[001-003]", "node001 node002 node003" },
        { "node[8-10]", "node8 node9 node10" },
        { "n[9-11]", "n9 n10 n11" },
        { "n[01-3]", "n01 n02 n03" }, /* the low bound sets the width */
        { "n[1-03]", "n1 n2 n3" },
        { "x[0010-12]", "x0010 x0011 x0012" },
        { "n[07-9]", "n07 n08 n09" },
        { "n[00-02]", "n00 n01 n02" },
        { "n[0-0]", "n0" },
        { "n[5]", "n5" },
        { "n[01]", "n01" },
        { "n[1-3,5-6]", "n1 n2 n3 n5 n6" },
        { "a[1-2],b3,c[05,07]", "a1 a2 b3 c05 c07" },
        { "n[1-2],n[2-3]", "n1 n2 n2 n3" }, /* order kept, no dedup */
        { "[1-2]", "1 2" },
        { "127.0.0.[1-2]", "127.0.0.1 127.0.0.2" },
        { "rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02" },
        { "n[1-2][3-4]", "n13 n14 n23 n24" },
        { "n[1-2]-[3-4]", "n1-3 n1-4 n2-3 n2-4" },
        { "n[1-2]a[3-4]", "n1a3 n1a4 n2a3 n2a4" },
        { "a[1-3]b[1-2]", "a1b1 a1b2 a2b1 a2b2 a3b1 a3b2" },
        /* Three or more groups: the last fastest, then the first. */
        { "a[1-2]b[1-2]c[1-2]",
          "a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 a1b2c2 a2b2c1 a2b2c2" },
        { "a[1-2]b[1-3]c[1-2]",
          "a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 a1b2c2 a2b2c1 a2b2c2 "
          "a1b3c1 a1b3c2 a2b3c1 a2b3c2" },
        { "a[1-2]b[1-2]c[1-2]d[1-2]",
          "a1b1c1d1 a1b1c1d2 a2b1c1d1 a2b1c1d2 a1b2c1d1 a1b2c1d2 "
          "a2b2c1d1 a2b2c1d2 a1b1c2d1 a1b1c2d2 a2b1c2d1 a2b1c2d2 "
          "a1b2c2d1 a1b2c2d2 a2b2c2d1 a2b2c2d2" },
        /* Text after the last group: Slurm 22.05 refuses it, python-
         * hostlist and later Slurm take it; a superset is harmless. */
        { "n[1-2]-ib", "n1-ib n2-ib" },
        { "gpu-[1-2].cluster", "gpu-1.cluster gpu-2.cluster" },
};

struct invalid_case {
        const char *text;
        int result;
        const char *mention; /* in the message */
};

static const struct invalid_case invalid_cases[] = {
        { "", HP_ECONFIG, "empty host list" },
        { "n[1-2", HP_ECONFIG, "'[' at offset 1 is never closed" },
        { "n1-2]", HP_ECONFIG, "']' without '[' at offset 4" },
        { "n]1[", HP_ECONFIG, "']' without '[' at offset 1" },
        { "n[[1]]", HP_ECONFIG, "nested '[' at offset 2" },
        { "n[1-2]]", HP_ECONFIG, "']' without '[' at offset 6" },
        { "n[3-1]", HP_ECONFIG, "reversed range '3-1' at offset 2" },
        { "n[]", HP_ECONFIG, "empty brackets at offset 1" },
        { "n[a-b]", HP_ECONFIG, "invalid range 'a-b' at offset 2" },
        { "n[1,,2]", HP_ECONFIG, "empty range at offset 4" },
        { "n[1,]", HP_ECONFIG, "empty range at offset 4" },
        { "n[1-2-3]", HP_ECONFIG, "invalid range '1-2-3'" },
        { "n[-1]", HP_ECONFIG, "invalid range '-1'" },
        { "n[1-]", HP_ECONFIG, "invalid range '1-'" },
        { "n[+1-2]", HP_ECONFIG, "invalid range '+1-2'" },
        { "n[0x1-2]", HP_ECONFIG, "invalid range '0x1-2'" },
        { "n[ 1-2]", HP_ECONFIG, "blank or control character at offset 2" },
        { "a b", HP_ECONFIG, "blank or control character at offset 1" },
        { "a\n", HP_ECONFIG, "blank or control character at offset 1" },
        { "a,,b", HP_ECONFIG, "empty item at offset 2" },
        { ",a", HP_ECONFIG, "empty item at offset 0" },
        { "a,", HP_ECONFIG, "empty item at offset 2" },
        { "n[1234567890123456789]", HP_ECONFIG, "invalid range" },
        { "n[0-65536]", HP_ETOOBIG, "more than 65536 hosts" },
        { "n[0-99999999999]", HP_ETOOBIG, "more than 65536 hosts" },
        { "n[0-40000],m[0-40000]", HP_ETOOBIG, "more than 65536 hosts" },
        { "n[0-300][0-300]", HP_ETOOBIG, "more than 65536 hosts" },
        { "n[0-2,3-65536]", HP_ETOOBIG, "more than 65536 hosts" },
        { "a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]i[1]", HP_ECONFIG,
          "more than 8 bracket groups" },
};

static void check_names(const char *text, const struct hp_hostlist *got,
                        const char *want)
{
        char joined[4096];
        size_t used = 0;

        joined[0] = '\0';
        for (size_t i = 0; i < got->count; i++) {
                used += (size_t)snprintf(joined + used, sizeof(joined) - used,
                                         "%s%s", i ? " " : "", got->names[i]);
                assert_true(used < sizeof(joined));
        }
        if (strcmp(joined, want) != 0)
                fail_msg("'%s' expanded to '%s', expected '%s'", text, joined,
                         want);
}

static void test_valid_lists(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(valid_cases); k++) {
                const struct valid_case *c = &valid_cases[k];
                struct hp_hostlist list;
                char errbuf[256] = "";
                int r = hp_hostlist_expand(c->text, &list, errbuf,
                                           sizeof(errbuf));

                if (r != 0)
                        fail_msg("'%s' was refused (%d): %s", c->text, r,
                                 errbuf);
                check_names(c->text, &list, c->names);
                hp_hostlist_free(&list);
                assert_null(list.names);
                assert_int_equal(list.count, 0);
        }
}

static void test_invalid_lists(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(invalid_cases); k++) {
                const struct invalid_case *c = &invalid_cases[k];
                struct hp_hostlist list = { .count = 99 };
                char errbuf[256] = "";
                int r = hp_hostlist_expand(c->text, &list, errbuf,
                                           sizeof(errbuf));

                if (r != c->result)
                        fail_msg("'%s': returned %d, expected %d (%s)",
                                 c->text, r, c->result, errbuf);
                if (strstr(errbuf, c->mention) == NULL)
                        fail_msg("'%s': message '%s' lacks '%s'", c->text,
                                 errbuf, c->mention);
                /* Nothing half-built is handed out. */
                assert_null(list.names);
                assert_int_equal(list.count, 0);
        }
}

/* The cap itself is reachable: exactly HP_HOSTLIST_MAX_HOSTS names. */
static void test_cap_is_inclusive(void **state)
{
        struct hp_hostlist list;
        char errbuf[256] = "", last[32];

        (void)state;
        assert_int_equal(hp_hostlist_expand("n[00000-65535]", &list, errbuf,
                                            sizeof(errbuf)),
                         0);
        assert_int_equal(list.count, HP_HOSTLIST_MAX_HOSTS);
        assert_string_equal(list.names[0], "n00000");
        snprintf(last, sizeof(last), "n%05d", HP_HOSTLIST_MAX_HOSTS - 1);
        assert_string_equal(list.names[list.count - 1], last);
        hp_hostlist_free(&list);

        /* Split over items, the cap counts the whole list. */
        assert_int_equal(hp_hostlist_expand("a[1-32768],b[1-32768]", &list,
                                            errbuf, sizeof(errbuf)),
                         0);
        assert_int_equal(list.count, HP_HOSTLIST_MAX_HOSTS);
        hp_hostlist_free(&list);
        assert_int_equal(hp_hostlist_expand("a[1-32768],b[1-32768],c", &list,
                                            errbuf, sizeof(errbuf)),
                         HP_ETOOBIG);
}

static void test_name_length_cap(void **state)
{
        char text[HP_HOSTLIST_MAX_NAME + 16];
        struct hp_hostlist list;
        char errbuf[256] = "";

        (void)state;
        /* 254 letters and one digit: 255 bytes, the longest name. */
        memset(text, 'x', HP_HOSTLIST_MAX_NAME - 1);
        strcpy(text + HP_HOSTLIST_MAX_NAME - 1, "[7]");
        assert_int_equal(hp_hostlist_expand(text, &list, errbuf,
                                            sizeof(errbuf)),
                         0);
        assert_int_equal(strlen(list.names[0]), HP_HOSTLIST_MAX_NAME);
        hp_hostlist_free(&list);
        /* One more digit is one byte too many. */
        strcpy(text + HP_HOSTLIST_MAX_NAME - 1, "[10]");
        assert_int_equal(hp_hostlist_expand(text, &list, errbuf,
                                            sizeof(errbuf)),
                         HP_ETOOBIG);
        assert_non_null(strstr(errbuf, "longer than 255 bytes"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_valid_lists),
                cmocka_unit_test(test_invalid_lists),
                cmocka_unit_test(test_cap_is_inclusive),
                cmocka_unit_test(test_name_length_cap),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
