# SPDX-License-Identifier: Apache-2.0
"""What every client of the worker socket shares: where the socket is,
how a client connects, the frame format and the exception."""

import json
import os
import socket
import struct
from typing import Optional

#: Set by the agent for every worker and hook: the socket's path.
SOCKET_ENV = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"

# The agent closes a connection that sends a longer frame; its own frames
# are far shorter, so a longer one means the stream is not ours.
FRAME_MAX = 4 << 20


class HyperPodIPCException(RuntimeError):
    """The agent could not be reached, did not answer in time, or closed
    the connection."""


def socket_path() -> str:
    """The socket's path from the environment; ValueError without it."""
    path = os.environ.get(SOCKET_ENV, "")
    if not path:
        raise ValueError(f"{SOCKET_ENV} not set. Can't initialize client")
    return path


def connect(path: str, timeout: Optional[float]) -> socket.socket:
    """A connected stream socket; HyperPodIPCException when the agent
    cannot be reached."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as ex:
        sock.close()
        raise HyperPodIPCException(
            f"cannot connect to the agent's worker socket {path}: {ex}"
        ) from ex
    return sock


def client_frame(message_type: str, local_rank: int, client_id: str,
                 message: dict) -> bytes:
    """A client's message with the envelope every message carries: its
    type, the sender's local rank and its client id."""
    message = dict(message)
    message["type"] = message_type
    message["local_rank"] = local_rank
    message["client_id"] = client_id
    return frame(message)


def frame(message: dict) -> bytes:
    """A 4-byte big-endian length, then the UTF-8 JSON body."""
    body = json.dumps(message).encode("utf-8")
    return struct.pack(">I", len(body)) + body


def read_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = sock.recv(n)
        if not chunk:
            raise HyperPodIPCException("the agent closed the worker socket")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes:
    """One frame's body; HyperPodIPCException on end of stream or on a
    length over FRAME_MAX."""
    (length,) = struct.unpack(">I", read_exact(sock, 4))
    if length > FRAME_MAX:
        raise HyperPodIPCException(f"a {length}-byte frame from the agent")
    return read_exact(sock, length)
