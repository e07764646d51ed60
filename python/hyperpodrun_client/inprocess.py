# SPDX-License-Identifier: Apache-2.0
"""In-process restart: the training processes' side of the barrier.

An agent run with ``--inprocess-restart`` keeps its training processes
alive across faults. Each rank waits at the barrier until the operator's
``/start`` arrives as ``job_start`` (its rank, world size and master for
this round), trains, and on an error reports ``job_fault`` and goes back
to the barrier. A fault anywhere else in the job reaches every rank as a
``job_fault`` broadcast once the operator stops this node; the client's
reader thread sets ``fault_event`` when one arrives, so that the training
loop knows it must leave the step and return to the barrier.
"""

import collections
import enum
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Dict, Optional, Tuple

from . import _wire
from ._wire import HyperPodIPCException
from ._wire import read_frame as _read_frame

logger = logging.getLogger(__name__)


class InProcessRestartSocketMessageType(str, enum.Enum):
    """The message types of the in-process restart protocol."""

    AT_RCB_BARRIER = "at_rcb_barrier"
    JOB_DATA = "job_data"
    JOB_FAILED_RANKS = "job_failed_ranks"
    JOB_FAULT = "job_fault"
    JOB_RANK_INFO = "job_rank_info"
    JOB_START = "job_start"
    PAST_RCB_BARRIER = "past_rcb_barrier"
    RANK_LABELS = "rank_labels"


class RestartMode(str, enum.Enum):
    """How a rank's fault asks to be recovered.

    IN_PROCESS_RESTART: the default; every rank returns to the barrier.
    PROCESS_LEVEL_RESTART: the operator restarts the processes of every node.
    JOB_LEVEL_RESTART: the operator restarts the whole job.
    LOCAL_PRL: this node's agent restarts its own processes, without the
    operator.
    """

    IN_PROCESS_RESTART = "in_process_restart"
    JOB_LEVEL_RESTART = "job_level_restart"
    LOCAL_PRL = "local_process_level_restart"
    PROCESS_LEVEL_RESTART = "process_level_restart"


_MODES = {m.value for m in RestartMode}
# How many unread messages of each type a client keeps.
_INBOX_MAX = 16
# The messages the agent sends this client, each kept in arrival order.
_INBOUND = (
    InProcessRestartSocketMessageType.JOB_START.value,
    InProcessRestartSocketMessageType.JOB_FAULT.value,
    InProcessRestartSocketMessageType.JOB_RANK_INFO.value,
)


def apply_worker_envs(payload: Dict[str, Any]) -> Dict[str, str]:
    """Copies a ``job_start`` or ``job_rank_info`` payload's
    ``worker_envs`` into ``os.environ`` (so that
    ``init_process_group("env://")`` uses this round's rank and master) and
    returns them. Raises ValueError when the payload has none."""
    envs = payload.get("worker_envs") if isinstance(payload, dict) else None
    if not isinstance(envs, dict):
        raise ValueError(f"no worker_envs object in {payload!r}")
    out = {}
    for key, value in envs.items():
        out[str(key)] = str(value)
    os.environ.update(out)
    return out


class InProcessRestartSocketClient:
    """One client object on its own connection to the agent, with a reader
    thread that files what the agent sends by type.

    Connects and registers (``init``) on construction: ValueError when
    HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH is not set,
    HyperPodIPCException when the agent cannot be reached. Every method that
    sends raises HyperPodIPCException when the send fails; every method that
    waits raises it on its timeout or when the agent closes the connection.
    """

    def __init__(self, timeout: Optional[float] = 60.0):
        path = _wire.socket_path()
        self.server_socket_path = path
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.client_id = str(uuid.uuid4())
        #: Set by the reader thread when a ``job_fault`` arrives (a fault
        #: elsewhere, or the operator's stop), cleared when the next
        #: ``job_start`` arrives. A training loop checks it between steps.
        self.fault_event = threading.Event()
        #: The last ``job_fault`` payload, e.g. ``{"restart_count": 1}``.
        self.last_fault: Optional[dict] = None
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        # Bounded: a job_fault arrives every round whether or not anyone
        # calls hyperpod_wait_fault, and only the latest ones matter.
        self._inbox = {t: collections.deque(maxlen=_INBOX_MAX) for t in _INBOUND}
        self._closed: Optional[str] = None
        self._sock = _wire.connect(path, timeout)
        # The reader blocks in recv for as long as the job runs.
        self._sock.settimeout(None)
        self._send("init", {})
        self._reader = threading.Thread(
            target=self._read_loop, name="hyperpodrun-ipr-reader", daemon=True
        )
        self._reader.start()

    def __repr__(self):
        return (
            f"InProcessRestartSocketClient(local_rank={self.local_rank}, "
            f"client_id={self.client_id!r})"
        )

    # -- the connection ----------------------------------------------------

    def _send(self, message_type: str, message: dict) -> None:
        data = _wire.client_frame(message_type, self.local_rank,
                                  self.client_id, message)
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError as ex:
            with self._cond:
                why = self._closed or ex
            raise HyperPodIPCException(
                f"cannot send {message_type} to the agent: {why}"
            ) from ex

    def _read_loop(self) -> None:
        reason = "the agent closed the worker socket"
        try:
            while True:
                body = _read_frame(self._sock)
                self._dispatch(body)
        except HyperPodIPCException as ex:
            reason = str(ex)
        except OSError as ex:
            reason = f"the worker socket failed: {ex}"
        with self._cond:
            if self._closed is None:
                self._closed = reason
            self._cond.notify_all()

    def _dispatch(self, body: bytes) -> None:
        try:
            msg = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            logger.warning("ignoring a frame from the agent that is not JSON")
            return
        if not isinstance(msg, dict):
            return
        msg_type = msg.pop("type", None)
        client_id = msg.pop("client_id", None)
        # Frames for other clients on this connection, and the checkpoint
        # answers, are not ours.
        if client_id != self.client_id or msg_type not in self._inbox:
            return
        with self._cond:
            self._inbox[msg_type].append(msg)
            if msg_type == InProcessRestartSocketMessageType.JOB_FAULT.value:
                self.last_fault = msg
                self.fault_event.set()
            elif msg_type == InProcessRestartSocketMessageType.JOB_START.value:
                # Cleared here, in arrival order, not when the barrier
                # returns: a fault that follows the start at once must
                # not be forgotten.
                self.fault_event.clear()
            self._cond.notify_all()

    def _drain(self, msg_type: str) -> list:
        with self._cond:
            box = self._inbox[msg_type]
            out = list(box)
            box.clear()
            return out

    def _wait(self, msg_type: str, timeout: Optional[float]) -> Tuple[str, dict]:
        """The oldest queued message of msg_type, waiting for one."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            box = self._inbox[msg_type]
            while not box:
                if self._closed is not None:
                    raise HyperPodIPCException(
                        f"no {msg_type} from the agent: {self._closed}"
                    )
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise HyperPodIPCException(
                        f"Timed out reading data from server after {timeout} seconds"
                    )
                self._cond.wait(left)
            return msg_type, box.popleft()

    @property
    def connected(self) -> bool:
        """False once the agent has closed the connection."""
        with self._cond:
            return self._closed is None

    def close(self) -> None:
        """Closes the connection (the agent forgets this client) and stops
        the reader thread."""
        with self._cond:
            if self._closed is None:
                self._closed = "the client was closed"
            self._cond.notify_all()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=10)
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the protocol ------------------------------------------------------

    def hyperpod_barrier(
        self, timeout: Optional[float] = None, apply_envs: bool = True
    ) -> Tuple[str, dict]:
        """Tells the agent this rank is at the barrier (``at_rcb_barrier``)
        and blocks until the operator's start arrives as ``job_start``.

        Returns ``("job_start", payload)`` with payload
        ``{"worker_envs": {"RANK": "4", "WORLD_SIZE": "8", "MASTER_ADDR": ...,
        "JOB_RESTART_COUNT": "1", ...}, "aggregate_worker_data":
        {"rank_ips": [...], "aggregate_worker_data": [...]}}``, the
        reference's shape. With apply_envs (the default) the worker_envs are
        also copied into os.environ. fault_event is clear on return unless
        a job_fault already followed the start.
        """
        # Forget a start that belonged to an earlier round before saying
        # we are here, so that the one that answers this barrier is kept.
        self._drain(InProcessRestartSocketMessageType.JOB_START.value)
        self._send(InProcessRestartSocketMessageType.AT_RCB_BARRIER.value, {})
        response = self._wait(InProcessRestartSocketMessageType.JOB_START.value,
                              timeout)
        if apply_envs:
            try:
                apply_worker_envs(response[1])
            except ValueError as ex:
                raise HyperPodIPCException(f"a job_start from the agent: {ex}") from ex
        logger.info("barrier cleared")
        return response

    def hyperpod_past_rcb_barrier(self) -> None:
        """Tells the agent this rank has passed the barrier and trains: its
        data and fault are cleared."""
        self._send(InProcessRestartSocketMessageType.PAST_RCB_BARRIER.value, {})

    def hyperpod_send_fault(
        self,
        rank: int,
        restart_mode: RestartMode = RestartMode.IN_PROCESS_RESTART,
        reason: Optional[str] = None,
        message: Optional[str] = None,
    ) -> None:
        """Reports a fault of this rank (global ``rank``): the agent goes
        FAULTED with reason and message (its /status shows them), and
        restart_mode says how to recover. The rank then returns to
        hyperpod_barrier."""
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise ValueError(f"rank must be an int, not {rank!r}")
        mode = restart_mode.value if isinstance(restart_mode, RestartMode) else restart_mode
        if mode not in _MODES:
            raise ValueError(
                f"restart_mode {restart_mode!r} is not one of {sorted(_MODES)}"
            )
        for name, value in (("reason", reason), ("message", message)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a str or None, not {value!r}")
        self._send(
            InProcessRestartSocketMessageType.JOB_FAULT.value,
            {"rank": rank, "restart_mode": mode, "reason": reason, "message": message},
        )

    def hyperpod_send_data(self, rank: int, data: Any) -> None:
        """Attaches data (any JSON value) to this rank; /status shows it in
        worker_data until the rank passes the next barrier."""
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise ValueError(f"rank must be an int, not {rank!r}")
        self._send(
            InProcessRestartSocketMessageType.JOB_DATA.value,
            {"rank": rank, "data": data},
        )

    def hyperpod_notify_labels(self, labels: Dict[str, str]) -> None:
        """Replaces the node's rank_labels in /status (e.g. {"PP": "0"});
        the last rank to call wins."""
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise ValueError(f"labels must map str to str, not {labels!r}")
        self._send(
            InProcessRestartSocketMessageType.RANK_LABELS.value, {"labels": labels}
        )

    def hyperpod_wait_fault(self, timeout: Optional[float] = None) -> Tuple[str, dict]:
        """Blocks until the next ``job_fault`` (one already received is
        forgotten, as in the reference) and returns ("job_fault",
        {"restart_count": N}). fault_event needs no such call."""
        self._drain(InProcessRestartSocketMessageType.JOB_FAULT.value)
        return self._wait(InProcessRestartSocketMessageType.JOB_FAULT.value, timeout)

    def hyperpod_wait_rank_info(
        self, timeout: Optional[float] = None
    ) -> Tuple[str, dict]:
        """The latest ``job_rank_info`` (sent on the operator's /update)
        received, or blocks for the next one."""
        queued = self._drain(InProcessRestartSocketMessageType.JOB_RANK_INFO.value)
        if queued:
            return InProcessRestartSocketMessageType.JOB_RANK_INFO.value, queued[-1]
        return self._wait(InProcessRestartSocketMessageType.JOB_RANK_INFO.value, timeout)


class TrainingManager:
    """The reference's entry point: ``TrainingManager().InProcessRestart``
    is an InProcessRestartSocketClient."""

    def __init__(self):
        self.InProcessRestart = InProcessRestartSocketClient()

    @staticmethod
    def get_checkpoint_discovery_client(
        prefix: str, num_model_checkpoints: int = 0, num_data_checkpoints: int = 0
    ):
        from .checkpoint import CheckpointDiscoverySocketClient

        return CheckpointDiscoverySocketClient(
            prefix, num_model_checkpoints, num_data_checkpoints
        )
