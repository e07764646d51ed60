/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hyperpodrun-nccl-check: one all-reduce communicator over every GPU of
 * this node, timed at sizes up to --max-bytes, for hyperpodrun's
 * --preflight nccl.
 *
 * A program of its own, always dynamically linked: a static hyperpodrun
 * cannot safely dlopen libraries built against the image's glibc, so it
 * spawns this instead. NCCL and the CUDA runtime are loaded with dlopen,
 * so neither is needed to build or install it.
 *
 * Output: one JSON object per line on stdout, {"size":...} per size, then
 * {"ok":true,...} or {"ok":false,"error":"..."}. Exit status 0 when the
 * all-reduce ran, 1 when NCCL or CUDA failed, 3 when a library is
 * missing, 2 for a bad command line.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if HP_HAVE_NCCL_H
#include <cuda_runtime_api.h>
#include <nccl.h>
#else
/* The few types of nccl.h and cuda_runtime_api.h this program uses, as
 * those headers declare them, for builds where they are absent. */
typedef struct ncclComm *ncclComm_t;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef enum { ncclFloat32 = 7 } ncclDataType_t;
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
#endif

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_MISSING 3
#define MAX_DEVICES 64

struct api {
        ncclResult_t (*CommInitAll)(ncclComm_t *, int, const int *);
        ncclResult_t (*AllReduce)(const void *, void *, size_t,
                                  ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                  cudaStream_t);
        ncclResult_t (*GroupStart)(void);
        ncclResult_t (*GroupEnd)(void);
        ncclResult_t (*CommDestroy)(ncclComm_t);
        const char *(*GetErrorString)(ncclResult_t);
        cudaError_t (*GetDeviceCount)(int *);
        cudaError_t (*SetDevice)(int);
        cudaError_t (*Malloc)(void **, size_t);
        cudaError_t (*Memset)(void *, int, size_t);
        cudaError_t (*Free)(void *);
        cudaError_t (*StreamCreate)(cudaStream_t *);
        cudaError_t (*StreamSynchronize)(cudaStream_t);
        cudaError_t (*StreamDestroy)(cudaStream_t);
        const char *(*CudaErrorString)(cudaError_t);
};

static void json_string(FILE *f, const char *s)
{
        fputc('"', f);
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\')
                        fprintf(f, "\\%c", c);
                else if (c < 0x20)
                        fprintf(f, "\\u%04x", c);
                else
                        fputc(c, f);
        }
        fputc('"', f);
}

static int fail(int code, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static int fail(int code, const char *fmt, ...)
{
        char msg[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fputs("{\"ok\":false,\"exit\":", stdout);
        printf("%d,\"error\":", code);
        json_string(stdout, msg);
        fputs("}\n", stdout);
        fflush(stdout);
        return code;
}

/* The first of names that loads; *which says which one. */
static void *open_first(const char *const *names, const char **which)
{
        for (size_t i = 0; names[i] != NULL; i++) {
                void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
                if (h != NULL) {
                        *which = names[i];
                        return h;
                }
        }
        return NULL;
}

#define SYM(lib, field, name)                                                \
        do {                                                                 \
                *(void **)&api->field = dlsym(lib, name);                    \
                if (api->field == NULL)                                      \
                        return fail(EXIT_MISSING, "%s has no %s",            \
                                    lib##_name, name);                       \
        } while (0)

static int load(struct api *api, const char *library)
{
        static const char *const nccl_names[] = { "libnccl.so.2",
                                                  "libnccl.so", NULL };
        static const char *const cudart_names[] = {
                "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                "libcudart.so.11.0", NULL
        };
        const char *nccl_name = NULL, *cudart_name = NULL;
        void *nccl, *cudart;

        if (library != NULL) {
                /* One library with both APIs: the test hook. */
                nccl = dlopen(library, RTLD_NOW | RTLD_LOCAL);
                if (nccl == NULL)
                        return fail(EXIT_MISSING, "cannot load %s: %s",
                                    library, dlerror());
                nccl_name = cudart_name = library;
                cudart = nccl;
        } else {
                nccl = open_first(nccl_names, &nccl_name);
                if (nccl == NULL)
                        return fail(EXIT_MISSING,
                                    "cannot load libnccl.so.2 (NCCL): %s; "
                                    "install NCCL or add its directory to "
                                    "LD_LIBRARY_PATH",
                                    dlerror());
                cudart = open_first(cudart_names, &cudart_name);
                if (cudart == NULL)
                        return fail(EXIT_MISSING,
                                    "cannot load libcudart.so (the CUDA "
                                    "runtime): %s; install it or add its "
                                    "directory to LD_LIBRARY_PATH",
                                    dlerror());
        }
        SYM(nccl, CommInitAll, "ncclCommInitAll");
        SYM(nccl, AllReduce, "ncclAllReduce");
        SYM(nccl, GroupStart, "ncclGroupStart");
        SYM(nccl, GroupEnd, "ncclGroupEnd");
        SYM(nccl, CommDestroy, "ncclCommDestroy");
        SYM(nccl, GetErrorString, "ncclGetErrorString");
        SYM(cudart, GetDeviceCount, "cudaGetDeviceCount");
        SYM(cudart, SetDevice, "cudaSetDevice");
        SYM(cudart, Malloc, "cudaMalloc");
        SYM(cudart, Memset, "cudaMemset");
        SYM(cudart, Free, "cudaFree");
        SYM(cudart, StreamCreate, "cudaStreamCreate");
        SYM(cudart, StreamSynchronize, "cudaStreamSynchronize");
        SYM(cudart, StreamDestroy, "cudaStreamDestroy");
        SYM(cudart, CudaErrorString, "cudaGetErrorString");
        fprintf(stderr, "hyperpodrun-nccl-check: %s, %s\n", nccl_name,
                cudart_name);
        return 0;
}

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define CUDA(call, what)                                                     \
        do {                                                                 \
                cudaError_t e_ = (call);                                     \
                if (e_ != 0)                                                 \
                        return fail(EXIT_FAILED, "%s on GPU %d: %s", what,   \
                                    d, api->CudaErrorString(e_));            \
        } while (0)
#define NCCL(call, what)                                                     \
        do {                                                                 \
                ncclResult_t r_ = (call);                                    \
                if (r_ != ncclSuccess)                                       \
                        return fail(EXIT_FAILED, "%s: %s", what,             \
                                    api->GetErrorString(r_));                \
        } while (0)

struct dev {
        void *send, *recv;
        cudaStream_t stream;
};

static int all_reduce(const struct api *api, ncclComm_t *comms,
                      struct dev *devs, int n, size_t bytes)
{
        int d = 0;

        NCCL(api->GroupStart(), "ncclGroupStart");
        for (d = 0; d < n; d++)
                NCCL(api->AllReduce(devs[d].send, devs[d].recv, bytes / 4,
                                    ncclFloat32, ncclSum, comms[d],
                                    devs[d].stream),
                     "ncclAllReduce");
        NCCL(api->GroupEnd(), "ncclGroupEnd");
        for (d = 0; d < n; d++) {
                CUDA(api->SetDevice(d), "cudaSetDevice");
                CUDA(api->StreamSynchronize(devs[d].stream),
                     "cudaStreamSynchronize");
        }
        return 0;
}

static int run(const struct api *api, size_t max_bytes, int iters)
{
        static ncclComm_t comms[MAX_DEVICES];
        static struct dev devs[MAX_DEVICES];
        double best_busbw = 0, best_algbw = 0;
        int n = 0, d = 0, r;

        r = api->GetDeviceCount(&n);
        if (r != 0)
                return fail(EXIT_FAILED, "cudaGetDeviceCount: %s",
                            api->CudaErrorString(r));
        if (n < 1)
                return fail(EXIT_FAILED, "no GPU visible (cudaGetDeviceCount "
                                         "says 0)");
        if (n > MAX_DEVICES)
                n = MAX_DEVICES;
        for (d = 0; d < n; d++) {
                CUDA(api->SetDevice(d), "cudaSetDevice");
                CUDA(api->Malloc(&devs[d].send, max_bytes), "cudaMalloc");
                CUDA(api->Malloc(&devs[d].recv, max_bytes), "cudaMalloc");
                CUDA(api->Memset(devs[d].send, 0, max_bytes), "cudaMemset");
                CUDA(api->StreamCreate(&devs[d].stream), "cudaStreamCreate");
        }
        NCCL(api->CommInitAll(comms, n, NULL), "ncclCommInitAll");
        /* Sizes from 1 MiB (or max) doubling up to max, as nccl-tests
         * does with -f 2; each warmed up once, then timed. */
        for (size_t bytes = max_bytes < (1u << 20) ? max_bytes : (1u << 20);;
             bytes *= 2) {
                double t0, t, algbw, busbw;

                if (bytes > max_bytes)
                        bytes = max_bytes;
                r = all_reduce(api, comms, devs, n, bytes);
                if (r != 0)
                        return r;
                t0 = now_s();
                for (int i = 0; i < iters; i++) {
                        r = all_reduce(api, comms, devs, n, bytes);
                        if (r != 0)
                                return r;
                }
                t = (now_s() - t0) / iters;
                algbw = t > 0 ? (double)bytes / t / 1e9 : 0;
                /* nccl-tests' bus bandwidth for all-reduce. */
                busbw = n > 1 ? algbw * 2.0 * (n - 1) / n : algbw;
                printf("{\"size\":%zu,\"time_us\":%.1f,\"algbw\":%.3f,"
                       "\"busbw\":%.3f}\n",
                       bytes, t * 1e6, algbw, busbw);
                fflush(stdout);
                if (busbw > best_busbw) {
                        best_busbw = busbw;
                        best_algbw = algbw;
                }
                if (bytes >= max_bytes)
                        break;
        }
        for (d = 0; d < n; d++) {
                api->CommDestroy(comms[d]);
                api->SetDevice(d);
                api->StreamDestroy(devs[d].stream);
                api->Free(devs[d].send);
                api->Free(devs[d].recv);
        }
        printf("{\"ok\":true,\"gpus\":%d,\"max_bytes\":%zu,\"algbw\":%.3f,"
               "\"busbw\":%.3f}\n",
               n, max_bytes, best_algbw, best_busbw);
        fflush(stdout);
        return 0;
}

int main(int argc, char **argv)
{
        const char *library = NULL;
        size_t max_bytes = 64u << 20;
        int iters = 5, r;
        struct api api;

        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];
                if (strcmp(arg, "--max-bytes") == 0 && i + 1 < argc) {
                        char *end;
                        errno = 0;
                        unsigned long long v = strtoull(argv[++i], &end, 10);
                        if (errno || *end || v < 4 || v > (1ull << 40))
                                return fail(EXIT_USAGE,
                                            "--max-bytes '%s': expected 4 to "
                                            "2^40",
                                            argv[i]);
                        max_bytes = (size_t)v & ~(size_t)3;
                } else if (strcmp(arg, "--iters") == 0 && i + 1 < argc) {
                        iters = atoi(argv[++i]);
                        if (iters < 1 || iters > 1000)
                                return fail(EXIT_USAGE,
                                            "--iters '%s': "
                                            "expected 1 to 1000",
                                            argv[i]);
                } else if (strcmp(arg, "--library") == 0 && i + 1 < argc) {
                        library = argv[++i];
                } else {
                        return fail(EXIT_USAGE, "unknown argument '%s'", arg);
                }
        }
        memset(&api, 0, sizeof(api));
        r = load(&api, library);
        if (r != 0)
                return r;
        return run(&api, max_bytes, iters);
}
