# SPDX-License-Identifier: Apache-2.0
"""``hyperpod_elastic_agent.ipc``: the worker socket's clients."""

from hyperpodrun_client import (
    CheckpointDiscoverySocketClient,
    HyperPodIPCException,
    InProcessRestartSocketClient,
    InProcessRestartSocketMessageType,
    RestartMode,
    TrainingManager,
)

__all__ = [
    "CheckpointDiscoverySocketClient",
    "HyperPodIPCException",
    "InProcessRestartSocketClient",
    "InProcessRestartSocketMessageType",
    "RestartMode",
    "TrainingManager",
]
