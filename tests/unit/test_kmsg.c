/* SPDX-License-Identifier: Apache-2.0 */
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
        { "3,1,-129185342,-;NVRM: Xid (PCI:0000:10:1c): 79, old", -EPROTO, 0,
          0, 0, NULL },
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

#define RULE(t, r, p)                                                        \
        "{\"type\":\"" t "\",\"reason\":\"" r "\",\"pattern\":\"" p "\"}"

static const struct config_case config_cases[] = {
        { "{\"rules\":[]}", NULL },
        { "{\"lookback\":\"1h30m\",\"bufferSize\":3,\"rules\":[" RULE(
                  "temporary", "A", "a") "]}",
          NULL },
        { "[]", "not a JSON object" },
        { "{", "not valid JSON" },
        { "{\"conditions\":[]}", "\"rules\" is missing" },
        { "{\"rules\":[{\"type\":\"temporary\",\"pattern\":\"x\"}]}",
          "rules[0] has no \"reason\"" },
        { "{\"rules\":[" RULE("sometimes", "A", "a") "]}",
          "rules[0].type 'sometimes'" },
        { "{\"rules\":[" RULE("permanent", "A", "a") "]}",
          "names no \"condition\"" },
        { "{\"conditions\":[{\"type\":\"C\"}],\"rules\":[{\"type\":"
          "\"permanent\",\"condition\":\"D\",\"reason\":\"A\",\"pat"
          "tern\":\"a\"}]}",
          "condition 'D' is not one of" },
        { "{\"rules\":[" RULE("temporary", "A", "(") "]}",
          "rules[0].pattern '(' is not a valid" },
        { "{\"lookback\":\"5 minutes\",\"rules\":[]}",
          "\"lookback\" '5 minutes' is not a duration" },
        { "{\"bufferSize\":0,\"rules\":[]}", "\"bufferSize\" must be" },
        { "{\"bufferSize\":2.5,\"rules\":[]}", "\"bufferSize\" must be" },
        { "{\"plugin\":\"kmsg\",\"logPath\":\"/dev/kmsg\",\"rules\":[]}",
          NULL },
        { "{\"plugin\":\"journald\",\"logPath\":\"/var/log/journal"
          "\",\"rules\":[]}",
          "\"plugin\" is 'journald': hyperpodrun reads only the kernel log" },
        { "{\"plugin\":\"filelog\",\"logPath\":\"/var/log/syslog\","
          "\"rules\":[]}",
          "\"plugin\" is 'filelog'" },
        { "{\"plugin\":3,\"rules\":[]}", "\"plugin\" is not a string" },
        { "{\"rules\":[{\"type\":7,\"reason\":\"A\",\"pattern\":\"a\"}]}",
          "\"type\" is not a string" },
};

static void test_config(void **state)
{
        for (size_t i = 0; i < HP_ARRAY_SIZE(config_cases); i++) {
                const struct config_case *c = &config_cases[i];
                struct kmsg_rules *rs = NULL;
                char err[512] = "";
                int r = kmsg_rules_parse(c->json, strlen(c->json),
                                         "test.json", &rs, err, sizeof(err));

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

#define MULTI                                                                \
        "{\"bufferSize\":3,\"conditions\":[{\"type\":\"K\"}],\"ru"           \
        "les\":["                                                            \
        "{\"type\":\"permanent\",\"condition\":\"K\",\"reason\":"            \
        "\"Oops\",\"pattern\":\"BUG: .*\\\\nCall Trace:\"}," RULE(           \
                "temporary", "Any", "x.*") "]}"
#define WINDOW                                                               \
        "{\"lookback\":\"10s\",\"rules\":[" RULE("temporary", "T",           \
                                                 ".*boom.*") "]}"
/* '^' is the start of the buffer (PCRE2 without PCRE2_MULTILINE, as Go's
 * regexp in NPD), not of the newest line; "(?m)^" is the start of any. */
#define CARET3                                                               \
        "{\"bufferSize\":3,\"rules\":[" RULE(                                \
                "temporary", "Caret", "^A.*") "," RULE("temporary", "Line",  \
                                                       "(?m)^A.*") "]}"

static const struct match_case match_cases[] = {
        { "neuron permanent",
          "neuron.json",
          1000,
          { { 2000, "NEURON_HW_ERR=DMA_ERROR nd-id=0 nc-id=3",
              "P:NeuronHasError_DMA_ERROR[NEURON_HW_ERR=DMA_ERROR nd-id"
              "=0 nc-id=3]" },
            { 2001, "NEURON_HW_ERR=HANG_ON_COLLECTIVES",
              "P:NeuronHasError_HANG_ON_COLLECTIVES[NEURON_HW_ERR=HANG_"
              "ON_COLLECTIVES]" },
            { 2002, "neuron: all good", "" } } },
        /* before start minus the 5m lookback: ignored */
        { "neuron too old",
          "neuron.json",
          400000000,
          { { 1, "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR", "" },
            { 100000001, "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR",
              "P:NeuronHasError_SRAM_UNCORRECTABLE_ERROR[NEURON_HW_ERR="
              "SRAM_UNCORRECTABLE_ERROR]" } } },
        { "xid classes",
          "nvidia-xid.json",
          0,
          { { 1,
              "NVRM: Xid (PCI:0000:10:1c): 79, pid=1, name=python, GPU "
              "has fallen off the bus.",
              "P:Xid79FallenOffTheBus[NVRM: Xid (PCI:0000:10:1c): 79, p"
              "id=1, name=python, GPU has fallen off the bus.]" },
            { 2,
              "NVRM: Xid (PCI:0000:10:1c): 13, pid=1, name=python, Grap"
              "hics SM Warp Exception",
              "T:Xid13GraphicsEngineException[NVRM: Xid (PCI:0000:10:1c"
              "): 13, pid=1, name=python, Graphics SM Warp Exception]" },
            { 3,
              "NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double "
              "bit error",
              "P:Xid48DoubleBitECCError[NVRM: Xid (PCI:0000:3b:00): 48,"
              " An uncorrectable double bit error]" },
            /* 31 is not 119 or 13 read as a prefix */
            { 4,
              "NVRM: Xid (PCI:0000:3b:00): 31, pid=2, name=x, Ch 000000"
              "10, MMU Fault",
              "T:Xid31MMUFault[NVRM: Xid (PCI:0000:3b:00): 31, pid=2, n"
              "ame=x, Ch 00000010, MMU Fault]" },
            { 5, "NVRM: Xid (PCI:0000:3b:00): 43, pid=2, Ch 08",
              "T:Xid43ChannelStopped[NVRM: Xid (PCI:0000:3b:00): 43, pi"
              "d=2, Ch 08]" },
            { 6,
              "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action cha"
              "nged from 0x0 (None) to 0x1 (GPU Reset Required)",
              "P:Xid154RecoveryActionRequired[NVRM: Xid (PCI:0000:3b:00"
              "): 154, GPU recovery action changed from 0x0 (None) to 0"
              "x1 (GPU Reset Required)]" } } },
        { "efa",
          "efa.json",
          0,
          { { 1, "efa 0000:31:00.0: Admin queue is not in running state",
              "P:EFAAdminQueueDead[efa 0000:31:00.0: Admin queue is not"
              " in running state]" } } },
        /* NPD's buffer: a multi-line pattern ends at the newest line, and
         * the message is every line it covers */
        { "multi-line",
          MULTI,
          0,
          { { 1, "BUG: unable to handle page fault", "" },
            { 2, "Call Trace:",
              "P:Oops[BUG: unable to handle page fault\nCall Trace:]" },
            { 3, "Call Trace:", "" },
            { 4, "x1", "T:Any[x1]" } } },
        { "caret in a buffer of 3",
          CARET3,
          0,
          { { 1, "A1", "T:Caret[A1] T:Line[A1]" },
            { 2, "A2", "T:Line[A2]" },
            { 3, "xA3", "" },
            { 4, "A4", "T:Line[A4]" } } },
        { "window",
          WINDOW,
          20000000,
          { { 9999999, "boom", "" }, { 10000000, "boom", "T:T[boom]" } } },
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
                for (size_t s = 0;
                     s < HP_ARRAY_SIZE(c->steps) && c->steps[s].msg; s++) {
                        const struct match_step *st = &c->steps[s];
                        struct kmsg_record rec = { 6, s, st->usec, st->msg,
                                                   strlen(st->msg) };
                        struct hits h = { "", 0 };
                        int n = kmsg_matcher_feed(m, &rec, collect, &h);

                        if (n != h.count || strcmp(h.text, st->hits) != 0)
                                fail_msg(
                                        "%s step %zu: got %d '%s', want '%s'",
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
        const char *msgs[] = { "NEURON_HW_ERR=DMA_ERROR",
                               "NEURON_HW_ERR=DMA_ERROR",
                               "NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR" };
        size_t dma = SIZE_MAX, hbm = SIZE_MAX;

        for (size_t i = 0; i < kmsg_rules_count(rs); i++) {
                if (strcmp(kmsg_rules_reason(rs, i),
                           "NeuronHasError_DMA_ERROR") == 0)
                        dma = i;
                if (strcmp(kmsg_rules_reason(rs, i),
                           "NeuronHasError_HBM_UNCORRECTABLE_ERROR") == 0)
                        hbm = i;
        }
        assert_true(dma != SIZE_MAX && hbm != SIZE_MAX);
        for (size_t i = 0; i < 2; i++) {
                struct kmsg_record rec = { 6, i, 5, msgs[i],
                                           strlen(msgs[i]) };
                assert_int_equal(kmsg_matcher_feed(m, &rec, NULL, NULL), 1);
        }
        assert_int_equal(kmsg_matcher_count(m, dma), 2);
        assert_true(kmsg_matcher_active(m, dma));
        {
                struct kmsg_record rec = { 6, 3, 5, msgs[2],
                                           strlen(msgs[2]) };
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

/* ---- the shipped rules against real and forged records ---- */

/* Each rule of each shipped config with a line its driver prints (as the
 * record's message: what follows "<prio>,<seq>,<usec>,<flags>;"). Every
 * rule must have one: test_shipped_rules fails on a rule without. */
struct genuine {
        const char *config;
        const char *reason;
        const char *line;
};

#define XID_LINE(n, text) "NVRM: Xid (PCI:0000:3b:00): " #n ", " text

static const struct genuine genuine_lines[] = {
        { "nvidia-xid.json", "Xid38DriverFirmwareError",
          XID_LINE(38, "pid=4242, name=python3, Driver firmware error") },
        { "nvidia-xid.json", "Xid48DoubleBitECCError",
          XID_LINE(48,
                   "An uncorrectable double bit error (DBE) has been detecte"
                   "d on GPU in the framebuffer at partition 2, subpartition"
                   " 0.") },
        { "nvidia-xid.json", "Xid61MicrocontrollerBreakpoint",
          XID_LINE(61,
                   "pid=4242, name=python3, Internal micro-controller breakp"
                   "oint/warning") },
        { "nvidia-xid.json", "Xid62MicrocontrollerHalt",
          XID_LINE(
                  62,
                  "pid=4242, name=python3, Internal micro-controller halt") },
        { "nvidia-xid.json", "Xid63RowRemapPending",
          XID_LINE(63,
                   "pid='<unknown>', name=<unknown>, Row Remapper: New row m"
                   "arked for remapping, reset gpu to activate.") },
        { "nvidia-xid.json", "Xid64RowRemapFailure",
          XID_LINE(64,
                   "pid='<unknown>', name=<unknown>, Row Remapper Error: Fai"
                   "led to remap row") },
        { "nvidia-xid.json", "Xid74NVLinkError",
          XID_LINE(74,
                   "pid=4242, name=python3, NVLink: fatal error detected on "
                   "link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)") },
        { "nvidia-xid.json", "Xid79FallenOffTheBus",
          XID_LINE(79,
                   "pid=4242, name=python3, GPU has fallen off the bus.") },
        /* the PCI function is printed by some driver versions */
        { "nvidia-xid.json", "Xid79FallenOffTheBus",
          "NVRM: Xid (PCI:0000:3b:00.0): 79, pid='<unknown>', name="
          "<unknown>, GPU has fallen off the bus." },
        { "nvidia-xid.json", "Xid95UncontainedECCError",
          XID_LINE(95,
                   "pid=4242, name=python3, Uncontained: FBHUB. RST: Yes, D-"
                   "RST: No") },
        { "nvidia-xid.json", "Xid119GSPRPCTimeout",
          XID_LINE(119,
                   "pid=4242, name=python3, Timeout after 6s of waiting for "
                   "RPC response from GPU0 GSP!") },
        { "nvidia-xid.json", "Xid120GSPError",
          XID_LINE(120, "pid=4242, name=python3, GSP task exception") },
        { "nvidia-xid.json", "Xid121C2CLinkError",
          XID_LINE(121, "pid=4242, name=python3, C2C link corrected error") },
        { "nvidia-xid.json", "Xid140UnrecoverableECCError",
          XID_LINE(140,
                   "pid=4242, name=python3, An unrecoverable ECC error") },
        { "nvidia-xid.json", "Xid154RecoveryActionRequired",
          XID_LINE(154,
                   "GPU recovery action changed from 0x0 (None) to 0x2 (Node"
                   " Reboot Required)") },
        { "nvidia-xid.json", "Xid13GraphicsEngineException",
          XID_LINE(13,
                   "pid=4242, name=python3, Graphics SM Warp Exception on (G"
                   "PC 0, TPC 1, SM 0): Out Of Range Address") },
        { "nvidia-xid.json", "Xid31MMUFault",
          XID_LINE(31,
                   "pid=4242, name=python3, Ch 00000010, intr 10000000. MMU "
                   "Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1e_0"
                   "0000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ") },
        { "nvidia-xid.json", "Xid32PushBufferError",
          XID_LINE(32,
                   "pid=4242, name=python3, Channel ID 00000010 intr 0000400"
                   "0") },
        { "nvidia-xid.json", "Xid43ChannelStopped",
          XID_LINE(43, "pid=4242, name=python3, Ch 00000008") },
        { "nvidia-xid.json", "Xid45PreemptiveCleanup",
          XID_LINE(45, "pid=4242, name=python3, Ch 00000008") },
        { "nvidia-xid.json", "Xid92HighSingleBitECCRate",
          XID_LINE(
                  92,
                  "pid=4242, name=python3, High single-bit ECC error rate") },
        { "nvidia-xid.json", "Xid94ContainedECCError",
          XID_LINE(94,
                   "pid=4242, name=python3, Contained: SM (0x1). RST: No, D-"
                   "RST: No") },
        { "nvidia-xid.json", "Xid109ContextSwitchTimeout",
          XID_LINE(109,
                   "pid=4242, name=python3, Ch 00000010, errorString CTX SWI"
                   "TCH TIMEOUT, Info 0x1c000") },
        /* The Neuron runtime's report, printed by the driver as given, and
         * the fault injection of the Neuron docs (root: echo ... >
         * /dev/kmsg), whose record is the echoed text. */
        { "neuron.json", "NeuronHasError_SRAM_UNCORRECTABLE_ERROR",
          "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-059"
          "2464924bd45322 hostname=ip-172-31-61-252 nd-id=0 nc-id=0"
          " serial-num=19fcda00f5ff6eb9 action=TERMINATE_INSTANCE" },
        { "neuron.json", "NeuronHasError_NC_UNCORRECTABLE_ERROR",
          "NEURON_HW_ERR=NC_UNCORRECTABLE_ERROR instance-id=i-05924"
          "64924bd45322 nd-id=1 nc-id=0" },
        { "neuron.json", "NeuronHasError_HBM_UNCORRECTABLE_ERROR",
          "NEURON_HW_ERR=HBM_UNCORRECTABLE_ERROR instance-id=i-0592"
          "464924bd45322 nd-id=3" },
        { "neuron.json", "NeuronHasError_DMA_ERROR",
          "NEURON_HW_ERR=DMA_ERROR instance-id=i-0592464924bd45322 "
          "nd-id=0 nc-id=3" },
        { "neuron.json", "NeuronHasError_DMA_ERROR",
          "NEURON_HW_ERR=DMA_ERROR" },
        { "neuron.json", "NeuronHasError_HANG_ON_COLLECTIVES",
          "NEURON_HW_ERR=HANG_ON_COLLECTIVES instance-id=i-0592464924bd45322" },
        /* dev_err ("efa 0000:31:00.0: ...") and ibdev_err (with the
         * InfiniBand device's name) */
        { "efa.json", "EFADeviceResetFailed",
          "efa 0000:31:00.0: Failed to reset device" },
        { "efa.json", "EFAAdminQueueDead",
          "efa 0000:31:00.0: Admin queue is not in running state" },
        { "efa.json", "EFAAdminQueueDead",
          "efa 0000:31:00.0 efa_0: Failed to submit command GET_FEA"
          "TURE (opcode 12) err -62" },
        { "efa.json", "EFAProbeFailed",
          "efa 0000:31:00.0: Failed to initialize device" },
        { "efa.json", "EFACommandTimeout",
          "efa 0000:31:00.0 efa_0: Wait for completion (polling) timeout" },
        { "efa.json", "PCIeAER",
          "pcieport 0000:30:01.0: AER: Corrected error received: 00"
          "00:31:00.0" },
};

/* What an unprivileged process gets into the kernel log around a genuine
 * line G, each as the record's message. %1$ is G's first 15 bytes (a
 * command name holds no more), %2$ is G. */
static const char *const forgeries[] = {
        /* A crashing binary named G: the kernel's segfault line, as
         * arch/x86/mm/fault.c prints it (comm, then the file's name). */
        "%1$.15s[4265]: segfault at 0 ip 000055ab57273139 sp 00007ffc97715db0 "
        "error 4 in %2$s[1139,55ab57273000+1000] likely on CPU 1 (core 1, "
        "socket 0)",
        /* A user's syslog line, where the journal is forwarded to the
         * kernel log (logger, a user process) */
        "root[4321]: %2$s",
        "python3[4321]: %2$s",
        /* G in the middle of other kernel messages */
        "audit: type=1701 audit(1700000000.123:42): auid=1000 uid=1000 "
        "gid=1000 ses=3 pid=4265 comm=\"%1$.15s\" exe=\"/tmp/%2$s\" sig=11 "
        "res=1",
        "Out of memory: Killed process 4265 (%1$.15s) total-vm:1000kB, "
        "anon-rss:0kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:40kB "
        "oom_score_adj:0",
        "traps: %1$.15s[4265] general protection fault ip:401000 "
        "sp:7ffc97715db0 error:0 in %2$s[401000+1000]",
};

/* Forgeries shaped against one config: a command name that is itself the
 * start of a line the rule wants, so that only the rule's fixed prefix,
 * longer than a command name, keeps it out. */
static const struct {
        const char *config;
        const char *line;
} crafted[] = {
        { "efa.json", "efa 0: x[4265]: segfault at 0 ip 000055ab57273139 sp "
                      "00007ffc97715db0 error 4 in Failed to reset "
                      "device[1139,55ab57273000+1000]" },
        { "efa.json",
          "efa 0:31.0 efa_[4265]: segfault at 0 ip "
          "000055ab57273139 sp 00007ffc97715db0 error 4 in Admin "
          "queue is not in running state[1139,55ab57273000+1000]" },
        { "efa.json",
          "a 0000:30:01.0:[4265]: segfault at 0 ip 0 sp 0 error 4 "
          "in AER: Corrected error received[1139,55+1000]" },
        { "neuron.json", "NEURON_HW_ERR=D[4265]: segfault at 0 ip 0 sp 0 "
                         "error 4 in MA_ERROR[1139,55+1000]" },
        { "nvidia-xid.json", "NVRM: Xid (PCI:[4265]: segfault at 0 ip 0 sp 0 "
                             "error 4 in 0000:3b:00): 79, x[1139,55+1000]" },
};

/* The rules of config that msg (one record, alone in the buffer) trips. */
static int hits_of(struct kmsg_rules *rs, const char *msg, struct hits *h)
{
        struct kmsg_matcher *m = kmsg_matcher_new(rs, 0);
        struct kmsg_record rec = { 6, 1, 1, msg, strlen(msg) };
        int n;

        assert_non_null(m);
        h->text[0] = '\0';
        h->count = 0;
        n = kmsg_matcher_feed(m, &rec, collect, h);
        kmsg_matcher_free(m);
        return n;
}

static void test_shipped_rules(void **state)
{
        static const char *const configs[] = { "nvidia-xid.json",
                                               "neuron.json", "efa.json" };

        for (size_t c = 0; c < HP_ARRAY_SIZE(configs); c++) {
                struct kmsg_rules *rs = load(configs[c]);

                /* Every rule has a genuine line, and says nothing at
                 * start. */
                for (size_t r = 0; r < kmsg_rules_count(rs); r++) {
                        const char *reason = kmsg_rules_reason(rs, r);
                        bool found = false;

                        for (size_t i = 0; i < HP_ARRAY_SIZE(genuine_lines);
                             i++)
                                if (strcmp(genuine_lines[i].config,
                                           configs[c]) == 0 &&
                                    strcmp(genuine_lines[i].reason, reason) ==
                                            0)
                                        found = true;
                        if (!found)
                                fail_msg("%s: rule %s has no genuine line in "
                                         "genuine_lines[]",
                                         configs[c], reason);
                        if (kmsg_rules_warning(rs, r) != NULL)
                                fail_msg("%s", kmsg_rules_warning(rs, r));
                }
                for (size_t i = 0; i < HP_ARRAY_SIZE(genuine_lines); i++) {
                        const struct genuine *g = &genuine_lines[i];
                        char want[256], forged[2048];
                        struct hits h;
                        int n;

                        if (strcmp(g->config, configs[c]) != 0)
                                continue;
                        /* The driver's line trips its rule. */
                        n = hits_of(rs, g->line, &h);
                        snprintf(want, sizeof(want), ":%s[", g->reason);
                        if (n < 1 || strstr(h.text, want) == NULL)
                                fail_msg(
                                        "%s: the genuine line '%s' gave '%s', "
                                        "not %s",
                                        g->config, g->line, h.text,
                                        g->reason);
                        /* The same text forged by a user trips nothing. */
                        for (size_t f = 0; f < HP_ARRAY_SIZE(forgeries);
                             f++) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
                                snprintf(forged, sizeof(forged), forgeries[f],
                                         g->line, g->line);
#pragma GCC diagnostic pop
                                n = hits_of(rs, forged, &h);
                                if (n != 0)
                                        fail_msg("%s: the forged record '%s' "
                                                 "tripped %s",
                                                 g->config, forged, h.text);
                        }
                }
                for (size_t i = 0; i < HP_ARRAY_SIZE(crafted); i++) {
                        struct hits h;

                        if (strcmp(crafted[i].config, configs[c]) != 0)
                                continue;
                        if (hits_of(rs, crafted[i].line, &h) != 0)
                                fail_msg("%s: the forged record '%s' tripped "
                                         "%s",
                                         configs[c], crafted[i].line, h.text);
                }
                kmsg_rules_free(rs);
        }
}

/* A forged record does not hide a genuine one that follows it, nor is it
 * taken for one when it follows a genuine one (the buffer of 1). */
static void test_shipped_sequence(void **state)
{
        struct kmsg_rules *rs = load("nvidia-xid.json");
        struct kmsg_matcher *m = kmsg_matcher_new(rs, 0);
        const char *msgs[] = {
                "NVRM: Xid (PCI:[4265]: segfault at 0 ip 0 sp 0 error 4 in "
                "NVRM: Xid (PCI:0000:3b:00.0): 79, pid=1[1139,55+1000]",
                XID_LINE(79, "pid=4242, name=python3, GPU has fallen off the "
                             "bus."),
                "NVRM: Xid (PCI:[4266]: segfault at 0 ip 0 sp 0 error 4 in "
                "NVRM: Xid (PCI:0000:3b:00.0): 48, pid=1[1139,55+1000]",
        };
        const int want[] = { 0, 1, 0 };

        assert_non_null(m);
        for (size_t i = 0; i < HP_ARRAY_SIZE(msgs); i++) {
                struct kmsg_record rec = { 6, i, 1, msgs[i],
                                           strlen(msgs[i]) };
                assert_int_equal(kmsg_matcher_feed(m, &rec, NULL, NULL),
                                 want[i]);
        }
        kmsg_matcher_free(m);
        kmsg_rules_free(rs);
}

/* The warning at start: which patterns get one, and what it names. */
static void test_anchor_warning(void **state)
{
        static const struct {
                int buffer;          /* 0: no bufferSize (NPD's 10) */
                const char *pattern; /* as JSON */
                const char *warning; /* a substring, NULL: none */
        } cases[] = {
                { 1, ".*NVRM: Xid.*", "is not anchored" },
                { 1, "NVRM: Xid.*", "is not anchored" },
                { 1, "^.*NVRM: Xid.*", "is not anchored" },
                { 1, "^.+NVRM", "is not anchored" },
                { 1, "(?i).*nvrm", "is not anchored" },
                { 1, "(?:^A|B)", "is not anchored" },
                { 1, "^NVRM: Xid.*", NULL },
                { 1, "\\\\ANVRM", NULL },
                { 1, "(?i)^nvrm", NULL },
                { 3, "(?m)^NVRM: Xid.*", NULL },
                { 0, "(?im)^nvrm", NULL },
                { 3, "^NVRM: Xid.*", "bufferSize is 3" },
                { 0, "^NVRM: Xid.*", "bufferSize is 10" },
                { 3, "(?-m)^NVRM", "bufferSize is 3" },
        };

        for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
                char json[512], err[512] = "", buffer[32] = "";
                struct kmsg_rules *rs = NULL;
                const char *w;

                if (cases[i].buffer)
                        snprintf(buffer, sizeof(buffer), "\"bufferSize\":%d,",
                                 cases[i].buffer);
                snprintf(json, sizeof(json),
                         "{%s\"rules\":[{\"type\":\"temporary\",\"reason\":"
                         "\"R%zu\",\"pattern\":\"%s\"}]}",
                         buffer, i, cases[i].pattern);
                if (kmsg_rules_parse(json, strlen(json),
                                     "--node-problem-"
                                     "config 'my.json'",
                                     &rs, err, sizeof(err)) != 0)
                        fail_msg("case %zu: %s", i, err);
                w = kmsg_rules_warning(rs, 0);
                if (cases[i].warning == NULL && w != NULL)
                        fail_msg("case %zu: unexpected warning '%s'", i, w);
                if (cases[i].warning != NULL &&
                    (w == NULL || strstr(w, cases[i].warning) == NULL ||
                     strstr(w, "--node-problem-config 'my.json': rules[0] "
                               "(R") == NULL))
                        fail_msg("case %zu: warning '%s', want '%s' naming "
                                 "the file and the rule",
                                 i, w ? w : "(none)", cases[i].warning);
                kmsg_rules_free(rs);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_record_parse),
                cmocka_unit_test(test_config),
                cmocka_unit_test(test_lookback),
                cmocka_unit_test(test_match),
                cmocka_unit_test(test_counters),
                cmocka_unit_test(test_shipped_rules),
                cmocka_unit_test(test_shipped_sequence),
                cmocka_unit_test(test_anchor_warning),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
