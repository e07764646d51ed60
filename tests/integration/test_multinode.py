# SPDX-License-Identifier: Apache-2.0
"""Self-driven multi-node rendezvous: resource_config.json and Slurm.

Two "nodes" run on one machine as two hyperpodrun processes, one on
127.0.0.1 and one on 127.0.0.2 (all of 127/8 is loopback). Each finds its
own rank, from a resource_config.json (--local-addr says which instance it
is) or from SLURM_* variables, and their four workers all-reduce with
PyTorch's gloo backend. A stand-in scontrol, a shell script, plays the
fresh node list after a node replacement. Bad input must end in exit
status 2 before anything is spawned.
"""

import json
import re
import socket

import pytest

from conftest import SOURCE_ROOT, have_torch, helper, worker_lines, write_exec

EXAMPLE = SOURCE_ROOT / "examples" / "allreduce.py"
WORKER = helper("rdzv_worker.py")
SUM_RE = re.compile(rb"^rank (\d+)/(\d+) \(local (\d+)\): all_reduce sum = (\d+)$")

needs_torch = pytest.mark.skipif(not have_torch(),
                                 reason="/usr/bin/python3 has no torch")


@pytest.fixture
def hpr(hpr):
    """The conftest runner, without any Slurm or SageMaker variable of the
    machine that runs the tests."""
    hpr.env = {k: v for k, v in hpr.env.items()
               if not k.startswith(("SLURM", "SAGEMAKER_"))}
    return hpr


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resource_config(path, workers, group="workers"):
    """Writes a resource_config.json in HyperPod's shape: a controller
    group, then the workers' group with one instance per address."""
    doc = {
        "ClusterConfig": {
            "ClusterArn": "arn:aws:sagemaker:us-west-2:111122223333:cluster/hprtest",
            "ClusterName": "hprtest",
        },
        "InstanceGroups": [
            {"Name": "controller-machine", "InstanceType": "ml.c5.xlarge",
             "Instances": [{"InstanceName": "controller-machine-1",
                            "AgentIpAddress": "172.16.0.1",
                            "CustomerIpAddress": "10.255.0.1",
                            "InstanceId": "i-0000000000000000a"}]},
            {"Name": group, "InstanceType": "ml.p5.48xlarge",
             "Instances": [{"InstanceName": f"{group}-{i + 1}",
                            "AgentIpAddress": f"172.16.1.{i + 1}",
                            "CustomerIpAddress": addr,
                            "InstanceId": f"i-000000000000001{i}"}
                           for i, addr in enumerate(workers)]},
        ],
    }
    path.write_text(json.dumps(doc, indent=2))
    return path


def fake_scontrol(tmp_path, answer_file):
    """A stand-in for scontrol that prints answer_file; it insists on being
    asked what hyperpodrun asks."""
    return write_exec(tmp_path / "scontrol", (
        "#!/bin/sh\n"
        '[ "$1 $2 $3" = "--oneliner show job" ] || exit 9\n'
        f'exec cat "{answer_file}"\n'))


def check_allreduce(results, nproc, nnodes):
    world = nproc * nnodes
    want_sum = world * (world + 1) // 2
    for node, r in enumerate(results):
        assert r.rc == 0, r.describe()
        by_rank = worker_lines(r.stdout)
        for local in range(nproc):
            rank = node * nproc + local
            want = (f"rank {rank}/{world} (local {local}): "
                    f"all_reduce sum = {want_sum}")
            assert by_rank.get(local) == [want.encode()], r.describe()


def run_two_nodes(hpr, tmp_path, per_node_args, per_node_env=None):
    """Starts one hyperpodrun per node and waits for both."""
    procs = []
    for node, args in enumerate(per_node_args):
        env = per_node_env[node] if per_node_env else None
        procs.append(hpr.start(
            ["--log-dir", tmp_path / f"node{node}", "--nproc-per-node", "2",
             "--tee", "3", *args, EXAMPLE], env=env, log_dir=False))
    return [p.wait(120) for p in procs]


@needs_torch
def test_resource_config_two_nodes_allreduce(hpr, tmp_path):
    rc = resource_config(tmp_path / "resource_config.json",
                         ["127.0.0.1", "127.0.0.2"])
    port = free_port()
    # Node 1 starts first: the order of start must not matter.
    args = [["--rdzv-backend", "resource-config", "--rdzv-conf",
             f"resource_config={rc},instance_group=workers",
             "--local-addr", addr, "--master-port", port]
            for addr in ("127.0.0.2", "127.0.0.1")]
    results = run_two_nodes(hpr, tmp_path, args)
    results.reverse()
    check_allreduce(results, 2, 2)
    for node, r in enumerate(results):
        assert (f"rendezvous: resource-config: node {node} of 2, master "
                f"127.0.0.1:{port}, from resource config '{rc}', group "
                f"'workers'") in r.err, r.describe()


@needs_torch
def test_resource_config_path_from_environment(hpr, tmp_path):
    """SAGEMAKER_RESOURCE_CONFIG_PATH, and the group found by address."""
    rc = resource_config(tmp_path / "rc.json", ["127.0.0.1", "127.0.0.2"],
                         group="gpu-workers")
    port = free_port()
    args = [["--rdzv-backend", "resource-config", "--local-addr", addr,
             "--master-port", port] for addr in ("127.0.0.1", "127.0.0.2")]
    env = {"SAGEMAKER_RESOURCE_CONFIG_PATH": rc}
    results = run_two_nodes(hpr, tmp_path, args, [env, env])
    check_allreduce(results, 2, 2)


def slurm_env(node, nodelist, node_id=None, job_id=4242):
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id,
           "SLURM_NNODES": 2, "SLURM_JOB_NUM_NODES": 2,
           "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist,
           "SLURM_STEP_NUM_NODES": 2, "SLURM_STEP_NODELIST": nodelist,
           "SLURM_NODEID": node if node_id is None else node_id,
           "SLURMD_NODENAME": f"127.0.0.{node + 1}",
           "SLURM_PROCID": node, "SLURM_LOCALID": 0}
    return env


def port_for_job_id():
    """A free port in 15000-24999 and a job id that maps to it."""
    for port in range(20000 + free_port() % 4000, 25000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port, 1_000_000 + port - 15000
    pytest.fail("no free port in 20000-24999")


@needs_torch
def test_slurm_two_nodes_allreduce(hpr, tmp_path):
    """The step's variables as srun sets them, node names that are
    addresses, and the port from the job id; scontrol is not asked."""
    port, job_id = port_for_job_id()
    args = [["--rdzv-backend", "slurm", "--rdzv-conf",
             "scontrol=off,master_port=jobid"]] * 2
    envs = [slurm_env(node, "127.0.0.[1-2]", job_id=job_id) for node in (0, 1)]
    results = run_two_nodes(hpr, tmp_path, args, envs)
    check_allreduce(results, 2, 2)
    for node, r in enumerate(results):
        assert (f"rendezvous: slurm: node {node} of 2, master "
                f"127.0.0.1:{port}, from SLURM_STEP_NODELIST=127.0.0.[1-2]"
                ) in r.err, r.describe()


@needs_torch
def test_slurm_stale_list_replaced_by_scontrol(hpr, tmp_path):
    """After a node replacement the environment names a node that is gone
    (and that does not resolve): only scontrol's current list lets the
    workers meet."""
    answer = tmp_path / "answer"
    answer.write_text("JobId=4242 JobName=train ReqNodeList=(null) "
                      "ExcNodeList=(null) NodeList=127.0.0.[1-2] "
                      "BatchHost=127.0.0.1\n")
    scontrol = fake_scontrol(tmp_path, answer)
    port = free_port()
    args = [["--rdzv-backend", "slurm", "--rdzv-conf", f"scontrol={scontrol}",
             "--master-port", port]] * 2
    stale = "gone-node.invalid,127.0.0.2"
    envs = [slurm_env(node, stale) for node in (0, 1)]
    results = run_two_nodes(hpr, tmp_path, args, envs)
    check_allreduce(results, 2, 2)
    for r in results:
        assert ("from scontrol show job 4242 (NodeList=127.0.0.[1-2])"
                in r.err), r.describe()


def read_records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_restart_rereads_resource_config(hpr, tmp_path):
    """Attempt 0 swaps in a resource_config.json where a new node comes
    first; attempt 1 must see it: new master, this node now rank 1."""
    rc = resource_config(tmp_path / "rc.json", ["127.0.0.1"])
    replaced = resource_config(tmp_path / "rc.next.json",
                               ["127.0.0.3", "127.0.0.1"])
    out = tmp_path / "records"
    r = hpr.run(["--rdzv-backend", "resource-config", "--rdzv-conf",
                 f"resource_config={rc}", "--local-addr", "127.0.0.1",
                 "--max-restarts", "1", "--nproc-per-node", "2",
                 WORKER, out, replaced, rc])
    assert r.rc == 0, r.describe()
    records = sorted((x["TORCHELASTIC_RESTART_COUNT"], x["GROUP_RANK"],
                      x["GROUP_WORLD_SIZE"], x["RANK"], x["WORLD_SIZE"],
                      x["MASTER_ADDR"]) for x in read_records(out))
    # Rank 1 of attempt 0 may be stopped before it writes its record: its
    # local rank 0 failed on purpose.
    attempt0 = [x for x in records if x[0] == "0"]
    assert attempt0 in ([("0", "0", "1", "0", "2", "127.0.0.1")],
                        [("0", "0", "1", "0", "2", "127.0.0.1"),
                         ("0", "0", "1", "1", "2", "127.0.0.1")]), records
    assert [x for x in records if x[0] != "0"] == [
        ("1", "1", "2", "2", "4", "127.0.0.3"),
        ("1", "1", "2", "3", "4", "127.0.0.3"),
    ]


def test_restart_rereads_slurm_node_list(hpr, tmp_path):
    """The same through scontrol: the second answer lists a replacement
    node first."""
    answer = tmp_path / "answer"
    answer.write_text("JobId=4242 NodeList=127.0.0.[1-2]\n")
    next_answer = tmp_path / "answer.next"
    next_answer.write_text("JobId=4242 NodeList=127.0.0.[2,9]\n")
    scontrol = fake_scontrol(tmp_path, answer)
    out = tmp_path / "records"
    env = slurm_env(1, "127.0.0.[1-2]")
    r = hpr.run(["--rdzv-backend", "slurm", "--rdzv-conf",
                 f"scontrol={scontrol}", "--max-restarts", "1",
                 WORKER, out, next_answer, answer], env=env)
    assert r.rc == 0, r.describe()
    records = read_records(out)
    assert [(x["TORCHELASTIC_RESTART_COUNT"], x["GROUP_RANK"],
             x["MASTER_ADDR"]) for x in records] == [
        ("0", "1", "127.0.0.1"), ("1", "0", "127.0.0.2")]


def test_rendezvous_failing_at_restart_exits_1(hpr, tmp_path):
    """A rendezvous that fails before a restart is not a usage error: the
    job ran; exit status 1, with the reason."""
    rc = resource_config(tmp_path / "rc.json", ["127.0.0.1"])
    other = resource_config(tmp_path / "rc.next.json", ["127.0.0.7"])
    out = tmp_path / "records"
    r = hpr.run(["--rdzv-backend", "resource-config", "--rdzv-conf",
                 f"resource_config={rc}", "--local-addr", "127.0.0.1",
                 "--max-restarts", "1", WORKER, out, other, rc])
    assert r.rc == 1, r.describe()
    assert len(read_records(out)) == 1
    assert re.search(r"rendezvous: this node \(--local-addr 127\.0\.0\.1\) is "
                     r"in no instance group", r.err), r.describe()


# Bad input: (name, args before the script, environment, files to write,
# what the message must say). "{tmp}" is the test's directory.
BAD_INPUT = [
    ("slurm outside Slurm", ["--rdzv-backend", "slurm"], {}, {},
     "none of SLURM_STEP_NUM_NODES, SLURM_NNODES, SLURM_JOB_NUM_NODES is set"),
    ("slurm without a node list", ["--rdzv-backend", "slurm"],
     {"SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "0"}, {},
     "none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST is set"),
    ("slurm with a malformed node list", ["--rdzv-backend", "slurm"],
     {"SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[1-2",
      "SLURM_NODEID": "0"}, {},
     "invalid host list 'n[1-2' in SLURM_STEP_NODELIST (environment): '[' at "
     "offset 1 is never closed"),
    ("slurm with a node id out of range", ["--rdzv-backend", "slurm"],
     {"SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[1-2]",
      "SLURM_NODEID": "2"}, {},
     "SLURM_NODEID 2 (environment) is out of range: SLURM_STEP_NUM_NODES is "
     "2, so node ids go from 0 to 1"),
    ("slurm with a malformed node count", ["--rdzv-backend", "slurm"],
     {"SLURM_NNODES": "2x", "SLURM_JOB_NODELIST": "n[1-2]",
      "SLURM_NODEID": "0"}, {},
     "invalid value '2x' for SLURM_NNODES (environment)"),
    ("slurm with this node not in the list", ["--rdzv-backend", "slurm"],
     {"SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[1-2]",
      "SLURMD_NODENAME": "n5"}, {},
     "this node 'n5' (SLURMD_NODENAME) is not in SLURM_STEP_NODELIST 'n[1-2]'"),
    ("slurm with an unknown key",
     ["--rdzv-backend", "slurm", "--rdzv-conf", "scontrl=off"], {}, {},
     "--rdzv-conf key 'scontrl' is not one of the slurm backend's"),
    ("resource config missing",
     ["--rdzv-backend", "resource-config", "--local-addr", "127.0.0.1"],
     {"SAGEMAKER_RESOURCE_CONFIG_PATH": "{tmp}/missing.json"}, {},
     "cannot read resource config '{tmp}/missing.json' (from "
     "SAGEMAKER_RESOURCE_CONFIG_PATH): no such file or directory"),
    ("resource config with bad JSON",
     ["--rdzv-backend", "resource-config", "--rdzv-conf",
      "resource_config={tmp}/rc.json", "--local-addr", "127.0.0.1"], {},
     {"rc.json": '{"InstanceGroups": [\n  {"Name": "w",,}\n]}\n'},
     "resource config '{tmp}/rc.json' is not valid JSON (line 2, column"),
    ("resource config with an unknown group",
     ["--rdzv-backend", "resource-config", "--rdzv-conf",
      "resource_config={tmp}/rc.json,instance_group=gpu",
      "--local-addr", "127.0.0.1"], {}, {"rc.json": "workers"},
     "instance group 'gpu' (--rdzv-conf instance_group) is not in resource "
     "config '{tmp}/rc.json', which has: controller-machine, workers"),
    ("resource config without this node",
     ["--rdzv-backend", "resource-config", "--rdzv-conf",
      "resource_config={tmp}/rc.json", "--local-addr", "127.0.0.9"], {},
     {"rc.json": "workers"},
     "this node (--local-addr 127.0.0.9) is in no instance group of resource "
     "config '{tmp}/rc.json' (groups: controller-machine, workers)"),
    ("resource config and a wrong --node-rank",
     ["--rdzv-backend", "resource-config", "--rdzv-conf",
      "resource_config={tmp}/rc.json", "--local-addr", "127.0.0.2",
      "--node-rank", "0"], {}, {"rc.json": "workers"},
     "--node-rank 0 disagrees with resource config '{tmp}/rc.json', group "
     "'workers', which makes this node rank 1"),
]


@pytest.mark.parametrize("name,args,env,files,mention", BAD_INPUT,
                         ids=[c[0] for c in BAD_INPUT])
def test_bad_input_exits_2_before_spawning(hpr, tmp_path, name, args, env,
                                           files, mention):
    def fill(text):
        return str(text).replace("{tmp}", str(tmp_path))

    for fname, content in files.items():
        if content == "workers":
            resource_config(tmp_path / fname, ["127.0.0.1", "127.0.0.2"])
        else:
            (tmp_path / fname).write_text(content)
    out = tmp_path / "records"
    r = hpr.run([fill(a) for a in args] + [WORKER, out],
                env={k: fill(v) for k, v in env.items()})
    assert r.rc == 2, r.describe()
    assert r.err.startswith("hyperpodrun: error: "), r.describe()
    assert fill(mention) in r.err, r.describe()
    assert not out.exists(), "a worker was started"
    assert hpr.run_dirs() == [], "a run directory was made"
