"""capgate: decide heavy calls inside the app with a capgate decision service.

    client = capgate.Client("unix:/run/capgate.sock")
    with client.call(user="cora", groups=["core_user"], endpoint="$match",
                     semantic=True, rows=1) as decision:
        if decision.refused:
            ...  # answer decision.status with decision.headers and decision.body
        else:
            ...  # run the call; its place is held until the block ends

capgate.django has the Django/DRF middleware and view decorator.
"""

from capgate.client import DEFAULT_TIMEOUT, Client, Decision, DecisionError

__all__ = ["Client", "Decision", "DecisionError", "DEFAULT_TIMEOUT"]
__version__ = "0.1.0"
