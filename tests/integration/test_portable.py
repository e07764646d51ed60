# SPDX-License-Identifier: Apache-2.0
"""The binary runs on older distributions and says what it is.

* The dynamic binary needs no glibc symbol newer than GLIBC_2.34, so that it
  starts where glibc is 2.34 or 2.35 (Amazon Linux 2023, Ubuntu 22.04):
  newer system calls go through syscall(2) (src/common/hp-sys.h).
* On a kernel without pidfds it stops at start with exit status 2 and a
  message naming the kernel. An old kernel is played by a seccomp filter that
  answers the missing call as that kernel would.
* --version names the commit, static or dynamic, and the library versions.
"""

import ctypes
import errno
import os
import re
import subprocess

import pytest

from conftest import HYPERPODRUN, SOURCE_ROOT

NEWEST_GLIBC = (2, 34)

__NR_waitid = 247          # x86_64
__NR_pidfd_open = 434      # every architecture
P_PIDFD = 3


def is_static(path):
    out = subprocess.run(["readelf", "-lW", path], capture_output=True,
                         text=True, check=True).stdout
    return "INTERP" not in out


def test_no_glibc_symbol_newer_than_2_34():
    if is_static(HYPERPODRUN):
        pytest.skip("a static binary has no versioned symbols")
    out = subprocess.run(["objdump", "-T", HYPERPODRUN], capture_output=True,
                         text=True, check=True).stdout
    versions = {}
    for line in out.splitlines():
        m = re.search(r"\(?GLIBC_(\d+)\.(\d+)(?:\.\d+)?\)?\s+(\S+)$", line)
        if m:
            versions[m.group(3)] = (int(m.group(1)), int(m.group(2)))
    # objdump found the table: the check below cannot pass vacuously.
    assert "__libc_start_main" in versions, out[:2000]
    too_new = {s: v for s, v in versions.items() if v > NEWEST_GLIBC}
    assert not too_new, (
        f"symbols newer than GLIBC_{NEWEST_GLIBC[0]}.{NEWEST_GLIBC[1]}: "
        f"{too_new}; call them through syscall(2) in src/common/hp-sys.h")


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort),
                ("filter", ctypes.POINTER(SockFilter))]


def refuse(nr, err, arg0=None):
    """A preexec_fn that installs a seccomp filter failing system call nr
    (only when its first argument is arg0, if given) with errno err."""
    LD_ABS, JEQ, RET = 0x20, 0x15, 0x06
    ALLOW, ERRNO = 0x7fff0000, 0x00050000
    prog = [(LD_ABS, 0, 0, 0)]                     # seccomp_data.nr
    if arg0 is None:
        prog += [(JEQ, 0, 1, nr)]
    else:
        prog += [(JEQ, 0, 3, nr),
                 (LD_ABS, 0, 0, 16),               # args[0], low word
                 (JEQ, 0, 1, arg0)]
    prog += [(RET, 0, 0, ERRNO | err), (RET, 0, 0, ALLOW)]

    def install():
        libc = ctypes.CDLL(None, use_errno=True)
        filters = (SockFilter * len(prog))(*prog)
        fprog = SockFprog(len(prog), filters)
        if libc.prctl(38, 1, 0, 0, 0) != 0:        # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # SECCOMP
            raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    return install


@pytest.mark.parametrize("nr,err,arg0,missing", [
    # Linux before 5.3: no pidfd_open.
    (__NR_pidfd_open, errno.ENOSYS, None, "pidfd_open"),
    # Linux 5.3: pidfd_open but no waitid(P_PIDFD).
    (__NR_waitid, errno.EINVAL, P_PIDFD, "waitid(P_PIDFD)"),
])
def test_old_kernel_fails_at_start(tmp_path, nr, err, arg0, missing):
    marker = tmp_path / "ran"
    res = subprocess.run(
        [HYPERPODRUN, "--standalone", "--nproc-per-node", "1",
         "--log-dir", str(tmp_path / "logs"), "--no-python", "/bin/touch",
         str(marker)],
        capture_output=True, text=True, timeout=30,
        preexec_fn=refuse(nr, err, arg0))
    assert res.returncode == 2, res.stderr
    release = os.uname().release
    assert (f"hyperpodrun: error: this kernel (Linux {release}) lacks "
            f"{missing}: hyperpodrun needs Linux 5.4 or newer") in res.stderr
    assert not marker.exists()


def test_seccomp_other_calls_still_run(tmp_path):
    """The filter itself does not break the agent: waitid with another
    idtype still works, and the job runs."""
    marker = tmp_path / "ran"
    res = subprocess.run(
        [HYPERPODRUN, "--standalone", "--nproc-per-node", "1",
         "--log-dir", str(tmp_path / "logs"), "--no-python", "/bin/touch",
         str(marker)],
        capture_output=True, text=True, timeout=30,
        preexec_fn=refuse(__NR_waitid, errno.EINVAL, 99))
    assert res.returncode == 0, res.stderr
    assert marker.exists()


def test_version_names_commit_and_libraries():
    res = subprocess.run([HYPERPODRUN, "--version"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    kind = "static" if is_static(HYPERPODRUN) else "dynamic"
    head = re.fullmatch(r"hyperpodrun (\S+) \(commit (\S+), (\w+)\)",
                        lines[0])
    assert head, lines[0]
    assert head.group(3) == kind
    if (SOURCE_ROOT / ".git").exists():
        commit = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"],
            capture_output=True, text=True).stdout.strip()
        if commit:
            assert commit.startswith(head.group(2)), (commit, lines[0])
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["libuv", "PCRE2", "cJSON", "libyaml", "http-parser"]
    for line in lines[1:]:
        assert re.match(r"\S+ \d+\.\d+(\.\d+)?", line), line
    # The PCRE2 that Debian builds has JIT on x86_64, and the rules use it.
    assert re.fullmatch(r"PCRE2 \S+ \S+ \(JIT yes\)", lines[2]), lines[2]
