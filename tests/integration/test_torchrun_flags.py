# SPDX-License-Identifier: Apache-2.0
"""docs/torchrun-flags.md stays true: every torchrun flag, run.

Each row of the table is run as written (in a directory with job.py,
job.sh and the module job; PORT a free port; a leading NAME=value goes to
the environment): an accepted row must run the job and exit 0, a refused
one must exit 2, quote the row's text in its error, and start nothing.
The table must name every flag of current torchrun and every option of
hyperpodrun's option table (src/config/options.h) that has a PET_ variable.
"""

import re
import shlex

import pytest

from conftest import SOURCE_ROOT, write_exec
from test_multinode import free_port

TABLE = SOURCE_ROOT / "docs" / "torchrun-flags.md"
OPTIONS_H = SOURCE_ROOT / "src" / "config" / "options.h"

# torch/distributed/run.py of PyTorch 2.x, get_args_parser(), in its order.
TORCHRUN_FLAGS = [
    "--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint",
    "--rdzv-id", "--rdzv-conf", "--standalone", "--max-restarts",
    "--monitor-interval", "--start-method", "--event-log-handler", "--role",
    "--module", "--no-python", "--run-path", "--log-dir", "--redirects",
    "--tee", "--local-ranks-filter", "--duplicate-stdout-filters",
    "--duplicate-stderr-filters", "--node-rank", "--master-addr",
    "--master-port", "--local-addr", "--logs-specs", "--numa-binding",
    "--signals-to-handle", "--shutdown-timeout", "--virtual-local-rank",
]
assert len(TORCHRUN_FLAGS) == 30

ROW_RE = re.compile(r"^\|\s*(?P<flag>[^|]*?)\s*\|\s*(?P<pet>[^|]*?)\s*\|"
                    r"\s*`(?P<cmd>[^`]*)`\s*\|\s*(?P<status>[^|]*?)\s*\|"
                    r"\s*(?P<does>.*?)\s*\|$")
STATUS_RE = re.compile(r'^(accepted(, unused)?|refused: "(?P<says>[^"]+)")$')


def rows():
    out = []
    for line in TABLE.read_text().splitlines():
        m = ROW_RE.match(line)
        if m is None or m["cmd"] == "command":
            continue
        status = STATUS_RE.match(m["status"])
        assert status, f"status not understood: {line}"
        flags = re.findall(r"`(-[-a-z]+)`", m["flag"])
        assert flags, f"no flag in: {line}"
        out.append({"flags": flags, "pet": m["pet"].strip("`"),
                    "cmd": m["cmd"], "refused": status["says"]})
    return out


ROWS = rows()


def test_table_names_every_torchrun_flag():
    named = {f for row in ROWS for f in row["flags"]}
    assert set(TORCHRUN_FLAGS) <= named, set(TORCHRUN_FLAGS) - named
    # And each flag's row runs that flag (its short form counts).
    for row in ROWS:
        words = shlex.split(row["cmd"])
        assert any(w in words for w in row["flags"]) or \
            row["pet"] and row["cmd"].startswith(row["pet"] + "="), row


def test_table_names_every_pet_option():
    """An option with a PET_ variable is torchrun's: it must be here,
    with that variable."""
    text = OPTIONS_H.read_text().replace("\\\n", " ")
    pets = re.findall(r'XX\(\w+,\s*"([a-z-]+)",\s*\S+,\s*(?:NULL|"[^"]*"),'
                      r'\s*"(PET_\w+)",', text)
    assert len(pets) >= 25
    by_flag = {}
    for row in ROWS:
        for f in row["flags"]:
            by_flag.setdefault(f, set()).add(row["pet"])
    for name, pet in pets:
        assert f"--{name}" in by_flag, f"--{name} ({pet}) is not in the table"
        assert pet in by_flag[f"--{name}"], (name, pet, by_flag[f"--{name}"])


@pytest.fixture
def jobdir(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    mark = tmp_path / "ran"
    mark.mkdir()
    (d / "job.py").write_text(
        "import os\n"
        "open(os.path.join(os.environ['JOB_MARK'], 'ran' + "
        "os.environ['RANK']), 'w').close()\n"
        "print('trivial job ran', flush=True)\n")
    write_exec(d / "job.sh",
               "#!/bin/sh\n: > \"$JOB_MARK/ran$RANK\"\necho trivial job ran\n")
    return d, mark


@pytest.mark.parametrize("row", ROWS, ids=[r["cmd"] for r in ROWS])
def test_row(hpr, jobdir, row):
    cwd, mark = jobdir
    port = str(free_port())
    words = [w.replace("PORT", port) for w in shlex.split(row["cmd"])]
    env = {"JOB_MARK": mark}
    while words and re.match(r"^[A-Z_]+=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    r = hpr.run(words, env=env, cwd=cwd, timeout=60)
    ran = sorted(p.name for p in mark.iterdir())
    if row["refused"] is None:
        assert r.rc == 0, r.describe()
        assert "ran0" in ran, r.describe()
    else:
        assert r.rc == 2, r.describe()
        assert row["refused"] in r.err, r.describe()
        assert "hyperpodrun: error: " in r.err
        assert ran == [], r.describe()


WRITER = """import os, sys
r = os.environ["RANK"]
print(f"step 1 loss=0.5 rank {r}")
print(f"step 1 acc=0.9 rank {r}")
print(f"noise, with a comma {r}")
print(f"NCCL WARN timeout {r}", file=sys.stderr)
print(f"plain stderr {r}", file=sys.stderr)
"""


def test_duplicate_filters_copy_as_torchrun(hpr, tmp_path):
    """The tee'd ranks the console shows (not rank 2, filtered out), each
    line with its console prefix, when it contains one of the filters;
    ",," is a comma inside a filter. One file per stream per attempt."""
    script = tmp_path / "w.py"
    script.write_text(WRITER)
    r = hpr.run(["--standalone", "--nproc-per-node", 3, "--tee", 3,
                 "--local-ranks-filter", "0,1",
                 "--duplicate-stdout-filters", "loss,noise,, with",
                 script], env={"PET_DUPLICATE_STDERR_FILTERS": "NCCL"})
    assert r.rc == 0, r.describe()
    attempt = hpr.only_train_dir() / "attempt_0"
    out = (attempt / "filtered_stdout.log").read_text().splitlines()
    assert sorted(out) == sorted(
        [f"[default{k}]:step 1 loss=0.5 rank {k}" for k in (0, 1)] +
        [f"[default{k}]:noise, with a comma {k}" for k in (0, 1)]), out
    err = (attempt / "filtered_stderr.log").read_text().splitlines()
    assert sorted(err) == [f"[default{k}]:NCCL WARN timeout {k}"
                           for k in (0, 1)], err
    # The per-rank files are untouched by it.
    assert (attempt / "2" / "stdout.log").read_text().count("\n") == 3


def test_duplicate_filter_empty_copies_every_line(hpr, tmp_path):
    """torchrun splits "" into one empty filter, which every line holds;
    a rank that is not tee'd is not copied."""
    script = tmp_path / "w.py"
    script.write_text(WRITER)
    r = hpr.run(["--standalone", "--nproc-per-node", 2, "--tee", "0:1",
                 "--duplicate-stdout-filters", "", script])
    assert r.rc == 0, r.describe()
    attempt = hpr.only_train_dir() / "attempt_0"
    out = (attempt / "filtered_stdout.log").read_text().splitlines()
    assert out == ["[default0]:step 1 loss=0.5 rank 0",
                   "[default0]:step 1 acc=0.9 rank 0",
                   "[default0]:noise, with a comma 0"], out
    assert not (attempt / "filtered_stderr.log").exists()
