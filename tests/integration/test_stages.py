# SPDX-License-Identifier: Apache-2.0
"""Stages (pre-train → workers → post-train) and refusal of bad input."""

import json
import os
import re

import pytest

from conftest import helper, read_json, worker_lines, write_exec

HOOK = r"""#!/usr/bin/python3
import json, os, sys
name = os.path.basename(sys.argv[0]).split(".")[0]
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
with open(os.environ["ORDER_FILE"], "a") as f:
    f.write(f"{name} {attempt}\n")
with open(os.path.join(os.environ["OUT_DIR"], f"{name}_{attempt}.json"), "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ)}, f)
print(f"{name} says hi")
print(f"{name} complains", file=sys.stderr)
fail = os.environ.get(name.upper() + "_FAIL_UNTIL")
if fail and int(attempt) < int(fail.split(":")[1]):
    sys.exit(int(fail.split(":")[0]))
"""

WORKER = r"""#!/bin/sh
echo "train $RANK $TORCHELASTIC_RESTART_COUNT" >> "$ORDER_FILE"
echo "worker $RANK"
if [ -n "$TRAIN_FAIL_UNTIL" ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt "$TRAIN_FAIL_UNTIL" ]; then
    exit 6
fi
"""


@pytest.fixture
def stage(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    order_file = tmp_path / "order"

    class S:
        pre = write_exec(tmp_path / "pre.py", HOOK)
        post = write_exec(tmp_path / "post.py", HOOK)
        worker = write_exec(tmp_path / "train.sh", WORKER)
        env = {"ORDER_FILE": order_file, "OUT_DIR": out}
        outdir = out

        @staticmethod
        def order():
            return (order_file.read_text().splitlines()
                    if order_file.exists() else [])

    return S


def hook_dir(hpr, name, run_id):
    dirs = hpr.run_dirs(f"{name}_{run_id}_")
    assert len(dirs) == 1, [d.name for d in hpr.run_dirs()]
    assert re.fullmatch(rf"{name}_{re.escape(run_id)}_[a-z0-9_]{{8}}", dirs[0].name)
    return dirs[0]


def test_stages_in_order_with_one_argument(hpr, stage):
    pre_args = 'a b  "c" $HOME;* \\n'
    post_args = "--x=1 --y 2"
    r = hpr.run(["--rdzv-backend", "static", "--nnodes", "2", "--node-rank", "1",
                 "--nproc-per-node", "2", "--tee", "3", "--rdzv-id", "st",
                 "--pre-train-script", stage.pre, "--pre-train-args", pre_args,
                 "--post-train-script", stage.post, "--post-train-args", post_args,
                 "--no-python", stage.worker], env=stage.env)
    assert r.rc == 0, r.describe()
    order = stage.order()
    assert order[0] == "pre 0"
    assert sorted(order[1:3]) == ["train 2 0", "train 3 0"]
    assert order[3:] == ["post 0"]

    pre = read_json(stage.outdir / "pre_0.json")
    post = read_json(stage.outdir / "post_0.json")
    assert pre["argv"] == [str(stage.pre), pre_args]
    assert post["argv"] == [str(stage.post), post_args]
    for rec in (pre, post):
        assert rec["env"]["LOCAL_RANK"] == "0"
        assert rec["env"]["LOCAL_WORLD_SIZE"] == "1"
        assert rec["env"]["RANK"] == "2"  # node_rank * nproc

    # Hook logs: <log-dir>/{pre,post}_train_<run_id>_XXXXXXXX/attempt_0/0/.
    for name, hook in (("pre_train", "pre"), ("post_train", "post")):
        d = hook_dir(hpr, name, "st") / "attempt_0" / "0"
        assert (d / "stdout.log").read_text() == f"{hook} says hi\n"
        assert (d / "stderr.log").read_text() == f"{hook} complains\n"
    assert hpr.train_dir("st")
    # Console: the hooks' role is their stage name.
    assert b"[pre_train0]:pre says hi\n" in r.stdout
    assert b"[post_train0]:post says hi\n" in r.stdout
    assert b"[pre_train0]:pre complains\n" in r.stderr
    assert b"[post_train0]:post complains\n" in r.stderr
    lines = r.stdout.splitlines()
    assert lines.index(b"[pre_train0]:pre says hi") < \
        lines.index(b"[default0]:worker 2") < lines.index(b"[post_train0]:post says hi")


def test_no_argument_without_flag(hpr, stage):
    r = hpr.run(["--standalone", "--pre-train-script", stage.pre,
                 "--post-train-script", stage.post, "--no-python", stage.worker],
                env=stage.env)
    assert r.rc == 0, r.describe()
    assert read_json(stage.outdir / "pre_0.json")["argv"] == [str(stage.pre)]
    assert read_json(stage.outdir / "post_0.json")["argv"] == [str(stage.post)]


def test_empty_args_is_one_empty_argument(hpr, stage):
    r = hpr.run(["--standalone", "--pre-train-script", stage.pre,
                 "--pre-train-args", "", "--no-python", stage.worker],
                env=stage.env)
    assert r.rc == 0, r.describe()
    assert read_json(stage.outdir / "pre_0.json")["argv"] == [str(stage.pre), ""]


def test_failing_pre_train_stops_everything(hpr, stage):
    r = hpr.run(["--standalone", "--nproc-per-node", "2",
                 "--pre-train-script", stage.pre,
                 "--post-train-script", stage.post, "--no-python", stage.worker],
                env={**stage.env, "PRE_FAIL_UNTIL": "9:99"})
    assert r.rc == 9, r.describe()
    assert stage.order() == ["pre 0"]
    assert "pre.py" in r.err and re.search(r"exitcode\s*: 9 ", r.err)
    # The stage run dirs are made up front (as the HyperPod agent does), but
    # an attempt dir only for a stage that started.
    for d in hpr.run_dirs():
        if not d.name.startswith("pre_train_"):
            assert list(d.iterdir()) == [], f"{d.name} has {list(d.iterdir())}"


def test_failing_post_train(hpr, stage):
    r = hpr.run(["--standalone", "--nproc-per-node", "2",
                 "--pre-train-script", stage.pre,
                 "--post-train-script", stage.post, "--no-python", stage.worker],
                env={**stage.env, "POST_FAIL_UNTIL": "4:99"})
    assert r.rc == 4, r.describe()
    order = stage.order()
    assert order[0] == "pre 0" and order[-1] == "post 0"
    assert sorted(order[1:-1]) == ["train 0 0", "train 1 0"]


def test_failing_workers_skip_post_train(hpr, stage):
    r = hpr.run(["--standalone", "--pre-train-script", stage.pre,
                 "--post-train-script", stage.post, "--no-python", stage.worker],
                env={**stage.env, "TRAIN_FAIL_UNTIL": "99"})
    assert r.rc == 6, r.describe()
    assert stage.order() == ["pre 0", "train 0 0"]


def test_hooks_rerun_on_restart(hpr, stage):
    r = hpr.run(["--standalone", "--max-restarts", "2", "-t", "1",
                 "--pre-train-script", stage.pre,
                 "--post-train-script", stage.post, "--no-python", stage.worker],
                env={**stage.env, "TRAIN_FAIL_UNTIL": "1"})
    assert r.rc == 0, r.describe()
    assert stage.order() == ["pre 0", "train 0 0", "pre 1", "train 0 1", "post 1"]
    run_id = read_json(stage.outdir / "pre_0.json")["env"]["TORCHELASTIC_RUN_ID"]
    pre_dir = hook_dir(hpr, "pre_train", run_id)
    assert sorted(p.name for p in pre_dir.iterdir()) == ["attempt_0", "attempt_1"]
    for n in range(2):
        assert (pre_dir / f"attempt_{n}" / "0" / "stdout.log").read_text() == \
            "pre says hi\n"
    post_dir = hook_dir(hpr, "post_train", run_id)
    assert [p.name for p in post_dir.iterdir()] == ["attempt_1"]


def test_failing_pre_train_uses_a_restart(hpr, stage):
    r = hpr.run(["--standalone", "--max-restarts", "1",
                 "--pre-train-script", stage.pre, "--no-python", stage.worker],
                env={**stage.env, "PRE_FAIL_UNTIL": "9:1"})
    assert r.rc == 0, r.describe()
    assert stage.order() == ["pre 0", "pre 1", "train 0 1"]


# Bad input: exit 2, one line on stderr naming the value, nothing started.

def bad_cases(tmp_path):
    touch = tmp_path / "started"
    good = write_exec(tmp_path / "good.sh", f"#!/bin/sh\ntouch '{touch}'\n")
    good_py = tmp_path / "good.py"
    good_py.write_text(f"open({str(touch)!r}, 'w').close()\n")
    noexec = tmp_path / "noexec.sh"
    noexec.write_text(f"#!/bin/sh\ntouch '{touch}'\n")
    noexec.chmod(0o644)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    np = ["--no-python", good]
    return touch, {
        "missing-no-python": (["--no-python", tmp_path / "nope" / "prog"],
                              str(tmp_path / "nope" / "prog")),
        "missing-python-script": ([tmp_path / "missing.py"],
                                  str(tmp_path / "missing.py")),
        "non-executable": (["--no-python", noexec], str(noexec)),
        "missing-pre-train": (["--pre-train-script", tmp_path / "nopre", *np],
                              str(tmp_path / "nopre")),
        "non-executable-post-train": (["--post-train-script", noexec, *np],
                                      str(noexec)),
        "directory-pre-train": (["--pre-train-script", a_dir, *np], str(a_dir)),
        "nproc-word": (["--nproc-per-node", "abc", *np], "abc"),
        "nproc-negative": (["--nproc-per-node", "-3", *np], "-3"),
        "max-restarts": (["--max-restarts", "x7", *np], "x7"),
        "max-restarts-negative": (["--max-restarts", "-1", *np], "-1"),
        "shutdown-signal": (["--shutdown-signal", "SIGFOO", *np], "SIGFOO"),
        "shutdown-timeout": (["--shutdown-timeout", "soon", *np], "soon"),
        "redirects": (["--redirects", "9", *np], "9"),
        "tee-map": (["--tee", "0:3,1:x", *np], "0:3,1:x"),
        "elastic-nnodes": (["--nnodes", "1:4", *np], "1:4"),
        "nnodes-word": (["--nnodes", "two", *np], "two"),
        "master-port": (["--rdzv-backend", "static", "--master-port", "70000", *np],
                        "70000"),
        "node-rank": (["--rdzv-backend", "static", "--nnodes", "2",
                       "--node-rank", "5", *np], "5"),
        "ranks-filter": (["--local-ranks-filter", "0,a", *np], "0,a"),
        "rdzv-backend": (["--rdzv-backend", "etcd", *np], "etcd"),
        "monitor-interval": (["--monitor-interval", "fast", *np], "fast"),
        "unknown-flag": (["--bogus-flag", *np], "--bogus-flag"),
        "inprocess-restart": (["--standalone", "--inprocess-restart", *np],
                              "--inprocess-restart"),
        "log-dir-under-file": (["--log-dir", a_file / "sub", *np],
                               str(a_file / "sub")),
        "log-dir-is-file": (["--log-dir", a_file, *np], str(a_file)),
        "bad-pet": (np, "zz", {"PET_NPROC_PER_NODE": "zz"}),
    }


def _case_ids():
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        return list(bad_cases(Path(d))[1])


@pytest.mark.parametrize("case", _case_ids())
def test_bad_input_exits_2(hpr, tmp_path, case):
    touch, cases = bad_cases(tmp_path)
    args, value, *env = cases[case]
    env = env[0] if env else {}
    standalone = [] if "--rdzv-backend" in args else ["--standalone"]
    r = hpr.run([*standalone, *args], env=env, log_dir=not case.startswith("log-dir"),
                timeout=10)
    assert r.rc == 2, r.describe()
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1, r.describe()
    assert value in lines[0], f"the error does not name {value!r}: {lines[0]}"
    assert r.stdout == b""
    assert not touch.exists(), "something was started"
    assert not hpr.log_dir.exists() or list(hpr.log_dir.iterdir()) == []
