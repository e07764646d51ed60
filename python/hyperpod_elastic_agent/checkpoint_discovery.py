# SPDX-License-Identifier: Apache-2.0
"""``hyperpod_elastic_agent.checkpoint_discovery``: the checkpoint types."""

from hyperpodrun_client import CheckpointType

__all__ = ["CheckpointType"]
