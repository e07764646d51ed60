/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --preflight nccl: before the first stage, an all-reduce over every GPU
 * of the node, run by the hyperpodrun-nccl-check program beside
 * hyperpodrun and judged here. A failure, a timeout or a bus bandwidth
 * under the floor fails the node.
 */
#ifndef HYPERPOD_PREFLIGHT_H
#define HYPERPOD_PREFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define HP_PREFLIGHT_HELPER "hyperpodrun-nccl-check"
#define HP_PREFLIGHT_MAX_SIZES 48

struct hp_preflight_size {
        uint64_t bytes;
        double time_us;
        double algbw; /* GB/s */
        double busbw; /* GB/s */
};

struct hp_preflight_result {
        bool passed;
        bool unavailable; /* NCCL or the CUDA runtime is not installed */
        int gpus;
        double algbw, busbw; /* the best size's, GB/s */
        size_t nsizes;
        struct hp_preflight_size sizes[HP_PREFLIGHT_MAX_SIZES];
        char reason[1024]; /* why it failed, or what it measured */
};

/*
 * Judges the program's output (its JSON lines), exit status or signal,
 * and whether it was killed for taking longer than timeout_s. Pure.
 * Fills res; returns 0.
 */
int hp_preflight_judge(const char *output, size_t len, int64_t exit_status,
                       int term_signal, bool timed_out, double timeout_s,
                       double min_busbw, struct hp_preflight_result *res);

struct hp_preflight;
typedef void (*hp_preflight_cb)(struct hp_preflight *pf,
                                const struct hp_preflight_result *res);

struct hp_preflight {
        uv_loop_t *loop;
        uv_process_t proc;
        uv_pipe_t out;
        uv_timer_t timer;
        int refs; /* open handles */
        bool exited, eof, timed_out, running;
        int64_t exit_status;
        int term_signal;
        char output[32768]; /* what it printed; the rest is dropped */
        size_t len;
        double min_busbw;
        uint64_t timeout_ms;
        hp_preflight_cb cb;
        void *data;
        struct hp_preflight_result result;
};

struct hp_preflight_opts {
        const char *helper;  /* the program's path */
        const char *library; /* --preflight-library, or NULL */
        uint64_t max_bytes;
        double min_busbw; /* GB/s, 0: no floor */
        uint64_t timeout_ms;
};

/* Finds the program beside the running executable. Returns 0, or -ENOENT
 * with errbuf naming where it was looked for. */
int hp_preflight_find_helper(char *path, size_t len, char *errbuf,
                             size_t errlen);

/* Spawns the check; cb runs once with the verdict, after which the handles
 * are closing. Returns 0 or an error (errbuf says why; cb never runs). */
int hp_preflight_start(struct hp_preflight *pf, uv_loop_t *loop,
                       const struct hp_preflight_opts *opts,
                       hp_preflight_cb cb, char *errbuf, size_t errlen);
/* Kills a running check; its handles close on the next loop turn. */
void hp_preflight_cancel(struct hp_preflight *pf);

#endif
