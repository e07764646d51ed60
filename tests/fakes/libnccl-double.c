/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test double for NCCL and the CUDA runtime together: the entry points
 * hyperpodrun-nccl-check loads, with behaviour chosen by NCCL_DOUBLE_MODE:
 *   ok    every call succeeds at once
 *   fail  ncclAllReduce fails with a system error
 *   hang  ncclCommInitAll never returns (for the timeout)
 *   slow  every stream synchronisation takes 50 ms (for --preflight-min-busbw)
 *   nogpu cudaGetDeviceCount says no device
 * NCCL_DOUBLE_GPUS sets the device count (default 2). Never installed;
 * loaded only through --preflight-library.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int result_t;

static const char *mode(void)
{
        const char *m = getenv("NCCL_DOUBLE_MODE");
        return m != NULL ? m : "ok";
}

static int is(const char *m)
{
        return strcmp(mode(), m) == 0;
}

result_t ncclCommInitAll(void **comms, int n, const int *devs);
result_t ncclCommInitAll(void **comms, int n, const int *devs)
{
        (void)devs;
        if (is("hang"))
                for (;;)
                        pause();
        for (int i = 0; i < n; i++)
                comms[i] = (void *)(long)(i + 1);
        return 0;
}

result_t ncclAllReduce(const void *s, void *r, size_t count, int type, int op,
                       void *comm, void *stream);
result_t ncclAllReduce(const void *s, void *r, size_t count, int type, int op,
                       void *comm, void *stream)
{
        (void)s, (void)r, (void)count, (void)type, (void)op, (void)comm,
                (void)stream;
        return is("fail") ? 2 : 0;
}

result_t ncclGroupStart(void);
result_t ncclGroupStart(void)
{
        return 0;
}
result_t ncclGroupEnd(void);
result_t ncclGroupEnd(void)
{
        return 0;
}
result_t ncclCommDestroy(void *comm);
result_t ncclCommDestroy(void *comm)
{
        (void)comm;
        return 0;
}

const char *ncclGetErrorString(result_t r);
const char *ncclGetErrorString(result_t r)
{
        return r == 2 ? "unhandled system error (libnccl-double)" : "error";
}

int cudaGetDeviceCount(int *n);
int cudaGetDeviceCount(int *n)
{
        const char *g = getenv("NCCL_DOUBLE_GPUS");
        *n = is("nogpu") ? 0 : g != NULL ? atoi(g) : 2;
        return 0;
}

int cudaSetDevice(int d);
int cudaSetDevice(int d)
{
        (void)d;
        return 0;
}

static char buffers[8][1 << 12];
static int next_buffer;

int cudaMalloc(void **p, size_t n);
int cudaMalloc(void **p, size_t n)
{
        (void)n;
        /* Never touched beyond this: the double moves no data. */
        *p = buffers[next_buffer++ % 8];
        return 0;
}

int cudaMemset(void *p, int v, size_t n);
int cudaMemset(void *p, int v, size_t n)
{
        (void)p, (void)v, (void)n;
        return 0;
}
int cudaFree(void *p);
int cudaFree(void *p)
{
        (void)p;
        return 0;
}
int cudaStreamCreate(void **s);
int cudaStreamCreate(void **s)
{
        *s = (void *)1;
        return 0;
}
int cudaStreamDestroy(void *s);
int cudaStreamDestroy(void *s)
{
        (void)s;
        return 0;
}

int cudaStreamSynchronize(void *s);
int cudaStreamSynchronize(void *s)
{
        struct timespec ts = { 0, 50 * 1000 * 1000 };

        (void)s;
        if (is("slow"))
                nanosleep(&ts, NULL);
        return 0;
}

const char *cudaGetErrorString(int e);
const char *cudaGetErrorString(int e)
{
        (void)e;
        return "cuda error (libnccl-double)";
}
