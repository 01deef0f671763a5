"""A started command check, as ``run_command`` ends it (item 8 of the package docstring): kill what is left,
wait until nothing of it lives, read its exit status."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Final

from nexum.adapters.sandbox.groups import GROUP_GONE_WAIT_S, exits_within, kill_group, wait_group_gone
from nexum.adapters.sandbox.pids_cgroup import PidsCgroup

_SIGNALS: Final = frozenset(int(number) for number in signal.Signals)


class ProcessGroup:
    """An unsandboxed check (``isolation="none"``): its process group is all that can be killed."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def kill(self) -> None:
        kill_group(self.process.pid)  # start_new_session: the child leads its own session and group

    def end(self) -> list[int]:
        self.process.wait()
        return wait_group_gone(self.process.pid, GROUP_GONE_WAIT_S)

    def exit_status(self) -> int:
        return self.process.returncode


class Namespace:
    """A check inside bubblewrap: ``process`` is bwrap itself; ``init_pid`` the host pid of the sandbox's
    PID 1, whose death makes the kernel kill every process of the PID namespace."""

    def __init__(
        self, process: subprocess.Popen[bytes], init_pid: int | None, cgroup: PidsCgroup | None
    ) -> None:
        self.process = process
        self.init_pid = init_pid
        self.cgroup = cgroup
        self.init_pidfd: int | None = None
        if init_pid is not None:
            with contextlib.suppress(OSError):  # already gone
                self.init_pidfd = os.pidfd_open(init_pid)

    def kill(self) -> None:
        if self.init_pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.process.kill()

    def end(self) -> list[int]:
        """Wait until nothing of the check is left; returns the survivors (none unless the kernel failed)."""
        self.process.wait()
        survivors = []
        if self.init_pidfd is not None:
            if not exits_within(self.init_pidfd, GROUP_GONE_WAIT_S) and self.init_pid is not None:
                survivors.append(self.init_pid)
            os.close(self.init_pidfd)
            self.init_pidfd = None
        if self.cgroup is not None:
            survivors += [pid for pid in self.cgroup.remove() if pid not in survivors]
        return survivors

    def exit_status(self) -> int:
        """The check's status as ``Popen.returncode`` has it: bwrap reports a program killed by signal N as
        exit status 128 + N (as shells do), which reads back as -N."""
        status = self.process.returncode
        if status > 128 and (status - 128) in _SIGNALS:
            return -(status - 128)
        return status


Running = ProcessGroup | Namespace
