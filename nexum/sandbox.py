"""A real sandbox for the gate's checks (SPEC V1, V4, V8). Framework-free: no Django, no Celery.

``run_command`` runs a ``CommandCheck``; ``CheckRunner`` runs any check kind and is the ``run_check`` the gate
takes. What the sandbox guarantees, in the order it checks:

1. Working directory: ``cwd`` (relative to the workspace root, or absolute) is resolved with
   ``os.path.realpath`` so ``..`` and symlinks are followed, and must be an existing directory inside the
   resolved workspace root, else ``workspace_violation``. Nothing runs.
2. Executable: resolved before anything runs. A bare name (``pytest``) is looked up with ``shutil.which`` on
   the scrubbed PATH (empty and relative PATH entries dropped); a name with a slash is a path, relative to the
   resolved cwd. It is allowed when
   - the allowlist holds the bare name as typed and the name was found on PATH (a path such as ``./echo`` is
     never allowed by the bare-name entry ``echo``), or
   - the allowlist holds an absolute path equal to the found path (normalized) or to its ``realpath``.
   Not allowed → ``denied_executable``, whether or not it exists (existence is not revealed). Allowed but
   absent → ``missing_executable``. The child runs exactly the path that was vetted (argv[0] is replaced by
   it), never a second PATH lookup. A file replaced between the check and the exec is not guarded against:
   allowlist paths the checked code cannot write.
3. Environment: only the variables named in ``env_allowlist`` are copied from the parent, then ``env_set``
   is applied. PYTHONPATH is not in the default allowlist: a parent's import path must not leak in.
4. Process: argv list with ``shell=False``; stdin is /dev/null; stdout and stderr merged into one pipe;
   the child starts its own session (``start_new_session=True``), so its pid is its process group id. Limits
   are set in the child before exec through ``preexec_fn`` (it calls ``resource.setrlimit`` only, which is
   safe enough after fork even in a threaded parent): RLIMIT_CPU (soft, hard one second later), RLIMIT_AS,
   RLIMIT_NPROC, RLIMIT_FSIZE, and RLIMIT_CORE 0 (a crashing check leaves no core file in the workspace).
   A limit is never raised above the parent's hard limit.
   RLIMIT_NPROC counts every process of the user, not of the check, and is not enforced for root
   (CAP_SYS_RESOURCE / CAP_SYS_ADMIN): run workers as a dedicated unprivileged user for it to mean something,
   or set ``max_processes=None``.
5. Output is read incrementally (no deadlock on a chatty child; reading continues past the cap and drops the
   excess). Above the cap the head and the tail are kept (a test runner's summary is at the end) with a
   marker line in between, and ``truncated`` is set.
6. End: when the wall-clock timeout passes, the whole process group gets SIGKILL (reason ``timeout``). When
   the main process exits, stragglers left in its group (``cmd &``) are killed too: a check owns nothing
   after it returns. The group is killed while the leader is still an unreaped zombie (``waitid`` with
   WNOWAIT), so its id cannot be reused meanwhile, and the sandbox then waits until no live process of the
   group remains. A process that escapes with its own ``setsid`` is outside this guarantee (that needs a PID
   namespace or a cgroup).
7. Status: 0 → ``passed``; >0 → ``exit_nonzero``; killed by a signal → ``crashed`` (``exit_code`` is minus
   the signal), except SIGXCPU (the CPU limit) → ``timeout``.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nexum.core.errors import ValidationFailed
from nexum.core.gate import (
    CRASHED,
    DENIED_EXECUTABLE,
    EXIT_NONZERO,
    MISSING_EXECUTABLE,
    MISSING_FILE,
    NO_MATCH,
    PASSED,
    RAISED,
    RETURNED_FALSE,
    TIMEOUT,
    WORKSPACE_VIOLATION,
    ArtifactMatchesCheck,
    CallableCheck,
    CheckResult,
    CheckSpec,
    CommandCheck,
    FileExistsCheck,
    FileMatchesCheck,
)

DEFAULT_ENV_ALLOWLIST: Final = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TZ"})
FALLBACK_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_READ_CHUNK: Final = 65536
_POLL_S: Final = 0.05
_DRAIN_AFTER_KILL_S: Final = 1.0
_GROUP_GONE_WAIT_S: Final = 5.0


# A check judges the files as they are now: cached bytecode whose source changed within the same second and
# kept its size would be run instead of the new source, so a fixed test could still fail (or the reverse).
DEFAULT_ENV_SET = {"PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class SandboxPolicy:
    """Operator-set limits for every check (SPEC V8). ``None`` disables a resource limit.

    ``allowed_executables`` holds bare names (matched against argv[0] as typed, found on the scrubbed PATH)
    and absolute paths (matched against the resolved path or its realpath). ``max_output_bytes`` and
    ``max_timeout_s`` cap what a check asks for; ``max_read_bytes`` caps how much of a file or artifact a
    pattern check reads.
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
        for name in ("cpu_seconds", "address_space_bytes", "max_processes", "max_file_size_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValidationFailed(f"{name} must be a positive integer or None", field=name)
        for name in ("max_output_bytes", "max_read_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationFailed(f"{name} must be a positive integer", field=name)
        if not self.max_timeout_s > 0:
            raise ValidationFailed("max_timeout_s must be positive", field="max_timeout_s")

    def child_env(self) -> dict[str, str]:
        """The scrubbed environment: allowlisted parent variables, then ``env_set``; PATH always sane."""
        env = {name: os.environ[name] for name in self.env_allowlist if name in os.environ}
        env.update(self.env_set)
        env["PATH"] = _sanitized_path(env.get("PATH", FALLBACK_PATH))
        return env


class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _sanitized_path(path: str) -> str:
    entries = [entry for entry in path.split(os.pathsep) if os.path.isabs(entry)]
    return os.pathsep.join(entries) or FALLBACK_PATH


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_in_workspace(policy: SandboxPolicy, relative: str) -> str:
    """``relative`` resolved (symlinks and ``..`` followed) under the workspace root; raises ``_Refused``."""
    root = os.path.realpath(policy.workspace_root)
    if not os.path.isdir(root):
        raise _Refused(WORKSPACE_VIOLATION, f"workspace root {root} is not a directory")
    resolved = os.path.realpath(os.path.join(root, relative))
    if not _inside(resolved, root):
        raise _Refused(
            WORKSPACE_VIOLATION, f"{relative!r} resolves to {resolved}, outside the workspace {root}"
        )
    return resolved


def _resolve_cwd(policy: SandboxPolicy, cwd: str) -> str:
    resolved = resolve_in_workspace(policy, cwd)
    if not os.path.isdir(resolved):
        raise _Refused(WORKSPACE_VIOLATION, f"working directory {cwd!r} is not a directory in the workspace")
    return resolved


def resolve_executable(policy: SandboxPolicy, program: str, *, cwd: str, search_path: str) -> str:
    """The absolute path to execute for ``program`` if the allowlist permits it; raises ``_Refused``."""
    allowed = policy.allowed_executables
    if "/" not in program:
        found = shutil.which(program, path=search_path)
        if program in allowed:
            if found is None:
                raise _Refused(MISSING_EXECUTABLE, f"executable {program!r} not found on PATH {search_path}")
            return os.path.abspath(found)
        if found is not None and _path_allowed(os.path.abspath(found), allowed):
            return os.path.abspath(found)
        raise _Refused(DENIED_EXECUTABLE, f"executable {program!r} is not on the allowlist")
    candidate = os.path.normpath(os.path.join(cwd, program))
    if not _path_allowed(candidate, allowed):
        raise _Refused(DENIED_EXECUTABLE, f"executable {program!r} ({candidate}) is not on the allowlist")
    if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        raise _Refused(MISSING_EXECUTABLE, f"executable {candidate} does not exist or is not executable")
    return candidate


def _path_allowed(path: str, allowed: frozenset[str]) -> bool:
    return path in allowed or os.path.realpath(path) in allowed


def _rlimits(policy: SandboxPolicy) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) triples, never above the parent's hard limits."""

    def clamp(which: int, value: int) -> int:
        _, hard = resource.getrlimit(which)
        return value if hard == resource.RLIM_INFINITY else min(value, hard)

    limits = [(resource.RLIMIT_CORE, 0, 0)]
    if policy.cpu_seconds is not None:
        soft = clamp(resource.RLIMIT_CPU, policy.cpu_seconds)
        limits.append((resource.RLIMIT_CPU, soft, clamp(resource.RLIMIT_CPU, soft + 1)))
    for which, value in (
        (resource.RLIMIT_AS, policy.address_space_bytes),
        (resource.RLIMIT_NPROC, policy.max_processes),
        (resource.RLIMIT_FSIZE, policy.max_file_size_bytes),
    ):
        if value is not None:
            limited = clamp(which, value)
            limits.append((which, limited, limited))
    return limits


def _preexec(limits: list[tuple[int, int, int]]) -> Callable[[], None]:
    def apply_limits() -> None:  # runs in the child between fork and exec: keep it minimal
        for which, soft, hard in limits:
            resource.setrlimit(which, (soft, hard))

    return apply_limits


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
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read().decode("ascii", errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) >= 3 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


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
    time is a reused pid, not the check: nothing is killed.
    """
    leader_started = process_start_ticks(pgid)
    if leader_started is not None and leader_started != start_ticks:
        return []
    _kill_group(pgid)
    return _wait_group_gone(pgid, _GROUP_GONE_WAIT_S)


def run_command(
    check: CommandCheck, policy: SandboxPolicy, *, on_start: Callable[[int], None] | None = None
) -> CheckResult:
    """Run ``check`` under ``policy`` (see the module docstring for every rule) and report what happened.

    ``on_start(pid)`` is called once the child runs (its pid is its process group id), so a caller can
    record where the check runs; if it raises, the group is killed and the error propagates.
    """
    started = time.monotonic()

    def refused(reason: str, message: str) -> CheckResult:
        return CheckResult(
            name=check.name, passed=False, reason=reason, output=message, duration_ms=_ms_since(started)
        )

    env = policy.child_env()
    try:
        cwd = _resolve_cwd(policy, check.cwd)
        executable = resolve_executable(policy, check.argv[0], cwd=cwd, search_path=env["PATH"])
    except _Refused as refusal:
        return refused(refusal.reason, refusal.message)

    cap = min(check.max_output_bytes, policy.max_output_bytes)
    timeout_s = min(check.timeout_s, policy.max_timeout_s)
    try:
        process = subprocess.Popen(
            [executable, *check.argv[1:]],
            shell=False,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
            start_new_session=True,
            preexec_fn=_preexec(_rlimits(policy)),  # see module docstring, item 4
        )
    except FileNotFoundError as exc:
        return refused(MISSING_EXECUTABLE, f"could not execute {executable}: {exc}")
    except (OSError, subprocess.SubprocessError) as exc:
        return refused(RAISED, f"could not start {executable}: {type(exc).__name__}: {exc}")

    pgid = process.pid  # start_new_session: the child leads its own session and process group
    output = _OutputCollector(cap)
    timed_out = False
    assert process.stdout is not None
    with process.stdout as stream:
        fd = stream.fileno()
        os.set_blocking(fd, False)
        try:
            if on_start is not None:
                on_start(pgid)
            timed_out = _pump_until_exit(process.pid, fd, output, deadline=started + timeout_s)
        finally:
            _kill_group(pgid)  # the timeout, stragglers after a normal exit, or an error in this process
            _drain(fd, output, deadline=time.monotonic() + _DRAIN_AFTER_KILL_S)
            process.wait()
            survivors = _wait_group_gone(pgid, _GROUP_GONE_WAIT_S)

    text = output.text()
    if survivors:
        text += f"\n[nexum: processes {survivors} of group {pgid} survived SIGKILL]\n"
    returncode = process.returncode
    if timed_out:
        reason = TIMEOUT
        text += f"\n[nexum: timed out after {timeout_s:g}s; process group killed]\n"
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
    """Runs any check kind; an instance is the ``run_check`` that ``gate_task_completion`` takes.

    ``artifact_loader(digest)`` returns an artifact's content, or None when there is none.
    ``callables`` maps a ``CallableCheck.dotted_path`` to the function to call: only functions the library
    user registered here can run (a contract cannot name arbitrary code). A registered function takes no
    arguments and returns True (pass) or False (``returned_false``); anything else, or raising, is ``raised``.
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
        started = time.monotonic()
        if isinstance(check, CommandCheck):
            return run_command(check, self.policy, on_start=self.on_start)
        try:
            reason, message = self._evaluate(check)
        except _Refused as refusal:
            reason, message = refusal.reason, refusal.message
        except Exception as exc:  # a check that raises is a failed check (V4)
            reason, message = RAISED, f"{type(exc).__name__}: {exc}"
        return CheckResult(
            name=check.name,
            passed=reason == PASSED,
            reason=reason,
            output=message,
            duration_ms=_ms_since(started),
        )

    def _evaluate(self, check: CheckSpec) -> tuple[str, str]:
        if isinstance(check, FileExistsCheck):
            path = resolve_in_workspace(self.policy, check.path)
            if not os.path.exists(path):
                return MISSING_FILE, f"{check.path} does not exist"
            return PASSED, f"{check.path} exists"
        if isinstance(check, FileMatchesCheck):
            path = resolve_in_workspace(self.policy, check.path)
            if not os.path.isfile(path):
                return MISSING_FILE, f"{check.path} is not a file"
            with open(path, "rb") as handle:
                content = handle.read(self.policy.max_read_bytes)
            return _match(check.pattern, content, check.path)
        if isinstance(check, ArtifactMatchesCheck):
            if self.artifact_loader is None:
                raise RuntimeError("no artifact store is configured for artifact checks")
            artifact = self.artifact_loader(check.artifact_digest)
            if artifact is None:
                return MISSING_FILE, f"no artifact with digest {check.artifact_digest}"
            if isinstance(artifact, str):
                artifact = artifact.encode("utf-8")
            return _match(check.pattern, artifact[: self.policy.max_read_bytes], check.artifact_digest)
        if isinstance(check, CallableCheck):
            function = self.callables.get(check.dotted_path)
            if function is None:
                return DENIED_EXECUTABLE, f"callable {check.dotted_path!r} is not registered"
            verdict = function()
            if verdict is True:
                return PASSED, f"{check.dotted_path} returned True"
            if verdict is False:
                return RETURNED_FALSE, f"{check.dotted_path} returned False"
            return RAISED, f"{check.dotted_path} returned {type(verdict).__name__}, expected True or False"
        raise TypeError(f"unknown check kind {type(check).__name__}")


def _match(pattern: str, content: bytes, where: str) -> tuple[str, str]:
    found = re.search(pattern, content.decode("utf-8", errors="replace"))
    if found is None:
        return NO_MATCH, f"no match for {pattern!r} in {where}"
    return PASSED, f"{pattern!r} matched {found.group(0)[:200]!r} in {where}"
