/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the line splitter (src/stream/linesplit.c).
 *
 * Every table case is fed several ways: in the chunks the case lists, cut
 * in two and in three at every possible position (empty pieces included),
 * and one byte at a time. The splitter is a pure state machine, so all of
 * these must produce exactly the same lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/stream.h"

/* A chunk or an expected line given as a literal, NUL bytes included. */
#define BYTES(s) s, sizeof(s) - 1

struct chunk {
        const char *data; /* NULL ends the list */
        size_t len;
};

struct expected_line {
        const char *data; /* NULL ends the list */
        size_t len;
        enum hp_line_end end;
};

struct split_case {
        const char *name;
        size_t cap;
        struct chunk chunks[8];
        struct expected_line lines[12];
};

static const struct split_case split_cases[] = {
        {
                .name = "plain lines ended by newlines",
                .cap = 16,
                .chunks = { { BYTES("alpha\nbeta\ngamma\n") } },
                .lines = { { BYTES("alpha"), HP_LINE_EOL },
                           { BYTES("beta"), HP_LINE_EOL },
                           { BYTES("gamma"), HP_LINE_EOL } },
        },
        {
                .name = "a line split over three chunks",
                .cap = 16,
                .chunks = { { BYTES("al") },
                            { BYTES("ph") },
                            { BYTES("a\nbeta\n") } },
                .lines = { { BYTES("alpha"), HP_LINE_EOL },
                           { BYTES("beta"), HP_LINE_EOL } },
        },
        {
                .name = "carriage return ends a line, as tqdm writes",
                .cap = 16,
                .chunks = { { BYTES("10%\r20%\r30%\n") } },
                .lines = { { BYTES("10%"), HP_LINE_EOL },
                           { BYTES("20%"), HP_LINE_EOL },
                           { BYTES("30%"), HP_LINE_EOL } },
        },
        {
                .name = "CRLF is one terminator",
                .cap = 16,
                .chunks = { { BYTES("one\r\ntwo\r\n") } },
                .lines = { { BYTES("one"), HP_LINE_EOL },
                           { BYTES("two"), HP_LINE_EOL } },
        },
        {
                .name = "CR at the end of a chunk, LF at the start of the "
                        "next, is one terminator",
                .cap = 16,
                .chunks = { { BYTES("one\r") },
                            { BYTES("\ntwo\r") },
                            { BYTES("\n") } },
                .lines = { { BYTES("one"), HP_LINE_EOL },
                           { BYTES("two"), HP_LINE_EOL } },
        },
        {
                .name = "LF lines before and after a CR line in one chunk "
                        "(the next of each terminator is remembered)",
                .cap = 16,
                .chunks = { { BYTES("one\ntwo\nthree\rfour\nfive\r\nsix\n"
                                    "seven\r") } },
                .lines = { { BYTES("one"), HP_LINE_EOL },
                           { BYTES("two"), HP_LINE_EOL },
                           { BYTES("three"), HP_LINE_EOL },
                           { BYTES("four"), HP_LINE_EOL },
                           { BYTES("five"), HP_LINE_EOL },
                           { BYTES("six"), HP_LINE_EOL },
                           { BYTES("seven"), HP_LINE_EOL } },
        },
        {
                .name = "LF then CR are two terminators",
                .cap = 16,
                .chunks = { { BYTES("a\n\rb\n") } },
                .lines = { { BYTES("a"), HP_LINE_EOL },
                           { BYTES(""), HP_LINE_EOL },
                           { BYTES("b"), HP_LINE_EOL } },
        },
        {
                .name = "empty lines are kept",
                .cap = 16,
                .chunks = { { BYTES("\n\nx\n\r\r\n\n") } },
                .lines = { { BYTES(""), HP_LINE_EOL },
                           { BYTES(""), HP_LINE_EOL },
                           { BYTES("x"), HP_LINE_EOL },
                           { BYTES(""), HP_LINE_EOL },
                           { BYTES(""), HP_LINE_EOL },
                           { BYTES(""), HP_LINE_EOL } },
        },
        {
                .name = "NUL bytes and invalid UTF-8 are kept byte-exact",
                .cap = 16,
                .chunks = { { BYTES("a\0b\n\xff\xfe\xc3\n\0\0\n") } },
                .lines = { { BYTES("a\0b"), HP_LINE_EOL },
                           { BYTES("\xff\xfe\xc3"), HP_LINE_EOL },
                           { BYTES("\0\0"), HP_LINE_EOL } },
        },
        {
                .name = "a partial last line ends with EOF at finish",
                .cap = 16,
                .chunks = { { BYTES("done\npartial") } },
                .lines = { { BYTES("done"), HP_LINE_EOL },
                           { BYTES("partial"), HP_LINE_EOF } },
        },
        {
                .name = "finish with no partial line emits nothing",
                .cap = 16,
                .chunks = { { BYTES("done\n") } },
                .lines = { { BYTES("done"), HP_LINE_EOL } },
        },
        {
                .name = "a final CR leaves no partial line",
                .cap = 16,
                .chunks = { { BYTES("done\r") } },
                .lines = { { BYTES("done"), HP_LINE_EOL } },
        },
        {
                .name = "no input at all gives no line",
                .cap = 16,
                .chunks = { { BYTES("") } },
                .lines = { { NULL, 0, HP_LINE_EOL } },
        },
        {
                .name = "a line of exactly cap bytes is one normal line",
                .cap = 8,
                .chunks = { { BYTES("12345678\nnext\n") } },
                .lines = { { BYTES("12345678"), HP_LINE_EOL },
                           { BYTES("next"), HP_LINE_EOL } },
        },
        {
                .name = "a line of exactly cap bytes ended by CRLF",
                .cap = 8,
                .chunks = { { BYTES("12345678\r") }, { BYTES("\n") } },
                .lines = { { BYTES("12345678"), HP_LINE_EOL } },
        },
        {
                .name = "exactly cap bytes at end of stream is one EOF line",
                .cap = 8,
                .chunks = { { BYTES("12345678") } },
                .lines = { { BYTES("12345678"), HP_LINE_EOF } },
        },
        {
                .name = "cap + 1 bytes are a capped piece and the rest",
                .cap = 8,
                .chunks = { { BYTES("123456789\nnext\n") } },
                .lines = { { BYTES("12345678"), HP_LINE_CAPPED },
                           { BYTES("9"), HP_LINE_EOL },
                           { BYTES("next"), HP_LINE_EOL } },
        },
        {
                .name = "cap + 1 bytes at end of stream",
                .cap = 8,
                .chunks = { { BYTES("123456789") } },
                .lines = { { BYTES("12345678"), HP_LINE_CAPPED },
                           { BYTES("9"), HP_LINE_EOF } },
        },
        {
                .name = "twice cap bytes are one capped piece and one line",
                .cap = 8,
                .chunks = { { BYTES("abcdefghABCDEFGH\n") } },
                .lines = { { BYTES("abcdefgh"), HP_LINE_CAPPED },
                           { BYTES("ABCDEFGH"), HP_LINE_EOL } },
        },
        {
                .name = "a long line between short ones",
                .cap = 8,
                .chunks = { { BYTES("s\nabcdefghABCDEFGHxy\r\nt\n") } },
                .lines = { { BYTES("s"), HP_LINE_EOL },
                           { BYTES("abcdefgh"), HP_LINE_CAPPED },
                           { BYTES("ABCDEFGH"), HP_LINE_CAPPED },
                           { BYTES("xy"), HP_LINE_EOL },
                           { BYTES("t"), HP_LINE_EOL } },
        },
};

/* Feeding zero bytes must be a no-op wherever it happens: the header does
 * not forbid it, and a caller that forwards every read result would. */
static const struct split_case empty_chunk_cases[] = {
        {
                .name = "an empty chunk first",
                .cap = 16,
                .chunks = { { BYTES("") }, { BYTES("one\n") } },
                .lines = { { BYTES("one"), HP_LINE_EOL } },
        },
        {
                .name = "an empty chunk inside a line",
                .cap = 16,
                .chunks = { { BYTES("o") },
                            { BYTES("") },
                            { BYTES("ne\n") } },
                .lines = { { BYTES("one"), HP_LINE_EOL } },
        },
        {
                .name = "an empty chunk between CR and LF keeps them one "
                        "terminator",
                .cap = 16,
                .chunks = { { BYTES("one\r") },
                            { BYTES("") },
                            { BYTES("\ntwo\n") } },
                .lines = { { BYTES("one"), HP_LINE_EOL },
                           { BYTES("two"), HP_LINE_EOL } },
        },
        {
                .name = "an empty chunk last",
                .cap = 16,
                .chunks = { { BYTES("one\ntw") }, { BYTES("") } },
                .lines = { { BYTES("one"), HP_LINE_EOL },
                           { BYTES("tw"), HP_LINE_EOF } },
        },
};

struct line_record {
        size_t off;
        size_t len;
        enum hp_line_end end;
};

/* Records every line the splitter emits, copying the borrowed bytes. */
struct collector {
        char bytes[1024];
        size_t used;
        struct line_record lines[32];
        size_t count;
        bool overflow;
};

static void collect_cb(void *ctx, const char *line, size_t len,
                       enum hp_line_end end)
{
        struct collector *col = ctx;

        if (col->count == HP_ARRAY_SIZE(col->lines) ||
            col->used + len > sizeof(col->bytes)) {
                col->overflow = true;
                return;
        }
        memcpy(col->bytes + col->used, line, len);
        col->lines[col->count] = (struct line_record){ col->used, len, end };
        col->used += len;
        col->count++;
}

static const char *end_name(enum hp_line_end end)
{
        switch (end) {
        case HP_LINE_EOL:
                return "EOL";
        case HP_LINE_CAPPED:
                return "CAPPED";
        case HP_LINE_EOF:
                return "EOF";
        }
        return "?";
}

static size_t expected_count(const struct split_case *c)
{
        size_t n = 0;

        while (n < HP_ARRAY_SIZE(c->lines) && c->lines[n].data != NULL)
                n++;
        return n;
}

/* Compares what was collected with the case; how names the way the input
 * was chunked, so that a failure says which cut broke it. */
static void check_lines(const struct split_case *c,
                        const struct collector *col, const char *how)
{
        size_t want = expected_count(c);

        if (col->overflow)
                fail_msg("%s (%s): more output than the collector holds",
                         c->name, how);
        if (col->count != want)
                fail_msg("%s (%s): %zu lines, expected %zu", c->name, how,
                         col->count, want);
        for (size_t i = 0; i < want; i++) {
                const struct line_record *got = &col->lines[i];
                const struct expected_line *exp = &c->lines[i];

                if (got->len != exp->len || got->end != exp->end ||
                    memcmp(col->bytes + got->off, exp->data, exp->len) != 0)
                        fail_msg("%s (%s): line %zu is %zu bytes %s '%.*s', "
                                 "expected %zu bytes %s '%.*s'",
                                 c->name, how, i, got->len,
                                 end_name(got->end), (int)got->len,
                                 col->bytes + got->off, exp->len,
                                 end_name(exp->end), (int)exp->len,
                                 exp->data);
        }
}

/* The whole input of a case, its chunks joined. */
static size_t join_chunks(const struct split_case *c, char *out, size_t len)
{
        size_t n = 0;

        for (size_t i = 0; i < HP_ARRAY_SIZE(c->chunks); i++) {
                const struct chunk *ch = &c->chunks[i];

                if (ch->data == NULL)
                        break;
                assert_true(n + ch->len <= len);
                memcpy(out + n, ch->data, ch->len);
                n += ch->len;
        }
        return n;
}

/* Runs the splitter over pieces of input cut at the given positions. */
static void run_cuts(const struct split_case *c, const char *input, size_t n,
                     const size_t *cuts, size_t ncuts, const char *how)
{
        struct collector *col = test_calloc(1, sizeof(*col));
        struct hp_linesplit ls;
        char buf[64];
        size_t from = 0;

        assert_non_null(col);
        assert_true(c->cap <= sizeof(buf));
        hp_linesplit_init(&ls, buf, c->cap);
        for (size_t i = 0; i <= ncuts; i++) {
                size_t to = i < ncuts ? cuts[i] : n;

                hp_linesplit_feed(&ls, input + from, to - from, collect_cb,
                                  col);
                from = to;
        }
        hp_linesplit_finish(&ls, collect_cb, col);
        check_lines(c, col, how);
        test_free(col);
}

/* Runs the splitter over the chunks exactly as the case lists them. */
static void run_as_chunked(const struct split_case *c)
{
        struct collector *col = test_calloc(1, sizeof(*col));
        struct hp_linesplit ls;
        char buf[64];

        assert_non_null(col);
        assert_true(c->cap <= sizeof(buf));
        hp_linesplit_init(&ls, buf, c->cap);
        for (size_t i = 0; i < HP_ARRAY_SIZE(c->chunks); i++) {
                if (c->chunks[i].data == NULL)
                        break;
                hp_linesplit_feed(&ls, c->chunks[i].data, c->chunks[i].len,
                                  collect_cb, col);
        }
        hp_linesplit_finish(&ls, collect_cb, col);
        check_lines(c, col, "the case's own chunks");
        test_free(col);
}

static void test_split_cases_as_chunked(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(split_cases); k++)
                run_as_chunked(&split_cases[k]);
}

static void test_empty_chunks_change_nothing(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(empty_chunk_cases); k++)
                run_as_chunked(&empty_chunk_cases[k]);
}

static void test_split_cases_cut_in_two_everywhere(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(split_cases); k++) {
                const struct split_case *c = &split_cases[k];
                char input[256], how[64];
                size_t n = join_chunks(c, input, sizeof(input));

                for (size_t cut = 0; cut <= n; cut++) {
                        snprintf(how, sizeof(how), "cut at %zu", cut);
                        run_cuts(c, input, n, &cut, 1, how);
                }
        }
}

static void test_split_cases_cut_in_three_everywhere(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(split_cases); k++) {
                const struct split_case *c = &split_cases[k];
                char input[256], how[64];
                size_t n = join_chunks(c, input, sizeof(input));

                /* Empty middle pieces are the business of the case that
                 * lists one; here every piece but the ends has bytes. */
                for (size_t a = 0; a <= n; a++) {
                        for (size_t b = a + 1; b <= n; b++) {
                                size_t cuts[2] = { a, b };

                                snprintf(how, sizeof(how),
                                         "cut at %zu and %zu", a, b);
                                run_cuts(c, input, n, cuts, 2, how);
                        }
                }
        }
}

static void test_split_cases_one_byte_at_a_time(void **state)
{
        (void)state;
        for (size_t k = 0; k < HP_ARRAY_SIZE(split_cases); k++) {
                const struct split_case *c = &split_cases[k];
                char input[256];
                size_t cuts[256];
                size_t n = join_chunks(c, input, sizeof(input));

                for (size_t i = 0; i + 1 < n; i++)
                        cuts[i] = i + 1;
                run_cuts(c, input, n, cuts, n > 1 ? n - 1 : 0,
                         "one byte at a time");
        }
}

/* finish() leaves the splitter as init() did: a held partial line is gone
 * and a CR that ended the old stream does not swallow a leading LF of the
 * next one. */
static void test_finish_resets_the_splitter(void **state)
{
        static const struct split_case after_finish = {
                .name = "a second stream after finish",
                .cap = 16,
                .lines = { { BYTES("old"), HP_LINE_EOF },
                           { BYTES("cr"), HP_LINE_EOL },
                           { BYTES(""), HP_LINE_EOL },
                           { BYTES("new"), HP_LINE_EOF } },
        };
        struct collector *col = test_calloc(1, sizeof(*col));
        struct hp_linesplit ls;
        char buf[16];

        (void)state;
        assert_non_null(col);
        hp_linesplit_init(&ls, buf, sizeof(buf));
        hp_linesplit_feed(&ls, BYTES("old"), collect_cb, col);
        hp_linesplit_finish(&ls, collect_cb, col);
        hp_linesplit_finish(&ls, collect_cb, col);
        hp_linesplit_feed(&ls, BYTES("cr\r"), collect_cb, col);
        hp_linesplit_finish(&ls, collect_cb, col);
        hp_linesplit_feed(&ls, BYTES("\nnew"), collect_cb, col);
        hp_linesplit_finish(&ls, collect_cb, col);
        check_lines(&after_finish, col, "finish between streams");
        test_free(col);
}

/* A worker that prints 10 MB with no newline: the splitter hands it on in
 * pieces of exactly cap bytes and never holds more than cap. */
struct long_line_check {
        size_t cap;
        size_t offset; /* bytes of the line seen so far */
        size_t pieces;
        size_t capped;
        size_t eof;
        size_t other;
        size_t short_capped; /* CAPPED pieces not of cap bytes */
        size_t wrong_bytes;  /* pieces whose bytes are not the input's */
};

static char pattern_byte(size_t offset)
{
        return (char)('a' + offset % 23);
}

static void long_line_cb(void *ctx, const char *line, size_t len,
                         enum hp_line_end end)
{
        struct long_line_check *chk = ctx;

        chk->pieces++;
        if (end == HP_LINE_CAPPED) {
                chk->capped++;
                if (len != chk->cap)
                        chk->short_capped++;
        } else if (end == HP_LINE_EOF) {
                chk->eof++;
        } else {
                chk->other++;
        }
        for (size_t i = 0; i < len; i++) {
                if (line[i] != pattern_byte(chk->offset + i)) {
                        chk->wrong_bytes++;
                        break;
                }
        }
        chk->offset += len;
}

static void test_ten_megabyte_line_without_newline(void **state)
{
        const size_t total = 10 * 1024 * 1024;
        const size_t chunk = 64 * 1024;
        const size_t cap = 1000; /* does not divide the total */
        struct long_line_check chk = { .cap = cap };
        struct hp_linesplit ls;
        char *input = test_malloc(total);
        char *buf = test_malloc(cap);

        (void)state;
        assert_non_null(input);
        assert_non_null(buf);
        for (size_t i = 0; i < total; i++)
                input[i] = pattern_byte(i);
        hp_linesplit_init(&ls, buf, cap);
        for (size_t off = 0; off < total; off += chunk) {
                size_t n = total - off < chunk ? total - off : chunk;

                hp_linesplit_feed(&ls, input + off, n, long_line_cb, &chk);
                /* Only whole pieces of cap bytes may have gone out. */
                assert_true(ls.len <= cap);
                assert_int_equal(chk.offset + ls.len, off + n);
        }
        hp_linesplit_finish(&ls, long_line_cb, &chk);

        assert_int_equal(chk.offset, total);
        assert_int_equal(chk.capped, total / cap);
        assert_int_equal(chk.eof, 1);
        assert_int_equal(chk.pieces, total / cap + 1);
        assert_int_equal(chk.other, 0);
        assert_int_equal(chk.short_capped, 0);
        assert_int_equal(chk.wrong_bytes, 0);
        test_free(buf);
        test_free(input);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_split_cases_as_chunked),
                cmocka_unit_test(test_empty_chunks_change_nothing),
                cmocka_unit_test(test_split_cases_cut_in_two_everywhere),
                cmocka_unit_test(test_split_cases_cut_in_three_everywhere),
                cmocka_unit_test(test_split_cases_one_byte_at_a_time),
                cmocka_unit_test(test_finish_resets_the_splitter),
                cmocka_unit_test(test_ten_megabyte_line_without_newline),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
