/* SPDX-License-Identifier: Apache-2.0 */
/* The Python side of a hang report: the sitecustomize.py the workers'
 * PYTHONPATH loads (see the top of forensics.c for what it does and why),
 * the private directory that holds it, and the removal of the ones that
 * SIGKILLed agents left behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "hyperpod/common.h"
#include "hyperpod/forensics.h"

#include "forensics-private.h"

/* The Python text as Python has it, at column 0. */
/* clang-format off */
static const char sitecustomize[] =
"# Written by hyperpodrun (--hang-dump): lets the agent ask this Python\n"
"# worker for the stack of every thread. faulthandler writes it to a\n"
"# memory file that the agent reads, never to stdout or stderr. The\n"
"# variable is removed so that only the worker itself registers, not the\n"
"# processes it starts. Then the sitecustomize this one hides, if any,\n"
"# runs as it would have.\n"
"import os as _hp_os\n"
"import sys as _hp_sys\n"
"\n"
"\n"
"def _hp_register():\n"
"    sig = _hp_os.environ.pop('HYPERPODRUN_STACKS_SIGNAL', None)\n"
"    if not sig:\n"
"        return\n"
"    try:\n"
"        import _thread\n"
"        import faulthandler\n"
"        import signal\n"
"        sig = int(sig)\n"
"        fd = _hp_os.memfd_create('hyperpodrun-stacks')\n"
"        r, w = _hp_os.pipe()\n"
"        # faulthandler puts this back as Python exits: a signal that\n"
"        # comes then is lost instead of killing the worker.\n"
"        signal.signal(sig, signal.SIG_IGN)\n"
"        faulthandler.register(sig, file=fd, all_threads=True)\n"
"        # The thread takes no signal but ours: a SIGTERM sent to the\n"
"        # process must land on the worker's own threads, or its handler\n"
"        # waits for the main thread to wake (time.sleep is not woken).\n"
"        # Blocked here first, so that the thread starts with the mask.\n"
"        keep = {sig, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE,\n"
"                signal.SIGILL, signal.SIGABRT}\n"
"        mask = signal.pthread_sigmask(\n"
"            signal.SIG_BLOCK, set(signal.valid_signals()) - keep)\n"
"        try:\n"
"            _thread.start_new_thread(_hp_stacks_wait,\n"
"                                     (fd, r, w, _thread.get_native_id))\n"
"        finally:\n"
"            signal.pthread_sigmask(signal.SIG_SETMASK, mask)\n"
"    except Exception:\n"
"        pass\n"
"\n"
"\n"
"def _hp_stacks_wait(fd, r, w, native_id):\n"
"    # The only thread the agent signals: it waits in a pipe read, which\n"
"    # the kernel restarts after the handler (SA_RESTART), so no call of\n"
"    # the worker's own threads is ever interrupted by a report.\n"
"    _hp_os.write(fd, ('hyperpodrun-stacks 2 pid=%d tid=%d\\n'\n"
"                      % (_hp_os.getpid(), native_id())).encode())\n"
"    while True:\n"
"        _hp_os.read(r, 1)\n"
"\n"
"\n"
"def _hp_chain():\n"
"    import importlib.machinery\n"
"    import importlib.util\n"
"    here = _hp_os.path.dirname(_hp_os.path.abspath(__file__))\n"
"    path = [p for p in _hp_sys.path\n"
"            if _hp_os.path.abspath(p or _hp_os.curdir) != here]\n"
"    spec = importlib.machinery.PathFinder.find_spec('sitecustomize', path)\n"
"    if spec is None or spec.loader is None:\n"
"        return\n"
"    module = importlib.util.module_from_spec(spec)\n"
"    _hp_sys.modules['sitecustomize'] = module\n"
"    spec.loader.exec_module(module)\n"
"\n"
"\n"
"_hp_register()\n"
"_hp_chain()\n";
/* clang-format on */

#define PYTHON_DIR_PREFIX "hyperpodrun-py-"

/* Whether name, in the directory dirfd, is something an agent puts in its
 * Python directory: our sitecustomize.py, Python's __pycache__ of it, and
 * the flight recorder's pipes (nccl-fr-<rank>.pipe), all of our user. */
static bool python_dir_entry_ours(int dirfd, const char *name, bool cache)
{
        size_t len = strlen(name);
        struct stat st;

        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return true;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            st.st_uid != geteuid())
                return false;
        if (cache)
                return S_ISREG(st.st_mode) &&
                       strncmp(name, "sitecustomize.", 14) == 0 && len > 4 &&
                       strcmp(name + len - 4, ".pyc") == 0;
        if (strcmp(name, "sitecustomize.py") == 0)
                return S_ISREG(st.st_mode);
        if (strncmp(name, "nccl-fr-", 8) == 0 && len > 13 &&
            strcmp(name + len - 5, ".pipe") == 0 &&
            strspn(name + 8, "0123456789") == len - 13)
                return S_ISFIFO(st.st_mode);
        if (strcmp(name, "__pycache__") != 0 || !S_ISDIR(st.st_mode))
                return false;
        {
                int fd = openat(dirfd, name,
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                        O_CLOEXEC);
                DIR *d = fd < 0 ? NULL : fdopendir(fd);
                struct dirent *de;
                bool ours = d != NULL;

                if (d == NULL && fd >= 0)
                        close(fd);
                while (ours && (de = readdir(d)) != NULL)
                        ours = python_dir_entry_ours(fd, de->d_name, true);
                if (d != NULL)
                        closedir(d);
                return ours;
        }
}

/* A SIGKILLed agent leaves its Python directory in tmp. One that is
 * provably a dead agent's goes: our name (hyperpodrun-py-<pid>-XXXXXX), a
 * 0700 directory of our user, the pid no live hyperpodrun's, no one
 * holding its lock (a live agent holds it, in any pid namespace), and
 * nothing in it but what an agent puts there. */
void hp_forensics__remove_stale(const char *tmp)
{
        struct dirent *de;
        DIR *d = opendir(tmp);

        if (d == NULL)
                return;
        while ((de = readdir(d)) != NULL) {
                const char *digits = de->d_name + strlen(PYTHON_DIR_PREFIX);
                struct dirent *in;
                struct stat st;
                bool ours;
                DIR *sub;
                char *end;
                long pid;
                int fd;

                if (strncmp(de->d_name, PYTHON_DIR_PREFIX,
                            strlen(PYTHON_DIR_PREFIX)) != 0 ||
                    *digits < '1' || *digits > '9')
                        continue;
                pid = strtol(digits, &end, 10);
                if (*end != '-' || strlen(end + 1) != 6 ||
                    hp_pid_is_other_agent(pid))
                        continue;
                fd = openat(dirfd(d), de->d_name,
                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        continue;
                if (fstat(fd, &st) < 0 || st.st_uid != geteuid() ||
                    (st.st_mode & 07777) != 0700 ||
                    flock(fd, LOCK_EX | LOCK_NB) < 0) {
                        close(fd);
                        continue;
                }
                sub = fdopendir(fd);
                if (sub == NULL) {
                        close(fd);
                        continue;
                }
                ours = true;
                while (ours && (in = readdir(sub)) != NULL)
                        ours = python_dir_entry_ours(fd, in->d_name, false);
                /* Removed while we hold its lock: an agent that started
                 * meanwhile never takes a directory it did not make. */
                if (ours && hp_remove_tree_at(dirfd(d), de->d_name) == 0)
                        hp_log_info("removed %s/%s, left by agent %ld, which "
                                    "is gone",
                                    tmp, de->d_name, pid);
                closedir(sub);
        }
        closedir(d);
}

/* Writes sitecustomize.py into a private directory of $TMPDIR, removed at
 * exit, and builds the workers' PYTHONPATH with it first. */
int hp_forensics__prepare_python(struct hp_forensics *f, const char *tmp,
                                 char *errbuf, size_t errlen)
{
        const char *inherited = getenv("PYTHONPATH");
        char file[PATH_MAX];
        size_t len;
        int fd, r;

        if (hp_snprintf(f->python_dir, sizeof(f->python_dir),
                        "%s/" PYTHON_DIR_PREFIX "%d-XXXXXX", tmp,
                        (int)getpid()) < 0 ||
            mkdtemp(f->python_dir) == NULL) {
                r = f->python_dir[0] ? -errno : -ENAMETOOLONG;
                snprintf(errbuf, errlen,
                         "--hang-dump: cannot create a directory in %s: %s",
                         tmp, hp_strerror(r));
                f->python_dir[0] = '\0';
                return HP_ECONFIG;
        }
        /* Held until we exit: the directory is a live agent's. */
        f->python_dir_fd = open(f->python_dir, O_RDONLY | O_DIRECTORY |
                                                       O_NOFOLLOW |
                                                       O_CLOEXEC);
        if (f->python_dir_fd < 0 ||
            flock(f->python_dir_fd, LOCK_EX | LOCK_NB) < 0) {
                r = -errno;
                snprintf(errbuf, errlen, "--hang-dump: cannot lock '%s': %s",
                         f->python_dir, hp_strerror(r));
                return HP_ECONFIG;
        }
        if (hp_snprintf(file, sizeof(file), "%s/sitecustomize.py",
                        f->python_dir) < 0)
                return -ENAMETOOLONG;
        fd = openat(f->python_dir_fd, "sitecustomize.py",
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0644);
        r = fd < 0 ? -errno
                   : hp_write_all(fd, sitecustomize,
                                  sizeof(sitecustomize) - 1);
        if (fd >= 0 && close(fd) < 0 && r == 0)
                r = -errno;
        if (r < 0) {
                snprintf(errbuf, errlen, "--hang-dump: cannot write '%s': %s",
                         file, hp_strerror(r));
                return HP_ECONFIG;
        }
        len = strlen(f->python_dir) + 2 + (inherited ? strlen(inherited) : 0);
        f->python_path = malloc(len);
        if (f->python_path == NULL)
                return -ENOMEM;
        snprintf(f->python_path, len, "%s%s%s", f->python_dir,
                 inherited && *inherited ? ":" : "",
                 inherited ? inherited : "");
        snprintf(f->stacks_signal, sizeof(f->stacks_signal), "%d",
                 SIGRTMIN + STACKS_SIGNAL_OFFSET);
        return 0;
}
