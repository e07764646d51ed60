# SPDX-License-Identifier: Apache-2.0
"""The reference agent's worker-side import paths, served by hyperpodrun_client.

Training code written for the HyperPod elastic agent's package
(``hyperpod_elastic_agent``) runs unchanged against hyperpodrun with this
package on its path. Only the worker side is here: the ``ipc`` clients,
``checkpoint_discovery.CheckpointType`` and ``elastic_event_handler``. Do not
install it beside the reference's own package: both are named
``hyperpod_elastic_agent``.
"""

from hyperpodrun_client import (
    CheckpointDiscoverySocketClient,
    InProcessRestartSocketClient,
    InProcessRestartSocketMessageType,
    RestartMode,
    TrainingManager,
)

__all__ = [
    "CheckpointDiscoverySocketClient",
    "InProcessRestartSocketClient",
    "InProcessRestartSocketMessageType",
    "RestartMode",
    "TrainingManager",
]
