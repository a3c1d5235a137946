"""A worker starved of the GIL does not turn decisions into misses (issue
28, finding 2): another thread of the process parses large JSON bodies
(each parse holds the GIL for its whole length, as DRF's JSON parser does
with a 10 MB $match body), and every decision the service sent in time is
still read as the decision, however late this process gets to read it."""
import json
import threading
import time

import capgate

CALL = dict(user="cora", groups=["core_user"], endpoint="$match", semantic=True, rows=1)


def test_a_gil_starved_worker_reads_the_decision_it_was_sent(stub):
    timeout = 0.1
    # A document whose parse outlasts the client's timeout 2.5 times over
    # (each parse holds the GIL throughout).
    n, parse = 30000, 0.0
    while parse < 2.5 * timeout:
        n *= 2
        big = json.dumps([{"name": "fever %d" % i, "rows": [i, i + 1]} for i in range(n)])
        start = time.monotonic()
        json.loads(big)
        parse = time.monotonic() - start

    stub.limits(cora=0)  # every answer a refusal: a miss would run the call
    stop, parsing = threading.Event(), threading.Event()

    def hog():
        while not stop.is_set():
            parsing.set()
            json.loads(big)

    threads = [threading.Thread(target=hog, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    # The calls start once a parse holds the GIL: otherwise a fast machine
    # may run all ten before a hog gets it, and nothing was starved.
    parsing.wait()
    client = capgate.Client(stub.url, timeout=timeout)
    decisions, took = [], []
    try:
        for _ in range(10):
            t0 = time.monotonic()
            with client.call(**CALL) as d:
                decisions.append(d)
            took.append(time.monotonic() - t0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    missed = [d for d in decisions if d.failed_open]
    # The calls took longer than the timeout (the process was starved),
    # and none of them was a miss.
    assert max(took) > timeout
    assert missed == [], "%d of %d calls failed open; parse %.3fs, calls took %s" % (
        len(missed), len(decisions), parse, ["%.3f" % t for t in took])
    assert all(d.refused for d in decisions)
