"""A real sandbox for the gate's checks (SPEC V1, V4, V8). Framework-free: no Django, no Celery.

``run_command`` runs a ``CommandCheck``; ``CheckRunner`` runs any check kind and is the ``run_check`` the gate
takes. A policy is per project: ``workspace_root`` is that project's own folder. What the sandbox guarantees,
in the order it checks:

1. Working directory: ``cwd`` (relative to the project's folder, or absolute) is resolved with
   ``os.path.realpath`` so ``..`` and symlinks are followed, and must be an existing directory inside the
   project's folder, else ``workspace_violation``. Nothing runs.
2. Executable: resolved before anything runs. A bare name (``pytest``) is looked up with ``shutil.which`` on
   the scrubbed PATH (empty and relative PATH entries dropped); a name with a slash is a path, relative to the
   resolved cwd. It is allowed when
   - the allowlist holds the bare name as typed and the name was found on PATH (a path such as ``./echo`` is
     never allowed by the bare-name entry ``echo``), or
   - the allowlist holds an absolute path that names the same file: the found path (normalized) or its
     ``realpath`` equals the entry or the entry's ``realpath``, both sides resolved, so ``venv/bin/python3``
     is allowed by ``venv/bin/python`` when both are links to one interpreter. An entry allows the file it
     resolves to by whatever path a check names it (the entries are resolved at each check: a link an
     operator repoints moves the allowance with it).
   Not allowed → ``denied_executable``, whether or not it exists (existence is not revealed). Allowed but
   absent → ``missing_executable``. The child runs exactly the path that was vetted (argv[0] is replaced by
   it), never a second PATH lookup. The allowlist vets the first program only: inside the sandbox a check
   may run anything the sandbox shows.
3. Environment: only the variables named in ``env_allowlist`` are copied from the worker, then ``env_set``
   is applied; inside bubblewrap HOME and TMPDIR are the private /tmp. PYTHONPATH is not in the default
   allowlist: a parent's import path must not leak in.
4. Isolation (``isolation="bwrap"``, the default; see ``nexum/adapters/bubblewrap.py`` for every namespace
   and mount): the check runs in its own user, PID, network (loopback only), IPC, UTS and cgroup namespaces
   without capabilities, as uid 1000 inside, and sees only the system folders, the allowlisted executables'
   install prefixes, the operator's ``read_only_paths`` and its project's folder (read-write, at /workspace).
   The ``hidden_paths`` (data directory, artifact store, database file, workspace root, /run) do not exist
   inside. When bubblewrap is missing or cannot work here, or a mount would show a hidden path, the check is
   refused with ``sandbox_unavailable`` and a message saying how to fix it; nothing runs. ``isolation="none"``
   (development only, chosen explicitly) runs the program directly in a new session.
5. Limits, set before bubblewrap executes (so on it and everything inside): RLIMIT_CPU (soft, hard one
   second later), RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CORE 0 (no core file in the workspace) and, for a worker
   that is not root, RLIMIT_NPROC, never above the worker's hard limits; RLIMIT_NPROC then counts the check's
   processes together with the worker user's other processes. A root worker's checks all run as one host
   user (item 6), for whom RLIMIT_NPROC would count every check at once: each check gets its own pids cgroup
   (``nexum/adapters/pids_cgroup.py``) holding ``max_processes``, joined before the user is dropped; a root
   worker without a writable pids cgroup refuses checks (``sandbox_unavailable``) unless ``max_processes`` is
   None. The private /tmp holds at most ``tmp_bytes``.
6. No host privilege: bubblewrap maps the check's uid 1000 to the user that runs it, so a root worker's
   sandbox process drops to ``host_uid``/``host_gid`` (no supplementary groups) after joining the cgroup and
   setting the limits, and executes bubblewrap as that user: whatever a check makes belongs to it, never to
   host root. A mount behind a folder that user cannot search is bound back in place first, in a mount
   namespace of the sandbox process's own; a mount it cannot read, or a workspace it cannot write, is
   ``sandbox_unavailable`` naming the path; a root worker without ``host_uid`` refuses command checks. The
   workspace is mounted nosuid,nodev, and after every command check ``sweep_workspace`` clears setuid and
   setgid bits and removes device nodes in the project's folder.
7. Output is read incrementally (no deadlock on a chatty child; reading continues past the cap and drops the
   excess). Above the cap the head and the tail are kept (a test runner's summary is at the end) with a
   marker line in between, and ``truncated`` is set.
8. End: the check is over when its first program exits or the wall-clock timeout passes (reason
   ``timeout``). Either way every process it started is killed: inside bubblewrap the sandbox's PID 1 is
   killed and the kernel kills the whole PID namespace, ``setsid`` double forks included; ``run_command``
   returns only once the namespace's PID 1 is gone (which the kernel allows only once every process in it
   is). If the worker itself dies, bubblewrap (``--die-with-parent``) and then the namespace die with it.
   ``on_start(pid)`` is told the pid of the outermost sandbox process: SIGKILL to it ends the whole check.
   Without bubblewrap the process group is killed and waited for (a ``setsid`` escapes it).
9. Status: 0 → ``passed``; >0 → ``exit_nonzero``; killed by a signal → ``crashed`` (``exit_code`` is minus
   the signal), except SIGXCPU (the CPU limit) → ``timeout``. Bubblewrap reports a program killed by signal
   N as exit status 128 + N, as shells do; such a status reads back as the signal.

File and artifact checks run in the worker: a file is opened once, beneath the project's folder
(``open_in_workspace``: symlinks followed only while they stay inside, non-blocking, a regular file for
``file_matches``), at most ``max_read_bytes`` are read, and patterns are RE2 (linear time: no pattern can
hold a worker).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nexum.adapters import bubblewrap, telemetry
from nexum.adapters.pids_cgroup import CgroupUnavailable, PidsCgroup, find_parent
from nexum.core.errors import ValidationFailed
from nexum.core.verification.checks.base import (
    CRASHED,
    DENIED_EXECUTABLE,
    EXIT_NONZERO,
    MISSING_EXECUTABLE,
    MISSING_FILE,
    PASSED,
    RAISED,
    SANDBOX_UNAVAILABLE,
    TIMEOUT,
    WORKSPACE_VIOLATION,
    CheckRefused,
    CheckResult,
    CheckSpec,
)
from nexum.core.verification.checks.command import CommandCheck

DEFAULT_ENV_ALLOWLIST: Final = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TZ"})
FALLBACK_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_READ_CHUNK: Final = 65536
_POLL_S: Final = 0.05
_DRAIN_AFTER_KILL_S: Final = 1.0
_GROUP_GONE_WAIT_S: Final = 5.0
_INFO_WAIT_S: Final = 10.0
BWRAP: Final = "bwrap"
UNSANDBOXED: Final = "none"
ISOLATIONS: Final = (BWRAP, UNSANDBOXED)
# Inside bubblewrap the worker's HOME does not exist: programs keep their caches in the private /tmp.
SANDBOX_ENV: Final = {"HOME": "/tmp", "TMPDIR": "/tmp"}
_SIGNALS: Final = frozenset(int(number) for number in signal.Signals)
# The user and group a root worker's sandboxes run as on the host: nobody and nogroup, which every Linux
# system reserves for "owns nothing" and which no service's files belong to (an operator may pick a uid of
# its own: NEXUM_SANDBOX_HOST_UID, NEXUM_SANDBOX_HOST_GID).
DEFAULT_HOST_ID: Final = 65534
# At most this many entries of a project's folder are looked at by the sweep after each command check.
SWEEP_MAX_ENTRIES: Final = 200_000


# A check judges the files as they are now: cached bytecode whose source changed within the same second and
# kept its size would be run instead of the new source, so a fixed test could still fail (or the reverse).
DEFAULT_ENV_SET = {"PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class SandboxPolicy:
    """Operator-set limits for one project's checks (SPEC V8). ``None`` disables a resource limit.

    ``workspace_root`` is the project's own folder. ``allowed_executables`` holds bare names (matched against
    argv[0] as typed, found on the scrubbed PATH) and absolute paths (matched against the resolved path or its
    realpath, the entry resolved too: an entry allows the file it names, by any path). ``max_output_bytes``
    and ``max_timeout_s`` cap what a check asks for; ``max_read_bytes`` caps how much of a file or artifact a
    pattern check reads. ``isolation`` is ``bwrap`` or ``none``; ``read_only_paths`` are extra host paths
    every check sees read-only; ``hidden_paths`` and ``private_paths`` are what no mount may show (see
    ``bubblewrap.plan_mounts``); ``cgroup_parent`` is the pids cgroup folder for a root worker (None: found
    automatically); ``tmp_bytes`` sizes the private /tmp; ``host_uid`` and ``host_gid`` are the unprivileged
    host user a root worker runs its sandboxes as (None: it has none, and refuses command checks).
    """

    workspace_root: Path
    allowed_executables: frozenset[str] = frozenset()
    env_allowlist: frozenset[str] = DEFAULT_ENV_ALLOWLIST
    env_set: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV_SET))
    cpu_seconds: int | None = 300
    address_space_bytes: int | None = 4 * 1024**3
    max_processes: int | None = 256
    max_file_size_bytes: int | None = 256 * 1024**2
    max_output_bytes: int = 1024 * 1024
    max_timeout_s: float = 3600.0
    max_read_bytes: int = 16 * 1024 * 1024
    isolation: str = BWRAP
    read_only_paths: tuple[str, ...] = ()
    hidden_paths: frozenset[str] = frozenset()
    private_paths: frozenset[str] = frozenset()
    cgroup_parent: str | None = None
    tmp_bytes: int | None = 256 * 1024**2
    host_uid: int | None = DEFAULT_HOST_ID
    host_gid: int | None = DEFAULT_HOST_ID

    def __post_init__(self) -> None:
        root = Path(self.workspace_root)
        if not root.is_absolute():
            raise ValidationFailed("workspace_root must be an absolute path", field="workspace_root")
        object.__setattr__(self, "workspace_root", root)
        allowed = frozenset(self.allowed_executables)
        for entry in allowed:
            if not isinstance(entry, str) or not entry or "\x00" in entry:
                raise ValidationFailed(f"bad allowlist entry {entry!r}", field="allowed_executables")
            if "/" in entry and not os.path.isabs(entry):
                raise ValidationFailed(
                    f"allowlist entry {entry!r} must be a bare name or an absolute path",
                    field="allowed_executables",
                )
        object.__setattr__(self, "allowed_executables", allowed)
        object.__setattr__(self, "env_allowlist", frozenset(self.env_allowlist))
        object.__setattr__(self, "env_set", dict(self.env_set))
        limits = (
            "cpu_seconds",
            "address_space_bytes",
            "max_processes",
            "max_file_size_bytes",
            "tmp_bytes",
            "host_uid",
            "host_gid",
        )
        for name in limits:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValidationFailed(f"{name} must be a positive integer or None", field=name)
        for name in ("max_output_bytes", "max_read_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationFailed(f"{name} must be a positive integer", field=name)
        if not self.max_timeout_s > 0:
            raise ValidationFailed("max_timeout_s must be positive", field="max_timeout_s")
        if self.isolation not in ISOLATIONS:
            raise ValidationFailed(
                f"isolation must be one of {', '.join(ISOLATIONS)}, not {self.isolation!r}", field="isolation"
            )
        for name in ("read_only_paths", "hidden_paths", "private_paths"):
            paths = getattr(self, name)
            if any(not os.path.isabs(path) for path in paths):
                raise ValidationFailed(f"{name} must hold absolute paths", field=name)
        object.__setattr__(self, "read_only_paths", tuple(self.read_only_paths))
        object.__setattr__(self, "hidden_paths", frozenset(self.hidden_paths))
        object.__setattr__(self, "private_paths", frozenset(self.private_paths))

    def child_env(self) -> dict[str, str]:
        """The scrubbed environment: allowlisted parent variables, then ``env_set``; PATH always sane."""
        env = {name: os.environ[name] for name in self.env_allowlist if name in os.environ}
        env.update(self.env_set)
        env["PATH"] = _sanitized_path(env.get("PATH", FALLBACK_PATH))
        return env


def _sanitized_path(path: str) -> str:
    entries = [entry for entry in path.split(os.pathsep) if os.path.isabs(entry)]
    return os.pathsep.join(entries) or FALLBACK_PATH


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_in_workspace(policy: SandboxPolicy, relative: str) -> str:
    """``relative`` resolved (symlinks and ``..`` followed) under the workspace root; raises
    ``CheckRefused``."""
    root = os.path.realpath(policy.workspace_root)
    if not os.path.isdir(root):
        raise CheckRefused(WORKSPACE_VIOLATION, f"workspace root {root} is not a directory")
    resolved = os.path.realpath(os.path.join(root, relative))
    if not _inside(resolved, root):
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
        if not _inside(os.path.normpath(relative), root):
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
    _libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    _libc.unshare.argtypes = [ctypes.c_int]
_CLONE_NEWNS: Final = 0x00020000
_MS_NOSUID: Final = 0x2
_MS_NODEV: Final = 0x4
_MS_BIND: Final = 0x1000
_MS_REC: Final = 0x4000
_MS_SLAVE: Final = 0x80000
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


def _read_bounded(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(_READ_CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _resolve_cwd(policy: SandboxPolicy, cwd: str) -> str:
    resolved = resolve_in_workspace(policy, cwd)
    if not os.path.isdir(resolved):
        raise CheckRefused(
            WORKSPACE_VIOLATION, f"working directory {cwd!r} is not a directory in the workspace"
        )
    return resolved


def resolve_executable(policy: SandboxPolicy, program: str, *, cwd: str, search_path: str) -> str:
    """The absolute path to execute for ``program`` if the allowlist permits it; raises ``CheckRefused``."""
    allowed = policy.allowed_executables
    if "/" not in program:
        found = shutil.which(program, path=search_path)
        if program in allowed:
            if found is None:
                raise CheckRefused(
                    MISSING_EXECUTABLE, f"executable {program!r} not found on PATH {search_path}"
                )
            return os.path.abspath(found)
        if found is not None and _path_allowed(os.path.abspath(found), allowed):
            return os.path.abspath(found)
        raise CheckRefused(DENIED_EXECUTABLE, f"executable {program!r} is not on the allowlist")
    candidate = os.path.normpath(os.path.join(cwd, program))
    if not _path_allowed(candidate, allowed):
        raise CheckRefused(DENIED_EXECUTABLE, f"executable {program!r} ({candidate}) is not on the allowlist")
    if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        raise CheckRefused(MISSING_EXECUTABLE, f"executable {candidate} does not exist or is not executable")
    return candidate


def _path_allowed(path: str, allowed: frozenset[str]) -> bool:
    """Whether ``path`` names the same file as an absolute allowlist entry, each side as given or resolved."""
    if path in allowed:
        return True
    resolved = os.path.realpath(path)
    return any(os.path.isabs(entry) and resolved in (entry, os.path.realpath(entry)) for entry in allowed)


def _rlimits(policy: SandboxPolicy) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) triples, never above the parent's hard limits.

    A root worker's checks all run as the one host user ``host_uid``, for whom RLIMIT_NPROC would count every
    check of every worker process together: there the check's own pids cgroup holds ``max_processes``.
    """

    def clamp(which: int, value: int) -> int:
        _, hard = resource.getrlimit(which)
        return value if hard == resource.RLIM_INFINITY else min(value, hard)

    limits = [(resource.RLIMIT_CORE, 0, 0)]
    if policy.cpu_seconds is not None:
        soft = clamp(resource.RLIMIT_CPU, policy.cpu_seconds)
        limits.append((resource.RLIMIT_CPU, soft, clamp(resource.RLIMIT_CPU, soft + 1)))
    for which, value in (
        (resource.RLIMIT_AS, policy.address_space_bytes),
        (resource.RLIMIT_NPROC, None if _needs_cgroup(policy) else policy.max_processes),
        (resource.RLIMIT_FSIZE, policy.max_file_size_bytes),
    ):
        if value is not None:
            limited = clamp(which, value)
            limits.append((which, limited, limited))
    return limits


def _preexec(
    limits: list[tuple[int, int, int]],
    join_fd: int | None = None,
    staged: Mapping[str, list[str]] | None = None,
    run_as: tuple[int, int] | None = None,
) -> Callable[[], None]:
    def prepare_child() -> None:  # runs in the child between fork and exec: keep it minimal
        if join_fd is not None:  # into the check's pids cgroup before anything else can fork
            os.write(join_fd, str(os.getpid()).encode("ascii"))
        for which, soft, hard in limits:
            resource.setrlimit(which, (soft, hard))
        if staged:
            _stage(staged)
        if run_as is not None:  # last: the cgroup, the limits and the staging mounts need root
            uid, gid = run_as
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)

    return prepare_child


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


def _stage_or_refuse(
    plan: bubblewrap.MountPlan, executable: str | None, run_as: tuple[int, int]
) -> dict[str, list[str]]:
    """What a root worker's bubblewrap, running as ``run_as``, could not reach on the host: each mount behind
    a folder that user cannot search (a venv's interpreter under a 0700 /root, a project folder under a 0700
    /tmp/pytest-of-root), by the highest such folder; ``_stage`` makes them reachable where they are. What
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
        tops = [top for path in mounts if _inside(found, top := os.path.realpath(path))]
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


def _stage(staged: Mapping[str, list[str]]) -> None:
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


def _staging_advice(staged: Mapping[str, list[str]], run_as: tuple[int, int]) -> str:
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


def sandbox_unavailable(policy: SandboxPolicy) -> str | None:
    """Why command checks cannot run as ``policy`` asks here and how to fix it; None when they can."""
    try:
        _usable_bwrap(policy)
        run_as = host_user(policy)
        if run_as is not None:
            env = policy.child_env()
            plan = bubblewrap.plan_mounts(
                workspace=None,
                executables=_allowlisted_paths(policy, env["PATH"]),
                extra_read_only=policy.read_only_paths,
                hidden=policy.hidden_paths,
                private=policy.private_paths,
            )
            _stage_or_refuse(plan, None, run_as)
    except CheckRefused as refusal:
        return refusal.message
    except bubblewrap.SandboxUnavailable as exc:
        return str(exc)
    return None


def _usable_bwrap(policy: SandboxPolicy) -> str:
    """The bwrap to run checks with; raises ``CheckRefused`` (``sandbox_unavailable``) saying what is
    missing."""
    bwrap = bubblewrap.find_bwrap()
    if bwrap is None:
        raise CheckRefused(
            SANDBOX_UNAVAILABLE,
            "bubblewrap (bwrap) is not installed on this worker, and command checks never run unsandboxed:"
            " install it (apt-get install bubblewrap), or on a development machine set NEXUM_SANDBOX=none to"
            " run checks without a sandbox",
        )
    problem = bubblewrap.probe(bwrap, user=host_user(policy))
    if problem is not None:
        raise CheckRefused(
            SANDBOX_UNAVAILABLE,
            f"{problem}; unprivileged user namespaces must be allowed (sysctl user.max_user_namespaces > 0,"
            " kernel.unprivileged_userns_clone=1 where it exists)",
        )
    if _needs_cgroup(policy):
        try:
            find_parent(policy.cgroup_parent)
        except CgroupUnavailable as exc:
            raise CheckRefused(SANDBOX_UNAVAILABLE, _cgroup_advice(exc)) from None
    return bwrap


def _needs_cgroup(policy: SandboxPolicy) -> bool:
    """RLIMIT_NPROC binds every user but root: a root worker needs a pids cgroup for the process limit."""
    return policy.max_processes is not None and os.geteuid() == 0


def _cgroup_advice(problem: CgroupUnavailable) -> str:
    return (
        "the worker runs as root, for whom the kernel does not enforce RLIMIT_NPROC, and no pids cgroup can"
        f" hold the process limit ({problem}): run the worker as an unprivileged user, give it a writable"
        " pids cgroup (NEXUM_SANDBOX_CGROUP), or set NEXUM_CHECK_MAX_PROCESSES=0 to run checks without a"
        " process limit"
    )


class _ProcessGroup:
    """An unsandboxed check (``isolation="none"``): its process group is all that can be killed."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def kill(self) -> None:
        _kill_group(self.process.pid)  # start_new_session: the child leads its own session and group

    def end(self) -> list[int]:
        self.process.wait()
        return _wait_group_gone(self.process.pid, _GROUP_GONE_WAIT_S)

    def exit_status(self) -> int:
        return self.process.returncode


class _Namespace:
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
            if not _exits_within(self.init_pidfd, _GROUP_GONE_WAIT_S) and self.init_pid is not None:
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


_Running = _ProcessGroup | _Namespace


def _start(policy: SandboxPolicy, argv: Sequence[str], *, cwd: str, env: dict[str, str]) -> _Running:
    if policy.isolation == UNSANDBOXED:
        return _ProcessGroup(_popen(argv, env=env, cwd=cwd, prepare=_preexec(_rlimits(policy))))
    return _start_in_bubblewrap(policy, argv, cwd=cwd, env=env)


def _popen(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    prepare: Callable[[], None],
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """No shell, stdin /dev/null, stdout and stderr merged into one pipe, a session of its own, ``prepare``
    (the limits and the host user, see the module docstring, items 5 and 6) run in the child before it
    executes."""
    return subprocess.Popen(
        argv,
        shell=False,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        close_fds=True,
        pass_fds=pass_fds,
        start_new_session=True,
        preexec_fn=prepare,
    )


def _start_in_bubblewrap(
    policy: SandboxPolicy, argv: Sequence[str], *, cwd: str, env: dict[str, str]
) -> _Namespace:
    bwrap = _usable_bwrap(policy)
    try:
        plan = bubblewrap.plan_mounts(
            workspace=os.path.realpath(policy.workspace_root),
            executables=[argv[0], *_allowlisted_paths(policy, env["PATH"])],
            extra_read_only=policy.read_only_paths,
            hidden=policy.hidden_paths,
            private=policy.private_paths,
        )
        run_as = host_user(policy)
        staged = _stage_or_refuse(plan, argv[0], run_as) if run_as is not None else {}
        cgroup = None
        if _needs_cgroup(policy):
            assert policy.max_processes is not None
            cgroup = PidsCgroup.create(find_parent(policy.cgroup_parent), policy.max_processes)
    except bubblewrap.SandboxUnavailable as exc:
        raise CheckRefused(SANDBOX_UNAVAILABLE, str(exc)) from None
    except CgroupUnavailable as exc:
        raise CheckRefused(SANDBOX_UNAVAILABLE, _cgroup_advice(exc)) from None
    info_read, info_write = os.pipe()
    passwd, group = bubblewrap.data_fd(bubblewrap.PASSWD), bubblewrap.data_fd(bubblewrap.GROUP)
    try:
        process = _popen(
            bubblewrap.command_line(
                bwrap,
                plan,
                [plan.inside_path(argv[0]), *argv[1:]],
                cwd=plan.inside_path(cwd),
                info_fd=info_write,
                passwd_fd=passwd,
                group_fd=group,
                tmp_bytes=policy.tmp_bytes,
            ),
            env={**env, **SANDBOX_ENV},
            prepare=_preexec(_rlimits(policy), cgroup.join_fd if cgroup else None, staged, run_as),
            pass_fds=(info_write, passwd, group),
        )
    except BaseException as exc:
        os.close(info_read)
        if cgroup is not None:
            cgroup.remove()
        if staged and run_as is not None and isinstance(exc, subprocess.SubprocessError):
            raise CheckRefused(SANDBOX_UNAVAILABLE, _staging_advice(staged, run_as)) from None
        raise
    finally:
        for fd in (info_write, passwd, group):
            os.close(fd)
    try:
        init_pid = _read_child_pid(info_read, deadline=time.monotonic() + _INFO_WAIT_S)
    finally:
        os.close(info_read)
    return _Namespace(process, init_pid, cgroup)


def _allowlisted_paths(policy: SandboxPolicy, search_path: str) -> list[str]:
    """Where the allowlisted executables are, so a check sees all of them (a program may call another)."""
    found = []
    for entry in sorted(policy.allowed_executables):
        path = entry if os.path.isabs(entry) else shutil.which(entry, path=search_path)
        if path is not None and os.path.isfile(path):
            found.append(os.path.abspath(path))
    return found


def _read_child_pid(fd: int, *, deadline: float) -> int | None:
    """bwrap's ``--info-fd`` JSON, read until bwrap closes it: the host pid of the sandbox's PID 1."""
    received = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0 and selector.select(timeout=remaining):
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                break
            received += chunk
    try:
        return int(json.loads(received)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None  # bwrap failed before starting the sandbox; its message is in the output


class _OutputCollector:
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


def _leader_exited(pid: int) -> bool:
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


def _exits_within(pidfd: int, timeout_s: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(pidfd, selectors.EVENT_READ)
        return bool(selector.select(timeout=timeout_s))


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _wait_group_gone(pgid: int, timeout_s: float) -> list[int]:
    """Kill group ``pgid`` until no live member remains or ``timeout_s`` passes; returns the survivors."""
    deadline = time.monotonic() + timeout_s
    while True:
        survivors = _live_group_members(pgid)
        if not survivors or time.monotonic() >= deadline:
            return survivors
        _kill_group(pgid)
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
    _kill_group(pgid)
    for _, pidfd in sandboxes:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    survivors = _wait_group_gone(pgid, _GROUP_GONE_WAIT_S)
    for pid, pidfd in sandboxes:
        if not _exits_within(pidfd, _GROUP_GONE_WAIT_S):
            survivors.append(pid)
        os.close(pidfd)
    return survivors


def run_command(
    check: CommandCheck, policy: SandboxPolicy, *, on_start: Callable[[int], None] | None = None
) -> CheckResult:
    """Run ``check`` under ``policy`` (see the module docstring for every rule) and report what happened.

    ``on_start(pid)`` is called once the check runs, with the pid of its outermost process (bwrap, or the
    program itself without a sandbox), which leads a process group of its own: a supervisor may record it
    and later end the whole check with ``kill_leftover_group``. It is not called when the check is refused
    before anything started; if it raises, the check is killed and the error propagates.

    Traced in three spans: ``nexum.sandbox.start`` (resolving and starting the program), ``nexum.sandbox.run``
    (until it exits or times out) and ``nexum.sandbox.output`` (killing what is left, collecting the output,
    sweeping the workspace).
    """
    started = time.monotonic()

    def refused(reason: str, message: str) -> CheckResult:
        return CheckResult(
            name=check.name, passed=False, reason=reason, output=message, duration_ms=_ms_since(started)
        )

    env = policy.child_env()
    with telemetry.span("nexum.sandbox.start", check=check.name) as starting:
        try:
            cwd = _resolve_cwd(policy, check.cwd)
            executable = resolve_executable(policy, check.argv[0], cwd=cwd, search_path=env["PATH"])
            running = _start(policy, [executable, *check.argv[1:]], cwd=cwd, env=env)
        except CheckRefused as refusal:
            starting.set(outcome="refused", reason=refusal.reason)
            return refused(refusal.reason, refusal.message)
        except FileNotFoundError as exc:
            starting.set(outcome="refused", reason=MISSING_EXECUTABLE)
            return refused(MISSING_EXECUTABLE, f"could not execute {exc.filename or check.argv[0]}: {exc}")
        except (OSError, subprocess.SubprocessError) as exc:
            starting.set(outcome="refused", reason=RAISED)
            return refused(RAISED, f"could not start {check.argv[0]}: {type(exc).__name__}: {exc}")

    cap = min(check.max_output_bytes, policy.max_output_bytes)
    timeout_s = min(check.timeout_s, policy.max_timeout_s)
    process = running.process
    output = _OutputCollector(cap)
    timed_out = False
    assert process.stdout is not None
    with process.stdout as stream:
        fd = stream.fileno()
        os.set_blocking(fd, False)
        try:
            with telemetry.span("nexum.sandbox.run", check=check.name):
                if on_start is not None:
                    on_start(process.pid)
                timed_out = _pump_until_exit(process.pid, fd, output, deadline=started + timeout_s)
        finally:
            with telemetry.span("nexum.sandbox.output", check=check.name):
                running.kill()  # the timeout, stragglers after a normal exit, or an error in this process
                _drain(fd, output, deadline=time.monotonic() + _DRAIN_AFTER_KILL_S)
                survivors = running.end()
                swept = sweep_workspace(os.path.realpath(policy.workspace_root))

    text = output.text()
    if survivors:
        text += f"\n[nexum: processes {survivors} of the check survived SIGKILL]\n"
    if swept.changed or swept.incomplete:
        text += f"\n[nexum: {swept.describe()}]\n"
    returncode = running.exit_status()
    if timed_out:
        reason = TIMEOUT
        text += f"\n[nexum: timed out after {timeout_s:g}s; every process of the check was killed]\n"
    elif returncode < 0:
        reason = TIMEOUT if -returncode == signal.SIGXCPU else CRASHED
        text += f"\n[nexum: killed by signal {_signal_name(-returncode)}]\n"
    elif returncode > 0:
        reason = EXIT_NONZERO
    else:
        reason = PASSED
    return CheckResult(
        name=check.name,
        passed=reason == PASSED,
        reason=reason,
        exit_code=returncode,
        output=text,
        truncated=output.truncated,
        duration_ms=_ms_since(started),
    )


@dataclass
class Sweep:
    """What ``sweep_workspace`` changed: the files whose setuid/setgid bits it cleared, the device nodes it
    removed."""

    cleared: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    seen: int = 0
    incomplete: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.cleared or self.removed)

    def describe(self) -> str:
        said = []
        if self.cleared:
            said.append(f"cleared the setuid/setgid bits of {', '.join(sorted(self.cleared)[:20])}")
        if self.removed:
            said.append(f"removed the device nodes {', '.join(sorted(self.removed)[:20])}")
        if self.incomplete:
            said.append(f"the sweep of the workspace stopped after {self.seen} entries")
        return "; ".join(said)


_SPECIAL_BITS: Final = stat.S_ISUID | stat.S_ISGID
_WALK_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def sweep_workspace(root: str, max_entries: int = SWEEP_MAX_ENTRIES) -> Sweep:
    """After a command check: no file or folder of the project keeps a setuid or setgid bit and no device
    node is left (FIFOs and sockets stay), whoever made them. The walk goes from folder descriptors and never
    follows a symlink, so another check swapping a folder for a link to /usr cannot steer it out of ``root``;
    it looks at ``max_entries`` entries at most (``incomplete`` then says so)."""
    sweep = Sweep()
    try:
        top = os.open(root, _WALK_FLAGS)
    except OSError:
        return sweep
    _sweep_entry(top, ".", ".", sweep)
    pending = [(top, "")]
    try:
        while pending:
            folder, where = pending.pop()
            try:
                try:
                    names = os.listdir(folder)
                except OSError:
                    continue
                for name in names:
                    if sweep.seen >= max_entries:
                        sweep.incomplete = True
                        return sweep
                    sweep.seen += 1
                    relative = f"{where}/{name}" if where else name
                    if _sweep_entry(folder, name, relative, sweep):
                        with contextlib.suppress(OSError):
                            pending.append((os.open(name, _WALK_FLAGS, dir_fd=folder), relative))
            finally:
                os.close(folder)
    finally:
        for folder, _ in pending:
            os.close(folder)
    return sweep


def _sweep_entry(folder: int, name: str, relative: str, sweep: Sweep) -> bool:
    """Clear or remove ``name`` in ``folder`` as ``sweep_workspace`` says; True when it is a folder."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return False
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=folder)
            sweep.removed.append(relative)
        return False
    if info.st_mode & _SPECIAL_BITS and (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        # chmod through an O_PATH descriptor of the very inode that was looked at, never through a name
        with contextlib.suppress(OSError):
            handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            try:
                now = os.fstat(handle)
                if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
                    os.chmod(f"/proc/self/fd/{handle}", stat.S_IMODE(now.st_mode) & ~_SPECIAL_BITS)
                    sweep.cleared.append(relative)
            finally:
                os.close(handle)
    return stat.S_ISDIR(info.st_mode) and name != "."


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _pump_until_exit(pid: int, fd: int, output: _OutputCollector, *, deadline: float) -> bool:
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
                if _leader_exited(pid):
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
        return os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return None


def _drain(fd: int, output: _OutputCollector, *, deadline: float) -> None:
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


# --- the other check kinds ---

ArtifactLoader = Callable[[str], bytes | str | None]
RegisteredCallable = Callable[[], bool]


class CheckRunner:
    """Runs any check kind: an instance is the ``run_check`` that ``gate_task_completion`` takes, and the
    ``CheckContext`` and ``PreflightContext`` the check kinds reach the project through (their
    ``run``/``evaluate`` and ``preflight``).

    ``artifact_loader(digest)`` returns an artifact's content, or None when there is none.
    ``callables`` maps a ``CallableCheck.dotted_path`` to the function to call: only functions the library
    user registered here can run (a contract cannot name arbitrary code).
    ``on_start`` is passed to ``run_command`` for every command check.
    """

    def __init__(
        self,
        policy: SandboxPolicy,
        *,
        artifact_loader: ArtifactLoader | None = None,
        callables: Mapping[str, RegisteredCallable] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> None:
        self.policy = policy
        self.artifact_loader = artifact_loader
        self.callables = dict(callables or {})
        self.on_start = on_start

    def __call__(self, check: CheckSpec) -> CheckResult:
        return check.run(self)

    # --- CheckContext ---

    def run_command(self, check: CommandCheck) -> CheckResult:
        return run_command(check, self.policy, on_start=self.on_start)

    def require_workspace_file(self, path: str) -> None:
        os.close(open_in_workspace(self.policy, path, os.O_PATH))

    def read_workspace_file(self, path: str) -> bytes | None:
        fd = open_in_workspace(self.policy, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return _read_bounded(fd, self.policy.max_read_bytes)
        finally:
            os.close(fd)

    def load_artifact(self, digest: str) -> bytes | None:
        if self.artifact_loader is None:
            raise RuntimeError("no artifact store is configured for artifact checks")
        artifact = self.artifact_loader(digest)
        if isinstance(artifact, str):
            artifact = artifact.encode("utf-8")
        return None if artifact is None else artifact[: self.policy.max_read_bytes]

    def registered_callable(self, dotted_path: str) -> RegisteredCallable | None:
        return self.callables.get(dotted_path)

    # --- PreflightContext ---

    @property
    def workspace_root(self) -> str:
        return str(self.policy.workspace_root)

    def resolve_in_workspace(self, relative: str) -> str:
        return resolve_in_workspace(self.policy, relative)

    def resolve_executable(self, program: str, *, cwd: str) -> str:
        return resolve_executable(self.policy, program, cwd=cwd, search_path=self.policy.child_env()["PATH"])
