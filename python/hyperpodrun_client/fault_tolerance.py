# SPDX-License-Identifier: Apache-2.0
"""Heartbeats and timed sections for hyperpodrun, with the names and
behaviour of nvidia-resiliency-ext's ``RankMonitorClient``.

Code written for ``ft_launcher`` changes one line::

    import nvidia_resiliency_ext.fault_tolerance as fault_tolerance
    # becomes
    import hyperpodrun_client.fault_tolerance as fault_tolerance

and is started with ``hyperpodrun --ft-rank-heartbeat-timeout ...`` (the
``--ft-*`` flags are ft_launcher's).

How it reaches the agent: ``init_workload_monitoring()`` registers on the
agent's worker socket (``ft_init``) and maps the slot the agent keeps for
this local rank in a shared-memory segment. A heartbeat, ``start_section``
and ``end_section`` are stores into that slot: no system call, nothing
that can block, whatever the agent is doing; the agent reads the slot only
when one of the rank's deadlines comes. Only computed timeouts
(``calculate_and_set_*``, ``load_state_dict``) and the shutdown go over the
socket, and wait at most ``REPLY_TIMEOUT`` seconds for the agent.

Without an agent (no ``HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH``, as under
plain ``python train.py``), or with an agent that does not monitor ranks,
``init_workload_monitoring()`` raises ``RankMonitorClientError`` at once or
after ``REPLY_TIMEOUT`` seconds, as ft's client raises without its rank
monitor; it never hangs.
"""

import dataclasses
import json
import logging
import mmap
import os
import time
import uuid
from typing import Any, Collection, Mapping, Optional

from ._wire import (
    SOCKET_ENV,
    HyperPodIPCException,
    client_frame,
    connect,
    read_frame,
)

_monotonic_ns = time.monotonic_ns

#: Seconds to wait for the agent's answer to ft_init or ft_timeouts.
REPLY_TIMEOUT = float(os.environ.get("HYPERPODRUN_FT_REPLY_TIMEOUT", "10"))

# The slot's words (include/hyperpod/ftmon.h, enum hp_ft_word).
_W_INIT_NS = 0
_W_HB_COUNT = 1
_W_HB_NS = 2
_W_OOS_NS = 3
_W_STEPS = 4
_W_SECTION0 = 8


class RankMonitorClientError(Exception):
    pass


@dataclasses.dataclass
class HeartbeatTimeouts:
    initial: Optional[float] = None
    subsequent: Optional[float] = None
    were_calculated: bool = False

    @property
    def are_valid(self) -> bool:
        return self.initial is not None and self.subsequent is not None


@dataclasses.dataclass
class SectionTimeouts:
    section: Mapping[str, Optional[float]] = dataclasses.field(
        default_factory=dict)
    out_of_section: Optional[float] = None
    calculated_sections: Collection[str] = dataclasses.field(
        default_factory=list)
    is_out_of_section_calculated: bool = False


class TimeoutsCalc:
    """ft's timeout calculator: the longest observed intervals times the
    safety factor, merged with earlier computed values by an EMA."""

    def __init__(self, sections=None, start_time=None, safety_factor=5.0):
        self.start_time = time.monotonic() if start_time is None else start_time
        self.prev_hb_time = None
        self.count = 0
        self.initial_max_time = -1.0
        self.subsequent_max_time = -1.0
        self.safety_factor = safety_factor
        self.open_sections = {}
        self.last_section_close_time = self.start_time
        self.out_of_section_max_time = -1.0
        self.section_to_max_time = {name: -1.0 for name in (sections or ())}

    def synchronize_all(self):
        """Takes the max over all ranks when torch.distributed is
        initialized; alone, the rank's own values stand."""
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            return
        if not (dist.is_available() and dist.is_initialized()):
            return
        device = (torch.device("cuda")
                  if dist.get_backend() == dist.Backend.NCCL
                  else torch.device("cpu"))
        t = torch.tensor(
            [self.initial_max_time, self.subsequent_max_time,
             self.out_of_section_max_time]
            + list(self.section_to_max_time.values()),
            dtype=torch.float32, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self.initial_max_time = float(t[0].item())
        self.subsequent_max_time = float(t[1].item())
        self.out_of_section_max_time = float(t[2].item())
        for i, name in enumerate(self.section_to_max_time):
            self.section_to_max_time[name] = float(t[3 + i].item())

    def update_on_heartbeat(self, hb_time):
        if self.count == 0:
            self.initial_max_time = max(self.initial_max_time,
                                        hb_time - self.start_time)
        else:
            self.subsequent_max_time = max(self.subsequent_max_time,
                                           hb_time - self.prev_hb_time)
        self.count += 1
        self.prev_hb_time = hb_time

    def maybe_bump_oos_time(self, curr_time=None):
        if not self.open_sections:
            curr_time = time.monotonic() if curr_time is None else curr_time
            self.out_of_section_max_time = max(
                self.out_of_section_max_time,
                curr_time - self.last_section_close_time)

    def open_section(self, name, t):
        self.maybe_bump_oos_time(t)
        self.open_sections[name] = t

    def close_section(self, name, t):
        self.section_to_max_time[name] = max(
            self.section_to_max_time[name], t - self.open_sections.pop(name))
        if not self.open_sections:
            self.last_section_close_time = t

    @staticmethod
    def _ema(x, curr, alpha=0.5):
        return alpha * x + (1.0 - alpha) * curr

    def can_get_hb_timeouts(self):
        return self.initial_max_time > 0 and self.subsequent_max_time > 0

    def get_hb_timeouts(self, current=None):
        initial = self.safety_factor * self.initial_max_time
        subsequent = self.safety_factor * self.subsequent_max_time
        if current is not None and current.were_calculated:
            initial = self._ema(initial, current.initial)
            subsequent = self._ema(subsequent, current.subsequent)
        return HeartbeatTimeouts(initial, subsequent, True)

    def can_get_section_timeouts(self, selected_sections=None,
                                 calc_out_of_section=True):
        selected = selected_sections or self.section_to_max_time.keys()
        return (all(self.section_to_max_time[s] > 0 for s in selected)
                and (self.out_of_section_max_time > 0
                     if calc_out_of_section else True))

    def get_section_timeouts(self, selected_sections=None,
                             calc_out_of_section=True, current=None):
        selected = (list(selected_sections) if selected_sections is not None
                    else list(self.section_to_max_time))
        section = {s: None for s in self.section_to_max_time}
        for s in selected:
            section[s] = self.safety_factor * self.section_to_max_time[s]
        oos = (self.safety_factor * self.out_of_section_max_time
               if calc_out_of_section else None)
        new = SectionTimeouts(section, oos, selected, calc_out_of_section)
        if current is None:
            return new
        merged = {}
        for s in new.section:
            if s in current.calculated_sections and s in new.calculated_sections:
                merged[s] = self._ema(current.section[s], new.section[s])
            elif s in new.calculated_sections:
                merged[s] = new.section[s]
            else:
                merged[s] = current.section.get(s)
        if current.is_out_of_section_calculated and calc_out_of_section:
            oos = self._ema(current.out_of_section, new.out_of_section)
        elif not calc_out_of_section:
            oos = current.out_of_section
        return SectionTimeouts(
            merged, oos,
            sorted(set(current.calculated_sections) | set(selected)),
            current.is_out_of_section_calculated or calc_out_of_section)


class RankMonitorClient:
    """nvidia-resiliency-ext's RankMonitorClient, on hyperpodrun's rank
    monitor. ``.hb_timeouts`` and ``.section_timeouts`` hold the timeouts
    in use; ``state_dict()`` keeps computed ones across a restart."""

    CURRENT_TIMEOUTS_STATE_KEY = "current_timeouts"

    def __init__(self):
        self.rank_info = None
        self.is_initialized = False
        self.timeouts_calc = None
        self.hb_timeouts = None
        self.section_timeouts = None
        self.loaded_hb_timeouts = None
        self.loaded_section_timeouts = None
        self.cfg = None
        self.logger = logging.getLogger(__name__)
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.client_id = str(uuid.uuid4())
        self._sock = None
        self._map = None
        self._slot = None
        self._index = {}
        self._open = set()

    # ---- the socket ----

    def _send(self, message_type: str, message: dict) -> None:
        self._sock.sendall(client_frame(message_type, self.local_rank,
                                        self.client_id, message))

    def _reply(self, types) -> dict:
        """The next message of one of types for this client; others
        (broadcasts meant for other clients of the socket) are skipped."""
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RankMonitorClientError(
                    f"the agent did not answer within {REPLY_TIMEOUT:g} s: "
                    "is it a hyperpodrun that monitors ranks?")
            self._sock.settimeout(left)
            try:
                msg = json.loads(read_frame(self._sock))
            except (OSError, HyperPodIPCException, ValueError) as ex:
                raise RankMonitorClientError(
                    f"no answer from the agent: {ex}") from ex
            if (msg.get("type") in types
                    and msg.get("client_id") == self.client_id):
                return msg

    def _ensure_is_ready(self):
        if not self.is_initialized:
            raise RankMonitorClientError("RankMonitorClient is not initialized")

    # ---- set-up ----

    def init_workload_monitoring(self, num_warmup_iters: Optional[int] = None
                                 ) -> None:
        """Registers this rank with the agent and maps its slot.
        num_warmup_iters is accepted for ft's signature and not used."""
        if self.is_initialized:
            raise RankMonitorClientError(
                "RankMonitorClient is already initialized")
        path = os.environ.get(SOCKET_ENV, "")
        if not path:
            raise RankMonitorClientError(
                f"{SOCKET_ENV} is not set: this process was not started by "
                "hyperpodrun, and there is no rank monitor to talk to")
        try:
            self._sock = connect(path, REPLY_TIMEOUT)
        except HyperPodIPCException as ex:
            raise RankMonitorClientError(str(ex)) from ex
        try:
            self._send("init", {})
            self._send("ft_init", {"rank": int(os.environ.get("RANK", "-1"))})
            reply = self._reply(("ft_config",))
            self._map_slot(reply)
        except BaseException:
            self._close()
            raise
        self.cfg = reply
        sections = list(reply.get("rank_section_timeouts", {}))
        self._index = {name: i for i, name in enumerate(sections)}
        self.timeouts_calc = TimeoutsCalc(
            sections=sections, safety_factor=reply.get("safety_factor", 5.0))
        self.hb_timeouts = HeartbeatTimeouts(
            initial=reply.get("initial_rank_heartbeat_timeout"),
            subsequent=reply.get("rank_heartbeat_timeout"),
            were_calculated=False)
        self.section_timeouts = SectionTimeouts(
            section=dict(reply.get("rank_section_timeouts", {})),
            out_of_section=reply.get("rank_out_of_section_timeout"),
            calculated_sections=[],
            is_out_of_section_calculated=False)
        self.is_initialized = True
        if self.loaded_hb_timeouts or self.loaded_section_timeouts:
            self._set_calculated_timeouts(self.loaded_hb_timeouts,
                                          self.loaded_section_timeouts)

    def _map_slot(self, reply):
        size = int(reply["slot_bytes"])
        fd = os.open(reply["segment"], os.O_RDWR | os.O_NOFOLLOW
                     | os.O_CLOEXEC)
        try:
            self._map = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        start = int(reply["slot"]) * size
        self._slot = memoryview(self._map)[start:start + size].cast("Q")

    def _close(self):
        self._open = set()
        if self._slot is not None:
            self._slot.release()
            self._slot = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def shutdown_workload_monitoring(self):
        """Tells the agent to stop watching this rank and disconnects."""
        if not self.is_initialized:
            return
        try:
            self._send("ft_shutdown", {})
        except OSError:
            pass  # the agent is gone: nothing to tell
        self._close()
        self.is_initialized = False

    # ---- the hot path: stores into the slot ----

    def send_heartbeat(self) -> None:
        """A heartbeat: two stores into the rank's slot, and ft's interval
        bookkeeping, inline: this is the call a training loop makes most."""
        slot = self._slot
        if slot is None:
            raise RankMonitorClientError("RankMonitorClient is not initialized")
        now = _monotonic_ns()
        # The time first: a count the agent sees always has its time.
        slot[_W_HB_NS] = now
        slot[_W_HB_COUNT] += 1
        calc = self.timeouts_calc
        t = now * 1e-9
        if calc.count:
            gap = t - calc.prev_hb_time
            if gap > calc.subsequent_max_time:
                calc.subsequent_max_time = gap
        elif t - calc.start_time > calc.initial_max_time:
            calc.initial_max_time = t - calc.start_time
        calc.count += 1
        calc.prev_hb_time = t

    def start_section(self, section: str) -> None:
        """Opens a section; a name without a timeout in the agent's
        configuration is not monitored (as in ft)."""
        self._ensure_is_ready()
        i = self._index.get(section)
        if i is None:
            return
        if section in self._open:
            raise RankMonitorClientError(
                f"RankMonitorClient could not send section update: section "
                f"{section} is already open")
        now = time.monotonic_ns()
        self._slot[_W_SECTION0 + i] = now
        self._open.add(section)
        self._slot[_W_OOS_NS] = 0
        self.timeouts_calc.open_section(section, now / 1e9)

    def end_section(self, section: str) -> None:
        """Closes an open section."""
        self._ensure_is_ready()
        i = self._index.get(section)
        if i is None:
            return
        if section not in self._open:
            raise RankMonitorClientError(
                f"RankMonitorClient could not send section update: section "
                f"{section} is not open")
        now = time.monotonic_ns()
        self._open.discard(section)
        if not self._open:
            self._slot[_W_OOS_NS] = now
        self._slot[_W_SECTION0 + i] = 0
        if section == "step":
            self._slot[_W_STEPS] += 1
        self.timeouts_calc.close_section(section, now / 1e9)

    def end_all_sections(self) -> None:
        """Closes every open section; nothing when none is open."""
        self._ensure_is_ready()
        for section in sorted(self._open):
            self.end_section(section)

    # ---- computed timeouts ----

    def _set_calculated_timeouts(self, new_hb_timeouts, new_section_timeouts):
        msg = {}
        if new_hb_timeouts is not None:
            msg["heartbeat"] = {"initial": new_hb_timeouts.initial,
                                "subsequent": new_hb_timeouts.subsequent}
        if new_section_timeouts is not None:
            msg["section"] = {
                "section": dict(new_section_timeouts.section),
                "out_of_section": new_section_timeouts.out_of_section}
        try:
            self._send("ft_timeouts", msg)
        except OSError as ex:
            raise RankMonitorClientError(
                f"cannot send the timeouts to the agent: {ex}") from ex
        reply = self._reply(("ft_ok", "ft_error"))
        if reply["type"] != "ft_ok":
            raise RankMonitorClientError(
                f"the agent refused the timeouts {msg} (its log says why)")
        if new_hb_timeouts is not None:
            self.hb_timeouts = new_hb_timeouts
        if new_section_timeouts is not None:
            self.section_timeouts = new_section_timeouts

    def calculate_and_set_hb_timeouts(self, skip_if_not_ready: bool = False
                                      ) -> bool:
        """Heartbeat timeouts from the longest observed intervals times
        the safety factor (the max over ranks when torch.distributed is
        initialized); they apply at once."""
        self._ensure_is_ready()
        self.timeouts_calc.synchronize_all()
        if not self.timeouts_calc.can_get_hb_timeouts():
            if skip_if_not_ready:
                return False
            raise RankMonitorClientError("Not enough data to compute timeouts.")
        self._set_calculated_timeouts(
            self.timeouts_calc.get_hb_timeouts(current=self.hb_timeouts), None)
        return True

    def calculate_and_set_section_timeouts(
            self, selected_sections: Optional[Collection[str]] = None,
            calc_out_of_section: bool = True,
            skip_if_not_ready: bool = False) -> bool:
        """Section (and out-of-section) timeouts, as the heartbeat ones."""
        self._ensure_is_ready()
        self.timeouts_calc.maybe_bump_oos_time()
        self.timeouts_calc.synchronize_all()
        if not self.timeouts_calc.can_get_section_timeouts(
                selected_sections, calc_out_of_section):
            if skip_if_not_ready:
                return False
            raise RankMonitorClientError("Not enough data to compute timeouts.")
        self._set_calculated_timeouts(None, self.timeouts_calc.get_section_timeouts(
            selected_sections, calc_out_of_section,
            current=self.section_timeouts))
        return True

    # ---- state ----

    def state_dict(self) -> Mapping[str, Any]:
        """{"current_timeouts": {"heartbeat": ..., "section": ...}}: the
        computed timeouts only, as ft's; the same on every rank."""
        state = {self.CURRENT_TIMEOUTS_STATE_KEY: {}}
        cur = state[self.CURRENT_TIMEOUTS_STATE_KEY]
        if (self.hb_timeouts is not None and self.hb_timeouts.are_valid
                and self.hb_timeouts.were_calculated):
            cur["heartbeat"] = dataclasses.asdict(self.hb_timeouts)
        st = self.section_timeouts
        if st is not None and (st.calculated_sections
                               or st.is_out_of_section_calculated):
            cur["section"] = dataclasses.asdict(st)
            cur["section"]["calculated_sections"] = sorted(
                cur["section"]["calculated_sections"])
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Takes computed timeouts back, before or after
        init_workload_monitoring()."""
        ft_state = state.get(self.CURRENT_TIMEOUTS_STATE_KEY)
        if ft_state is None:
            return
        if "heartbeat" in ft_state:
            self.loaded_hb_timeouts = HeartbeatTimeouts(**ft_state["heartbeat"])
        if "section" in ft_state:
            self.loaded_section_timeouts = SectionTimeouts(
                **ft_state["section"])
        if self.is_initialized:
            self._set_calculated_timeouts(self.loaded_hb_timeouts,
                                          self.loaded_section_timeouts)


__all__ = [
    "HeartbeatTimeouts",
    "RankMonitorClient",
    "RankMonitorClientError",
    "SectionTimeouts",
    "TimeoutsCalc",
]
