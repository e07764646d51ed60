/* Unit tests for the kernel log rules (src/kmsg): the record parser, the
 * NPD config reader and the matcher, table-driven; the shipped configs in
 * examples/node-problem/ are checked against the kernel lines they are
 * for. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hyperpod/common.h"
#include "hyperpod/kmsg.h"

#define EXAMPLES HP_TEST_FIXTURES "/../../../examples/node-problem/"

/* ---- records ---- */

struct record_case {
        const char *text;
        int result; /* 0, or what kmsg_record_parse returns */
        int prio;
        uint64_t seq, usec;
        const char *msg;
};

static const struct record_case record_cases[] = {
        { "6,1,100,-;hello\n", 0, 6, 1, 100, "hello" },
        { "4,339,5140900,-;NEURON_HW_ERR=DMA_ERROR qid 3\n", 0, 4, 339,
          5140900, "NEURON_HW_ERR=DMA_ERROR qid 3" },
        /* continuation lines are not part of the message */
        { "3,7,9,c;NVRM: Xid (PCI:0000:10:1c): 79, GPU off\n SUBSYSTEM=pci\n",
          0, 3, 7, 9, "NVRM: Xid (PCI:0000:10:1c): 79, GPU off" },
        /* later kernels add fields after the flags */
        { "6,2,3,-,caller=T1;with caller", 0, 6, 2, 3, "with caller" },
        { "6,2,3;no flags", 0, 6, 2, 3, "no flags" },
        { "6,2,3,-;", 0, 6, 2, 3, "" },
        { "0,1,0,-;at boot", 0, 0, 1, 0, "at boot" },
        /* not a record: a plain line */
        { "a message without a header", -EBADMSG, 0, 0, 0, NULL },
        { "2000,1,1,-;prio too big", -EBADMSG, 0, 0, 0, NULL },
        { "-3,1,1,-;negative prio", -EBADMSG, 0, 0, 0, NULL },
        { "6;only a prio", -EBADMSG, 0, 0, 0, NULL },
        { "6,1,1\n,-;newline in header", -EBADMSG, 0, 0, 0, NULL },
        /* a record's header with a broken field */
        { "6,x,3,-;bad seq", -EPROTO, 0, 0, 0, NULL },
        { "6,2;too few", -EPROTO, 0, 0, 0, NULL },
        { "6,1,99999999999999999999999,-;overflow", -EPROTO, 0, 0, 0, NULL },
        { "3,1,-129185342,-;NVRM: Xid (PCI:0000:10:1c): 79, old", -EPROTO, 0, 0,
          0, NULL },
        { "3,1,,-;empty timestamp", -EPROTO, 0, 0, 0, NULL },
        { "3,1,12x4,-;letters in the timestamp", -EPROTO, 0, 0, 0, NULL },
        { "3,1,+5,-;signed timestamp", -EPROTO, 0, 0, 0, NULL },
        { "3,-1,5,-;negative seq", -EPROTO, 0, 0, 0, NULL },
};

static void test_record_parse(void **state)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(record_cases); i++) {
                const struct record_case *c = &record_cases[i];
                struct kmsg_record rec;
                int r = kmsg_record_parse(c->text, strlen(c->text), &rec);

                if (r != c->result)
                        fail_msg("case %zu '%s': %d, expected %d", i, c->text,
                                 r, c->result);
                if (c->result != 0)
                        continue;
                assert_int_equal(rec.prio, c->prio);
                assert_int_equal(rec.seq, c->seq);
                assert_int_equal(rec.usec, c->usec);
                assert_int_equal(rec.msg_len, strlen(c->msg));
                assert_memory_equal(rec.msg, c->msg, rec.msg_len);
        }
}

/* ---- configs ---- */

struct config_case {
        const char *json;
        const char *error; /* substring of the error, NULL: valid */
};

#define RULE(t, r, p) "{\"type\":\"" t "\",\"reason\":\"" r "\",\"pattern\":\"" p "\"}"

static const struct config_case config_cases[] = {
        { "{\"rules\":[]}", NULL },
        { "{\"lookback\":\"1h30m\",\"bufferSize\":3,\"rules\":[" RULE("temporary", "A", "a") "]}", NULL },
        { "[]", "not a JSON object" },
        { "{", "not valid JSON" },
        { "{\"conditions\":[]}", "\"rules\" is missing" },
        { "{\"rules\":[{\"type\":\"temporary\",\"pattern\":\"x\"}]}", "rules[0] has no \"reason\"" },
        { "{\"rules\":[" RULE("sometimes", "A", "a") "]}", "rules[0].type 'sometimes'" },
        { "{\"rules\":[" RULE("permanent", "A", "a") "]}", "names no \"condition\"" },
        { "{\"conditions\":[{\"type\":\"C\"}],\"rules\":[{\"type\":\"permanent\",\"condition\":\"D\",\"reason\":\"A\",\"pattern\":\"a\"}]}",
          "condition 'D' is not one of" },
        { "{\"rules\":[" RULE("temporary", "A", "(") "]}", "rules[0].pattern '(' is not a valid" },
        { "{\"lookback\":\"5 minutes\",\"rules\":[]}", "\"lookback\" '5 minutes' is not a duration" },
        { "{\"bufferSize\":0,\"rules\":[]}", "\"bufferSize\" must be" },
        { "{\"bufferSize\":2.5,\"rules\":[]}", "\"bufferSize\" must be" },
        { "{\"rules\":[{\"type\":7,\"reason\":\"A\",\"pattern\":\"a\"}]}", "\"type\" is not a string" },
};

static void test_config(void **state)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(config_cases); i++) {
                const struct config_case *c = &config_cases[i];
                struct kmsg_rules *rs = NULL;
                char err[512] = "";
                int r = kmsg_rules_parse(c->json, strlen(c->json), "test.json",
                                         &rs, err, sizeof(err));

                if (c->error == NULL) {
                        if (r != 0)
                                fail_msg("case %zu: %s", i, err);
                        kmsg_rules_free(rs);
                        continue;
                }
                if (r != HP_ECONFIG || rs != NULL)
                        fail_msg("case %zu '%s': accepted", i, c->json);
                if (strstr(err, c->error) == NULL ||
                    strncmp(err, "test.json: ", 11) != 0)
                        fail_msg("case %zu: error '%s' lacks '%s'", i, err,
                                 c->error);
        }
}

static void test_lookback(void **state)
{
        static const char json[] = "{\"lookback\":\"1h30m\",\"rules\":[]}";
        struct kmsg_rules *rs;
        char err[256];

        assert_int_equal(kmsg_rules_parse(json, strlen(json), "t", &rs, err,
                                          sizeof(err)),
                         0);
        assert_int_equal(kmsg_rules_lookback_us(rs), 5400ull * 1000000);
        kmsg_rules_free(rs);
}

/* ---- matching ---- */

struct hits {
        char text[2048];
        int count;
};

static void collect(void *ctx, const struct kmsg_hit *hit)
{
        struct hits *h = ctx;
        size_t used = strlen(h->text);

        snprintf(h->text + used, sizeof(h->text) - used, "%s%s:%s[%s]",
                 used ? " " : "", hit->type == KMSG_PERMANENT ? "P" : "T",
                 hit->reason, hit->message);
        h->count++;
}

struct match_step {
        uint64_t usec;
        const char *msg;
        const char *hits; /* as collect() writes them */
};

struct match_case {
        const char *name;
        const char *config; /* JSON, or a file under examples/node-problem */
        uint64_t start_us;
        struct match_step steps[6];
};

#define MULTI "{\"bufferSize\":3,\"conditions\":[{\"type\":\"K\"}],\"rules\":[" \
        "{\"type\":\"permanent\",\"condition\":\"K\",\"reason\":\"Oops\",\"pattern\":\"BUG: .*\\\\nCall Trace:\"}," \
        RULE("temporary", "Any", "x.*") "]}"
#define WINDOW "{\"lookback\":\"10s\",\"rules\":[" RULE("temporary", "T", ".*boom.*") "]}"

static const struct match_case match_cases[] = {
        { "neuron permanent", "neuron.json", 1000,
          { { 2000, "neuron0: NEURON_HW_ERR=DMA_ERROR qid 3",
              "P:NeuronHasError_DMA_ERROR[neuron0: NEURON_HW_ERR=DMA_ERROR qid 3]" },
            { 2001, "NEURON_HW_ERR=HANG_ON_COLLECTIVES",
              "P:NeuronHasError_HANG_ON_COLLECTIVES[NEURON_HW_ERR=HANG_ON_COLLECTIVES]" },
            { 2002, "neuron: all good", "" } } },
        /* before start minus the 5m lookback: ignored */
        { "neuron too old", "neuron.json", 400000000,
          { { 1, "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR", "" },
            { 100000001, "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR",
              "P:NeuronHasError_SRAM_UNCORRECTABLE_ERROR[NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR]" } } },
        { "xid classes", "nvidia-xid.json", 0,
          { { 1, "NVRM: Xid (PCI:0000:10:1c): 79, pid=1, name=python, GPU has fallen off the bus.",
              "P:Xid79FallenOffTheBus[NVRM: Xid (PCI:0000:10:1c): 79, pid=1, name=python, GPU has fallen off the bus.]" },
            { 2, "NVRM: Xid (PCI:0000:10:1c): 13, pid=1, name=python, Graphics SM Warp Exception",
              "T:Xid13GraphicsEngineException[NVRM: Xid (PCI:0000:10:1c): 13, pid=1, name=python, Graphics SM Warp Exception]" },
            { 3, "NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error",
              "P:Xid48DoubleBitECCError[NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error]" },
            /* 31 is not 119 or 13 read as a prefix */
            { 4, "NVRM: Xid (PCI:0000:3b:00): 31, pid=2, name=x, Ch 00000010, MMU Fault",
              "T:Xid31MMUFault[NVRM: Xid (PCI:0000:3b:00): 31, pid=2, name=x, Ch 00000010, MMU Fault]" },
            { 5, "NVRM: Xid (PCI:0000:3b:00): 43, pid=2, Ch 08",
              "T:Xid43ChannelStopped[NVRM: Xid (PCI:0000:3b:00): 43, pid=2, Ch 08]" },
            { 6, "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
              "P:Xid154RecoveryActionRequired[NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)]" } } },
        { "efa", "efa.json", 0,
          { { 1, "efa 0000:31:00.0: Admin queue is not in running state",
              "P:EFAAdminQueueDead[efa 0000:31:00.0: Admin queue is not in running state]" } } },
        /* NPD's buffer: a multi-line pattern ends at the newest line, and
         * the message is every line it covers */
        { "multi-line", MULTI, 0,
          { { 1, "BUG: unable to handle page fault", "" },
            { 2, "Call Trace:", "P:Oops[BUG: unable to handle page fault\nCall Trace:]" },
            { 3, "Call Trace:", "" },
            { 4, "x1", "T:Any[x1]" } } },
        { "window", WINDOW, 20000000,
          { { 9999999, "boom", "" },
            { 10000000, "boom", "T:T[boom]" } } },
};

static struct kmsg_rules *load(const char *config)
{
        struct kmsg_rules *rs = NULL;
        char err[512] = "", path[1024];
        int r;

        if (config[0] == '{') {
                r = kmsg_rules_parse(config, strlen(config), "case", &rs, err,
                                     sizeof(err));
        } else {
                snprintf(path, sizeof(path), "%s%s", EXAMPLES, config);
                r = kmsg_rules_load(path, &rs, err, sizeof(err));
        }
        if (r != 0)
                fail_msg("%s: %s", config, err);
        return rs;
}

static void test_match(void **state)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(match_cases); i++) {
                const struct match_case *c = &match_cases[i];
                struct kmsg_rules *rs = load(c->config);
                struct kmsg_matcher *m = kmsg_matcher_new(rs, c->start_us);

                assert_non_null(m);
                for (size_t s = 0; s < HP_ARRAY_SIZE(c->steps) && c->steps[s].msg; s++) {
                        const struct match_step *st = &c->steps[s];
                        struct kmsg_record rec = { 6, s, st->usec, st->msg,
                                                   strlen(st->msg) };
                        struct hits h = { "", 0 };
                        int n = kmsg_matcher_feed(m, &rec, collect, &h);

                        if (n != h.count || strcmp(h.text, st->hits) != 0)
                                fail_msg("%s step %zu: got %d '%s', want '%s'",
                                         c->name, s, n, h.text, st->hits);
                }
                kmsg_matcher_free(m);
                kmsg_rules_free(rs);
        }
}

/* problem_counter and problem_gauge: a condition holds one reason. */
static void test_counters(void **state)
{
        struct kmsg_rules *rs = load("neuron.json");
        struct kmsg_matcher *m = kmsg_matcher_new(rs, 0);
        const char *msgs[] = { "NEURON_HW_ERR=DMA_ERROR", "NEURON_HW_ERR=DMA_ERROR",
                               "NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR" };
        size_t dma = SIZE_MAX, hbm = SIZE_MAX;

        for (size_t i = 0; i < kmsg_rules_count(rs); i++) {
                if (strcmp(kmsg_rules_reason(rs, i), "NeuronHasError_DMA_ERROR") == 0)
                        dma = i;
                if (strcmp(kmsg_rules_reason(rs, i),
                           "NeuronHasError_HBM_UNCORRECTABLE_ERROR") == 0)
                        hbm = i;
        }
        assert_true(dma != SIZE_MAX && hbm != SIZE_MAX);
        for (size_t i = 0; i < 2; i++) {
                struct kmsg_record rec = { 6, i, 5, msgs[i], strlen(msgs[i]) };
                assert_int_equal(kmsg_matcher_feed(m, &rec, NULL, NULL), 1);
        }
        assert_int_equal(kmsg_matcher_count(m, dma), 2);
        assert_true(kmsg_matcher_active(m, dma));
        {
                struct kmsg_record rec = { 6, 3, 5, msgs[2], strlen(msgs[2]) };
                assert_int_equal(kmsg_matcher_feed(m, &rec, NULL, NULL), 1);
        }
        assert_false(kmsg_matcher_active(m, dma));
        assert_true(kmsg_matcher_active(m, hbm));
        assert_int_equal(kmsg_matcher_count(m, hbm), 1);
        assert_int_equal(kmsg_rules_type(rs, hbm), KMSG_PERMANENT);
        assert_string_equal(kmsg_rules_condition(rs, hbm), "NeuronHealth");
        kmsg_matcher_free(m);
        kmsg_rules_free(rs);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_record_parse),
                cmocka_unit_test(test_config),
                cmocka_unit_test(test_lookback),
                cmocka_unit_test(test_match),
                cmocka_unit_test(test_counters),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
