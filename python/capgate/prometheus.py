"""capgate.stats() as Prometheus counters (prometheus_client, when the
app has it):

    capgate_client_decisions_total{decision}      every call decided
    capgate_client_failed_open_total{reason}      calls that ran uncounted
    capgate_client_conservative_total{why}        calls counted as the conservative call

``register()`` (or ``CAPGATE["PROMETHEUS"] = True`` under Django) creates
them on a registry — prometheus_client's default unless one is given — and
counts every call from then on. They are plain Counters, so they add up
across a gunicorn's workers under prometheus_client's multiprocess mode
(PROMETHEUS_MULTIPROC_DIR) as any other.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional

from capgate.stats import counts

__all__ = ["register"]

_lock = threading.Lock()
_registered: Dict[int, Any] = {}

_NAMES = {
    "decision": ("capgate_client_decisions", "Heavy calls the capgate client decided, by decision (failed-open: ran uncounted).",
                 "decision"),
    "failed_open": ("capgate_client_failed_open", "Heavy calls that ran uncounted because the decision service could not decide them, by reason.",
                    "reason"),
    "conservative": ("capgate_client_conservative", "Heavy calls counted as the conservative call, by why.", "why"),
}


def register(registry: Optional[Any] = None) -> None:
    """Creates the counters on registry (default prometheus_client's
    REGISTRY) and counts every call from now on; a second call with the
    same registry does nothing. ImportError without prometheus_client."""
    import prometheus_client

    reg = registry if registry is not None else prometheus_client.REGISTRY
    with _lock:
        if id(reg) in _registered:
            return
        metrics = {kind: prometheus_client.Counter(name, doc, [label], registry=reg)
                   for kind, (name, doc, label) in _NAMES.items()}
        _registered[id(reg)] = (reg, metrics)

    def sink(kind: str, label: str) -> None:
        m = metrics.get(kind)
        if m is not None:
            m.labels(label).inc()

    counts.add_sink(sink)
