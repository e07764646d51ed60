#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Records the consoles tests/replay holds: train.py under hyperpodrun,
live, with rules.json, for each scenario, two ranks on gloo. Keeps the
console as a pod's log has it (the agent's stderr and the tee'd stdout
in one stream, with ${time} in the prefix) and rank 0's stdout.log. The
live verdict is the agent's own line in the console; the replay test
compares it with what --replay makes of every format of it.

Usage: tests/replay/record.py BUILD/cmd/hyperpodrun/hyperpodrun [SCENARIO...]
Slow (PyTorch starts in seconds, a never-started job waits out the cut-off):
run it once and commit the output.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = ["healthy", "hung", "slow", "never_started"]


def record(binary, scenario):
    out = HERE / scenario
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PET_", "TORCHELASTIC_"))}
        env.update(REPLAY_SCENARIO=scenario, PYTHON_EXEC="/usr/bin/python3",
                   OMP_NUM_THREADS="1")
        with open(out / "console.log", "wb") as console:
            p = subprocess.run(
                [binary, "--standalone", "--nproc-per-node", "2", "--tee", "3",
                 "--log-dir", tmp, "--log-line-prefix-template",
                 "${time} [${role_name}${local_rank}]:",
                 "--log-monitoring-config", HERE / "rules.json",
                 HERE / "train.py"],
                stdout=console, stderr=subprocess.STDOUT, env=env, timeout=300)
        logs = list(Path(tmp).glob("*/attempt_0/0/stdout.log"))
        shutil.copy(logs[0], out / "stdout.log")
    print(f"{scenario}: exit {p.returncode}")


def main():
    binary = os.path.abspath(sys.argv[1])
    for scenario in sys.argv[2:] or SCENARIOS:
        record(binary, scenario)


if __name__ == "__main__":
    main()
