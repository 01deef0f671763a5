"""The host user a root worker runs its sandboxes as, and what that user can reach (item 6 of the package
docstring).

A root worker's sandbox process drops to ``host_uid``/``host_gid`` before it executes bubblewrap, so nothing a
check makes belongs to host root. ``stage_or_refuse`` finds the mounts behind a folder that user cannot
search, and refuses what it cannot use at all; ``stage`` binds those mounts back in place for it, in a mount
namespace of the sandbox process's own, before the user is dropped.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from collections.abc import Mapping
from typing import Final

from nexum.adapters.sandbox import bubblewrap
from nexum.adapters.sandbox.policy import DEFAULT_HOST_ID, SandboxPolicy
from nexum.adapters.sandbox.workspace import inside
from nexum.core.verification.checks.base import SANDBOX_UNAVAILABLE, CheckRefused

_libc = ctypes.CDLL(None, use_errno=True)
if sys.platform == "linux":
    _libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    _libc.unshare.argtypes = [ctypes.c_int]
_CLONE_NEWNS: Final = 0x00020000
_MS_NOSUID: Final = 0x2
_MS_NODEV: Final = 0x4
_MS_BIND: Final = 0x1000
_MS_REC: Final = 0x4000
_MS_SLAVE: Final = 0x80000


def host_user(policy: SandboxPolicy) -> tuple[int, int] | None:
    """The (uid, gid) a root worker runs its sandboxes as; None for a worker that is not root (bubblewrap maps
    the check's user to the worker's own). Raises ``CheckRefused`` for a root worker that has none: bubblewrap
    would map the check's user to host root, and a file the check leaves (a setuid copy of a shell) would give
    root to anyone who runs it."""
    if os.geteuid() != 0:
        return None
    if policy.host_uid is None or policy.host_gid is None:
        raise CheckRefused(
            SANDBOX_UNAVAILABLE,
            "the worker runs as root and has no unprivileged host user to run checks as, so a check's files"
            " would belong to host root: set NEXUM_SANDBOX_HOST_UID and NEXUM_SANDBOX_HOST_GID to an"
            f" unprivileged uid and gid (the default is {DEFAULT_HOST_ID}, nobody), or run the worker as an"
            " unprivileged user",
        )
    return policy.host_uid, policy.host_gid


def stage_or_refuse(
    plan: bubblewrap.MountPlan, executable: str | None, run_as: tuple[int, int]
) -> dict[str, list[str]]:
    """What a root worker's bubblewrap, running as ``run_as``, could not reach on the host: each mount behind
    a folder that user cannot search (a venv's interpreter under a 0700 /root, a project folder under a 0700
    /tmp/pytest-of-root), by the highest such folder; ``stage`` makes them reachable where they are. What
    that user cannot use itself is refused (``CheckRefused`` naming the path): the workspace must be writable
    by it, the read-only mounts readable, the executable executable."""
    uid, gid = run_as
    mounts = [*plan.read_only, *([plan.workspace] if plan.workspace is not None else [])]
    staged: dict[str, list[str]] = {}
    for path in mounts:
        resolved = os.path.realpath(path)
        closed = _blocked_below("/", os.path.dirname(resolved), uid, gid, os.X_OK)
        if closed is not None:
            staged.setdefault(closed, []).append(resolved)
    wanted = [(path, path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0)) for path in plan.read_only]
    if executable is not None:
        found = os.path.realpath(executable)
        tops = [top for path in mounts if inside(found, top := os.path.realpath(path))]
        wanted.append((max(tops, key=len) if tops else os.path.dirname(found), found, os.X_OK))
    for top, path, access in wanted:
        blocked = _blocked_below(os.path.realpath(top), os.path.realpath(path), uid, gid, access)
        if blocked is not None:
            raise CheckRefused(
                SANDBOX_UNAVAILABLE,
                f"{blocked} is closed to the host user the sandbox runs as (uid {uid}, gid {gid}), so a check"
                f" cannot use {path}: open it to that user (chmod o+rx), install the allowlisted executable"
                " where that user can read it, or set NEXUM_SANDBOX_HOST_UID and NEXUM_SANDBOX_HOST_GID to a"
                " user that can read it",
            )
    if plan.workspace is not None:
        blocked = _blocked_below(plan.workspace, plan.workspace, uid, gid, os.R_OK | os.W_OK | os.X_OK)
        if blocked is not None:
            raise CheckRefused(
                SANDBOX_UNAVAILABLE,
                f"the project's folder {plan.workspace} is not writable by the host user the sandbox runs"
                f" as (uid {uid}, gid {gid}): chown {uid}:{gid} it (the service does for the folders it"
                " creates)",
            )
    return staged


def _blocked_below(top: str, path: str, uid: int, gid: int, access: int) -> str | None:
    """The first folder from ``top`` down to ``path`` (both resolved, ``top`` above or equal) that ``uid``
    and ``gid`` (no supplementary groups) cannot search, or ``path`` itself when it lacks ``access``
    (``os.R_OK | os.W_OK | os.X_OK`` bits); None when neither. Read from the mode bits as the kernel applies
    them (ACLs are not read)."""
    here = top
    below = [] if path == top else path[len(top.rstrip(os.sep)) + 1 :].split(os.sep)
    for depth in range(len(below) + 1):
        if depth:
            here = os.path.join(here, below[depth - 1])
        try:
            info = os.stat(here)
        except OSError:
            return here
        shift = 6 if info.st_uid == uid else 3 if info.st_gid == gid else 0
        needed = access if depth == len(below) else os.X_OK
        if (info.st_mode >> shift) & needed != needed:
            return here
    return None


def stage(staged: Mapping[str, list[str]]) -> None:
    """In the child, as root, before the user is dropped: in a mount namespace of its own (nothing of it
    reaches the host's), each closed folder of ``staged`` is covered by a tmpfs holding only the way (0755
    folders) to the mounts below it, each bound back in place. Bubblewrap, run as the unprivileged user, then
    finds every mount at its host path; the check sees the same as a non-root worker's would."""
    _checked(_libc.unshare(_CLONE_NEWNS))
    _checked(_libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None))
    opened = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for paths in staged.values() for path in paths}
    os.umask(0o022)  # the way must be searchable by the unprivileged user, whatever the worker's umask
    for closed, paths in staged.items():
        _checked(_libc.mount(b"nexum-stage", closed.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755"))
        for path in paths:
            fd = opened.pop(path)
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(path, 0o755)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            _checked(
                _libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, _MS_BIND | _MS_REC, None)
            )
            os.close(fd)


def staging_advice(staged: Mapping[str, list[str]], run_as: tuple[int, int]) -> str:
    closed = ", ".join(sorted(staged))
    mounts = ", ".join(sorted(path for paths in staged.values() for path in paths))
    uid, gid = run_as
    return (
        f"{closed} cannot be searched by the host user the sandbox runs as (uid {uid}, gid {gid}),"
        f" and binding {mounts} back in place for it, in a mount namespace of the sandbox's own, failed (that"
        " needs CAP_SYS_ADMIN, which root has outside a container): let that user search them (chmod o+x), or"
        " move what lies below them elsewhere"
    )


def _checked(status: int) -> None:
    if status != 0:
        failure = ctypes.get_errno()
        raise OSError(failure, os.strerror(failure))
