"""Paths and files beneath a project's folder: a working directory resolved inside it (item 1 of the package
docstring), and a file opened once beneath it for the file checks, which run in the worker.

``open_in_workspace`` follows symlinks only while they stay inside, never a magic link, opens non-blocking
(a FIFO cannot hold the worker) and opens the very file it resolved: with ``openat2`` where the kernel has
it, else one component at a time. ``read_bounded`` reads at most ``max_read_bytes`` of it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from typing import Final

from nexum.adapters.sandbox.policy import READ_CHUNK, SandboxPolicy
from nexum.core.verification.checks.base import MISSING_FILE, WORKSPACE_VIOLATION, CheckRefused


def inside(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies below it (neither is resolved here)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_in_workspace(policy: SandboxPolicy, relative: str) -> str:
    """``relative`` resolved (symlinks and ``..`` followed) under the workspace root; raises
    ``CheckRefused``."""
    root = os.path.realpath(policy.workspace_root)
    if not os.path.isdir(root):
        raise CheckRefused(WORKSPACE_VIOLATION, f"workspace root {root} is not a directory")
    resolved = os.path.realpath(os.path.join(root, relative))
    if not inside(resolved, root):
        raise CheckRefused(
            WORKSPACE_VIOLATION, f"{relative!r} resolves to {resolved}, outside the workspace {root}"
        )
    return resolved


def open_in_workspace(policy: SandboxPolicy, relative: str, flags: int) -> int:
    """A descriptor for ``relative`` opened with ``flags`` beneath the workspace root, resolved once: from a
    descriptor of the root, symlinks followed only while they stay beneath it, never a magic link; the file
    opened is the file resolved (no second lookup by name another check could swap in between). Raises
    ``CheckRefused``: ``missing_file`` when there is nothing to open, ``workspace_violation`` when the path
    leads outside. ``O_NONBLOCK`` in ``flags`` keeps a FIFO from holding the worker."""
    root = os.path.realpath(policy.workspace_root)
    if os.path.isabs(relative):
        if not inside(os.path.normpath(relative), root):
            raise CheckRefused(WORKSPACE_VIOLATION, f"{relative!r} is outside the workspace {root}")
        relative = os.path.relpath(os.path.normpath(relative), root)
    try:
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise CheckRefused(WORKSPACE_VIOLATION, f"workspace root {root} is not a directory") from None
    try:
        for _ in range(_OPEN_ATTEMPTS):
            try:
                return _open_beneath(root_fd, relative, flags | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:  # a rename raced the lookup of ".."; resolve again
                    continue
                raise CheckRefused(*_open_failure(exc, relative, root)) from None
        raise CheckRefused(MISSING_FILE, f"{relative} kept changing while it was opened")
    finally:
        os.close(root_fd)


def _open_failure(problem: OSError, relative: str, root: str) -> tuple[str, str]:
    if problem.errno in (errno.EXDEV, errno.ELOOP):
        return WORKSPACE_VIOLATION, f"{relative!r} leads outside the workspace {root} (a symlink or '..')"
    if problem.errno in (errno.ENOENT, errno.ENOTDIR):
        return MISSING_FILE, f"{relative} does not exist"
    return MISSING_FILE, f"{relative} cannot be opened: {problem.strerror}"


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_OPENAT2: Final = 437  # the same number on every Linux architecture
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_BENEATH: Final = 0x08
_OPEN_ATTEMPTS: Final = 5
_MAX_SYMLINKS: Final = 40  # as the kernel's own lookup allows
_libc = ctypes.CDLL(None, use_errno=True)
if sys.platform == "linux":
    _libc.syscall.restype = ctypes.c_long
_openat2_missing = sys.platform != "linux"


def _open_beneath(root_fd: int, relative: str, flags: int) -> int:
    """``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` where the kernel has it (Linux 5.6), else
    the same rule walked one component at a time."""
    global _openat2_missing
    if not _openat2_missing:
        how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        path = os.fsencode(relative)
        fd = _libc.syscall(
            ctypes.c_long(_OPENAT2), ctypes.c_int(root_fd), path, ctypes.byref(how), ctypes.sizeof(how)
        )
        if fd >= 0:
            return int(fd)
        failure = ctypes.get_errno()
        if failure not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter that does not know it
            raise OSError(failure, os.strerror(failure), relative)
        _openat2_missing = True
    return _walk_beneath(root_fd, relative, flags)


def _walk_beneath(root_fd: int, relative: str, flags: int) -> int:
    """Open ``relative`` beneath ``root_fd`` one component at a time, each with ``O_NOFOLLOW``: a symlink is
    read and its target walked in its place from the folder it is in (an absolute target, or ``..`` above
    the root, is ``EXDEV``); a component swapped for a symlink between the look and the open fails the open
    (``ELOOP``, ``ENOTDIR``) and the lookup is started again by the caller."""
    folders = [os.dup(root_fd)]
    pending = _components(relative)
    followed = 0
    try:
        while pending:
            name = pending.pop()
            if name == "..":
                if len(folders) == 1:
                    raise OSError(errno.EXDEV, "leads outside the workspace", relative)
                os.close(folders.pop())
                continue
            info = os.stat(name, dir_fd=folders[-1], follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                followed += 1
                target = os.readlink(name, dir_fd=folders[-1])
                if followed > _MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many symlinks", relative)
                if os.path.isabs(target):
                    raise OSError(errno.EXDEV, f"a symlink to {target}", relative)
                pending += _components(target)
                continue
            wanted = flags if not pending else os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
            try:
                opened = os.open(name, wanted | os.O_NOFOLLOW, dir_fd=folders[-1])
            except OSError as exc:
                if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and stat.S_ISDIR(info.st_mode)):
                    raise OSError(errno.EAGAIN, "changed while it was opened", relative) from None
                raise
            if not pending:
                return opened
            folders.append(opened)
        return os.open(".", flags, dir_fd=folders[-1])  # the root itself, or a folder the path ended on
    finally:
        for folder in folders:
            os.close(folder)


def _components(path: str) -> list[str]:
    """The names of ``path`` in reverse order (to be popped), ``.`` and empty names dropped."""
    return [name for name in reversed(path.split("/")) if name not in ("", ".")]


def read_bounded(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(READ_CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def resolve_cwd(policy: SandboxPolicy, cwd: str) -> str:
    resolved = resolve_in_workspace(policy, cwd)
    if not os.path.isdir(resolved):
        raise CheckRefused(
            WORKSPACE_VIOLATION, f"working directory {cwd!r} is not a directory in the workspace"
        )
    return resolved
