"""A command check's output (item 7 of the package docstring): read incrementally from its one pipe while it
runs and drained after it was killed, the head and the tail kept within the cap."""

from __future__ import annotations

import os
import selectors
import time
from typing import Final

from nexum.adapters.sandbox.groups import leader_exited
from nexum.adapters.sandbox.policy import READ_CHUNK

_POLL_S: Final = 0.05


class OutputCollector:
    """Keeps the first and last bytes of a stream within ``cap`` bytes and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        dropped = self.total - len(self.head) - len(self.tail)
        marker = f"\n[nexum: output truncated: {dropped} of {self.total} bytes omitted]\n"
        return head + marker + tail


def pump_until_exit(pid: int, fd: int, output: OutputCollector, *, deadline: float) -> bool:
    """Read output until the process exits (returns False) or the deadline passes (returns True).

    Where the platform has pidfds the exit wakes the selector at once; elsewhere it is polled.
    """
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    poll_s = None if pidfd is not None else _POLL_S
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            if pidfd is not None:
                selector.register(pidfd, selectors.EVENT_READ)
            while True:
                if leader_exited(pid):
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                wait_s = remaining if poll_s is None else min(remaining, poll_s)
                for key, _ in selector.select(timeout=wait_s):
                    if key.fd != fd:
                        continue  # the pidfd: the exit is confirmed at the top of the loop
                    chunk = _read(fd)
                    if chunk:
                        output.add(chunk)
                    elif chunk == b"":  # EOF: every writer closed the pipe; keep waiting for the exit
                        selector.unregister(fd)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _read(fd: int) -> bytes | None:
    try:
        return os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return None


def drain(fd: int, output: OutputCollector, *, deadline: float) -> None:
    """Read what is left in the pipe after the group was killed, until EOF or the deadline."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0:
            if not selector.select(timeout=remaining):
                return
            chunk = _read(fd)
            if chunk == b"":
                return
            if chunk:
                output.add(chunk)
