# SPDX-License-Identifier: Apache-2.0
"""A stand-in for NCCL's RAS thread (NCCL >= 2.24), for machines without
a GPU: it answers on 127.0.0.1 the client protocol that NCCL's ncclras
client speaks (src/ras/client.cc): "CLIENT PROTOCOL <n>\\n" is answered
"SERVER PROTOCOL 2\\n"; "STATUS\\n" by a text report and the end of the
connection.

argv[1]: the file to write the port to; argv[2]: "answer", or "silent"
(accepts and never answers); argv[3], optional: the report's size in
bytes."""

import socket
import sys

PORT_FILE, MODE = sys.argv[1], sys.argv[2]
SIZE = int(sys.argv[3]) if len(sys.argv) > 3 else 0

srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(4)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
import os  # noqa: E402
os.rename(PORT_FILE + ".tmp", PORT_FILE)

REPORT = ("Job summary\n===========\n\n  Nodes  Processes  GPUs\n"
          "      1          2     2\n\nCommunicators... (0.00s)\n"
          "=============\n\nGroup  Comms  Nodes  Ranks  Status  Errors\n"
          "    0      1      1      2  RUNNING     OK\n")

held = []
while True:
    conn, _ = srv.accept()
    if MODE == "silent":
        held.append(conn)
        continue
    f = conn.makefile("rb")
    line = f.readline()
    if not line.startswith(b"CLIENT PROTOCOL "):
        f.close()
        conn.close()
        continue
    conn.sendall(b"SERVER PROTOCOL 2\n")
    line = f.readline()
    if line.strip() in (b"STATUS", b"VERBOSE STATUS"):
        body = REPORT.encode()
        if SIZE:
            body = (body * (SIZE // len(body) + 1))[:SIZE]
        conn.sendall(body)
    f.close()
    conn.close()
