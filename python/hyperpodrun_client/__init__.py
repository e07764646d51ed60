# SPDX-License-Identifier: Apache-2.0
"""The worker side of hyperpodrun's worker socket, for training code.

Training code started by hyperpodrun (or by the reference HyperPod elastic
agent: the wire protocol is the same) uses it for two things.

Checkpoint discovery: report the checkpoints each rank has saved and ask,
on start, which one every rank completed::

    from hyperpodrun_client import CheckpointDiscoverySocketClient, CheckpointType

    ckpt = CheckpointDiscoverySocketClient("/ckpt/run1", num_model_checkpoints=world)
    path = ckpt.get_latest_checkpoint_path()      # None on a fresh start
    ...
    ckpt.update(step, path, CheckpointType.MODEL_CHECKPOINT)

In-process restart (``hyperpodrun --inprocess-restart``): wait at the
barrier for the operator's start, report a fault, and learn of a fault
elsewhere in the job, all without the process exiting::

    from hyperpodrun_client import InProcessRestartSocketClient, RestartMode

    ipr = InProcessRestartSocketClient()
    _, start = ipr.hyperpod_barrier()     # blocks for job_start; sets os.environ
    ipr.hyperpod_past_rcb_barrier()
    ...                                   # train; ipr.fault_event says "go back"
    ipr.hyperpod_send_fault(rank, RestartMode.IN_PROCESS_RESTART, "Reason", "text")

The names are those of the reference's ``hyperpod_elastic_agent`` package,
so code written for it switches by changing the import (or, unchanged,
through the ``hyperpod_elastic_agent`` package shipped beside this one).
"""

from ._wire import SOCKET_ENV, HyperPodIPCException
from .checkpoint import CheckpointDiscoverySocketClient, CheckpointType
from .inprocess import (
    InProcessRestartSocketClient,
    InProcessRestartSocketMessageType,
    RestartMode,
    TrainingManager,
    apply_worker_envs,
)

__all__ = [
    "CheckpointDiscoverySocketClient",
    "CheckpointType",
    "HyperPodIPCException",
    "InProcessRestartSocketClient",
    "InProcessRestartSocketMessageType",
    "RestartMode",
    "SOCKET_ENV",
    "TrainingManager",
    "apply_worker_envs",
]


def __getattr__(name):
    # Importing the handler module installs a SIGUSR1 handler, which only
    # code that asks for elastic_event_detected should get.
    if name == "elastic_event_detected":
        from .elastic_event_handler import elastic_event_detected

        return elastic_event_detected
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
