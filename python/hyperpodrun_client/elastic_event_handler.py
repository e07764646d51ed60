# SPDX-License-Identifier: Apache-2.0
"""Graceful stop for elastic scaling: did the agent ask this job to stop?

For a scale event the operator stops the job gracefully, and the agent
sends the workers SIGUSR1. Importing this module installs a SIGUSR1
handler that only records the signal; the training loop asks
``elastic_event_detected()`` between steps, saves and exits.

``HYPERPOD_SIGNAL_COORDINATION`` (read once, on import) decides:

- ``disabled`` or unset: always False;
- ``distributed``: this rank's flag, or, once torch.distributed is
  initialised, the MAX of every rank's flag (an all-reduce, so every rank
  must call it at the same step), so that all ranks stop at the same step
  even when the signal reached them at different times; on any error in
  the all-reduce, this rank's flag;
- anything else: a warning on import, then as ``disabled``.
"""

import logging
import os
import signal

logger = logging.getLogger(__name__)

ENV = "HYPERPOD_SIGNAL_COORDINATION"
_VALID_COORDINATION_MODES = ("disabled", "distributed")


def _read_mode() -> str:
    raw = os.environ.get(ENV, "disabled").lower()
    if raw not in _VALID_COORDINATION_MODES:
        logger.warning(
            '%s="%s" is not one of %s; elastic events are disabled',
            ENV, raw, ", ".join(_VALID_COORDINATION_MODES))
        return "disabled"
    return raw


_SIGNAL_COORDINATION_MODE = _read_mode()

#: Signal number -> whether it has been received.
_signal_received = {signal.SIGUSR1: False}


def _signal_handler(signum, frame):
    # Only a store: the handler runs between two bytecodes of whatever the
    # main thread was doing, possibly inside logging.
    _signal_received[signum] = True


try:
    signal.signal(signal.SIGUSR1, _signal_handler)
except ValueError:
    # signal.signal works only in the main thread of the main interpreter.
    logger.warning(
        "%s was imported outside the main thread: no SIGUSR1 handler, so "
        "elastic_event_detected() stays False", __name__)


def elastic_event_detected(sig: int = signal.SIGUSR1) -> bool:
    """True once a scale event asked this job to stop (see the module's
    text). Any signal other than SIGUSR1 gives False."""
    if sig != signal.SIGUSR1:
        return False
    if _SIGNAL_COORDINATION_MODE == "disabled":
        return False
    local = bool(_signal_received.get(sig, False))
    if _SIGNAL_COORDINATION_MODE != "distributed":
        return False
    try:
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            return local
        device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        flag = torch.tensor([1.0 if local else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)
    except Exception as ex:  # noqa: BLE001 - any failure falls back
        logger.warning("elastic event all-reduce failed (%s); using this "
                       "rank's flag", ex)
        return local
