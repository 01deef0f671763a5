"""``run_command``: one command check from start to result, in the three spans ``nexum.sandbox.start``,
``nexum.sandbox.run`` and ``nexum.sandbox.output``, its exit status read as a reason (item 9 of the package
docstring)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Final

from nexum.adapters import telemetry
from nexum.adapters.sandbox.executables import resolve_executable
from nexum.adapters.sandbox.launch import start_command
from nexum.adapters.sandbox.output import OutputCollector, drain, pump_until_exit
from nexum.adapters.sandbox.policy import SandboxPolicy
from nexum.adapters.sandbox.sweep import sweep_workspace
from nexum.adapters.sandbox.workspace import resolve_cwd
from nexum.core.verification.checks.base import (
    CRASHED,
    EXIT_NONZERO,
    MISSING_EXECUTABLE,
    PASSED,
    RAISED,
    TIMEOUT,
    CheckRefused,
    CheckResult,
)
from nexum.core.verification.checks.command import CommandCheck

_DRAIN_AFTER_KILL_S: Final = 1.0


def run_command(
    check: CommandCheck, policy: SandboxPolicy, *, on_start: Callable[[int], None] | None = None
) -> CheckResult:
    """Run ``check`` under ``policy`` (see the package docstring for every rule) and report what happened.

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
            cwd = resolve_cwd(policy, check.cwd)
            executable = resolve_executable(policy, check.argv[0], cwd=cwd, search_path=env["PATH"])
            running = start_command(policy, [executable, *check.argv[1:]], cwd=cwd, env=env)
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
    output = OutputCollector(cap)
    timed_out = False
    assert process.stdout is not None
    with process.stdout as stream:
        fd = stream.fileno()
        os.set_blocking(fd, False)
        try:
            with telemetry.span("nexum.sandbox.run", check=check.name):
                if on_start is not None:
                    on_start(process.pid)
                timed_out = pump_until_exit(process.pid, fd, output, deadline=started + timeout_s)
        finally:
            with telemetry.span("nexum.sandbox.output", check=check.name):
                running.kill()  # the timeout, stragglers after a normal exit, or an error in this process
                drain(fd, output, deadline=time.monotonic() + _DRAIN_AFTER_KILL_S)
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


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
