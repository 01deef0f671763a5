"""Process groups by their pids, from /proc: whether a check's leader has exited, which of its processes
still live, killing them until none does, and ending a check left running by a worker process that died
(``kill_leftover_group``, by the group and start time a lease recorded)."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
from typing import Final

# How long a killed check is waited for before what is left of it is reported as surviving.
GROUP_GONE_WAIT_S: Final = 5.0


def leader_exited(pid: int) -> bool:
    """True once ``pid`` has exited, without reaping it: as a zombie it keeps its group id reserved."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _live_group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in group ``pgid``: a /proc scan on Linux, ``killpg`` elsewhere."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    if not os.path.isdir("/proc/self"):
        return [pgid]
    return [pid for pid, _, group in _live_processes() if group == pgid]


def _live_children(parent: int) -> list[int]:
    return [pid for pid, ppid, _ in _live_processes() if ppid == parent]


def _live_processes() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every live (non-zombie) process, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read().decode("ascii", errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) >= 3 and fields[0] not in ("Z", "X"):
            found.append((int(entry), int(fields[1]), int(fields[2])))
    return found


def exits_within(pidfd: int, timeout_s: float) -> bool:
    """True when the process of ``pidfd`` exits within ``timeout_s``."""
    with selectors.DefaultSelector() as selector:
        selector.register(pidfd, selectors.EVENT_READ)
        return bool(selector.select(timeout=timeout_s))


def kill_group(pgid: int) -> None:
    """SIGKILL to every process of group ``pgid``, if there is one this worker may signal."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def wait_group_gone(pgid: int, timeout_s: float) -> list[int]:
    """Kill group ``pgid`` until no live member remains or ``timeout_s`` passes; returns the survivors."""
    deadline = time.monotonic() + timeout_s
    while True:
        survivors = _live_group_members(pgid)
        if not survivors or time.monotonic() >= deadline:
            return survivors
        kill_group(pgid)
        time.sleep(0.01)


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, /proc/<pid>/stat), or None when there is no such
    process (or no /proc): with the pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read().decode("ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # field 22 of the whole line is the 20th after "(comm) "
    return int(fields[19]) if len(fields) > 19 else None


def kill_leftover_group(pgid: int, start_ticks: int | None) -> list[int]:
    """Kill a check left running by a worker process that died (its group ``pgid``, its leader started at
    ``start_ticks``) and wait until none of it lives; returns the pids that survived.

    The group is killed when its leader is still that process, or when the leader is gone but members
    remain (a group id is not handed out again while the group has members). A leader with another start
    time is a reused pid, not the check: nothing is killed. Inside bubblewrap the leader is bwrap and the
    sandbox's PID 1 is its child in a session of its own: it is killed too, and waited for, since the
    kernel lets it go only once every process of its namespace is gone.
    """
    leader_started = process_start_ticks(pgid)
    if leader_started is not None and leader_started != start_ticks:
        return []
    sandboxes = []  # opened while their parent lives, so each names its process even if the pid is reused
    for pid in _live_children(pgid) if leader_started is not None else []:
        with contextlib.suppress(OSError):
            sandboxes.append((pid, os.pidfd_open(pid)))
    kill_group(pgid)
    for _, pidfd in sandboxes:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    survivors = wait_group_gone(pgid, GROUP_GONE_WAIT_S)
    for pid, pidfd in sandboxes:
        if not exits_within(pidfd, GROUP_GONE_WAIT_S):
            survivors.append(pid)
        os.close(pidfd)
    return survivors
