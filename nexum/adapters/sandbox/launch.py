"""Starting a command check's program (items 4 to 6 of the package docstring): the rlimits, the pids cgroup
joined, the mounts staged and the host user dropped to in the child before it executes, then bubblewrap
(or, unsandboxed, the program itself) in a session of its own."""

from __future__ import annotations

import json
import os
import resource
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from nexum.adapters.sandbox import bubblewrap
from nexum.adapters.sandbox.executables import allowlisted_paths
from nexum.adapters.sandbox.pids_cgroup import CgroupUnavailable, PidsCgroup, find_parent
from nexum.adapters.sandbox.policy import READ_CHUNK, UNSANDBOXED, SandboxPolicy
from nexum.adapters.sandbox.probe import cgroup_advice, needs_cgroup, usable_bwrap
from nexum.adapters.sandbox.running import Namespace, ProcessGroup, Running
from nexum.adapters.sandbox.staging import host_user, stage, stage_or_refuse, staging_advice
from nexum.core.verification.checks.base import SANDBOX_UNAVAILABLE, CheckRefused

_INFO_WAIT_S: Final = 10.0
# Inside bubblewrap the worker's HOME does not exist: programs keep their caches in the private /tmp.
SANDBOX_ENV: Final = {"HOME": "/tmp", "TMPDIR": "/tmp"}


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
        (resource.RLIMIT_NPROC, None if needs_cgroup(policy) else policy.max_processes),
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
            stage(staged)
        if run_as is not None:  # last: the cgroup, the limits and the staging mounts need root
            uid, gid = run_as
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)

    return prepare_child


def start_command(policy: SandboxPolicy, argv: Sequence[str], *, cwd: str, env: dict[str, str]) -> Running:
    """Start ``argv`` (its first item the vetted executable) in ``cwd`` with ``env`` as ``policy`` says:
    inside bubblewrap, or unsandboxed; raises ``CheckRefused`` when the sandbox cannot be set up."""
    if policy.isolation == UNSANDBOXED:
        return ProcessGroup(_popen(argv, env=env, cwd=cwd, prepare=_preexec(_rlimits(policy))))
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
    (the limits and the host user, see the package docstring, items 5 and 6) run in the child before it
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
) -> Namespace:
    bwrap = usable_bwrap(policy)
    try:
        plan = bubblewrap.plan_mounts(
            workspace=os.path.realpath(policy.workspace_root),
            executables=[argv[0], *allowlisted_paths(policy, env["PATH"])],
            extra_read_only=policy.read_only_paths,
            hidden=policy.hidden_paths,
            private=policy.private_paths,
        )
        run_as = host_user(policy)
        staged = stage_or_refuse(plan, argv[0], run_as) if run_as is not None else {}
        cgroup = None
        if needs_cgroup(policy):
            assert policy.max_processes is not None
            cgroup = PidsCgroup.create(find_parent(policy.cgroup_parent), policy.max_processes)
    except bubblewrap.SandboxUnavailable as exc:
        raise CheckRefused(SANDBOX_UNAVAILABLE, str(exc)) from None
    except CgroupUnavailable as exc:
        raise CheckRefused(SANDBOX_UNAVAILABLE, cgroup_advice(exc)) from None
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
            raise CheckRefused(SANDBOX_UNAVAILABLE, staging_advice(staged, run_as)) from None
        raise
    finally:
        for fd in (info_write, passwd, group):
            os.close(fd)
    try:
        init_pid = _read_child_pid(info_read, deadline=time.monotonic() + _INFO_WAIT_S)
    finally:
        os.close(info_read)
    return Namespace(process, init_pid, cgroup)


def _read_child_pid(fd: int, *, deadline: float) -> int | None:
    """bwrap's ``--info-fd`` JSON, read until bwrap closes it: the host pid of the sandbox's PID 1."""
    received = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0 and selector.select(timeout=remaining):
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                break
            received += chunk
    try:
        return int(json.loads(received)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None  # bwrap failed before starting the sandbox; its message is in the output
