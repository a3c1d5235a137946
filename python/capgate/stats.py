"""What the package did in this process, for metrics and logs.

Every call a ``capgate.Client`` decides is counted here by outcome: the
service's decisions, the calls that failed open (and why), and the calls
counted as the conservative call (and why). ``capgate.stats()`` reads the
counts; ``capgate.prometheus.register()`` exports them (when
prometheus_client is installed). Logs of a kind of failure are written at
most once a minute per process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

__all__ = ["stats", "FAILED_OPEN_REASONS", "CONSERVATIVE_WHY", "LOG_INTERVAL"]

logger = logging.getLogger("capgate")

#: How often one kind of failure is logged, at most, per process.
LOG_INTERVAL = 60.0

#: Why a call failed open (ran uncounted): the limiter could not decide it.
FAILED_OPEN_REASONS = (
    "unreachable",     # no socket, connection refused, permission denied
    "timeout",         # no decision within the client's bound
    "closed",          # the service hung up before a decision
    "status",          # an answer other than 200 or 400 (a 5xx, a proxy's error, a wrong token)
    "not_a_decision",  # a 200 whose body is no decision line
    "rejected",        # the service refused the conservative call too (400): its own error
    "error",           # anything else gone wrong in the client
)

#: Why a call was counted as the conservative call: the caller's side
#: could not be read as a call.
CONSERVATIVE_WHY = (
    "classifier",  # the classifier raised, or returned no call it may
    "unreadable",  # the request could not be read for the classifier
    "rejected",    # the service refused the call as read (400)
)

Sink = Callable[[str, str], None]


class _Counts:
    """The process's counts, by (kind, label): kind "decision" (label the
    decision), "failed_open" (label a reason), "conservative" (label a
    why)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n: Dict[Tuple[str, str], int] = {}
        self._sinks: List[Sink] = []
        self._logged: Dict[str, float] = {}

    def add(self, kind: str, label: str) -> None:
        with self._lock:
            self._n[(kind, label)] = self._n.get((kind, label), 0) + 1
            sinks = list(self._sinks)
        for sink in sinks:
            try:
                sink(kind, label)
            except Exception:  # a metrics library's error never fails a call
                pass

    def add_sink(self, sink: Sink) -> None:
        with self._lock:
            self._sinks.append(sink)

    def snapshot(self) -> Dict[str, Dict[str, int]]:
        out: Dict[str, Dict[str, int]] = {"decision": {}, "failed_open": {}, "conservative": {}}
        with self._lock:
            for (kind, label), n in self._n.items():
                out.setdefault(kind, {})[label] = n
        return out

    def may_log(self, what: str, now: Optional[float] = None) -> bool:
        """Whether a failure of kind what may be logged now: at most once
        every LOG_INTERVAL seconds per process."""
        now = time.monotonic() if now is None else now
        with self._lock:
            last = self._logged.get(what)
            if last is not None and now - last < LOG_INTERVAL:
                return False
            self._logged[what] = now
            return True

    def after_fork(self) -> None:
        # A forked worker logs its own failures, and its copy of the lock
        # may have been held at the fork.
        self._lock = threading.Lock()
        self._logged = {}


counts = _Counts()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=counts.after_fork)


def stats() -> Dict[str, Dict[str, int]]:
    """The counts of this process: ``{"decision": {decision: n},
    "failed_open": {reason: n}, "conservative": {why: n}}`` (see
    FAILED_OPEN_REASONS and CONSERVATIVE_WHY)."""
    return counts.snapshot()


def log_once_a_minute(what: str, level: int, msg: str, *args: object) -> None:
    """Logs msg unless a failure of kind what was logged in the last
    minute by this process."""
    if counts.may_log(what):
        logger.log(level, msg, *args)
