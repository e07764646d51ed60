/* SPDX-License-Identifier: Apache-2.0 */
/* torch's NCCL flight recorder in a hang report (--hang-dump full):
 * ProcessGroupNCCL dumps it to TORCH_FR_DUMP_TEMP_FILE<rank> (torch >= 2.8;
 * before, and still read after it, TORCH_NCCL_DEBUG_INFO_TEMP_FILE) when a
 * byte arrives on its pipe TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe. The
 * dump, a pickle, is recorded by path and size, not parsed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hyperpod/common.h"
#include "hyperpod/forensics.h"

#include "forensics-private.h"

bool hp_forensics_fr_prefixes(const struct hp_forensics *f,
                              const char *attempt_dir, char *pipe, char *dump,
                              size_t len)
{
        const char *user_pipe = getenv("TORCH_NCCL_DEBUG_INFO_PIPE_FILE");
        /* torch reads the new name first, as here. */
        const char *user_dump = getenv("TORCH_FR_DUMP_TEMP_FILE");

        if (user_dump == NULL || *user_dump == '\0')
                user_dump = getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE");

        /* The dumps go beside the report, the pipes in our private
         * directory: both need log files. */
        if (f == NULL || !f->open || !f->p.full || f->python_dir[0] == '\0' ||
            attempt_dir[0] == '\0')
                return false;
        if (user_pipe && *user_pipe)
                snprintf(pipe, len, "%s", user_pipe);
        else if (hp_snprintf(pipe, len, "%s/nccl-fr-", f->python_dir) < 0)
                return false;
        if (user_dump && *user_dump)
                snprintf(dump, len, "%s", user_dump);
        else if (hp_snprintf(dump, len, "%s/nccl-flight-recorder-rank-",
                             attempt_dir) < 0)
                return false;
        return true;
}

static char *path_of(const char *prefix, int rank, const char *suffix)
{
        size_t len = strlen(prefix) + strlen(suffix) + 16;
        char *path = malloc(len);

        if (path != NULL)
                snprintf(path, len, "%s%d%s", prefix, rank, suffix);
        return path;
}

/* Asks one rank's ProcessGroupNCCL for its flight recorder. The pipe is
 * opened without waiting: with no reader (no flight recorder in that
 * process) the open fails at once, which is only recorded. */
void hp_nccl_fr__ask(struct hp_nccl_fr *fr, int rank, const char *pipe_prefix,
                     const char *dump_prefix)
{
        struct stat st;
        int fd;

        fr->pipe = path_of(pipe_prefix, rank, ".pipe");
        fr->dump = path_of(dump_prefix, rank, "");
        if (fr->pipe == NULL || fr->dump == NULL) {
                fr->status = "out of memory";
                return;
        }
        if (stat(fr->dump, &st) == 0) {
                fr->mtime = st.st_mtim;
                fr->size = st.st_size;
        } else {
                fr->size = -1;
        }
        /* Never through a link: a pipe's name is no one else's to
         * point somewhere. */
        fd = open(fr->pipe,
                  O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
        if (fd < 0) {
                fr->status = errno == ENXIO    ? "no reader"
                             : errno == ENOENT ? "no pipe"
                             : errno == ELOOP  ? "not a pipe"
                                               : "cannot open the pipe";
                return;
        }
        /* Never write into a file that only has the pipe's name. */
        if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode)) {
                fr->status = "not a pipe";
        } else if (write(fd, "1\n", 2) < 0 && errno != EAGAIN) {
                fr->status = "cannot write to the pipe";
        } else {
                /* EAGAIN: a full pipe holds an ask not yet read. */
                fr->status = "no answer";
                fr->waiting = true;
                fr->seen = -1; /* two looks at the new size */
        }
        close(fd);
}

/* True while the dump is still awaited: it must have changed since the
 * ask and then kept its size for one poll period. */
bool hp_nccl_fr__poll(struct hp_nccl_fr *fr)
{
        struct stat st;
        bool changed;

        if (!fr->waiting)
                return false;
        if (stat(fr->dump, &st) < 0)
                return true;
        changed = fr->size < 0 || st.st_size != fr->size ||
                  st.st_mtim.tv_sec != fr->mtime.tv_sec ||
                  st.st_mtim.tv_nsec != fr->mtime.tv_nsec;
        if (!changed)
                return true;
        if (st.st_size > 0 && st.st_size == fr->seen) {
                fr->waiting = false;
                fr->status = "complete";
                return false;
        }
        fr->seen = st.st_size;
        fr->status = "cut at the timeout";
        return true;
}

void hp_nccl_fr__report(const struct hp_nccl_fr *fr, cJSON *o)
{
        cJSON *j;
        struct stat st;

        if (fr->status == NULL)
                return;
        j = cJSON_AddObjectToObject(o, "nccl_flight_recorder");
        if (j == NULL)
                return;
        cJSON_AddStringToObject(j, "status", fr->status);
        if (fr->pipe != NULL)
                cJSON_AddStringToObject(j, "pipe", fr->pipe);
        if (fr->dump != NULL && strcmp(fr->status, "complete") == 0 &&
            stat(fr->dump, &st) == 0) {
                cJSON_AddStringToObject(j, "path", fr->dump);
                cJSON_AddNumberToObject(j, "size", (double)st.st_size);
        }
}

void hp_nccl_fr__free(struct hp_nccl_fr *fr)
{
        free(fr->pipe);
        free(fr->dump);
        fr->pipe = fr->dump = NULL;
}
