"""Re-registering held calls whose connection dropped.

The connection is the lease: if the service restarts (or is killed) while
a held call's ``with`` block still runs, its connection ends without the
client closing it, and the call would run uncounted. One background thread
per process watches the held calls' sockets; when one ends that way it
re-sends the call with ``"running": true`` every REREGISTER_EVERY seconds
while the block runs, until a service counts it again (docs/PROTOCOL.md,
"A call that already runs"), and then holds the new connection instead.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING, Dict, List, Optional, cast

if TYPE_CHECKING:  # pragma: no cover
    from capgate.client import _Call

#: Seconds between tries to re-register a call whose connection dropped.
REREGISTER_EVERY = 0.25


class _Watched:
    """A held call's connection as the watcher sees it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""  # the end of what the service sent after the decision
        self.lost = False  # the connection ended: re-register
        self.next = 0.0  # when to try that next (time.monotonic)


class Rewatcher:
    """Watches held calls' connections and re-registers dropped ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: Dict[_Call, _Watched] = {}
        self._thread: Optional[threading.Thread] = None
        self._pid: Optional[int] = None

    def watch(self, call: _Call) -> None:
        """Starts watching a held call's connection."""
        if call._sock is None:
            return
        with self._lock:
            self._calls[call] = _Watched(call._sock)
            self._start_locked()

    def forget(self, call: _Call) -> None:
        """Stops watching call: its block ended, the client closes it."""
        with self._lock:
            self._calls.pop(call, None)

    def _start_locked(self) -> None:
        # A forked worker (gunicorn's preload) has no thread of its parent's.
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="capgate-rewatch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._calls:
                    self._thread = None
                    return
                watched = {st.sock: c for c, st in self._calls.items() if not st.lost}
                lost = [c for c, st in self._calls.items() if st.lost]
            if watched:
                ready: List[socket.socket] = []
                # epoll or poll: no limit on descriptor numbers, unlike select.
                with selectors.DefaultSelector() as sel:
                    for sock in watched:
                        try:
                            sel.register(sock, selectors.EVENT_READ)
                        except (OSError, ValueError):
                            ready.append(sock)  # closed under us: look at it
                    if sel.get_map():
                        ready += [cast(socket.socket, key.fileobj) for key, _ in sel.select(REREGISTER_EVERY)]
                for sock in ready:
                    self._read(watched[sock], sock)
            else:
                time.sleep(REREGISTER_EVERY)
            now = time.monotonic()
            for call in lost:
                with self._lock:
                    st = self._calls.get(call)
                    due = st is not None and st.lost and st.next <= now
                if due:
                    self._reregister(call)

    def _read(self, call: _Call, sock: socket.socket) -> None:
        """Reads what the service sent after the decision; a connection
        that ends (or resets) without the service ending the call, or one
        the service ended for shutting down, is lost."""
        try:
            data = sock.recv(4096)
        except (BlockingIOError, socket.timeout, InterruptedError):
            return
        except OSError:
            data = b""
        with self._lock:
            st = self._calls.get(call)
            if st is None or st.sock is not sock:
                return
            if data:
                st.buf = (st.buf + data)[-256:]
                if b'"released":"release"' in st.buf or b'"released":"max_hold"' in st.buf:
                    # The service ended the hold on purpose: nothing to re-register.
                    self._calls.pop(call, None)
                return
            st.lost, st.next, st.buf = True, 0.0, b""
        try:
            sock.close()
        except OSError:
            pass

    def _reregister(self, call: _Call) -> None:
        """One try at counting call again; on success the call holds the
        new connection."""
        again, d = call._running_again()
        ok = d is not None and d.held
        with self._lock:
            st = self._calls.get(call)
            if st is not None and d is not None and not ok:
                # The service answered but holds nothing (mode off): done.
                self._calls.pop(call, None)
                st = None
            if st is None or not ok:
                if st is not None:
                    st.next = time.monotonic() + REREGISTER_EVERY
                keep = False
            else:
                assert again is not None
                # The block still runs: it holds the new connection, which
                # its close() ends.
                call._take_connection(again)
                if call._sock is None:
                    self._calls.pop(call, None)
                else:
                    self._calls[call] = _Watched(call._sock)
                keep = True
        if again is not None and not keep:
            again.close()


_rewatcher = Rewatcher()


def rewatcher() -> Rewatcher:
    """The process's watcher."""
    return _rewatcher


def _after_fork() -> None:
    # A forked child has none of its parent's calls nor its thread, and its
    # copy of the lock may have been held at the fork.
    global _rewatcher
    _rewatcher = Rewatcher()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
