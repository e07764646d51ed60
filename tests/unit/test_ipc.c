/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the worker socket's framer and checkpoint discovery
 * (src/ipc/framer.c, src/ipc/ckpt.c), as tables. The tracker cases follow
 * the reference's own scenarios. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"

#include "table.h"

/* ---- The framer ---- */

struct frame_case {
        const char *name;
        size_t sizes[4]; /* body sizes of the frames sent; 0 ends... */
        int nframes;     /* ...so the count is explicit (0-byte frames) */
        size_t chunk;    /* bytes per feed; 0: all at once */
        size_t max;
        size_t truncate; /* send only this many bytes (0: all) */
        int expect_frames;
        int expect_r;
        uint32_t expect_too_big;
};

static const struct frame_case frame_cases[] = {
        { .name = "one frame, one read",
          .sizes = { 30 },
          .nframes = 1,
          .max = 1024,
          .expect_frames = 1 },
        { .name = "the length prefix split 1+3",
          .sizes = { 30 },
          .nframes = 1,
          .chunk = 1,
          .max = 1024,
          .expect_frames = 1 },
        { .name = "the prefix alone in one read, the body in the next",
          .sizes = { 30 },
          .nframes = 1,
          .chunk = 4,
          .max = 1024,
          .expect_frames = 1 },
        { .name = "prefix and body split every 3 bytes",
          .sizes = { 30, 7 },
          .nframes = 2,
          .chunk = 3,
          .max = 1024,
          .expect_frames = 2 },
        { .name = "three frames in one read",
          .sizes = { 5, 6, 7 },
          .nframes = 3,
          .max = 1024,
          .expect_frames = 3 },
        { .name = "a zero-length frame",
          .sizes = { 0, 4 },
          .nframes = 2,
          .max = 1024,
          .expect_frames = 2 },
        { .name = "a frame of exactly the cap",
          .sizes = { 1024 },
          .nframes = 1,
          .max = 1024,
          .expect_frames = 1 },
        { .name = "a frame one byte over the cap",
          .sizes = { 1025 },
          .nframes = 1,
          .max = 1024,
          .expect_r = HP_ETOOBIG,
          .expect_too_big = 1025 },
        { .name = "a good frame, then one over the cap",
          .sizes = { 10, 5000 },
          .nframes = 2,
          .max = 1024,
          .expect_frames = 1,
          .expect_r = HP_ETOOBIG,
          .expect_too_big = 5000 },
        { .name = "1 MiB in 64 KiB reads",
          .sizes = { 1u << 20 },
          .nframes = 1,
          .chunk = 65536,
          .max = HP_IPC_FRAME_MAX,
          .expect_frames = 1 },
        { .name = "a partial body waits for the rest",
          .sizes = { 100 },
          .nframes = 1,
          .max = 1024,
          .truncate = 50,
          .expect_frames = 0 },
        { .name = "a partial prefix waits for the rest",
          .sizes = { 100 },
          .nframes = 1,
          .max = 1024,
          .truncate = 2,
          .expect_frames = 0 },
};

struct frames_seen {
        int count;
        size_t sizes[8];
        bool content_ok;
};

static int collect_frame(void *ctx, const char *body, size_t len)
{
        struct frames_seen *seen = ctx;

        /* Each body is filled with its frame's index, so a frame that
         * mixed bytes of two would show. */
        for (size_t i = 0; i < len; i++)
                if (body[i] != (char)('a' + seen->count))
                        seen->content_ok = false;
        if (seen->count < 8)
                seen->sizes[seen->count] = len;
        seen->count++;
        return 0;
}

static void test_framer(void **state)
{
        int failures = 0;

        for (size_t i = 0; i < HP_ARRAY_SIZE(frame_cases); i++) {
                const struct frame_case *c = &frame_cases[i];
                struct frames_seen seen = { .content_ok = true };
                struct hp_ipc_framer f;
                size_t total = 0, pos = 0, end, chunk;
                uint32_t too_big = 0;
                char *wire;
                int r = 0;

                for (int k = 0; k < c->nframes; k++)
                        total += 4 + c->sizes[k];
                wire = malloc(total);
                assert_non_null(wire);
                for (int k = 0; k < c->nframes; k++) {
                        hp_ipc_frame_head((uint8_t *)wire + pos,
                                          (uint32_t)c->sizes[k]);
                        memset(wire + pos + 4, 'a' + k, c->sizes[k]);
                        pos += 4 + c->sizes[k];
                }
                end = c->truncate ? c->truncate : total;
                chunk = c->chunk ? c->chunk : end;
                hp_ipc_framer_init(&f, c->max);
                for (pos = 0; pos < end && r == 0; pos += chunk) {
                        size_t n = end - pos < chunk ? end - pos : chunk;
                        r = hp_ipc_framer_feed(&f, wire + pos, n,
                                               collect_frame, &seen,
                                               &too_big);
                }
                if (r != c->expect_r)
                        CASE_FAILED(failures, "%s: returned %d, expected %d",
                                    c->name, r, c->expect_r);
                if (seen.count != c->expect_frames)
                        CASE_FAILED(failures, "%s: %d frames, expected %d",
                                    c->name, seen.count, c->expect_frames);
                for (int k = 0; k < seen.count && k < c->expect_frames; k++)
                        if (seen.sizes[k] != c->sizes[k])
                                CASE_FAILED(failures,
                                            "%s: frame %d has %zu bytes, "
                                            "expected %zu",
                                            c->name, k, seen.sizes[k],
                                            c->sizes[k]);
                if (!seen.content_ok)
                        CASE_FAILED(failures, "%s: a frame's bytes are mixed",
                                    c->name);
                if (c->expect_too_big && too_big != c->expect_too_big)
                        CASE_FAILED(failures, "%s: too_big %u, expected %u",
                                    c->name, too_big, c->expect_too_big);
                /* The server counts what a framer holds as unfinished
                 * frames: nothing between frames, about the bytes of an
                 * unfinished one. */
                if (c->expect_r == 0 && !c->truncate && f.alloc != 0)
                        CASE_FAILED(failures,
                                    "%s: %zu bytes kept after "
                                    "the last frame",
                                    c->name, f.alloc);
                if (f.alloc > 2 * f.have + 256)
                        CASE_FAILED(failures, "%s: %zu bytes held for %zu",
                                    c->name, f.alloc, f.have);
                hp_ipc_framer_free(&f);
                free(wire);
        }
        assert_int_equal(failures, 0);
}

static void test_frame_head_is_big_endian(void **state)
{
        uint8_t head[4];

        hp_ipc_frame_head(head, 0x01020304u);
        assert_memory_equal(head, "\x01\x02\x03\x04", 4);
        hp_ipc_frame_head(head, 50);
        assert_memory_equal(head, "\x00\x00\x00\x32", 4);
}

/* The connection cap from the open-files limit: the reserve and 16 per
 * rank left free, at most HP_IPC_CONN_MAX, at least the floor. */
static void test_conn_limit(void **state)
{
        static const struct {
                uint64_t soft;
                int nranks;
                size_t expect;
        } cases[] = {
                { 1u << 20, 8, HP_IPC_CONN_MAX },
                { 8192, 8, HP_IPC_CONN_MAX },
                { 4096, 8, 4096 - 128 - 8 * 16 },
                { 1024, 8, 1024 - 128 - 8 * 16 },
                { 256, 2, 256 - 128 - 2 * 16 },
                { 256, 8, 2 * 8 + 8 }, /* below the floor */
                { 64, 1, 2 + 8 },
                { 1024, 64, 2 * 64 + 8 },
                { RLIM_INFINITY, 1024, HP_IPC_CONN_MAX },
        };
        int failures = 0;

        for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                size_t got = hp_ipc_conn_limit(cases[i].soft,
                                               cases[i].nranks);
                if (got != cases[i].expect)
                        CASE_FAILED(failures,
                                    "soft %llu, %d ranks: %zu, "
                                    "expected %zu",
                                    (unsigned long long)cases[i].soft,
                                    cases[i].nranks, got, cases[i].expect);
        }
        assert_int_equal(failures, 0);
}

/* ---- Checkpoint discovery ---- */

enum op_kind { OP_END = 0, OP_SEED, OP_INIT, OP_UPDATE, OP_GET };

#define NUL_COUNT -1 /* a null count in ckpt_init */
#define NO_TYPE -2   /* the type is not in ckpt_init */

struct ckpt_op {
        enum op_kind kind;
        const char *prefix; /* OP_INIT */
        int model, data;    /* OP_INIT counts */
        const char *seed;   /* OP_SEED: /start's progress as JSON */
        int rank;           /* OP_UPDATE */
        int64_t step;
        const char *path;
        const char *type; /* "m", "d" or a literal name */
        int expect_r;
        const char *expect_get; /* OP_GET: the path, or NULL */
        /* Then: the latest complete step ("" for none; NULL: not
         * checked), as "<step> <path>". */
        const char *then;
};

struct ckpt_case {
        const char *name;
        int nranks;
        struct ckpt_op ops[40];
};

#define INIT(p, m, d)                                                        \
        {                                                                    \
                .kind = OP_INIT, .prefix = (p), .model = (m), .data = (d)
#define UPD(r, s, p, t)                                                      \
        {                                                                    \
                .kind = OP_UPDATE, .rank = (r), .step = (s), .path = (p),    \
                .type = (t)
#define GET(p)                                                               \
        {                                                                    \
                .kind = OP_GET, .expect_get = (p)
#define SEED(j)                                                              \
        {                                                                    \
                .kind = OP_SEED, .seed = (j)
#define END }

static const struct ckpt_case ckpt_cases[] = {
        { "single update completes a one-rank step",
          1,
          {
                  INIT("/ck", 1, 0),
                  .then = "" END,
                  UPD(0, 1, "/ck/1", "m"),
                  .expect_r = 1,
                  .then = "1 /ck/1" END,
                  GET("/ck/1") END,
          } },
        { "complete with 8 model and 2 data ranks",
          8,
          {
                  INIT("/ck", 8, 2) END,
                  UPD(0, 5, "/ck/5", "m") END,
                  UPD(1, 5, "/ck/5", "m") END,
                  UPD(2, 5, "/ck/5", "m") END,
                  UPD(3, 5, "/ck/5", "m") END,
                  UPD(4, 5, "/ck/5", "m") END,
                  UPD(5, 5, "/ck/5", "m") END,
                  UPD(6, 5, "/ck/5", "m") END,
                  UPD(7, 5, "/ck/5", "m"),
                  .then = "" END,
                  UPD(0, 5, NULL, "d"),
                  .then = "" END,
                  UPD(1, 5, NULL, "d"),
                  .expect_r = 1,
                  .then = "5 /ck/5" END,
          } },
        { "multiple steps: the highest complete one",
          2,
          {
                  INIT("/ck", 2, 0) END,
                  UPD(0, 1, "/ck/1", "m") END,
                  UPD(1, 1, "/ck/1", "m"),
                  .expect_r = 1 END,
                  UPD(0, 2, "/ck/2", "m") END,
                  UPD(1, 2, "/ck/2", "m"),
                  .expect_r = 1,
                  .then = "2 /ck/2" END,
                  GET("/ck/2") END,
          } },
        { "incomplete: one of two ranks",
          2,
          {
                  INIT("/ck", 2, 0) END,
                  UPD(0, 1, "/ck/1", "m"),
                  .then = "" END,
                  GET(NULL) END,
          } },
        { "incomplete: data ranks missing",
          2,
          {
                  INIT("/ck", 2, 1) END,
                  UPD(0, 1, "/ck/1", "m") END,
                  UPD(1, 1, "/ck/1", "m"),
                  .then = "" END,
          } },
        { "the same rank twice counts once",
          2,
          {
                  INIT("/ck", 2, 0) END,
                  UPD(0, 1, "/ck/1", "m") END,
                  UPD(0, 1, "/ck/1", "m"),
                  .then = "" END,
          } },
        { "out of order: an older step completed later does not lower it",
          2,
          {
                  INIT("/ck", 2, 0) END,
                  UPD(0, 1, "/ck/1", "m") END,
                  UPD(0, 2, "/ck/2", "m") END,
                  UPD(1, 2, "/ck/2", "m"),
                  .expect_r = 1 END,
                  UPD(1, 1, "/ck/1", "m"),
                  .then = "2 /ck/2" END,
          } },
        { "restart: incomplete steps above the latest are reset",
          2,
          {
                  INIT("/ck", 2, 0) END,
                  UPD(0, 10, "/ck/10", "m") END,
                  UPD(1, 10, "/ck/10", "m"),
                  .expect_r = 1 END,
                  UPD(0, 20, "/ck/20", "m") END,
                  /* rank 1 died before saving 20; the restarted ranks ask */
                  INIT("/ck", 2, 0) END,
                  GET("/ck/10") END,
                  /* rank 0's old report of 20 is gone: 20 needs both again */
                  UPD(1, 20, "/ck/20", "m"),
                  .then = "10 /ck/10" END,
                  UPD(0, 20, "/ck/20", "m"),
                  .expect_r = 1,
                  .then = "20 /ck/20" END,
          } },
        { "nothing complete: a query forgets every step",
          2,
          {
                  INIT("/ck", 2, 0) END,
                  UPD(0, 3, "/ck/3", "m") END,
                  GET(NULL) END,
                  UPD(1, 3, "/ck/3", "m"),
                  .then = "" END,
          } },
        { "a null data path keeps the model path",
          1,
          {
                  INIT("/ck", 1, 1) END,
                  UPD(0, 7, "/ck/7", "m") END,
                  UPD(0, 7, NULL, "d"),
                  .expect_r = 1,
                  .then = "7 /ck/7" END,
          } },
        { "the data update first, then the model path",
          1,
          {
                  INIT("/ck", 1, 1) END,
                  UPD(0, 7, NULL, "d") END,
                  UPD(0, 7, "/ck/7", "m"),
                  .expect_r = 1,
                  .then = "7 /ck/7" END,
          } },
        { "a null expected count never completes, until one is given",
          1,
          {
                  INIT("/ck", NUL_COUNT, 0) END,
                  UPD(0, 1, "/ck/1", "m"),
                  .then = "" END,
                  /* same prefix: the non-null count is merged */
                  INIT("/ck", 1, NUL_COUNT) END,
                  UPD(0, 2, "/ck/2", "m"),
                  .expect_r = 1,
                  .then = "2 /ck/2" END,
          } },
        { "a new prefix replaces the types and the steps",
          1,
          {
                  INIT("/a", 1, 0) END,
                  UPD(0, 5, "/a/5", "m"),
                  .expect_r = 1 END,
                  INIT("/b", 1, 0),
                  .then = "" END,
                  GET(NULL) END,
          } },
        { "/start's progress seeds the prefix once",
          2,
          {
                  SEED("{\"/ck\":{\"progressCount\":30,"
                       "\"progressData\":\"/ck/30\"}}") END,
                  INIT("/ck", 2, 0),
                  .then = "30 /ck/30" END,
                  GET("/ck/30") END,
                  UPD(0, 20, "/ck/20", "m") END,
                  UPD(1, 20, "/ck/20", "m"),
                  .expect_r = 0,
                  .then = "30 /ck/30" END,
                  UPD(0, 40, "/ck/40", "m") END,
                  UPD(1, 40, "/ck/40", "m"),
                  .expect_r = 1 END,
                  /* another rank's ckpt_init does not go back to 30 */
                  INIT("/ck", 2, 0),
                  .then = "40 /ck/40" END,
          } },
        { "a later /start's progress rolls back what the node knew",
          1,
          {
                  INIT("/ck", 1, 0) END,
                  UPD(0, 50, "/ck/50", "m"),
                  .expect_r = 1 END,
                  SEED("{\"/ck\":{\"progressCount\":\"40\","
                       "\"progressData\":\"/ck/40\"}}") END,
                  INIT("/ck", 1, 0),
                  .then = "40 /ck/40" END,
          } },
        { "progress for another prefix, or malformed, is not used",
          1,
          {
                  SEED("{\"/other\":{\"progressCount\":3,"
                       "\"progressData\":\"/o/3\"},"
                       "\"/ck\":{\"progressCount\":\"x\","
                       "\"progressData\":\"/ck/9\"}}") END,
                  INIT("/ck", 1, 0),
                  .then = "" END,
          } },
        { "a /start without progress replaces an unused one",
          1,
          {
                  SEED("{\"/ck\":{\"progressCount\":30,"
                       "\"progressData\":\"/ck/30\"}}") END,
                  SEED("null") END,
                  INIT("/ck", 1, 0),
                  .then = "" END,
          } },
        { "an empty /start progress keeps what is known",
          1,
          {
                  INIT("/ck", 1, 0) END,
                  UPD(0, 5, "/ck/5", "m"),
                  .expect_r = 1 END,
                  SEED("{}") END,
                  INIT("/ck", 1, 0),
                  .then = "5 /ck/5" END,
          } },
        { "bad updates are refused with a reason",
          2,
          {
                  UPD(0, 1, "/ck/1", "m"),
                  .expect_r = HP_ECONFIG END,
                  INIT("/ck", 2, NO_TYPE) END,
                  UPD(2, 1, "/ck/1", "m"),
                  .expect_r = HP_ECONFIG END,
                  UPD(-1, 1, "/ck/1", "m"),
                  .expect_r = HP_ECONFIG END,
                  UPD(0, 1, "/ck/1", "d"),
                  .expect_r = HP_ECONFIG END,
                  UPD(0, 1, "/ck/1", "optimizer"),
                  .expect_r = HP_ECONFIG END,
                  INIT("/ck", 3, 0),
                  .expect_r = HP_ECONFIG END,
                  INIT("/ck", -5, 0),
                  .expect_r = HP_ECONFIG,
                  .then = "" END,
          } },
        { "negative and huge steps are steps",
          1,
          {
                  INIT("/ck", 1, 0) END,
                  UPD(0, -3, "/ck/-3", "m"),
                  .expect_r = 1 END,
                  UPD(0, 9007199254740992LL, "/ck/big", "m"),
                  .expect_r = 1,
                  .then = "9007199254740992 /ck/big" END,
          } },
};

static const char *type_name(const char *t)
{
        if (strcmp(t, "m") == 0)
                return "model_checkpoint";
        if (strcmp(t, "d") == 0)
                return "data_checkpoint";
        return t;
}

static bool latest_is(const struct hp_ckpt *t, const char *want, char *got,
                      size_t len)
{
        if (!t->have_max)
                snprintf(got, len, "%s", "");
        else
                snprintf(got, len, "%lld %s", (long long)t->max_step,
                         t->max_path ? t->max_path : "(null)");
        return strcmp(got, want) == 0;
}

static void test_ckpt(void **state)
{
        int failures = 0;

        for (size_t i = 0; i < HP_ARRAY_SIZE(ckpt_cases); i++) {
                const struct ckpt_case *c = &ckpt_cases[i];
                struct hp_ckpt t;

                assert_int_equal(hp_ckpt_init(&t, c->nranks), 0);
                for (int k = 0; c->ops[k].kind != OP_END; k++) {
                        const struct ckpt_op *op = &c->ops[k];
                        char err[256] = "", got[256];
                        int r = 0;

                        switch (op->kind) {
                        case OP_SEED: {
                                cJSON *doc = cJSON_Parse(op->seed);
                                assert_non_null(doc);
                                r = hp_ckpt_set_progress(&t, doc);
                                cJSON_Delete(doc);
                                break;
                        }
                        case OP_INIT: {
                                struct hp_ckpt_type_count types[2];
                                int n = 0;
                                if (op->model != NO_TYPE)
                                        types[n++] =
                                                (struct hp_ckpt_type_count){
                                                        "model_checkpoint",
                                                        op->model
                                                };
                                if (op->data != NO_TYPE)
                                        types[n++] =
                                                (struct hp_ckpt_type_count){
                                                        "data_checkpoint",
                                                        op->data
                                                };
                                r = hp_ckpt_begin(&t, op->prefix, types, n,
                                                  1000, err, sizeof(err));
                                break;
                        }
                        case OP_UPDATE:
                                r = hp_ckpt_update(&t, op->rank, op->step,
                                                   op->path,
                                                   type_name(op->type), 2000,
                                                   err, sizeof(err));
                                break;
                        case OP_GET: {
                                const char *p = hp_ckpt_latest(&t);
                                if ((p == NULL) != (op->expect_get == NULL) ||
                                    (p && strcmp(p, op->expect_get) != 0))
                                        CASE_FAILED(failures,
                                                    "%s: op %d: latest %s, "
                                                    "expected %s",
                                                    c->name, k,
                                                    p ? p : "NULL",
                                                    op->expect_get
                                                            ? op->expect_get
                                                            : "NULL");
                                break;
                        }
                        case OP_END:
                                break;
                        }
                        if (r != op->expect_r)
                                CASE_FAILED(failures,
                                            "%s: op %d returned %d (%s), "
                                            "expected %d",
                                            c->name, k, r, err, op->expect_r);
                        if (r < 0 && err[0] == '\0' && op->kind != OP_SEED)
                                CASE_FAILED(failures,
                                            "%s: op %d failed without a "
                                            "reason",
                                            c->name, k);
                        if (op->then != NULL &&
                            !latest_is(&t, op->then, got, sizeof(got)))
                                CASE_FAILED(failures,
                                            "%s: after op %d the latest is "
                                            "\"%s\", expected \"%s\"",
                                            c->name, k, got, op->then);
                }
                hp_ckpt_free(&t);
        }
        assert_int_equal(failures, 0);
}

/* /status.progress, as the reference encodes it. */
static void test_ckpt_progress_encoding(void **state)
{
        struct hp_ckpt_type_count model = { "model_checkpoint", 1 };
        struct hp_ckpt t;
        char err[128], *text;
        cJSON *doc;

        assert_int_equal(hp_ckpt_init(&t, 1), 0);
        assert_null(hp_ckpt_progress(&t));
        assert_int_equal(hp_ckpt_begin(&t, "s3://b/run", &model, 1, 0, err,
                                       sizeof(err)),
                         0);
        assert_null(hp_ckpt_progress(&t));
        assert_int_equal(hp_ckpt_update(&t, 0, 120, "s3://b/run/step_120",
                                        "model_checkpoint", 5, err,
                                        sizeof(err)),
                         1);
        doc = hp_ckpt_progress(&t);
        assert_non_null(doc);
        text = cJSON_PrintUnformatted(doc);
        assert_string_equal(text, "{\"s3://b/run\":{\"progressData\":"
                                  "\"s3://b/run/step_120\","
                                  "\"progressCount\":120}}");
        free(text);
        cJSON_Delete(doc);
        hp_ckpt_free(&t);
}

/* More incomplete steps than the cap: the lowest go, memory stays
 * bounded, and the rest still complete. */
static void test_ckpt_step_cap(void **state)
{
        struct hp_ckpt_type_count model = { "model_checkpoint", 2 };
        struct hp_ckpt t;
        char err[128];

        assert_int_equal(hp_ckpt_init(&t, 2), 0);
        assert_int_equal(hp_ckpt_begin(&t, "/ck", &model, 1, 0, err,
                                       sizeof(err)),
                         0);
        for (int64_t s = 0; s < HP_CKPT_STEPS_MAX + 100; s++)
                assert_int_equal(hp_ckpt_update(&t, 0, s, "/p",
                                                "model_checkpoint", 0, err,
                                                sizeof(err)),
                                 0);
        assert_int_equal(t.nsteps, HP_CKPT_STEPS_MAX);
        assert_int_equal(hp_ckpt_update(&t, 1, HP_CKPT_STEPS_MAX + 99, "/p",
                                        "model_checkpoint", 0, err,
                                        sizeof(err)),
                         1);
        assert_int_equal(t.nsteps, 0);
        hp_ckpt_free(&t);
}

/* ---- The server, on a real loop and a real socket ---- */

/* A handler from outside the module: answers every client of the
 * sender's rank, as the in-process-restart messages will. */
static void echo_cb(struct hp_ipc_server *s, struct hp_ipc_client *c,
                    const cJSON *msg, void *ctx)
{
        int *calls = ctx;

        (*calls)++;
        assert_int_equal(hp_ipc_send_to_rank(s, c->local_rank, "echo", msg),
                         2);
}

static void send_frame(int fd, const char *json)
{
        uint8_t head[4];

        hp_ipc_frame_head(head, (uint32_t)strlen(json));
        assert_int_equal(write(fd, head, 4), 4);
        assert_int_equal(write(fd, json, strlen(json)),
                         (ssize_t)strlen(json));
}

/* Runs the loop until fd has n bytes to read, for at most 10 s. */
static void read_on_loop(uv_loop_t *loop, int fd, char *buf, size_t n)
{
        size_t have = 0;

        for (int i = 0; i < 1000 && have < n; i++) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                uv_run(loop, UV_RUN_NOWAIT);
                if (poll(&p, 1, 10) == 1) {
                        ssize_t r = read(fd, buf + have, n - have);
                        assert_true(r > 0);
                        have += (size_t)r;
                }
        }
        assert_int_equal(have, n);
}

static cJSON *read_message(uv_loop_t *loop, int fd)
{
        char head[4], body[512];
        uint32_t len;

        read_on_loop(loop, fd, head, 4);
        len = (uint32_t)(uint8_t)head[0] << 24 |
              (uint32_t)(uint8_t)head[1] << 16 |
              (uint32_t)(uint8_t)head[2] << 8 | (uint8_t)head[3];
        assert_true(len < sizeof(body));
        read_on_loop(loop, fd, body, len);
        return cJSON_ParseWithLength(body, len);
}

static void test_server_table_and_send_to_rank(void **state)
{
        struct hp_ipc_server *s = calloc(1, sizeof(*s));
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        uv_loop_t loop;
        char err[256], path[sizeof(addr.sun_path)];
        struct stat st;
        int calls = 0, fd;
        const char *seen[2];

        assert_non_null(s);
        assert_int_equal(uv_loop_init(&loop), 0);
        assert_int_equal(hp_ipc_server_start(s, &loop, 2, err, sizeof(err)),
                         0);
        assert_int_equal(hp_ipc_server_on(s, "echo", echo_cb, &calls), 0);
        assert_int_equal(hp_ipc_server_on(s, "echo", echo_cb, &calls),
                         -EEXIST);
        assert_int_equal(hp_ipc_server_on(s, "ckpt_init", echo_cb, &calls),
                         -EEXIST);
        snprintf(path, sizeof(path), "%s", s->path);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);

        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        memcpy(addr.sun_path, path, sizeof(addr.sun_path));
        assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)),
                         0);
        /* Two client objects of rank 1 on one connection. */
        send_frame(fd, "{\"type\":\"init\",\"local_rank\":1,"
                       "\"client_id\":\"a\"}");
        send_frame(fd, "{\"type\":\"init\",\"local_rank\":1,"
                       "\"client_id\":\"b\"}");
        send_frame(fd, "{\"n\":7,\"type\":\"echo\",\"local_rank\":1,"
                       "\"client_id\":\"a\"}");
        for (int i = 0; i < 2; i++) {
                cJSON *m = read_message(&loop, fd);
                const cJSON *id = cJSON_GetObjectItem(m, "client_id");
                assert_non_null(m);
                assert_string_equal(
                        cJSON_GetObjectItem(m, "type")->valuestring, "echo");
                assert_int_equal(cJSON_GetObjectItem(m, "n")->valueint, 7);
                seen[i] = strcmp(id->valuestring, "a") == 0 ? "a" : "b";
                cJSON_Delete(m);
        }
        assert_string_not_equal(seen[0], seen[1]);
        assert_int_equal(calls, 1);
        assert_int_equal(s->nclients, 2);
        assert_int_equal(hp_ipc_send_to_rank(s, 0, "echo", NULL), -ENOENT);

        /* A closed connection unregisters its clients. */
        close(fd);
        for (int i = 0; i < 1000 && s->nclients > 0; i++) {
                uv_run(&loop, UV_RUN_NOWAIT);
                poll(NULL, 0, 1);
        }
        assert_int_equal(s->nclients, 0);
        assert_int_equal(hp_ipc_send_to_rank(s, 1, "echo", NULL), -ENOENT);

        hp_ipc_server_close(s);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&loop), 0);
        assert_int_equal(access(path, F_OK), -1);
        free(s);
}

/* In-process restart's messages through the socket: each bad field is a
 * defined outcome, and the table sees what the good ones say. */
static void changed_cb(void *ctx)
{
        (*(int *)ctx)++;
}

/* ckpt_info_get is answered after every earlier frame of the connection
 * was handled: waiting for its answer waits for them. */
static void settle(uv_loop_t *loop, int fd, const char *id, int rank)
{
        char msg[128];
        cJSON *m;

        snprintf(msg, sizeof(msg),
                 "{\"type\":\"ckpt_info_get\",\"local_rank\":%d,"
                 "\"client_id\":\"%s\"}",
                 rank, id);
        send_frame(fd, msg);
        m = read_message(loop, fd);
        assert_non_null(m);
        cJSON_Delete(m);
}

static const struct ipr_case {
        const char *name;
        const char *frame; /* from client "a", local rank 0 */
        enum hp_ipc_rank_state state;
        int64_t rank;
        enum hp_restart_mode mode;
        const char *reason; /* NULL: none */
        const char *data;   /* printed, NULL: none */
        const char *labels; /* printed */
        bool released;      /* job_start went to local rank 0 before */
} ipr_cases[] = {
        { "a fault",
          "{\"type\":\"job_fault\",\"local_rank\":0,"
          "\"client_id\":\"a\",\"rank\":3,\"restart_mode\":"
          "\"local_process_level_restart\",\"reason\":\"R\","
          "\"message\":\"M\"}",
          HP_IPC_RANK_FAILED, 3, HP_RESTART_LOCAL_PROCESS_LEVEL, "R", NULL,
          "{}", false },
        { "a fault without rank still counts",
          "{\"type\":\"job_fault\",\"local_rank\":0,\"client_id\":"
          "\"a\",\"reason\":\"NoRank\"}",
          HP_IPC_RANK_FAILED, -1, HP_RESTART_IN_PROCESS, "NoRank", NULL, "{}",
          false },
        { "an unknown mode is in_process_restart, a number is no reason",
          "{\"type\":\"job_fault\",\"local_rank\":0,\"client_id\":"
          "\"a\",\"rank\":\"2\",\"restart_mode\":\"bogus\","
          "\"reason\":5}",
          HP_IPC_RANK_FAILED, -1, HP_RESTART_IN_PROCESS, NULL, NULL, "{}",
          false },
        { "data",
          "{\"type\":\"job_data\",\"local_rank\":0,"
          "\"client_id\":\"a\",\"rank\":2,\"data\":{\"a\":1}}",
          HP_IPC_RANK_FAILED, 2, HP_RESTART_IN_PROCESS, NULL, "{\"a\":1}",
          "{}", false },
        { "a rank outside the node is ignored",
          "{\"type\":\"past_rcb_barrier\",\"local_rank\":7,"
          "\"client_id\":\"a\"}",
          HP_IPC_RANK_FAILED, 2, HP_RESTART_IN_PROCESS, NULL, "{\"a\":1}",
          "{}", false },
        { "a client without init is ignored",
          "{\"type\":\"past_rcb_barrier\",\"local_rank\":0,"
          "\"client_id\":\"nobody\"}",
          HP_IPC_RANK_FAILED, 2, HP_RESTART_IN_PROCESS, NULL, "{\"a\":1}",
          "{}", false },
        { "labels that are not an object are ignored",
          "{\"type\":\"rank_labels\",\"local_rank\":0,\"client_id\":"
          "\"a\",\"labels\":\"PP\"}",
          HP_IPC_RANK_FAILED, 2, HP_RESTART_IN_PROCESS, NULL, "{\"a\":1}",
          "{}", false },
        { "labels",
          "{\"type\":\"rank_labels\",\"local_rank\":0,"
          "\"client_id\":\"a\",\"labels\":{\"PP\":\"1\"}}",
          HP_IPC_RANK_FAILED, 2, HP_RESTART_IN_PROCESS, NULL, "{\"a\":1}",
          "{\"PP\":\"1\"}", false },
        { "past the barrier before any job_start is ignored",
          "{\"type\":\"past_rcb_barrier\",\"local_rank\":0,"
          "\"client_id\":\"a\"}",
          HP_IPC_RANK_FAILED, 2, HP_RESTART_IN_PROCESS, NULL, "{\"a\":1}",
          "{\"PP\":\"1\"}", false },
        { "past the barrier: data and fault forgotten",
          "{\"type\":\"past_rcb_barrier\",\"local_rank\":0,"
          "\"client_id\":\"a\"}",
          HP_IPC_RANK_PAST_BARRIER, 2, HP_RESTART_IN_PROCESS, NULL, NULL,
          "{\"PP\":\"1\"}", true },
        { "at the barrier, queued until the agent waits",
          "{\"type\":\"at_rcb_barrier\",\"local_rank\":0,"
          "\"client_id\":\"a\"}",
          HP_IPC_RANK_PAST_BARRIER, 2, HP_RESTART_IN_PROCESS, NULL, NULL,
          "{\"PP\":\"1\"}", false },
};

static void test_server_inprocess_messages(void **state)
{
        struct hp_ipc_server *s = calloc(1, sizeof(*s));
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        uv_loop_t loop;
        char err[256];
        int changes = 0, fd, failures = 0;

        assert_non_null(s);
        assert_int_equal(uv_loop_init(&loop), 0);
        assert_int_equal(hp_ipc_server_start(s, &loop, 2, err, sizeof(err)),
                         0);
        assert_int_equal(hp_ipc_inprocess_enable(s, changed_cb, &changes), 0);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        memcpy(addr.sun_path, s->path, sizeof(addr.sun_path));
        assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)),
                         0);
        /* A duplicate init keeps one client, under the rank named last. */
        send_frame(fd, "{\"type\":\"init\",\"local_rank\":1,"
                       "\"client_id\":\"a\"}");
        send_frame(fd, "{\"type\":\"init\",\"local_rank\":0,"
                       "\"client_id\":\"a\"}");
        settle(&loop, fd, "a", 0);
        assert_int_equal(s->nclients, 1);
        assert_int_equal(hp_ipc_rank_clients(s, 0), 1);
        assert_int_equal(hp_ipc_rank_clients(s, 1), 0);

        for (size_t i = 0; i < HP_ARRAY_SIZE(ipr_cases); i++) {
                const struct ipr_case *c = &ipr_cases[i];
                const struct hp_ipc_rank *r = &s->ranks.ranks[0];
                char *data = r->data ? cJSON_PrintUnformatted(r->data) : NULL;
                char *labels;

                if (c->released)
                        hp_ipc_ranks_release(&s->ranks, 0);
                send_frame(fd, c->frame);
                settle(&loop, fd, "a", 0);
                free(data);
                data = r->data ? cJSON_PrintUnformatted(r->data) : NULL;
                labels = cJSON_PrintUnformatted(s->ranks.labels);
                if (r->state != c->state || r->rank != c->rank ||
                    r->mode != c->mode ||
                    (c->reason == NULL) != (r->reason == NULL) ||
                    (c->reason && strcmp(c->reason, r->reason) != 0) ||
                    (c->data == NULL) != (data == NULL) ||
                    (c->data && strcmp(c->data, data) != 0) ||
                    strcmp(c->labels, labels) != 0)
                        CASE_FAILED(failures,
                                    "%s: state %s rank %lld mode %s reason "
                                    "%s data %s labels %s",
                                    c->name, hp_ipc_rank_state_name(r->state),
                                    (long long)r->rank,
                                    hp_restart_mode_name(r->mode),
                                    r->reason ? r->reason : "(none)",
                                    data ? data : "(none)", labels);
                free(data);
                free(labels);
        }
        assert_int_equal(failures, 0);
        /* The queued barrier message counts once the agent waits. */
        hp_ipc_ranks_wait_begin(&s->ranks);
        assert_int_equal(s->ranks.ranks[0].state, HP_IPC_RANK_AT_BARRIER);

        /* job_fault to every client; a closed connection is a change. */
        assert_int_equal(hp_ipc_broadcast(s, "job_fault", NULL), 1);
        cJSON_Delete(read_message(&loop, fd));
        changes = 0;
        hp_ipc_drop_clients(s);
        assert_int_equal(changes, 1);
        assert_int_equal(hp_ipc_rank_clients(s, 0), 0);
        assert_int_equal(hp_ipc_broadcast(s, "job_fault", NULL), 0);
        close(fd);

        hp_ipc_server_close(s);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&loop), 0);
        free(s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_framer),
                cmocka_unit_test(test_frame_head_is_big_endian),
                cmocka_unit_test(test_conn_limit),
                cmocka_unit_test(test_ckpt),
                cmocka_unit_test(test_ckpt_progress_encoding),
                cmocka_unit_test(test_ckpt_step_cap),
                cmocka_unit_test(test_server_table_and_send_to_rank),
                cmocka_unit_test(test_server_inprocess_messages),
        };

        hp_log_set_level(HP_LOG_ERROR);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
