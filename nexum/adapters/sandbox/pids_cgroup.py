"""A pids cgroup per command check: the process limit that holds for a worker running as root.

RLIMIT_NPROC is not enforced for uid 0, and a sandbox whose user namespace maps to uid 0 is uid 0 to the
kernel's count; the pids controller counts every process in the cgroup whatever its uid. Each check gets its
own cgroup ``check-<worker pid>-<random>`` under a parent folder (``NEXUM_SANDBOX_CGROUP``, or
``nexum-checks`` at the top of the pids hierarchy, cgroup v1 or v2), with ``pids.max`` set to the limit. The
sandbox's first process joins it before it executes bubblewrap, so everything the check ever starts is
counted. Framework-free: no Django, no Celery.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path
from typing import Final

PARENT_NAME: Final = "nexum-checks"
_PREFIX: Final = "check-"
_EMPTY_WAIT_S: Final = 5.0


class CgroupUnavailable(Exception):
    """No writable pids cgroup: the message says what was tried."""


def find_parent(configured: str | None = None) -> Path:
    """The folder per-check cgroups are created in, made ready for use; raises ``CgroupUnavailable``.

    ``configured`` (an operator's path) is used as it is; otherwise the pids hierarchy is found in
    /proc/self/mountinfo (a v1 ``pids`` mount, else a v2 mount whose controllers include ``pids``).
    """
    if configured:
        parent = Path(configured)
        version = 2 if (parent / "cgroup.controllers").exists() else 1
    else:
        mount, version = _pids_hierarchy()
        parent = mount / PARENT_NAME
        if version == 2:
            _enable_pids(mount)
        try:
            parent.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create the pids cgroup {parent}: {exc.strerror}") from None
    if version == 2:
        _enable_pids(parent)
    if not (parent / "cgroup.procs").exists():
        raise CgroupUnavailable(f"{parent} is not a cgroup folder")
    if not os.access(parent, os.W_OK):
        raise CgroupUnavailable(f"the pids cgroup {parent} is not writable by this user (uid {os.geteuid()})")
    return parent


def _pids_hierarchy() -> tuple[Path, int]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read /proc/self/mountinfo: {exc.strerror}") from None
    unified = None
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, kind = before.split(), after.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        mount_point = Path(fields[4].replace("\\040", " "))
        if kind[0] == "cgroup" and "pids" in kind[2].split(","):
            return mount_point, 1
        if kind[0] == "cgroup2" and unified is None:
            unified = mount_point
    if unified is not None:
        with contextlib.suppress(OSError):
            if "pids" in (unified / "cgroup.controllers").read_text().split():
                return unified, 2
    raise CgroupUnavailable("no cgroup hierarchy with the pids controller is mounted")


def _enable_pids(folder: Path) -> None:
    """cgroup v2: let the children of ``folder`` use the pids controller."""
    control = folder / "cgroup.subtree_control"
    try:
        if "pids" not in control.read_text().split():
            control.write_text("+pids")
    except OSError as exc:
        raise CgroupUnavailable(f"cannot enable the pids controller below {folder}: {exc.strerror}") from None


class PidsCgroup:
    """One check's cgroup. ``join_fd`` is written the pid of the process to move in (in the child, before
    it executes anything); ``remove`` waits until no process is left and deletes the folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.join_fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    @classmethod
    def create(cls, parent: Path, max_processes: int) -> PidsCgroup:
        _remove_orphans(parent)
        path = parent / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_processes))
            return cls(path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise CgroupUnavailable(f"cannot set up the pids cgroup {path}: {exc.strerror}") from None

    def members(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self, timeout_s: float = _EMPTY_WAIT_S) -> list[int]:
        """Delete the cgroup once it is empty; returns the pids still in it when ``timeout_s`` passed."""
        with contextlib.suppress(OSError):
            os.close(self.join_fd)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return []
            except FileNotFoundError:
                return []
            except OSError:
                if time.monotonic() >= deadline:
                    return self.members()
                time.sleep(0.01)


def _remove_orphans(parent: Path) -> None:
    """Delete the empty cgroups of checks whose worker died (a live worker's cgroups are left alone)."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        owner = entry.name[len(_PREFIX) :].split("-", 1)[0]
        if not (entry.name.startswith(_PREFIX) and owner.isdigit()) or _alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            entry.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
