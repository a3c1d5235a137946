"""Decision.release: a held call ends at once, reporting what it used
(``usage``) to the service (against the decision stub, decidestub.py)."""

import capgate


def test_release_reports_usage_and_frees_the_place(stub):
    stub.limits(pat=1)
    client = capgate.Client(stub.url, timeout=5)
    with client.call(user="pat", route="chat") as d:
        assert d.decision == "admitted" and d.held
        d.release(usage=2048)
        assert stub.wait_released() == {}
        d.release(usage=1)  # a second release does nothing
    assert stub.stats()["releases"] == [{"id": d.id, "body": {"usage": 2048}}]
    with client.call(user="pat", route="chat") as d2:
        assert d2.decision == "admitted"  # the place was free


def test_a_usage_that_is_no_whole_number_is_not_sent(stub):
    stub.limits()
    client = capgate.Client(stub.url, timeout=5)
    for bad in (-1, True, 2.5, "7", None, 1 << 63):
        with client.call(user="pia") as d:
            d.release(usage=bad)  # type: ignore[arg-type]
            assert stub.wait_released() == {}
    assert stub.stats()["releases"] == []


def test_release_without_usage_closes_the_connection_only(stub):
    stub.limits()
    client = capgate.Client(stub.url, timeout=5)
    with client.call(user="pia") as d:
        d.release()
        assert stub.wait_released() == {}
    assert stub.stats()["releases"] == []


def test_a_failed_release_still_frees_the_place(stub, tmp_path):
    stub.limits()
    client = capgate.Client(stub.url, timeout=5)
    with client.call(user="pia") as d:
        client.url = "unix:" + str(tmp_path / "gone.sock")
        client._connect = capgate.Client(client.url, timeout=1)._connect  # the service is gone by then
        d.release(usage=5)  # logged, not raised
        assert stub.wait_released() == {}
    assert stub.stats()["releases"] == []


def test_a_call_that_holds_nothing_is_left_as_it_is(stub):
    stub.limits(pat=0)
    client = capgate.Client(stub.url, timeout=5)
    with client.call(user="pat") as d:
        assert d.refused
        d.release(usage=3)
    assert stub.stats()["releases"] == []
