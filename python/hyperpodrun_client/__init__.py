"""Checkpoint discovery over hyperpodrun's worker socket.

Training code started by hyperpodrun (or by the reference HyperPod elastic
agent: the wire protocol is the same) reports the checkpoints each rank has
saved and asks, on start, which one every rank completed::

    from hyperpodrun_client import CheckpointDiscoverySocketClient, CheckpointType

    ckpt = CheckpointDiscoverySocketClient("/ckpt/run1", num_model_checkpoints=world)
    path = ckpt.get_latest_checkpoint_path()      # None on a fresh start
    ...
    ckpt.update(step, path, CheckpointType.MODEL_CHECKPOINT)

The names are those of the reference's ``hyperpod_elastic_agent.ipc``
client, so code written for it switches by changing the import.
"""

import enum
import json
import os
import socket
import struct
import threading
import uuid
from typing import Optional

__all__ = [
    "CheckpointDiscoverySocketClient",
    "CheckpointType",
    "HyperPodIPCException",
    "SOCKET_ENV",
]

#: Set by the agent for every worker and hook: the socket's path.
SOCKET_ENV = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"

# The agent closes a connection that sends a longer frame; replies are far
# shorter, so a longer one means the stream is not ours.
_FRAME_MAX = 4 << 20


class HyperPodIPCException(Exception):
    """The agent could not be reached, or did not answer."""


class CheckpointType(str, enum.Enum):
    """What a rank saved: counted separately when deciding completeness."""

    MODEL_CHECKPOINT = "model_checkpoint"
    DATA_CHECKPOINT = "data_checkpoint"


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return struct.pack(">I", len(body)) + body


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = sock.recv(n)
        if not chunk:
            raise HyperPodIPCException("the agent closed the worker socket")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class CheckpointDiscoverySocketClient:
    """One client object on its own connection to the agent.

    ``prefix`` names the checkpoint series (usually its directory); the
    counts say how many local ranks of this node report each type of
    checkpoint per step. A step is complete when that many distinct local
    ranks have reported it for every type.
    """

    def __init__(
        self,
        prefix: str,
        num_model_checkpoints: int = 0,
        num_data_checkpoints: int = 0,
        timeout: Optional[float] = 60.0,
    ):
        path = os.environ.get(SOCKET_ENV, "")
        if not path:
            raise ValueError(f"{SOCKET_ENV} not set. Can't initialize client")
        self.prefix = prefix
        self.num_model_checkpoints = num_model_checkpoints
        self.num_data_checkpoints = num_data_checkpoints
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.client_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
        except OSError as ex:
            self._sock.close()
            raise HyperPodIPCException(
                f"cannot connect to the agent's worker socket {path}: {ex}"
            ) from ex
        self._send("init", {})
        self._send(
            "ckpt_init",
            {
                "prefix": prefix,
                "checkpoint_types": {
                    CheckpointType.MODEL_CHECKPOINT.value: num_model_checkpoints,
                    CheckpointType.DATA_CHECKPOINT.value: num_data_checkpoints,
                },
            },
        )

    def __repr__(self):
        return (
            f"CheckpointDiscoverySocketClient(prefix={self.prefix!r}, "
            f"num_model_checkpoints={self.num_model_checkpoints}, "
            f"num_data_checkpoints={self.num_data_checkpoints})"
        )

    def _send(self, message_type: str, message: dict) -> None:
        message = dict(message)
        message["type"] = message_type
        message["local_rank"] = self.local_rank
        message["client_id"] = self.client_id
        try:
            with self._lock:
                self._sock.sendall(_frame(message))
        except OSError as ex:
            raise HyperPodIPCException(
                f"cannot send {message_type} to the agent: {ex}"
            ) from ex

    def update(self, step: int, path: Optional[str], checkpoint_type) -> None:
        """Reports that this rank saved ``step`` at ``path``.

        A data checkpoint may pass ``path=None``: the step keeps the model
        checkpoint's path.
        """
        if isinstance(checkpoint_type, CheckpointType):
            checkpoint_type = checkpoint_type.value
        self._send(
            "ckpt_info_update",
            {"step": step, "path": path, "checkpoint_type": checkpoint_type},
        )

    def get_latest_checkpoint_path(self) -> Optional[str]:
        """The path of the latest step every rank completed, or None.

        After a restart this is where all ranks resume: the agent forgets
        the incomplete steps above it.
        """
        with self._lock:
            try:
                self._sock.sendall(
                    _frame(
                        {
                            "type": "ckpt_info_get",
                            "local_rank": self.local_rank,
                            "client_id": self.client_id,
                        }
                    )
                )
                while True:
                    (length,) = struct.unpack(">I", _read_exact(self._sock, 4))
                    if length > _FRAME_MAX:
                        raise HyperPodIPCException(
                            f"a {length}-byte frame from the agent"
                        )
                    reply = json.loads(_read_exact(self._sock, length))
                    if (
                        reply.get("type") == "ckpt_info_get"
                        and reply.get("client_id") == self.client_id
                    ):
                        return reply.get("path")
            except (OSError, ValueError) as ex:
                raise HyperPodIPCException(
                    f"no checkpoint answer from the agent: {ex}"
                ) from ex

    def close(self) -> None:
        """Closes the connection (the agent forgets this client)."""
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
