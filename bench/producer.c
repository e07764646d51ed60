/* SPDX-License-Identifier: Apache-2.0 */
/* The benchmarks' worker: writes training-style log lines to stdout as fast
 * as a process can, at a fixed rate, or as a job that hangs or crashes, and
 * stamps the moments the benchmarks time into a file.
 *
 *   producer lines N [RATE]     N lines of about 110 bytes, as fast as
 *                               possible, or RATE lines per second
 *   producer hang MS COUNT FILE COUNT progress lines MS apart, then silence;
 *                               the monotonic time of the last line goes to
 *                               FILE. On a restart (TORCHELASTIC_RESTART_COUNT
 *                               > 0) it stamps its start and exits 0.
 *   producer crash MS FILE      every rank stamps its start; on the first
 *                               attempt RANK 0 (of every node's ranks: the
 *                               one on node 0) stamps and exits 1 after MS,
 *                               the others wait to be stopped. On a restart
 *                               each rank stamps its start and exits 0.
 *   producer crash-once MS FILE as crash, across nodes: rank 0 also makes
 *                               FILE.crashed, and a rank that finds it
 *                               stamps its start and exits 0.
 *   producer start FILE         stamps its start and exits 0: the trivial
 *                               worker of a rendezvous.
 *
 * It must never be the bottleneck of what it measures: lines are formatted
 * into a 1 MiB buffer with a hand-rolled counter, so the producer spends
 * its time in the kernel's pipe code. The buffer goes out in writes of
 * WRITE_SIZE bytes, cut anywhere, as a Python worker's stdout does when it
 * is a pipe (io.DEFAULT_BUFFER_SIZE); C stdio writes 4 KiB. Larger
 * writes, which no worker makes, would flatter every tool.
 * Stamps are "KIND RANK ATTEMPT NANOSECONDS\n" lines appended with one
 * write() each, CLOCK_MONOTONIC, comparable across processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUFFER_SIZE (1024 * 1024)
#define WRITE_SIZE 8192
#define LINE_MAX_LEN 256

static char buffer[BUFFER_SIZE];

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int env_int(const char *name)
{
        const char *v = getenv(name);

        return v != NULL ? atoi(v) : 0;
}

static void write_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        /* The reader is gone: nothing left to measure. */
                        _exit(3);
                }
                p += w;
                n -= (size_t)w;
        }
}

static void stamp(const char *file, const char *kind)
{
        char line[128];
        int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        int n;

        if (fd < 0) {
                perror(file);
                _exit(4);
        }
        n = snprintf(line, sizeof(line), "%s %d %d %llu\n", kind,
                     env_int("LOCAL_RANK"),
                     env_int("TORCHELASTIC_RESTART_COUNT"),
                     (unsigned long long)now_ns());
        write_all(fd, line, (size_t)n);
        close(fd);
}

/* Writes v in decimal at p, right-aligned in width digits, zero-padded. */
static void put_digits(char *p, int width, unsigned long v)
{
        for (int i = width - 1; i >= 0; i--) {
                p[i] = (char)('0' + v % 10);
                v /= 10;
        }
}

/* One line of about 110 bytes. Every line matches JobHangingDetection and
 * LowThroughputDetection (with a throughput well above their threshold);
 * the first is JobStart's banner and every 10000th a finalized checkpoint,
 * so the benchmark runs the four rules as a healthy job would. */
static size_t format_line(char *p, unsigned long i)
{
        static const char progress[] =
                "[Epoch 0 Batch 0000000] {'training_loss_step': 2.000, "
                "'samples/sec': 200.00, 'lr': 0.0003, 'grad_norm': 0.50}\n";
        static const char banner[] =
                "Experiment configuration: model=llama-7b nodes=1 "
                "global_batch=1024 seq_len=4096 precision=bf16 zero=3 ok\n";
        static const char checkpoint[] =
                "2025-06-17 05:51:29,300 INFO The checkpoint is finalized. "
                "All shards is written. step=0000000 s3://ckpt/\n";
        size_t n;

        if (i == 0) {
                memcpy(p, banner, sizeof(banner) - 1);
                return sizeof(banner) - 1;
        }
        if (i % 10000 == 0) {
                n = sizeof(checkpoint) - 1;
                memcpy(p, checkpoint, n);
                put_digits(p + n - 19, 7, i % 10000000);
                return n;
        }
        n = sizeof(progress) - 1;
        memcpy(p, progress, n);
        put_digits(p + 15, 7, i % 10000000);
        /* Vary the metrics a little so that the numbers are parsed. */
        put_digits(p + 49, 3, i % 1000);
        put_digits(p + 73, 2, i % 100);
        return n;
}

static int run_lines(unsigned long count, unsigned long rate)
{
        /* At a rate, a batch every 10 ms, on an absolute schedule so that
         * the rate holds however long the writes take. */
        unsigned long per_tick = rate > 0 ? (rate + 99) / 100 : ~0ul;
        uint64_t next = now_ns();
        unsigned long i = 0;

        while (i < count) {
                size_t used = 0;
                unsigned long in_tick = 0;

                while (i < count && in_tick < per_tick &&
                       used + LINE_MAX_LEN <= sizeof(buffer)) {
                        used += format_line(buffer + used, i);
                        i++;
                        in_tick++;
                }
                for (size_t off = 0; off < used; off += WRITE_SIZE)
                        write_all(STDOUT_FILENO, buffer + off,
                                  used - off < WRITE_SIZE ? used - off
                                                          : WRITE_SIZE);
                if (rate > 0 && i < count) {
                        struct timespec ts;
                        next += 10000000ull;
                        ts.tv_sec = (time_t)(next / 1000000000ull);
                        ts.tv_nsec = (long)(next % 1000000000ull);
                        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME,
                                               &ts, NULL) == EINTR)
                                ;
                }
        }
        return 0;
}

static void sleep_ms(unsigned long ms)
{
        struct timespec ts = { (time_t)(ms / 1000),
                               (long)(ms % 1000) * 1000000 };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int run_hang(unsigned long interval_ms, unsigned long count,
                    const char *file)
{
        if (env_int("TORCHELASTIC_RESTART_COUNT") > 0) {
                stamp(file, "start");
                return 0;
        }
        for (unsigned long i = 0; i < count; i++) {
                size_t n = format_line(buffer, i + 1);
                write_all(STDOUT_FILENO, buffer, n);
                if (i + 1 < count)
                        sleep_ms(interval_ms);
        }
        stamp(file, "last");
        for (;;)
                pause();
}

static int run_crash(unsigned long after_ms, const char *file)
{
        stamp(file, "start");
        if (env_int("TORCHELASTIC_RESTART_COUNT") > 0)
                return 0;
        if (env_int("RANK") != 0) {
                for (;;)
                        pause();
        }
        sleep_ms(after_ms);
        stamp(file, "crash");
        _exit(1);
}

/* As crash, with the round told by FILE.crashed rather than by
 * TORCHELASTIC_RESTART_COUNT, which torchrun's c10d agents do not raise on
 * the nodes that did not fail. */
static int run_crash_once(unsigned long after_ms, const char *file)
{
        char mark[4096];
        int fd;

        snprintf(mark, sizeof(mark), "%s.crashed", file);
        stamp(file, "start");
        if (access(mark, F_OK) == 0)
                return 0;
        if (env_int("RANK") != 0) {
                for (;;)
                        pause();
        }
        sleep_ms(after_ms);
        stamp(file, "crash");
        fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
                close(fd);
        _exit(1);
}

static int usage(void)
{
        fprintf(stderr,
                "usage: producer lines N [RATE] | hang MS COUNT FILE "
                "| crash MS FILE | crash-once MS FILE | start FILE\n");
        return 2;
}

int main(int argc, char **argv)
{
        /* First, so that the stamp is as near the first instruction as a
         * process gets. */
        if (argc == 3 && strcmp(argv[1], "start") == 0) {
                stamp(argv[2], "start");
                return 0;
        }
        if (argc >= 3 && strcmp(argv[1], "lines") == 0)
                return run_lines(strtoul(argv[2], NULL, 10),
                                 argc > 3 ? strtoul(argv[3], NULL, 10) : 0);
        if (argc == 5 && strcmp(argv[1], "hang") == 0)
                return run_hang(strtoul(argv[2], NULL, 10),
                                strtoul(argv[3], NULL, 10), argv[4]);
        if (argc == 4 && strcmp(argv[1], "crash") == 0)
                return run_crash(strtoul(argv[2], NULL, 10), argv[3]);
        if (argc == 4 && strcmp(argv[1], "crash-once") == 0)
                return run_crash_once(strtoul(argv[2], NULL, 10), argv[3]);
        return usage();
}
