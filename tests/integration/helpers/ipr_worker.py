# SPDX-License-Identifier: Apache-2.0
"""A training process of an in-process-restart job, speaking the worker
socket with raw frames (no client library): init, at_rcb_barrier, wait for
job_start, past_rcb_barrier, then "train" until told otherwise.

Everything it receives goes to IPRW_DIR/rank<LOCAL_RANK>.jsonl, one JSON
object per line with the pid. The test steers it with a command file,
IPRW_DIR/cmd<LOCAL_RANK>, read every few milliseconds while training:

  fault REASON MODE MESSAGE...  job_data then job_fault, back to the barrier
  fault-norank                  job_fault without "rank", back to the barrier
  exit CODE                     exit
  labels JSON                   rank_labels
  data JSON                     job_data with JSON as "data", byte for byte

Each job_start is recorded with "raw", the frame's text as received.

Environment knobs (per local rank lists, comma separated):
  IPRW_NO_BARRIER=1,3   these ranks never send at_rcb_barrier
  IPRW_EXIT_AT_BARRIER=1  these ranks exit with code 3 once at the barrier,
                        before any job_start
  IPRW_DEAF=1           these ranks ignore job_fault while training (a
                        pause waits for them for ever)
  IPRW_DROP=init:1      local rank 1 closes its socket after init
                        (steps: connect, init, barrier, start) and idles
"""

import json
import os
import select
import socket
import struct
import sys
import time
import uuid

LR = int(os.environ.get("LOCAL_RANK", "0"))
OUT = os.environ["IPRW_DIR"]
LOG = os.path.join(OUT, f"rank{LR}.jsonl")
CMD = os.path.join(OUT, f"cmd{LR}")
CID = str(uuid.uuid4())


def ranks(name):
    v = os.environ.get(name, "")
    return {int(x) for x in v.split(",") if x.strip()}


def drop_step():
    for item in os.environ.get("IPRW_DROP", "").split(","):
        if ":" in item:
            step, r = item.split(":")
            if int(r) == LR:
                return step
    return None


def record(event, **kw):
    kw.update(event=event, pid=os.getpid())
    with open(LOG, "a") as f:
        f.write(json.dumps(kw) + "\n")


def send(s, mtype, payload=None):
    m = dict(payload or {})
    m.update(type=mtype, local_rank=LR, client_id=CID)
    body = json.dumps(m).encode()
    s.sendall(struct.pack(">I", len(body)) + body)


class Reader:
    def __init__(self, s):
        self.s = s
        self.buf = b""

    def poll(self, timeout):
        """The next message, or None after timeout seconds."""
        end = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    self.raw = body.decode()
                    return json.loads(body)
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.s], [], [], left)
            if r:
                chunk = self.s.recv(65536)
                if not chunk:
                    record("closed")
                    idle()
                self.buf += chunk


def idle():
    while True:
        time.sleep(1)


def dropped(s, step):
    if drop_step() == step:
        s.close()
        record("dropped", step=step)
        idle()


def barrier(s, rd):
    """at_rcb_barrier, then the job_start that releases us."""
    if LR in ranks("IPRW_NO_BARRIER"):
        record("no_barrier")
        idle()
    send(s, "at_rcb_barrier")
    record("at_barrier")
    if LR in ranks("IPRW_EXIT_AT_BARRIER"):
        sys.exit(3)
    dropped(s, "barrier")
    while True:
        m = rd.poll(3600)
        if m is None:
            continue
        if m["type"] == "job_start":
            record(m["type"], msg=m, raw=rd.raw)
        else:
            record(m["type"], msg=m)
        if m["type"] == "job_start":
            dropped(s, "start")
            send(s, "past_rcb_barrier")
            return m


def main():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"])
    dropped(s, "connect")
    send(s, "init")
    dropped(s, "init")
    rd = Reader(s)
    start = barrier(s, rd)
    step = 0
    while True:
        m = rd.poll(0.02)
        if m is not None:
            record(m["type"], msg=m)
            if m["type"] == "job_fault" and LR not in ranks("IPRW_DEAF"):
                # Another node failed: back to the barrier.
                start = barrier(s, rd)
            continue
        step += 1
        try:
            with open(CMD) as f:
                cmd_text = f.read()
                cmd = cmd_text.split(None, 3)
            os.unlink(CMD)
        except FileNotFoundError:
            continue
        if not cmd:
            continue
        rank = int(start["worker_envs"]["RANK"])
        if cmd[0] == "fault":
            send(s, "job_data", {"rank": rank, "data": f"step={step}"})
            send(s, "job_fault", {"rank": rank, "restart_mode": cmd[2],
                                  "reason": cmd[1],
                                  "message": cmd[3] if len(cmd) > 3 else ""})
            record("sent_fault")
            start = barrier(s, rd)
        elif cmd[0] == "fault-norank":
            send(s, "job_fault", {"reason": "NoRank"})
            record("sent_fault")
            start = barrier(s, rd)
        elif cmd[0] == "data":
            # The JSON text as written, not through json.dumps.
            text = cmd_text.split(None, 1)[1]
            head = json.dumps({"type": "job_data", "local_rank": LR,
                               "client_id": CID, "rank": rank})
            body = (head[:-1] + ', "data": ' + text + "}").encode()
            s.sendall(struct.pack(">I", len(body)) + body)
            record("sent_data")
        elif cmd[0] == "labels":
            send(s, "rank_labels", {"labels": json.loads(cmd[1])})
        elif cmd[0] == "exit":
            sys.exit(int(cmd[1]))


if __name__ == "__main__":
    main()
