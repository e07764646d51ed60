"""What every client of the worker socket shares: where the socket is,
the frame format and the exception."""

import json
import socket
import struct

#: Set by the agent for every worker and hook: the socket's path.
SOCKET_ENV = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"

# The agent closes a connection that sends a longer frame; its own frames
# are far shorter, so a longer one means the stream is not ours.
FRAME_MAX = 4 << 20


class HyperPodIPCException(RuntimeError):
    """The agent could not be reached, did not answer in time, or closed
    the connection."""


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
