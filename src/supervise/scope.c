/* SPDX-License-Identifier: Apache-2.0 */
/* Where a group's processes are: in a cgroup of the group's own when the
 * cgroup v2 hierarchy is writable, else among the agent's descendants.
 *
 * A process group does not hold a job: a worker's child may leave it
 * (setsid, setpgid) and a double fork leaves its parent. A cgroup holds
 * whatever is forked inside it, and cgroup.kill kills all of it at once,
 * new forks included. So each group gets a child of the agent's own
 * cgroup, D/hyperpodrun.<pid>/attempt_<N>.<stage>, and its workers are
 * cloned straight into it (CLONE_INTO_CGROUP: no migration, which would
 * cost a synchronize_rcu, milliseconds, per worker). The agent itself
 * stays in D: cgroup v2's no-internal-process rule concerns only a cgroup
 * whose controllers are enabled for its children, and hyperpodrun enables
 * none, so D may hold the agent and the group cgroups side by side
 * without a migration. Whoever owns D (the container runtime, systemd,
 * Slurm) still kills everything under it.
 *
 * Where D is not writable (most containers mount /sys/fs/cgroup read-only)
 * or there is no cgroup v2 hierarchy, the agent, a subreaper, finds the
 * same processes as its descendants in /proc: every orphan of the job is
 * reparented to it, so a live process of the job is always below it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/supervise.h"

#include "supervise-private.h"

/* Copies a mountinfo field, undoing its octal escapes (\040 for a space). */
static void unescape(const char *src, size_t len, char *dst, size_t size)
{
        size_t o = 0;

        for (size_t i = 0; i < len && o + 1 < size; i++) {
                if (src[i] == '\\' && i + 3 < len && src[i + 1] >= '0' &&
                    src[i + 1] <= '3') {
                        dst[o++] = (char)(((src[i + 1] - '0') << 6) |
                                          ((src[i + 2] - '0') << 3) |
                                          (src[i + 3] - '0'));
                        i += 3;
                } else {
                        dst[o++] = src[i];
                }
        }
        dst[o] = '\0';
}

/* The directory of our own cgroup v2 cgroup, wherever the hierarchy is
 * mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host). */
static int own_cgroup_dir(char *out, size_t size)
{
        char line[4096], cg[PATH_MAX], root[PATH_MAX], mnt[PATH_MAX];
        bool found = false;
        FILE *f;

        f = fopen("/proc/self/cgroup", "re");
        if (f == NULL)
                return -errno;
        while (fgets(line, sizeof(line), f) != NULL) {
                if (strncmp(line, "0::", 3) == 0) {
                        line[strcspn(line, "\n")] = '\0';
                        snprintf(cg, sizeof(cg), "%s", line + 3);
                        found = true;
                        break;
                }
        }
        fclose(f);
        if (!found || cg[0] != '/')
                return -ENOENT;

        f = fopen("/proc/self/mountinfo", "re");
        if (f == NULL)
                return -errno;
        found = false;
        while (!found && fgets(line, sizeof(line), f) != NULL) {
                /* id parent major:minor root mountpoint options... -
                 * fstype source superoptions */
                const char *field[5], *sep = strstr(line, " - ");
                size_t flen[5];
                const char *p = line;
                size_t rlen;

                if (sep == NULL || strncmp(sep + 3, "cgroup2 ", 8) != 0)
                        continue;
                for (int i = 0; i < 5; i++) {
                        field[i] = p;
                        flen[i] = strcspn(p, " ");
                        p += flen[i];
                        if (*p == ' ')
                                p++;
                }
                unescape(field[3], flen[3], root, sizeof(root));
                unescape(field[4], flen[4], mnt, sizeof(mnt));
                rlen = strcmp(root, "/") == 0 ? 0 : strlen(root);
                if (rlen > 0 && (strncmp(cg, root, rlen) != 0 ||
                                 (cg[rlen] != '/' && cg[rlen] != '\0')))
                        continue;
                if (hp_snprintf(out, size, "%s%s", mnt,
                                strcmp(cg + rlen, "/") == 0 ? ""
                                                            : cg + rlen) < 0)
                        continue;
                found = true;
        }
        fclose(f);
        return found ? 0 : -ENOENT;
}

static void root_fail(struct hp_scope_root *r, const char *what, int err)
{
        hp_log_debug("no cgroup of its own for each group (%s: %s); the "
                     "agent tracks their processes as its descendants",
                     what, hp_strerror(err));
        if (r->dirfd >= 0) {
                close(r->dirfd);
                r->dirfd = -1;
                (void)rmdir(r->path);
        }
        r->path[0] = '\0';
}

void hp_scope__root_init(struct hp_scope_root *r, bool use_cgroup)
{
        char own[PATH_MAX];
        int probe_fd, err;

        memset(r, 0, sizeof(*r));
        r->dirfd = -1;
        if (!use_cgroup) {
                hp_log_debug("--cgroup off: the agent tracks each group's "
                             "processes as its descendants");
                return;
        }
        if (!hp_spawn__can_join_cgroup()) {
                root_fail(r, "clone3 into a cgroup", -ENOSYS);
                return;
        }
        err = own_cgroup_dir(own, sizeof(own));
        if (err < 0) {
                root_fail(r, "cgroup v2 hierarchy", err);
                return;
        }
        if (hp_snprintf(r->path, sizeof(r->path), "%s/hyperpodrun.%d", own,
                        (int)getpid()) < 0) {
                root_fail(r, own, -ENAMETOOLONG);
                return;
        }
        /* One left by an agent that had our pid and was killed: its
         * watcher removes it, unless it was killed too. */
        if (mkdir(r->path, 0755) < 0 &&
            (errno != EEXIST || rmdir(r->path) < 0 ||
             mkdir(r->path, 0755) < 0)) {
                err = -errno;
                r->path[0] = '\0';
                root_fail(r, own, err);
                return;
        }
        r->dirfd = open(r->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (r->dirfd < 0) {
                err = -errno;
                (void)rmdir(r->path);
                root_fail(r, r->path, err);
                return;
        }
        /* cgroup.kill is Linux 5.14; clone3 into a cgroup (5.7) may be
         * refused by a seccomp filter. A child cloned into a cgroup of
         * its own tells both. */
        if (faccessat(r->dirfd, "cgroup.kill", W_OK, 0) < 0) {
                root_fail(r, "cgroup.kill", -errno);
                return;
        }
        if (mkdirat(r->dirfd, "probe", 0755) < 0) {
                root_fail(r, r->path, -errno);
                return;
        }
        probe_fd = openat(r->dirfd, "probe",
                          O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        err = probe_fd < 0 ? -errno : hp_spawn__probe(probe_fd);
        if (probe_fd >= 0)
                close(probe_fd);
        (void)unlinkat(r->dirfd, "probe", AT_REMOVEDIR);
        if (err < 0) {
                root_fail(r, "clone3 into a cgroup", err);
                return;
        }
        hp_log_debug("each group's processes run in a cgroup of their own "
                     "under %s",
                     r->path);
}

void hp_scope__root_close(struct hp_scope_root *r)
{
        if (r->dirfd < 0)
                return;
        close(r->dirfd);
        r->dirfd = -1;
        if (rmdir(r->path) < 0)
                hp_log_debug("cannot remove %s: %s", r->path,
                             hp_strerror(-errno));
}

void hp_scope__open(struct hp_scope_root *r, struct hp_scope *s,
                    const char *name)
{
        s->root = r;
        s->dirfd = -1;
        snprintf(s->name, sizeof(s->name), "%s", name);
        if (r->dirfd < 0)
                return;
        if (mkdirat(r->dirfd, s->name, 0755) < 0 &&
            (errno != EEXIST ||
             unlinkat(r->dirfd, s->name, AT_REMOVEDIR) < 0 ||
             mkdirat(r->dirfd, s->name, 0755) < 0)) {
                hp_log_debug("cannot create the cgroup %s/%s (%s); this "
                             "group's processes are tracked as the agent's "
                             "descendants",
                             r->path, s->name, hp_strerror(-errno));
                return;
        }
        s->dirfd = openat(r->dirfd, s->name,
                          O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->dirfd < 0) {
                hp_log_debug("cannot open the cgroup %s/%s: %s", r->path,
                             s->name, hp_strerror(-errno));
                (void)unlinkat(r->dirfd, s->name, AT_REMOVEDIR);
        }
}

void hp_scope__close(struct hp_scope *s)
{
        if (s->dirfd < 0)
                return;
        close(s->dirfd);
        s->dirfd = -1;
        /* Empty by now, unless a process would not die: then it stays,
         * and the watcher or whoever owns the agent's cgroup removes it. */
        if (unlinkat(s->root->dirfd, s->name, AT_REMOVEDIR) < 0)
                hp_log_debug("cannot remove the cgroup %s/%s: %s",
                             s->root->path, s->name, hp_strerror(-errno));
}

/* The pids in the cgroup's cgroup.procs, live ones only. */
static int cgroup_procs(const struct hp_scope *s, struct hp_procs *out)
{
        char buf[4096], num[16];
        size_t numlen = 0;
        int fd, r = 0;
        ssize_t n;

        fd = openat(s->dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        while ((n = read(fd, buf, sizeof(buf))) > 0 && r == 0) {
                for (ssize_t i = 0; i < n && r == 0; i++) {
                        struct hp_proc p;

                        if (buf[i] != '\n') {
                                if (numlen + 1 < sizeof(num))
                                        num[numlen++] = buf[i];
                                continue;
                        }
                        num[numlen] = '\0';
                        numlen = 0;
                        if (hp_proc_read((pid_t)atoi(num), &p) == 0 &&
                            hp_proc_live(&p))
                                r = hp_procs__push(out, &p);
                }
        }
        if (n < 0 && r == 0)
                r = -errno;
        close(fd);
        return r;
}

int hp_scope__list(const struct hp_scope *s, struct hp_procs *out)
{
        out->count = 0;
        if (s->dirfd >= 0)
                return cgroup_procs(s, out);
        return hp_proc__descendants(out);
}

void hp_scope__kill(const struct hp_scope *s)
{
        struct hp_procs procs = { 0 };
        int fd;

        if (s->dirfd >= 0) {
                fd = openat(s->dirfd, "cgroup.kill", O_WRONLY | O_CLOEXEC);
                if (fd >= 0 && write(fd, "1", 1) == 1) {
                        close(fd);
                        return;
                }
                hp_log_debug("cgroup.kill in %s/%s: %s", s->root->path,
                             s->name, hp_strerror(-errno));
                if (fd >= 0)
                        close(fd);
                /* Then one by one. */
                if (cgroup_procs(s, &procs) == 0)
                        for (size_t i = 0; i < procs.count; i++)
                                (void)kill(procs.items[i].pid, SIGKILL);
                hp_procs__free(&procs);
                return;
        }
        (void)hp_proc__kill_descendants(SIGKILL, false);
}
