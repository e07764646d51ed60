/* SPDX-License-Identifier: Apache-2.0 */
/* Where the worker socket listens: Python's temporary directory, the
 * reference's fixed name there when it is free (or a dead agent's), else
 * a private directory of this agent's; and the leftovers of dead agents
 * removed at start. Only system calls, no loop: server.c calls it once. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/ipc.h"

#include "ipc-private.h"

/* The directory Python's tempfile.gettempdir() would choose. */
const char *hp_ipc__temp_dir(void)
{
        static const char *const vars[] = { "TMPDIR", "TEMP", "TMP" };
        static const char *const dirs[] = { "/tmp", "/var/tmp", "/usr/tmp" };

        for (size_t i = 0; i < HP_ARRAY_SIZE(vars); i++) {
                const char *d = getenv(vars[i]);
                if (d != NULL && d[0] != '\0' && access(d, W_OK | X_OK) == 0)
                        return d;
        }
        for (size_t i = 0; i < HP_ARRAY_SIZE(dirs); i++)
                if (access(dirs[i], W_OK | X_OK) == 0)
                        return dirs[i];
        return "/tmp";
}

/* Whether no one listens on dir/name: a connection is refused. */
static bool nobody_listens(const char *dir, const char *name)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        bool refused;
        int fd;

        if (hp_snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s", dir,
                        name) < 0)
                return false;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return false;
        refused = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 &&
                  errno == ECONNREFUSED;
        close(fd);
        return refused;
}

/* The pid in name between prefix and suffix (where the name ends, or
 * where more follows with more), or 0; 0 too for our own. */
static long pid_in_name(const char *name, const char *prefix,
                        const char *suffix, bool more)
{
        size_t plen = strlen(prefix);
        char *end;
        long pid;

        if (strncmp(name, prefix, plen) != 0 || name[plen] < '1' ||
            name[plen] > '9')
                return 0;
        pid = strtol(name + plen, &end, 10);
        if (more ? strncmp(end, suffix, strlen(suffix)) != 0
                 : strcmp(end, suffix) != 0)
                return 0;
        return pid == (long)getpid() ? 0 : pid;
}

/* Whether name in dir is a socket of our user, of an agent that is gone
 * (not a live hyperpodrun), that no one listens on (an agent of another
 * pid namespace sharing dir still listens). */
static bool dead_agents_socket(DIR *d, const char *dir, const char *name,
                               long pid)
{
        struct stat st;

        return fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISSOCK(st.st_mode) && st.st_uid == geteuid() &&
               !hp_pid_is_other_agent(pid) && nobody_listens(dir, name);
}

/* A dead agent's private socket directory (bind_private's), name in
 * parent: goes only when it is ours (0700, our user) and holds nothing
 * but that agent's socket, which no one listens on. */
static void remove_stale_private_dir(DIR *parent, const char *dir,
                                     const char *name, long pid)
{
        char path[PATH_MAX], sock[64];
        struct dirent *de;
        struct stat st;
        bool ours = true, has_sock = false;
        DIR *d;
        int fd;

        if (hp_snprintf(path, sizeof(path), "%s/%s", dir, name) < 0)
                return;
        snprintf(sock, sizeof(sock), "hyperpod_elastic_agent_%ld.sock", pid);
        fd = openat(dirfd(parent), name,
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return;
        if (fstat(fd, &st) < 0 || st.st_uid != geteuid() ||
            (st.st_mode & 07777) != 0700 || (d = fdopendir(fd)) == NULL) {
                close(fd);
                return;
        }
        while (ours && (de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 ||
                    strcmp(de->d_name, "..") == 0)
                        continue;
                if (strcmp(de->d_name, sock) == 0 &&
                    dead_agents_socket(d, path, sock, pid))
                        has_sock = true;
                else
                        ours = false;
        }
        if (ours && (!has_sock || unlinkat(dirfd(d), sock, 0) == 0) &&
            unlinkat(dirfd(parent), name, AT_REMOVEDIR) == 0)
                hp_log_info("worker socket: removed %s, left by agent %ld, "
                            "which is gone",
                            path, pid);
        closedir(d);
}

/* A SIGKILLed agent leaves its socket in dir, or its private directory
 * when the reference's path was taken. What is provably a dead agent's
 * goes (ours is replaced at bind). */
void hp_ipc__remove_stale_sockets(const char *dir)
{
        struct dirent *de;
        DIR *d = opendir(dir);

        if (d == NULL)
                return;
        while ((de = readdir(d)) != NULL) {
                long pid = pid_in_name(de->d_name, "hyperpod_elastic_agent_",
                                       ".sock", false);

                if (pid > 0) {
                        if (dead_agents_socket(d, dir, de->d_name, pid) &&
                            unlinkat(dirfd(d), de->d_name, 0) == 0)
                                hp_log_info("worker socket: removed %s/%s, "
                                            "left by agent %ld, which is "
                                            "gone",
                                            dir, de->d_name, pid);
                        continue;
                }
                pid = pid_in_name(de->d_name, "hyperpodrun-ipc-", ".", true);
                if (pid > 0 && !hp_pid_is_other_agent(pid))
                        remove_stale_private_dir(d, dir, de->d_name, pid);
        }
        closedir(d);
}

/* Whether a process listens on the Unix socket at path. */
static bool socket_live(const char *path)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd, r;

        if (strlen(path) >= sizeof(addr.sun_path))
                return false;
        memcpy(addr.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return true; /* cannot tell: leave it */
        r = connect(fd, (struct sockaddr *)&addr, sizeof(addr));
        /* EAGAIN: it listens, its backlog is full. */
        r = r == 0 || errno == EAGAIN || errno == EINPROGRESS;
        close(fd);
        return r;
}

/*
 * Frees the reference's path for our socket when what is there is ours and
 * dead (a socket nobody listens on, a file or link of this uid): a
 * SIGKILLed agent of the same pid, as a container's PID 1 always is.
 * Anything else is left alone and -EADDRINUSE returned with what it is in
 * why: a directory, a live socket (another agent of pid 1 sharing /tmp),
 * or anything of another uid, which would otherwise stop the agent or be
 * removed from under its owner.
 */
static int clear_path(const char *path, char *why, size_t len)
{
        const char *kind;
        struct stat st;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        kind = S_ISSOCK(st.st_mode)  ? "a socket"
               : S_ISDIR(st.st_mode) ? "a directory"
               : S_ISLNK(st.st_mode) ? "a symbolic link"
               : S_ISREG(st.st_mode) ? "a file"
                                     : "a special file";
        if (st.st_uid == geteuid() && !S_ISDIR(st.st_mode) &&
            !(S_ISSOCK(st.st_mode) && socket_live(path))) {
                if (unlink(path) < 0 && errno != ENOENT)
                        return -errno;
                hp_log_debug("worker socket: removed a stale %s", path);
                return 0;
        }
        /* The uid as a number: the agent looks up no user (no NSS in the
         * static binary). */
        snprintf(why, len, "%s of uid %u%s", kind, (unsigned)st.st_uid,
                 S_ISSOCK(st.st_mode) && st.st_uid == geteuid()
                         ? " that another process listens on"
                         : "");
        return -EADDRINUSE;
}

/* Binds the listener at s->path, 0600 from the start. */
static int bind_path(struct hp_ipc_server *s)
{
        mode_t old_mask = umask(0177);
        int r;

        /* Only the agent's user may connect, from the moment it exists. */
        r = uv_pipe_bind(&s->listener, s->path);
        umask(old_mask);
        if (r == 0 && chmod(s->path, 0600) < 0)
                r = -errno;
        return r;
}

/* The socket in a directory of our own, made 0700 by mkdtemp in dir, where
 * no other uid can put anything. */
static int bind_private(struct hp_ipc_server *s, const char *dir)
{
        int r;

        r = hp_snprintf(s->dir, sizeof(s->dir),
                        "%s/hyperpodrun-ipc-%d.XXXXXX", dir, (int)getpid());
        if (r < 0)
                return r;
        if (mkdtemp(s->dir) == NULL) {
                r = -errno;
                s->dir[0] = '\0';
                return r;
        }
        r = hp_snprintf(s->path, sizeof(s->path),
                        "%s/hyperpod_elastic_agent_%d.sock", s->dir,
                        (int)getpid());
        if (r == 0)
                r = bind_path(s);
        if (r < 0) {
                (void)rmdir(s->dir);
                s->dir[0] = '\0';
        }
        return r;
}

/* Listens at the reference's path, or in a private directory beside it
 * when that path is taken: the workers find it either way, through the
 * environment. */
int hp_ipc__bind_listener(struct hp_ipc_server *s, const char *dir,
                          char *errbuf, size_t errlen)
{
        char taken[sizeof(s->path)], why[256] = "in use";
        int r;

        r = clear_path(s->path, why, sizeof(why));
        if (r == 0)
                r = bind_path(s);
        if (r != UV_EADDRINUSE && r != -EADDRINUSE) {
                if (r < 0)
                        snprintf(errbuf, errlen, "worker socket %s: %s",
                                 s->path, hp_strerror(r));
                return r;
        }
        memcpy(taken, s->path, sizeof(taken));
        r = bind_private(s, dir);
        if (r < 0) {
                snprintf(errbuf, errlen,
                         "worker socket: %s is %s, and no private directory "
                         "could be made in %s instead: %s",
                         taken, why, dir, hp_strerror(r));
                return r;
        }
        hp_log_warn("worker socket: %s is %s, not this agent's: listening "
                    "on %s instead (workers find it through %s)",
                    taken, why, s->path, HP_IPC_ENV);
        return 0;
}
