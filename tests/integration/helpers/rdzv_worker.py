#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Worker that records where the rendezvous put it, attempt by attempt.

usage: rdzv_worker.py OUTFILE [FROM TO]

Appends one JSON line to OUTFILE with the attempt, the ranks, the sizes
and the master. With FROM and TO, in attempt 0 local rank 0 then moves FROM over TO (a new
resource_config.json, or a new answer for a stand-in scontrol) and exits 1,
so that the restart has to read the rendezvous again to see it. The other
local ranks exit 0 at once, so that none can stop rank 0 before its move
(rank 0's failure may stop them before they write their record).
"""
import json
import os
import sys

KEYS = ("TORCHELASTIC_RESTART_COUNT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
        "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def main():
    record = {k: os.environ.get(k) for k in KEYS}
    with open(sys.argv[1], "a") as f:
        f.write(json.dumps(record) + "\n")
    if (len(sys.argv) == 4 and record["TORCHELASTIC_RESTART_COUNT"] == "0"
            and record["LOCAL_RANK"] == "0"):
        os.replace(sys.argv[2], sys.argv[3])
        sys.exit(1)


if __name__ == "__main__":
    main()
