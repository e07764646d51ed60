# SPDX-License-Identifier: Apache-2.0
"""Checkpoint discovery: each rank reports the checkpoint steps it saved,
and asks on start for the latest step every local rank completed."""

import enum
import json
import os
import threading
import uuid
from typing import Optional

from . import _wire
from ._wire import HyperPodIPCException
from ._wire import read_frame as _read_frame


class CheckpointType(str, enum.Enum):
    """What a rank saved: counted separately when deciding completeness."""

    MODEL_CHECKPOINT = "model_checkpoint"
    DATA_CHECKPOINT = "data_checkpoint"


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
        path = _wire.socket_path()
        self.prefix = prefix
        self.num_model_checkpoints = num_model_checkpoints
        self.num_data_checkpoints = num_data_checkpoints
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.client_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._sock = _wire.connect(path, timeout)
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
        data = _wire.client_frame(message_type, self.local_rank,
                                  self.client_id, message)
        try:
            with self._lock:
                self._sock.sendall(data)
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
                    _wire.client_frame("ckpt_info_get", self.local_rank,
                                       self.client_id, {})
                )
                while True:
                    reply = json.loads(_read_frame(self._sock))
                    # Broadcasts (job_fault) reach this connection too.
                    if (
                        isinstance(reply, dict)
                        and reply.get("type") == "ckpt_info_get"
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
