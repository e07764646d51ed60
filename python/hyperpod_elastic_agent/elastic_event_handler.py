# SPDX-License-Identifier: Apache-2.0
"""``hyperpod_elastic_agent.elastic_event_handler``: the very module
``hyperpodrun_client.elastic_event_handler``, so that its SIGUSR1 flag and
mode are one, whichever name imported it first."""

import sys

from hyperpodrun_client import elastic_event_handler as _impl

sys.modules[__name__] = _impl
