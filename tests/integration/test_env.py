# SPDX-License-Identifier: Apache-2.0
"""The environment and command line each worker is started with."""

import os
import re
import shutil

import pytest

from conftest import HELPERS, PYTHON, helper, read_json, write_exec

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def dumps(outdir, n, tag="env"):
    return [read_json(outdir / f"{tag}_{i}.json") for i in range(n)]


def run_dump(hpr, tmp_path, flags, nproc, script_args=(), env=None, unset=(),
             expect_rc=0):
    out = tmp_path / "dump"
    out.mkdir(exist_ok=True)
    r = hpr.run([*flags, helper("dump_env.py"), out, *script_args],
                env=env, unset=unset)
    assert r.rc == expect_rc, r.describe()
    got = sorted(p.name for p in out.glob("env_*.json"))
    assert got == [f"env_{i}.json" for i in range(nproc)], (got, r.describe())
    return dumps(out, nproc), r


def check_common(recs, hpr, run_id, *, nproc, nnodes, node_rank, role="default",
                 addr, port=None, max_restarts=0):
    ports = set()
    run_dir = hpr.train_dir(run_id)
    for i, rec in enumerate(recs):
        env = rec["env"]
        rank = node_rank * nproc + i
        expect = {
            "LOCAL_RANK": str(i),
            "RANK": str(rank),
            "GROUP_RANK": str(node_rank),
            "ROLE_RANK": str(rank),
            "ROLE_NAME": role,
            "LOCAL_WORLD_SIZE": str(nproc),
            "WORLD_SIZE": str(nnodes * nproc),
            "GROUP_WORLD_SIZE": str(nnodes),
            "ROLE_WORLD_SIZE": str(nnodes * nproc),
            "MASTER_ADDR": addr,
            "TORCHELASTIC_RESTART_COUNT": "0",
            "JOB_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
            "TORCHELASTIC_RUN_ID": run_id,
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCHELASTIC_ERROR_FILE":
                str(run_dir / "attempt_0" / str(i) / "error.json"),
            # Inherited from the agent.
            "HPR_TEST_MARKER": hpr.marker,
        }
        got = {k: env.get(k) for k in expect}
        assert got == expect, f"local rank {i}"
        if port is not None:
            assert env.get("MASTER_PORT") == str(port)
        assert re.fullmatch(r"[0-9]+", env.get("MASTER_PORT", "")), env.get("MASTER_PORT")
        assert 0 < int(env["MASTER_PORT"]) < 65536
        ports.add(env["MASTER_PORT"])
    assert len(ports) == 1, f"ranks disagree on MASTER_PORT: {ports}"


def test_standalone_nproc4(hpr, tmp_path):
    recs, r = run_dump(hpr, tmp_path, ["--standalone", "--nproc-per-node", "4"], 4)
    run_id = recs[0]["env"]["TORCHELASTIC_RUN_ID"]
    assert UUID_RE.match(run_id), run_id
    check_common(recs, hpr, run_id, nproc=4, nnodes=1, node_rank=0,
                 addr="127.0.0.1")
    for rec in recs:
        env = rec["env"]
        # Unset in the agent: 1; OMP unset and nproc > 1: 1 for every worker.
        assert env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1"
        assert env.get("OMP_NUM_THREADS") == "1"
        assert env.get("PYTHON_EXEC") == PYTHON
    # The standalone port is one nobody listens on (rank 0 will host the
    # store there); the job is over, so it must be bindable now.
    assert int(recs[0]["env"]["MASTER_PORT"]) >= 1024


def test_standalone_run_ids_differ(hpr, tmp_path):
    ids = []
    for n in range(2):
        out = tmp_path / f"d{n}"
        out.mkdir()
        r = hpr.run(["--standalone", helper("dump_env.py"), out])
        assert r.rc == 0, r.describe()
        ids.append(read_json(out / "env_0.json")["env"]["TORCHELASTIC_RUN_ID"])
    assert ids[0] != ids[1]
    assert all(UUID_RE.match(i) for i in ids), ids


def test_static_node_rank1(hpr, tmp_path):
    flags = ["--rdzv-backend", "static", "--nnodes", "2", "--node-rank", "1",
             "--master-addr", "10.0.0.1", "--master-port", "1234",
             "--nproc-per-node", "4"]
    recs, r = run_dump(hpr, tmp_path, flags, 4)
    check_common(recs, hpr, "none", nproc=4, nnodes=2, node_rank=1,
                 addr="10.0.0.1", port=1234)


def test_static_role_id_restarts(hpr, tmp_path):
    flags = ["--rdzv-backend", "static", "--nnodes", "3", "--node-rank", "2",
             "--nproc-per-node", "2", "--rdzv-id", "job7", "--role", "trainer",
             "--max-restarts", "3"]
    recs, r = run_dump(hpr, tmp_path, flags, 2)
    # Default static master: 127.0.0.1:29500.
    check_common(recs, hpr, "job7", nproc=2, nnodes=3, node_rank=2,
                 role="trainer", addr="127.0.0.1", port=29500, max_restarts=3)


def test_static_rdzv_endpoint(hpr, tmp_path):
    flags = ["--rdzv-backend", "static", "--rdzv-endpoint", "10.9.8.7:4455",
             "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "2"]
    recs, r = run_dump(hpr, tmp_path, flags, 2)
    check_common(recs, hpr, "none", nproc=2, nnodes=2, node_rank=0,
                 addr="10.9.8.7", port=4455)


def test_inherited_values_win(hpr, tmp_path):
    recs, r = run_dump(
        hpr, tmp_path, ["--standalone", "--nproc-per-node", "2"], 2,
        env={"OMP_NUM_THREADS": "7", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
             "SOME_USER_VAR": "a b\tc=d"})
    for rec in recs:
        env = rec["env"]
        assert env["OMP_NUM_THREADS"] == "7"
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
        assert env["SOME_USER_VAR"] == "a b\tc=d"


def test_single_worker_leaves_omp_alone(hpr, tmp_path):
    recs, r = run_dump(hpr, tmp_path, ["--standalone"], 1)
    assert "OMP_NUM_THREADS" not in recs[0]["env"]
    assert recs[0]["env"]["LOCAL_WORLD_SIZE"] == "1"
    assert recs[0]["env"]["WORLD_SIZE"] == "1"


def test_pet_fallbacks(hpr, tmp_path):
    env = {
        "PET_NPROC_PER_NODE": "3",
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_RDZV_BACKEND": "static",
        "PET_MASTER_ADDR": "10.1.2.3",
        "PET_MASTER_PORT": "4321",
        "PET_RDZV_ID": "petjob",
        "PET_MAX_RESTARTS": "2",
        "PET_ROLE": "petrole",
    }
    recs, r = run_dump(hpr, tmp_path, [], 3, env=env)
    check_common(recs, hpr, "petjob", nproc=3, nnodes=2, node_rank=1,
                 role="petrole", addr="10.1.2.3", port=4321, max_restarts=2)


def test_flags_win_over_pet(hpr, tmp_path):
    env = {"PET_NPROC_PER_NODE": "3", "PET_RDZV_BACKEND": "static",
           "PET_MASTER_PORT": "4321", "PET_RDZV_ID": "petjob"}
    recs, r = run_dump(hpr, tmp_path,
                       ["--nproc-per-node", "2", "--master-port", "5555",
                        "--rdzv-id", "flagjob"], 2, env=env)
    check_common(recs, hpr, "flagjob", nproc=2, nnodes=1, node_rank=0,
                 addr="127.0.0.1", port=5555)


def test_pet_standalone(hpr, tmp_path):
    recs, r = run_dump(hpr, tmp_path, ["--nproc-per-node", "2"], 2,
                       env={"PET_STANDALONE": "1"})
    run_id = recs[0]["env"]["TORCHELASTIC_RUN_ID"]
    assert UUID_RE.match(run_id), run_id
    check_common(recs, hpr, run_id, nproc=2, nnodes=1, node_rank=0,
                 addr="127.0.0.1")


def test_underscore_spellings(hpr, tmp_path):
    flags = ["--rdzv_backend", "static", "--nproc_per_node", "2",
             "--master_addr", "10.0.0.2", "--master_port", "2222",
             "--rdzv_id", "under", "--max_restarts", "1"]
    recs, r = run_dump(hpr, tmp_path, flags, 2)
    check_common(recs, hpr, "under", nproc=2, nnodes=1, node_rank=0,
                 addr="10.0.0.2", port=2222, max_restarts=1)


def test_nproc_cpu(hpr, tmp_path):
    n = len(os.sched_getaffinity(0))
    if n > 16:
        pytest.skip("too many CPUs for a quick test")
    recs, r = run_dump(hpr, tmp_path, ["--standalone", "--nproc-per-node", "cpu"], n)
    assert {rec["env"]["LOCAL_WORLD_SIZE"] for rec in recs} == {str(n)}


def test_local_rank_substitution(hpr, tmp_path):
    args = ["--local-rank=${local_rank}", "a${local_rank}b${local_rank}",
            "${local_rank}", "$local_rank", "{local_rank}", "plain"]
    recs, r = run_dump(hpr, tmp_path, ["--standalone", "--nproc-per-node", "3"],
                       3, script_args=args)
    for i, rec in enumerate(recs):
        assert rec["argv"][2:] == [f"--local-rank={i}", f"a{i}b{i}", f"{i}",
                                   "$local_rank", "{local_rank}", "plain"]


def test_python_mode_command_line(hpr, tmp_path):
    out = tmp_path / "dump"
    out.mkdir()
    script = helper("dump_env.py")
    r = hpr.run(["--standalone", script, out, "x y", ""])
    assert r.rc == 0, r.describe()
    rec = read_json(out / "env_0.json")
    assert rec["cmdline"] == [PYTHON, "-u", script, str(out), "x y", ""]
    assert rec["name"] == "__main__"


def test_module_mode(hpr, tmp_path):
    out = tmp_path / "dump"
    out.mkdir()
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "-m", "dump_env", out,
                 "--flag", "${local_rank}"],
                env={"PYTHONPATH": str(HELPERS)})
    assert r.rc == 0, r.describe()
    for i in range(2):
        rec = read_json(out / f"env_{i}.json")
        assert rec["cmdline"] == [PYTHON, "-u", "-m", "dump_env", str(out),
                                  "--flag", str(i)]
        assert rec["name"] == "__main__"
        assert rec["spec"] == "dump_env"
        assert rec["env"]["LOCAL_RANK"] == str(i)


def test_module_long_flag(hpr, tmp_path):
    out = tmp_path / "dump"
    out.mkdir()
    r = hpr.run(["--standalone", "--module", "dump_env", out],
                env={"PYTHONPATH": str(HELPERS)})
    assert r.rc == 0, r.describe()
    assert read_json(out / "env_0.json")["spec"] == "dump_env"


def test_default_interpreter_is_python3_from_path(hpr, tmp_path):
    """Without PYTHON_EXEC the worker is `python3 -u script args` via PATH."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    record = tmp_path / "fake_python_args"
    write_exec(fakebin / "python3",
               "#!/bin/sh\n"
               f"for a in \"$@\"; do printf '%s\\n' \"$a\"; done > '{record}'\n")
    (tmp_path / "train.py").write_text("")
    r = hpr.run(["--standalone", "train.py", "--lr", "0.1"], unset=["PYTHON_EXEC"],
                env={"PATH": f"{fakebin}:/usr/bin:/bin"})
    assert r.rc == 0, r.describe()
    assert record.read_text().splitlines() == ["-u", "train.py", "--lr", "0.1"]


def test_no_python_python_script(hpr, tmp_path):
    out = tmp_path / "dump"
    out.mkdir()
    script = tmp_path / "dump_env_exec.py"
    shutil.copy(helper("dump_env.py"), script)
    script.chmod(0o755)
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python", script,
                 out, "arg-${local_rank}"])
    assert r.rc == 0, r.describe()
    for i in range(2):
        rec = read_json(out / f"env_{i}.json")
        # exec'd directly: the kernel runs the shebang, no -u is added.
        assert rec["argv"] == [str(script), str(out), f"arg-{i}"]
        assert rec["cmdline"] == ["/usr/bin/python3", str(script), str(out),
                                  f"arg-{i}"]
        assert rec["env"]["RANK"] == str(i)


def test_no_python_shell_script(hpr, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = write_exec(
        tmp_path / "w.sh",
        '#!/bin/sh\nprintf "%s|%s|%s|%s\\n" "$0" "$1" "$RANK" "$WORLD_SIZE" '
        '> "$2/sh_$LOCAL_RANK"\n')
    r = hpr.run(["--standalone", "--nproc-per-node", "2", "--no-python", script,
                 "first", out])
    assert r.rc == 0, r.describe()
    for i in range(2):
        assert (out / f"sh_{i}").read_text() == f"{script}|first|{i}|2\n"


def test_workers_are_session_leaders(hpr, tmp_path):
    recs, r = run_dump(hpr, tmp_path, ["--standalone", "--nproc-per-node", "2"], 2)
    for rec in recs:
        assert rec["pid"] == rec["pgid"] == rec["sid"], rec
