/* SPDX-License-Identifier: Apache-2.0 */
/* Which stages run, and the agent's log directories: the log root, one
 * run directory per enabled stage, and each attempt's directory, all
 * reached through open directory fds. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

bool hp_agent__stage_enabled(const struct hp_agent *a, enum hp_stage stage)
{
        switch (stage) {
        case HP_STAGE_PRE_TRAIN:
                return a->cfg->pre_train_script != NULL;
        case HP_STAGE_POST_TRAIN:
                return a->cfg->post_train_script != NULL;
        default:
                return true;
        }
}

int hp_agent__next_enabled(const struct hp_agent *a, enum hp_stage stage)
{
        for (int next = (int)stage + 1; next < HP_STAGE_COUNT; next++)
                if (hp_agent__stage_enabled(a, (enum hp_stage)next))
                        return next;
        return -1;
}

/* A stage's attempt directory is made when the stage starts, so that an
 * attempt that failed in pre-train leaves no empty train directory. It is
 * made in the run directory's fd, private, after what a reused attempt
 * number left there is removed by fd: a run directory renamed, or a link
 * planted in it, leads nowhere else. */
void hp_agent__prepare_attempt_dir(struct hp_agent *a, enum hp_stage stage)
{
        char *dir = a->attempt_dir[stage];
        char name[32];
        int r;

        dir[0] = '\0';
        if (a->attempt_fd[stage] >= 0)
                close(a->attempt_fd[stage]);
        a->attempt_fd[stage] = -1;
        if (a->run_dir[stage][0] == '\0')
                return;
        snprintf(name, sizeof(name), "attempt_%d", a->restart_count);
        /* Too long: each rank's directory fails to start it. */
        (void)hp_snprintf(dir, sizeof(a->attempt_dir[stage]), "%s/%s",
                          a->run_dir[stage], name);
        /* As torch does: a reused attempt number starts clean. */
        r = hp_remove_tree_at(a->run_fd[stage], name);
        if (r < 0)
                hp_log_warn("cannot clear '%s' for attempt %d: %s", dir,
                            a->restart_count, hp_strerror(r));
        /* Not made (a full disk): each rank fails to start, naming its
         * own directory, and the attempt fails. */
        r = hp_mkdir_private_at(a->run_fd[stage], name);
        if (r >= 0)
                a->attempt_fd[stage] = r;
}

/* A new private directory (0700) <prefix><run_id>_XXXXXXXX in dirfd
 * (root, its path), as torchrun's mkdtemp: its path in out, its fd
 * returned, or -errno. */
static int make_run_dir(int dirfd, const char *root, const char *prefix,
                        const char *run_id, char *out, size_t len)
{
        for (int tries = 0; tries < 100; tries++) {
                char rand[9], name[NAME_MAX + 1];
                int fd;

                hp_random_name(rand, 8);
                rand[8] = '\0';
                if (hp_snprintf(name, sizeof(name), "%s%s_%s", prefix, run_id,
                                rand) < 0 ||
                    hp_snprintf(out, len, "%s%s%s", root,
                                strcmp(root, "/") == 0 ? "" : "/", name) < 0)
                        return -ENAMETOOLONG;
                fd = hp_mkdir_private_at(dirfd, name);
                if (fd != -EEXIST)
                        return fd;
        }
        return -EEXIST;
}

void hp_agent__close_log_dirs(struct hp_agent *a)
{
        for (int s = 0; s < HP_STAGE_COUNT; s++) {
                if (a->attempt_fd[s] >= 0)
                        close(a->attempt_fd[s]);
                if (a->run_fd[s] >= 0)
                        close(a->run_fd[s]);
                a->attempt_fd[s] = a->run_fd[s] = -1;
        }
        if (a->log_root_fd >= 0)
                close(a->log_root_fd);
        a->log_root_fd = -1;
}

#define UNSAFE_FIX                                                           \
        ": another user could redirect what the agent writes there; use a "  \
        "directory that only root or the agent's user owns and can write "   \
        "(chown root, chmod go-w), on a path no other user can change"

/* The log root: --log-dir, checked (and made), or a new private
 * torchelastic_XXXXXXXX in a checked $TMPDIR. */
static int open_log_root(struct hp_agent *a, char *errbuf, size_t errlen)
{
        const struct hp_config *cfg = a->cfg;
        const char *tmp = getenv("TMPDIR");
        char why[PATH_MAX + 256];
        int fd, r;

        if (cfg->log_dir != NULL) {
                if (hp_snprintf(a->log_root, sizeof(a->log_root), "%s",
                                cfg->log_dir) < 0)
                        return -ENAMETOOLONG;
                fd = hp_dir_open_trusted(a->log_root, HP_DIR_CREATE, why,
                                         sizeof(why));
                if (fd == HP_ECONFIG)
                        snprintf(errbuf, errlen,
                                 "--log-dir '%s' refused: %s" UNSAFE_FIX
                                 ", or choose another --log-dir",
                                 cfg->log_dir, why);
                else if (fd < 0)
                        snprintf(errbuf, errlen,
                                 "--log-dir '%s' cannot be created: %s: %s",
                                 cfg->log_dir, why, hp_strerror(fd));
                if (fd < 0)
                        return HP_ECONFIG;
                a->log_root_fd = fd;
                return 0;
        }
        if (tmp == NULL || *tmp == '\0')
                tmp = "/tmp";
        fd = hp_dir_open_trusted(tmp, HP_DIR_STICKY_OK, why, sizeof(why));
        if (fd == HP_ECONFIG)
                snprintf(errbuf, errlen,
                         "cannot create the log directory in %s (TMPDIR or "
                         "/tmp): %s" UNSAFE_FIX
                         ", or set TMPDIR or --log-dir to one",
                         tmp, why);
        else if (fd < 0)
                snprintf(errbuf, errlen,
                         "cannot create a log directory in %s: %s: %s", tmp,
                         why, hp_strerror(fd));
        if (fd < 0)
                return HP_ECONFIG;
        r = make_run_dir(fd, tmp, "torchelastic", "", a->log_root,
                         sizeof(a->log_root));
        close(fd);
        if (r < 0) {
                snprintf(errbuf, errlen,
                         "cannot create a log directory in %s: %s", tmp,
                         hp_strerror(r));
                return HP_ECONFIG;
        }
        a->log_root_fd = r;
        return 0;
}

int hp_agent__prepare_log_dirs(struct hp_agent *a, char *errbuf,
                               size_t errlen)
{
        static const char *const prefixes[] = { "pre_train_", "",
                                                "post_train_" };
        const struct hp_config *cfg = a->cfg;
        int r;

        if (cfg->log_to_devnull) {
                a->no_files = true;
                return 0;
        }
        r = open_log_root(a, errbuf, errlen);
        if (r == -ENAMETOOLONG)
                goto too_long;
        if (r < 0)
                return r;
        for (int s = 0; s < HP_STAGE_COUNT; s++) {
                a->run_dir[s][0] = '\0';
                if (!hp_agent__stage_enabled(a, (enum hp_stage)s))
                        continue;
                r = make_run_dir(a->log_root_fd, a->log_root, prefixes[s],
                                 a->rdzv.run_id, a->run_dir[s],
                                 sizeof(a->run_dir[s]));
                if (r == -ENAMETOOLONG)
                        goto too_long;
                if (r < 0) {
                        snprintf(errbuf, errlen,
                                 "log directory '%s' is not writable: %s",
                                 a->log_root, hp_strerror(r));
                        hp_agent__close_log_dirs(a);
                        return HP_ECONFIG;
                }
                a->run_fd[s] = r;
        }
        return 0;

too_long:
        hp_agent__close_log_dirs(a);
        snprintf(errbuf, errlen, "--log-dir '%s' is too long", cfg->log_dir);
        return HP_ECONFIG;
}
