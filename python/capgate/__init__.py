"""capgate: decide heavy calls inside the app with a capgate decision service.

    client = capgate.Client("unix:/run/capgate/decide.sock")
    with client.call(user="cora", groups=["staff"], route="report",
                     fields={"pages": 40}) as decision:
        if decision.refused:
            ...  # answer decision.status with decision.headers and decision.body
        else:
            ...  # run the call; its place is held until the block ends

capgate.django has the Django/DRF middleware, mixin and view decorator;
capgate.asgi an ASGI middleware (Starlette, FastAPI); capgate.stats() the
process's counts, capgate.prometheus their export.
"""

from capgate.client import (
    DEFAULT_TIMEOUT,
    UNIDENTIFIED,
    Client,
    Decision,
    DecisionError,
    FieldValue,
    Rejected,
    conservative_call,
)
from capgate.stats import stats

__all__ = [
    "Client",
    "Decision",
    "DecisionError",
    "Rejected",
    "DEFAULT_TIMEOUT",
    "UNIDENTIFIED",
    "FieldValue",
    "conservative_call",
    "stats",
]
__version__ = "0.2.0"
