"""The decision service's connection, read against a call's bound.

The bound is measured on the service, not on this process: it starts once
the call is sent, and when it has passed the client still reads what the
service already sent before calling it a miss, so a worker that was paused
or starved of the GIL (another thread parsing a large body) does not turn
an answered call into an uncounted one.
"""

from __future__ import annotations

import http.client
import io
import socket
import time
from typing import Any

#: The last read once the bound has passed: long enough to take what the
#: kernel holds already, too short to wait for anything new.
LAST_READ = 0.001


class Bound:
    """The deadline of one call's answer (monotonic seconds)."""

    __slots__ = ("deadline",)

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline


class _PatientReader(io.RawIOBase):
    """The answer's socket, read against the call's deadline (``Bound``).
    A read never fails before it has looked: past the deadline it still
    takes what the kernel holds, and a poll that timed out is followed by
    one non-blocking read, since the thread may have waited for the GIL
    long after the poll gave up (another thread parsing a large body) while
    the answer arrived."""

    def __init__(self, sock: socket.socket, bound: Bound) -> None:
        super().__init__()
        self._sock = sock
        self._bound = bound
        # The socket's own file, read through recv_into here, keeps it open
        # for the response when http.client closes the connection's
        # reference (Connection: close), as its makefile would.
        self._file = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()

    def readinto(self, b: Any) -> int:
        self._sock.settimeout(max(self._bound.deadline - time.monotonic(), LAST_READ))
        try:
            return self._sock.recv_into(b)
        except socket.timeout:
            self._sock.setblocking(False)
            try:
                return self._sock.recv_into(b)
            except BlockingIOError:
                raise socket.timeout("capgate decide: no answer within the timeout") from None
            finally:
                self._sock.settimeout(LAST_READ)


class PatientSocket:
    """What http.client.HTTPResponse reads an answer from: the socket
    through _PatientReader."""

    def __init__(self, sock: socket.socket, bound: Bound) -> None:
        self._sock = sock
        self._bound = bound

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_PatientReader(self._sock, self._bound))


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s
