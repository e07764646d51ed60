/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running hyperpodrun-nccl-check on the loop: its stdout read through a
 * pipe, a timer for --preflight-timeout (a hung NCCL cannot be
 * interrupted from inside, so the program is killed), and the verdict
 * once it has exited and its pipe is at EOF.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/preflight.h"

int hp_preflight_find_helper(char *path, size_t len, char *errbuf,
                             size_t errlen)
{
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        char *slash;

        if (n < 0) {
                snprintf(errbuf, errlen, "cannot read /proc/self/exe: %s",
                         strerror(errno));
                return -errno;
        }
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (slash != NULL)
                *slash = '\0';
        if (hp_snprintf(path, len, "%s/%s", exe, HP_PREFLIGHT_HELPER) < 0 ||
            access(path, X_OK) < 0) {
                snprintf(errbuf, errlen,
                         "--preflight nccl needs %s beside hyperpodrun (in "
                         "%s), installed with it; not found there",
                         HP_PREFLIGHT_HELPER, exe);
                return -ENOENT;
        }
        return 0;
}

static void closed_cb(uv_handle_t *handle)
{
        struct hp_preflight *pf = handle->data;

        if (--pf->refs == 0)
                pf->running = false;
}

static void close_all(struct hp_preflight *pf)
{
        uv_close((uv_handle_t *)&pf->timer, closed_cb);
        uv_close((uv_handle_t *)&pf->proc, closed_cb);
        if (!uv_is_closing((uv_handle_t *)&pf->out))
                uv_close((uv_handle_t *)&pf->out, closed_cb);
}

static void maybe_done(struct hp_preflight *pf)
{
        if (!pf->exited || !pf->eof)
                return;
        uv_timer_stop(&pf->timer);
        hp_preflight_judge(pf->output, pf->len, pf->exit_status,
                           pf->term_signal, pf->timed_out,
                           (double)pf->timeout_ms / 1000.0, pf->min_busbw,
                           &pf->result);
        close_all(pf);
        pf->cb(pf, &pf->result);
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
        static char sink[4096];
        struct hp_preflight *pf = handle->data;
        size_t room = sizeof(pf->output) - pf->len;

        /* Past the cap the output is read and dropped, so the program
         * never blocks on a full pipe. */
        if (room == 0)
                *buf = uv_buf_init(sink, sizeof(sink));
        else
                *buf = uv_buf_init(pf->output + pf->len, (unsigned)room);
}

static void read_cb(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf)
{
        struct hp_preflight *pf = stream->data;

        if (n > 0) {
                if (buf->base == pf->output + pf->len)
                        pf->len += (size_t)n;
                return;
        }
        if (n < 0) {
                uv_read_stop(stream);
                pf->eof = true;
                maybe_done(pf);
        }
}

static void exit_cb(uv_process_t *proc, int64_t status, int signum)
{
        struct hp_preflight *pf = proc->data;

        pf->exited = true;
        pf->exit_status = status;
        pf->term_signal = signum;
        maybe_done(pf);
}

static void timeout_cb(uv_timer_t *timer)
{
        struct hp_preflight *pf = timer->data;

        pf->timed_out = true;
        uv_process_kill(&pf->proc, SIGKILL);
}

int hp_preflight_start(struct hp_preflight *pf, uv_loop_t *loop,
                       const struct hp_preflight_opts *opts,
                       hp_preflight_cb cb, char *errbuf, size_t errlen)
{
        char max[32];
        char *argv[8];
        int argc = 0, r;
        uv_process_options_t po;
        uv_stdio_container_t stdio[3];

        memset(pf, 0, sizeof(*pf));
        pf->loop = loop;
        pf->cb = cb;
        pf->min_busbw = opts->min_busbw;
        pf->timeout_ms = opts->timeout_ms;
        snprintf(max, sizeof(max), "%llu",
                 (unsigned long long)opts->max_bytes);
        argv[argc++] = (char *)opts->helper;
        argv[argc++] = (char *)"--max-bytes";
        argv[argc++] = max;
        if (opts->library != NULL) {
                argv[argc++] = (char *)"--library";
                argv[argc++] = (char *)opts->library;
        }
        argv[argc] = NULL;

        uv_pipe_init(loop, &pf->out, 0);
        pf->out.data = pf;
        memset(&po, 0, sizeof(po));
        memset(stdio, 0, sizeof(stdio));
        stdio[0].flags = UV_IGNORE;
        stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
        stdio[1].data.stream = (uv_stream_t *)&pf->out;
        stdio[2].flags = UV_INHERIT_FD;
        stdio[2].data.fd = STDERR_FILENO;
        po.file = argv[0];
        po.args = argv;
        po.stdio = stdio;
        po.stdio_count = 3;
        po.exit_cb = exit_cb;
        pf->proc.data = pf;
        r = uv_spawn(loop, &pf->proc, &po);
        if (r < 0) {
                snprintf(errbuf, errlen, "cannot run %s: %s", argv[0],
                         uv_strerror(r));
                uv_close((uv_handle_t *)&pf->proc, NULL);
                uv_close((uv_handle_t *)&pf->out, NULL);
                return r;
        }
        uv_timer_init(loop, &pf->timer);
        pf->timer.data = pf;
        uv_timer_start(&pf->timer, timeout_cb, opts->timeout_ms, 0);
        uv_read_start((uv_stream_t *)&pf->out, alloc_cb, read_cb);
        pf->refs = 3;
        pf->running = true;
        return 0;
}

void hp_preflight_cancel(struct hp_preflight *pf)
{
        if (!pf->running || (pf->exited && pf->eof))
                return;
        /* The verdict then says killed by a signal; the caller ignores
         * it. */
        uv_process_kill(&pf->proc, SIGKILL);
}
