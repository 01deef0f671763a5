"""The command sandbox (SPEC V1, V4, V8) with real processes inside a real bubblewrap sandbox; no database.

Every test here runs bwrap for real and must be able to fail: each guarantee is shown by the check trying
to break it. Without bwrap they are skipped, saying why (CI installs it).
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nexum.adapters import sandbox
from nexum.adapters.sandbox import launch
from nexum.adapters.sandbox.commands import run_command
from nexum.adapters.sandbox.groups import kill_leftover_group, process_start_ticks
from nexum.adapters.sandbox.policy import DEFAULT_HOST_ID, SandboxPolicy
from nexum.adapters.sandbox.probe import sandbox_unavailable
from nexum.adapters.sandbox.runner import CheckRunner
from nexum.adapters.sandbox.sweep import sweep_workspace
from nexum.core.verification.checks.artifact_matches import ArtifactMatchesCheck
from nexum.core.verification.checks.base import CheckResult
from nexum.core.verification.checks.callable import CallableCheck
from nexum.core.verification.checks.command import CommandCheck
from nexum.core.verification.checks.file_exists import FileExistsCheck
from nexum.core.verification.checks.file_matches import FileMatchesCheck
from nexum.core.verification.gate import ContractSpec, gate_task_completion
from tests.conftest import NEEDS_BWRAP

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the sandbox's guarantees are Linux-specific"),
    NEEDS_BWRAP,
]

VENV_PYTHON = str(Path(sys.executable).parent / "python")
REPOSITORY = Path(__file__).resolve().parents[2]
SANDBOX_USER = DEFAULT_HOST_ID  # what a root worker runs its sandboxes as, the default policy's


def give_to_sandbox(*paths: Path) -> None:
    if os.geteuid() == 0:
        for path in paths:
            os.chown(path, SANDBOX_USER, SANDBOX_USER)


def policy_for(workspace: Path, *allowed: str, **options: object) -> SandboxPolicy:
    """A policy for ``workspace``, given to the sandbox's host user as the service does a project's folder."""
    give_to_sandbox(workspace)
    return SandboxPolicy(workspace_root=workspace, allowed_executables=frozenset(allowed), **options)  # type: ignore[arg-type]


def check(*argv: str, cwd: str = ".", timeout_s: float = 30, max_output_bytes: int = 65536) -> CommandCheck:
    return CommandCheck(
        name="cmd", argv=argv, cwd=cwd, timeout_s=timeout_s, max_output_bytes=max_output_bytes
    )


def new_marker() -> str:
    """An argument for ``sleep`` no other process on the machine uses, to find a check's processes by."""
    return f"600.{os.getpid()}{secrets.randbelow(10**9):09d}"


def live_sleepers(marker: str) -> list[int]:
    """Host pids of live (non-zombie) ``sleep <marker>`` processes, by a scan of the host's /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            arguments = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if marker.encode() in arguments[1:2] and stat[stat.rfind(")") + 2] not in "ZX":
            found.append(int(entry))
    return found


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def run_watching(marker: str, run: Callable[[], CheckResult]) -> tuple[CheckResult, int]:
    """Run a check in a thread while counting, from the host, its live ``sleep <marker>`` processes; returns
    the result and the most seen at once (so a test shows they existed before showing they are gone)."""
    results: list[CheckResult] = []
    worker = threading.Thread(target=lambda: results.append(run()))
    worker.start()
    most = 0
    while worker.is_alive():
        most = max(most, len(live_sleepers(marker)))
        time.sleep(0.02)
    worker.join()
    return results[0], most


# --- a real test suite, failing then fixed ---


def test_a_real_pytest_project_fails_then_passes_once_fixed(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "test_calc.py").write_text(
        "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    # Both versions of calc.py have the same size and may share an mtime second: a cached .pyc would be
    # taken for current, so the project's Python writes none.
    policy = policy_for(tmp_path, VENV_PYTHON, env_set={"PYTHONDONTWRITEBYTECODE": "1"})
    suite = check(VENV_PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", timeout_s=120)

    broken = run_command(suite, policy)
    assert (broken.passed, broken.reason, broken.exit_code) == (False, "exit_nonzero", 1)
    assert "1 failed" in broken.output

    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    fixed = run_command(suite, policy)
    assert (fixed.passed, fixed.reason, fixed.exit_code) == (True, "passed", 0), fixed.output
    assert "1 passed" in fixed.output
    assert fixed.duration_ms > 0


def test_the_gate_with_the_sandbox_runner_completes_only_when_the_command_passes(tmp_path: Path) -> None:
    runner = CheckRunner(policy_for(tmp_path, "sh"))
    contract = ContractSpec(checks=(CommandCheck(name="marker", argv=("sh", "-c", "test -f done")),))
    assert gate_task_completion("running", contract, "all tests pass", runner).outcome == "failed"
    (tmp_path / "done").write_text("")
    assert gate_task_completion("running", contract, "", runner).outcome == "completed"


# --- timeouts, the process tree, the process limit ---


def test_a_timeout_kills_every_process_of_the_check_setsid_double_forks_included(tmp_path: Path) -> None:
    marker = new_marker()
    script = f"setsid sh -c 'sleep {marker} &'; setsid sleep {marker} & sleep {marker} & sleep {marker}"
    started = time.monotonic()
    result, most = run_watching(
        marker, lambda: run_command(check("sh", "-c", script, timeout_s=2), policy_for(tmp_path, "sh"))
    )
    assert time.monotonic() - started < 60  # the sleepers would run for 600 s
    assert most == 4  # every sleeper was running, two of them in sessions of their own
    assert (result.passed, result.reason) == (False, "timeout")
    assert "timed out after 2s" in result.output
    assert live_sleepers(marker) == []  # checked the moment run_command returned


def test_processes_left_by_a_finished_command_are_killed(tmp_path: Path) -> None:
    marker = new_marker()
    script = f"setsid sh -c 'sleep {marker} &'; sleep {marker} & sleep 1; echo done"
    result, most = run_watching(
        marker, lambda: run_command(check("sh", "-c", script), policy_for(tmp_path, "sh"))
    )
    assert most == 2
    assert (result.reason, result.output) == ("passed", "done\n")
    assert live_sleepers(marker) == []


def test_a_check_cannot_fork_past_the_process_limit(tmp_path: Path) -> None:
    program = textwrap.dedent(
        """
        import os, time
        started = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError as error:
                print("refused after", started, error.strerror)
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            started += 1
        print("started", started)
        """
    )
    policy = policy_for(tmp_path, VENV_PYTHON, max_processes=20)
    result = run_command(check(VENV_PYTHON, "-c", program), policy)
    assert result.reason == "passed", result.output
    started = int(result.output.split("started")[-1])
    assert 10 <= started < 20, result.output  # bwrap and python count too
    assert "refused after" in result.output
    unlimited = run_command(check(VENV_PYTHON, "-c", program), policy_for(tmp_path, VENV_PYTHON))
    assert "started 200" in unlimited.output  # the default (256) leaves room: the limit made the difference


def worker_command(python: str, workspace: Path, argv: list[str], **options: object) -> list[str]:
    """A command line running one check in a worker process of its own (tests/unit/sandbox_worker.py)."""
    give_to_sandbox(workspace)
    request = {"paths": [str(REPOSITORY)], "workspace": str(workspace), "allowed": ["sh"], "argv": argv}
    request.update({"max_processes": 256, "isolation": "bwrap", **options})
    return [python, "-I", str(Path(__file__).with_name("sandbox_worker.py")), json.dumps(request)]


def test_when_the_worker_is_killed_the_check_dies_with_it(tmp_path: Path) -> None:
    marker = new_marker()
    script = f"setsid sh -c 'sleep {marker} &'; sleep {marker}"
    worker = subprocess.Popen(worker_command(VENV_PYTHON, tmp_path, ["sh", "-c", script]))
    try:
        assert wait_until(lambda: len(live_sleepers(marker)) == 2, timeout_s=30), "the check never started"
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        assert wait_until(lambda: live_sleepers(marker) == [], timeout_s=2.0), live_sleepers(marker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_on_start_names_the_check_so_kill_leftover_group_ends_all_of_it(tmp_path: Path) -> None:
    """What a lease does when its holder lost it (issue 13): record the pid on_start gives, later kill the
    check by it. kill_leftover_group returns only once nothing of the sandbox lives."""
    marker = new_marker()
    started: list[tuple[int, int | None, bytes]] = []
    remaining: list[list[int]] = []

    def record_then_kill(pid: int) -> None:
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        started.append((pid, process_start_ticks(pid), program))

        def supervisor() -> None:
            wait_until(lambda: len(live_sleepers(marker)) == 2, timeout_s=20)
            assert kill_leftover_group(pid, started[0][1]) == []
            remaining.append(live_sleepers(marker))

        threading.Thread(target=supervisor, daemon=True).start()

    script = f"setsid sleep {marker} & sleep {marker}"
    began = time.monotonic()
    result = run_command(
        check("sh", "-c", script, timeout_s=60), policy_for(tmp_path, "sh"), on_start=record_then_kill
    )
    assert time.monotonic() - began < 20
    assert (result.reason, result.exit_code) == ("crashed", -signal.SIGKILL)
    [(pid, _, program)] = started
    assert program.endswith(b"bwrap")  # the sandbox's outermost process, leader of its own group
    assert wait_until(lambda: remaining != [], timeout_s=5) and remaining == [[]]
    assert kill_leftover_group(pid, 12345) == []  # a pid with another start time is left alone


def test_the_cpu_limit_ends_a_busy_loop_as_a_timeout(tmp_path: Path) -> None:
    policy = policy_for(tmp_path, VENV_PYTHON, cpu_seconds=1)
    result = run_command(check(VENV_PYTHON, "-c", "while True: pass", timeout_s=20), policy)
    assert result.reason == "timeout"
    assert "SIGXCPU" in result.output or "SIGKILL" in result.output


# --- no shell, ever ---

SHELL_PAYLOADS = [
    "; touch pwned",
    "x; touch pwned",
    "&& touch pwned",
    "true && touch pwned",
    "|| touch pwned",
    "false || touch pwned",
    "| tee pwned",
    "x | tee pwned",
    "$(touch pwned)",
    "$(touch pwned)x",
    "`touch pwned`",
    "x`touch pwned`x",
    "\ntouch pwned",
    "x\ntouch pwned\n",
    "\r\ntouch pwned",
    "> pwned",
    ">pwned",
    ">> pwned",
    "2> pwned",
    "&> pwned",
    "< /etc/passwd > pwned",
    "*",
    "./*",
    "/*",
    "?",
    "[a-z]*",
    "{a,b}",
    "~",
    "~root",
    "$HOME",
    "${HOME}",
    "$PATH; touch pwned",
    "$((1+1))",
    "& touch pwned",
    "touch pwned &",
    "sleep 1 & touch pwned",
    "(touch pwned)",
    "{ touch pwned; }",
    "'; touch pwned; '",
    '"; touch pwned; "',
    "\\; touch pwned",
    "$'\\x74ouch' pwned",
    "<(touch pwned)",
    ">(touch pwned)",
    "!!",
    "#; touch pwned",
    "IFS=x; touch${IFS}pwned",
    "a=$(id) && echo $a > pwned",
    "-e touch pwned",
    "--help; touch pwned",
]


def test_fifty_shell_payloads_are_plain_arguments(tmp_path: Path) -> None:
    assert len(SHELL_PAYLOADS) == len(set(SHELL_PAYLOADS)) == 50
    policy = policy_for(tmp_path, "printf")
    for payload in SHELL_PAYLOADS:
        result = run_command(check("printf", "%s", payload), policy)
        assert result.reason == "passed", (payload, result.output)
        assert result.output == payload, payload
        assert list(tmp_path.iterdir()) == [], payload


def test_echo_prints_a_payload_literally(tmp_path: Path) -> None:
    result = run_command(check("echo", "$(touch pwned); `touch pwned` > pwned"), policy_for(tmp_path, "echo"))
    assert result.output == "$(touch pwned); `touch pwned` > pwned\n"
    assert list(tmp_path.iterdir()) == []


# --- the allowlist ---


def test_an_executable_off_the_allowlist_is_denied_before_anything_runs(tmp_path: Path) -> None:
    script = tmp_path / "evil.sh"
    script.write_text("#!/bin/sh\ntouch marker\n")
    script.chmod(0o755)
    policy = policy_for(tmp_path, "printf")
    for argv in (("./evil.sh",), (str(script),), ("sh", "-c", "touch marker"), ("touch", "marker")):
        result = run_command(check(*argv), policy)
        assert (result.passed, result.reason, result.exit_code) == (False, "denied_executable", None), argv
    assert not (tmp_path / "marker").exists()


def test_a_workspace_file_named_like_an_allowed_command_is_denied(tmp_path: Path) -> None:
    fake = tmp_path / "printf"
    fake.write_text("#!/bin/sh\ntouch marker\n")
    fake.chmod(0o755)
    result = run_command(check("./printf", "hi"), policy_for(tmp_path, "printf"))
    assert result.reason == "denied_executable"
    assert not (tmp_path / "marker").exists()


def test_an_allowlisted_absolute_path_may_run_through_a_symlink(tmp_path: Path) -> None:
    real = "/usr/bin/printf"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "p").symlink_to(real)
    result = run_command(check("bin/p", "ok"), policy_for(tmp_path, real))
    assert (result.reason, result.output) == ("passed", "ok")


def test_an_allowlisted_link_allows_every_path_to_the_same_file_and_no_other(tmp_path: Path) -> None:
    """As a virtualenv's bin/python and bin/python3, both links to one interpreter: allowing one allows the
    other (issue 29: both sides of the comparison are resolved), and a link to another file stays denied."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to("/usr/bin/printf")
    (venv / "python3").symlink_to("python")
    (venv / "other").symlink_to("/usr/bin/env")
    policy = policy_for(tmp_path, str(venv / "python"))
    for program in (str(venv / "python3"), "venv/bin/python3", str(venv / "python"), "/usr/bin/printf"):
        result = run_command(check(program, "ok"), policy)
        assert (result.reason, result.output) == ("passed", "ok"), program
    assert run_command(check(str(venv / "other"), "true"), policy).reason == "denied_executable"
    assert run_command(check("printf", "ok"), policy).reason == "passed"  # found on PATH: /usr/bin/printf


def test_a_missing_executable_is_reported(tmp_path: Path) -> None:
    policy = policy_for(tmp_path, "nexum-no-such-tool", str(tmp_path / "gone"))
    assert run_command(check("nexum-no-such-tool"), policy).reason == "missing_executable"
    assert run_command(check(str(tmp_path / "gone")), policy).reason == "missing_executable"


# --- the workspace ---


def test_a_working_directory_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "escape").symlink_to(outside)
    give_to_sandbox(workspace / "sub")
    policy = policy_for(workspace, "touch")
    for cwd in ("..", "sub/../..", "escape", "escape/.", str(outside), "/"):
        result = run_command(check("touch", "marker", cwd=cwd), policy)
        assert (result.passed, result.reason) == (False, "workspace_violation"), cwd
    assert list(outside.iterdir()) == []
    assert run_command(check("touch", "marker", cwd="sub/../sub"), policy).reason == "passed"
    assert (workspace / "sub" / "marker").exists()


def test_a_working_directory_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    result = run_command(check("printf", "x", cwd="nope"), policy_for(tmp_path, "printf"))
    assert result.reason == "workspace_violation"


# --- how processes end ---


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_a_child_killed_by_a_signal_crashed(tmp_path: Path, sig: signal.Signals) -> None:
    result = run_command(check("sh", "-c", f"kill -{sig.name[3:]} $$"), policy_for(tmp_path, "sh"))
    assert (result.passed, result.reason, result.exit_code) == (False, "crashed", -sig)
    assert sig.name in result.output
    assert list(tmp_path.iterdir()) == []  # no core file


def test_a_nonzero_exit_is_exit_nonzero(tmp_path: Path) -> None:
    result = run_command(check("sh", "-c", "echo oops >&2; exit 3"), policy_for(tmp_path, "sh"))
    assert (result.passed, result.reason, result.exit_code, result.output) == (
        False,
        "exit_nonzero",
        3,
        "oops\n",
    )


# --- output ---


def test_output_over_the_cap_is_truncated_and_marked(tmp_path: Path) -> None:
    program = "import sys; sys.stdout.write('H' * 5000 + 'x' * 100000 + 'T' * 5000)"
    result = run_command(
        check(VENV_PYTHON, "-c", program, max_output_bytes=1000), policy_for(tmp_path, VENV_PYTHON)
    )
    assert result.reason == "passed"
    assert result.truncated
    assert result.output.startswith("H" * 500)
    assert result.output.endswith("T" * 500)
    assert "[nexum: output truncated: 109000 of 110000 bytes omitted]" in result.output
    assert len(result.output) < 1200


def test_the_policy_caps_what_a_check_asks_for(tmp_path: Path) -> None:
    policy = policy_for(tmp_path, VENV_PYTHON, max_output_bytes=100)
    result = run_command(check(VENV_PYTHON, "-c", "print('y' * 1000)"), policy)
    assert result.truncated
    assert result.output.count("y") == 100


def test_a_chatty_child_on_both_streams_does_not_deadlock(tmp_path: Path) -> None:
    program = textwrap.dedent(
        """
        import sys
        for _ in range(200):
            sys.stdout.write('o' * 50000); sys.stderr.write('e' * 50000)
        sys.stdout.write('END')
        """
    )
    started = time.monotonic()
    result = run_command(
        check(VENV_PYTHON, "-c", program, max_output_bytes=4096), policy_for(tmp_path, VENV_PYTHON)
    )
    assert time.monotonic() - started < 20
    assert result.reason == "passed"
    assert result.truncated
    assert result.output.endswith("END")
    assert "of 20000003 bytes omitted" in result.output


def test_output_short_of_the_cap_is_whole(tmp_path: Path) -> None:
    result = run_command(check("printf", "a\nb\n"), policy_for(tmp_path, "printf"))
    assert (result.output, result.truncated) == ("a\nb\n", False)


# --- the environment ---


def test_the_environment_is_scrubbed_to_the_allowlist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEXUM_TEST_SECRET", "hunter2")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("PATH", f".:relative/bin:{os.environ['PATH']}")
    policy = policy_for(tmp_path, "env", env_set={"NEXUM_CHECK": "1"})
    result = run_command(check("env"), policy)
    assert result.reason == "passed"
    variables = dict(line.split("=", 1) for line in result.output.splitlines())
    assert "hunter2" not in result.output
    assert "NEXUM_TEST_SECRET" not in variables
    assert "PYTHONPATH" not in variables
    assert variables["NEXUM_CHECK"] == "1"
    assert all(os.path.isabs(entry) for entry in variables["PATH"].split(":"))
    assert set(variables) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "TZ",
        "NEXUM_CHECK",
        "PWD",
        "SHLVL",
        "_",
    }


# --- what a check can reach: namespaces, the environment, files, the network ---


def test_the_check_runs_unprivileged_in_namespaces_of_its_own(tmp_path: Path) -> None:
    kinds = ("user", "pid", "net", "ipc", "uts", "cgroup", "mnt")
    script = "id -u; id -g; grep CapEff /proc/self/status; cat /proc/sys/kernel/hostname; " + "; ".join(
        f"readlink /proc/self/ns/{kind}" for kind in kinds
    )
    result = run_command(check("sh", "-c", script), policy_for(tmp_path, "sh"))
    lines = result.output.splitlines()
    assert lines[:4] == ["1000", "1000", "CapEff:\t0000000000000000", "nexum-check"], result.output
    for kind, inside in zip(kinds, lines[4:], strict=True):
        assert inside != os.readlink(f"/proc/self/ns/{kind}"), kind


def test_a_check_cannot_read_the_hosts_or_the_workers_environment(tmp_path: Path) -> None:
    secret = f"planted-{secrets.token_hex(8)}"
    script = (
        "cat /proc/1/environ; echo; cat /proc/$PPID/environ; echo; for e in /proc/[0-9]*/environ; do cat $e;"
        f" echo; done; cat /proc/{os.getpid()}/environ; env"
    )

    def run_in_a_worker(**options: object) -> str:
        # The secret is in the worker's environment from its start, as DATABASE_URL is in a real worker's.
        command = worker_command(VENV_PYTHON, tmp_path, ["sh", "-c", script], **options)
        environment = {**os.environ, "NEXUM_PLANTED_SECRET": secret}
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["output"])

    output = run_in_a_worker()
    assert "PATH=" in output  # the reads happened
    assert f"/proc/{os.getpid()}/environ: No such file" in output
    assert secret not in output and "NEXUM_PLANTED_SECRET" not in output
    assert secret in run_in_a_worker(isolation="none")  # the same probe finds it where nothing hides it


def test_the_data_directory_artifacts_database_and_other_projects_do_not_exist_inside(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "artifacts" / "ab").mkdir(parents=True)
    (data / "artifacts" / "ab" / "cdef").write_text("stored output")
    (data / "nexum.sqlite3").write_text("SQLite format 3")
    (data / "workspace" / "acme").mkdir(parents=True)
    (data / "workspace" / "globex").mkdir()
    (data / "workspace" / "globex" / "secret.txt").write_text("globex only")
    hidden = {str(data), str(data / "artifacts"), str(data / "nexum.sqlite3"), str(data / "workspace")}
    probed = [
        str(data),
        str(data / "nexum.sqlite3"),
        str(data / "artifacts" / "ab" / "cdef"),
        str(data / "workspace" / "globex" / "secret.txt"),
        str(REPOSITORY / "nexum" / "settings.py"),
        "/run/postgresql",
        "/var/run",
        "/root/.bashrc",
        "/home",
        "/etc/shadow",
    ]
    script = 'for p in "$@"; do if [ -e "$p" ]; then echo "VISIBLE $p"; else echo "absent $p"; fi; done'
    argv = ("sh", "-c", script, "probe", *probed)
    policy = policy_for(data / "workspace" / "acme", "sh", VENV_PYTHON, hidden_paths=frozenset(hidden))
    result = run_command(check(*argv), policy)
    assert result.output.splitlines() == [f"absent {path}" for path in probed]
    unsandboxed = run_command(check(*argv), policy_for(data / "workspace" / "acme", "sh", isolation="none"))
    assert f"VISIBLE {data / 'nexum.sqlite3'}" in unsandboxed.output  # the probe sees what is there


def test_a_check_cannot_reach_services_on_the_hosts_loopback(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # open from the host
        program = textwrap.dedent(
            f"""
            import socket
            for port in ({port}, 5432, 6379):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                    print(port, "connected")
                except OSError as error:
                    print(port, type(error).__name__)
            """
        )
        result = run_command(check(VENV_PYTHON, "-c", program), policy_for(tmp_path, VENV_PYTHON))
    assert result.output.splitlines() == [
        f"{port} ConnectionRefusedError",
        "5432 ConnectionRefusedError",
        "6379 ConnectionRefusedError",
    ], result.output


def test_a_check_writes_in_its_workspace_and_nowhere_else(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "acme", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    targets = [str(outside / "planted"), "/usr/planted", "/etc/planted", "/planted", f"{sys.prefix}/planted"]
    script = (
        "touch /workspace/made-inside && echo inside-ok; touch /tmp/scratch && echo tmp-ok;"
        ' for p in "$@"; do touch "$p" 2>/dev/null && echo "WROTE $p"; done; true'
    )
    result = run_command(
        check("sh", "-c", script, "probe", *targets), policy_for(workspace, "sh", VENV_PYTHON)
    )
    assert result.output.splitlines() == ["inside-ok", "tmp-ok"]
    assert (workspace / "made-inside").exists()
    assert list(outside.iterdir()) == [] and not Path(sys.prefix, "planted").exists()


def test_a_check_leaves_no_setuid_file_no_device_and_nothing_owned_by_host_root(tmp_path: Path) -> None:
    """A root worker's sandbox used to be host root outside its user namespace: a setuid copy of cat left in
    the workspace gave any local user euid 0. Now the check's files belong to the sandbox's host user, the
    workspace is mounted nosuid,nodev inside, and the bits are swept off once the check is over."""
    script = textwrap.dedent(
        """
        grep ' /workspace ' /proc/self/mountinfo
        cp /usr/bin/cat cat-root && chmod 4755 cat-root
        cp /bin/sh sh-group && chmod 2755 sh-group
        mkdir -p shared/deeper && cp /usr/bin/cat shared/deeper/both && chmod 6755 shared/deeper/both
        chmod 2775 shared
        mknod null-copy c 1 3 2>/dev/null && echo MADE a device node
        mkfifo pipe
        ls -ln cat-root sh-group shared/deeper/both
        """
    )
    runner = CheckRunner(policy_for(tmp_path, "sh"))  # the defaults, as production's
    result = runner(CommandCheck(name="plant", argv=("sh", "-c", script)))
    assert result.reason == "passed", result.output
    mounted = result.output.splitlines()[0].split()[5].split(",")
    assert {"nosuid", "nodev"} <= set(mounted), result.output
    assert "-rwsr-xr-x" in result.output and "-rwxr-sr-x" in result.output  # planted, as the check saw them
    assert (tmp_path / "cat-root").exists() and (tmp_path / "pipe").exists()  # FIFOs stay
    found = [tmp_path, *tmp_path.rglob("*")]
    assert [str(path) for path in found if path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)] == []
    assert [str(path) for path in found if stat.S_ISCHR(path.lstat().st_mode)] == []
    assert [str(path) for path in found if path.lstat().st_uid == 0] == []
    assert "cleared the setuid/setgid bits of" in result.output and "cat-root" in result.output


def test_the_sweep_never_follows_a_symlink_out_of_the_workspace(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "setuid-elsewhere").write_text("")
    (outside / "setuid-elsewhere").chmod(0o4755)
    (workspace / "to-outside").symlink_to(outside)
    (workspace / "to-file").symlink_to(outside / "setuid-elsewhere")
    (workspace / "mine").write_text("")
    (workspace / "mine").chmod(0o2755)
    swept = sweep_workspace(str(workspace))
    assert (swept.cleared, swept.removed) == (["mine"], [])
    assert (outside / "setuid-elsewhere").stat().st_mode & 0o7777 == 0o4755
    assert sweep_workspace(str(workspace), max_entries=1).incomplete


def test_a_root_worker_without_a_host_user_runs_no_command_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # as CI and `make run` as root are
    for unset in ({"host_uid": None}, {"host_gid": None}):
        policy = policy_for(tmp_path, "sh", **unset)
        result = run_command(check("sh", "-c", "touch ran"), policy)
        assert (result.passed, result.reason) == (False, "sandbox_unavailable")
        assert "NEXUM_SANDBOX_HOST_UID" in result.output and "host root" in result.output
        assert sandbox_unavailable(policy) == result.output
        assert not (tmp_path / "ran").exists()


def test_a_root_worker_refuses_an_executable_its_sandbox_user_cannot_read(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker runs its sandboxes as another user")
    workspace, closed = tmp_path / "ws", tmp_path / "closed"
    workspace.mkdir()
    (closed / "bin").mkdir(parents=True)
    shutil.copy("/bin/true", closed / "bin" / "tool")
    closed.chmod(0o700)  # as /root is, holding a venv's interpreter
    policy = policy_for(workspace, "sh", str(closed / "bin" / "tool"))
    for argv in (("sh", "-c", "touch ran"), (str(closed / "bin" / "tool"),)):
        result = run_command(check(*argv), policy)
        assert result.reason == "sandbox_unavailable", result.output
        assert f"{closed} is closed to the host user the sandbox runs as (uid {SANDBOX_USER}" in result.output
    assert sandbox_unavailable(policy) == result.output
    assert not (workspace / "ran").exists()
    theirs = tmp_path / "theirs"  # root's, as a folder the service did not create would be
    theirs.mkdir()
    unwritable = SandboxPolicy(workspace_root=theirs, allowed_executables=frozenset({"sh"}))
    result = run_command(check("sh", "-c", "touch ran"), unwritable)
    assert result.reason == "sandbox_unavailable" and f"chown {SANDBOX_USER}:{SANDBOX_USER}" in result.output
    assert not (theirs / "ran").exists()


def test_a_root_worker_reaches_mounts_behind_folders_its_sandbox_user_cannot_search(tmp_path: Path) -> None:
    """A venv's interpreter under a 0700 /root, a project folder under pytest's 0700 folder: bwrap, run as
    the unprivileged user, could not pass them; the child binds them back in place in a mount namespace of
    its own first, so the check sees them as a non-root worker's would; the host's mounts do not change."""
    if os.geteuid() != 0:
        pytest.skip("only a root worker runs its sandboxes as another user")
    closed = tmp_path / "closed"
    (closed / "tools" / "bin").mkdir(parents=True)
    (closed / "tools" / "bin" / "greet").write_text("#!/bin/sh\necho greeted from $0\n")
    (closed / "tools" / "bin" / "greet").chmod(0o755)
    (closed / "tools" / "secret").write_text("beside the tool")
    workspace = closed / "projects" / "acme"
    workspace.mkdir(parents=True)
    for folder in (closed / "tools", closed / "tools" / "bin", closed / "projects"):
        folder.chmod(0o755)
    closed.chmod(0o700)
    tool = str(closed / "tools" / "bin" / "greet")
    mounts_before = Path("/proc/self/mountinfo").read_text()
    script = f"{tool}; touch made; ls {closed}; ls {closed / 'tools'}; ls -n made"
    result = run_command(check("sh", "-c", script), policy_for(workspace, "sh", tool))
    assert result.reason == "passed", result.output
    lines = result.output.splitlines()
    # Of the closed folder only the way to the mount (the tool's prefix, whole, as any prefix) is there.
    assert lines[:4] == [f"greeted from {tool}", "tools", "bin", "secret"], result.output
    assert lines[4].split()[2:4] == ["1000", "1000"], result.output
    assert (workspace / "made").stat().st_uid == SANDBOX_USER
    assert Path("/proc/self/mountinfo").read_text() == mounts_before


def test_a_worker_that_cannot_bind_mounts_back_in_place_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root in a container without CAP_SYS_ADMIN cannot make a mount namespace: a clear refusal, not a
    confusing error of the child."""
    if os.geteuid() != 0:
        pytest.skip("only a root worker runs its sandboxes as another user")
    closed = tmp_path / "closed"
    workspace = closed / "acme"
    workspace.mkdir(parents=True)
    closed.chmod(0o700)

    def no_mount_namespace(staged: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(launch, "stage", no_mount_namespace)
    result = run_command(check("sh", "-c", "touch ran"), policy_for(workspace, "sh"))
    assert result.reason == "sandbox_unavailable", result.output
    assert "cannot be searched by the host user" in result.output and "CAP_SYS_ADMIN" in result.output
    assert f"binding {workspace} back in place" in result.output
    assert not (workspace / "ran").exists()


def test_a_check_cannot_change_the_hosts_kernel_settings_or_read_kernel_internals(tmp_path: Path) -> None:
    """Sysctls trust uid 0 without asking for a capability, and a root worker's sandbox is uid 0 outside its
    user namespace: /proc/sys is read-only and files such as /proc/kpageflags cannot be opened."""
    script = textwrap.dedent(
        """
        for f in /proc/sys/kernel/core_pattern /proc/sys/vm/drop_caches; do test -w $f && echo WRITABLE; done
        limit=$(cat /proc/sys/kernel/printk_ratelimit)
        echo $limit > /proc/sys/kernel/printk_ratelimit && echo WROTE the same value back
        for f in /proc/kpageflags /proc/slabinfo /proc/keys; do head -c 1 $f >/dev/null && echo READ $f; done
        echo checked
        """
    )
    result = run_command(check("sh", "-c", script), policy_for(tmp_path, "sh"))
    assert result.output.splitlines()[-1] == "checked"
    assert [
        line for line in result.output.splitlines() if line.split()[0] in ("WRITABLE", "WROTE", "READ")
    ] == []


def test_the_process_limit_holds_for_an_unprivileged_worker() -> None:
    """Without a cgroup: RLIMIT_NPROC binds a worker that is not root (as an operator should run it)."""
    system_python, uid = "/usr/bin/python3", 64999
    if not os.access(system_python, os.X_OK) or os.geteuid() != 0:
        pytest.skip("needs root (to become another user) and a /usr/bin/python3 that user can run")
    base = Path(
        subprocess.check_output(["mktemp", "-d", "/tmp/nexum-unprivileged-XXXXXX"], text=True).strip()
    )
    try:
        base.chmod(0o755)
        (base / "workspace").mkdir()
        os.chown(base / "workspace", uid, uid)
        site_packages = str(next(Path(sys.prefix, "lib").glob("python3*/site-packages")))  # google-re2
        script = "n=0; while [ $n -lt 40 ]; do sleep 30 & n=$((n+1)); echo $n; done"
        reports = {}
        for limit in (15, None):
            command = worker_command(
                system_python, base / "workspace", ["sh", "-c", script], max_processes=limit
            )
            command[-1] = json.dumps({**json.loads(command[-1]), "paths": [str(REPOSITORY), site_packages]})
            done = subprocess.run(
                command,
                user=uid,
                group=uid,
                extra_groups=[],
                cwd=base,
                env={"PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            reports[limit] = json.loads(done.stdout)
        assert reports[15]["uid"] == uid
        assert "Cannot fork" in reports[15]["output"], reports[15]
        assert max(int(word) for word in reports[15]["output"].split() if word.isdigit()) < 15
        assert reports[None]["output"].split()[-1] == "40"  # the limit made the difference
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)


# --- the other check kinds ---


def test_file_checks_stay_in_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("password=1")
    (workspace / "link").symlink_to(tmp_path / "secret.txt")
    (workspace / "CHANGELOG.md").write_text("# Changes\n## 1.2.0\n")
    run = CheckRunner(policy_for(workspace))
    assert run(FileExistsCheck(name="f", path="CHANGELOG.md")).reason == "passed"
    assert run(FileExistsCheck(name="f", path="nope.md")).reason == "missing_file"
    assert run(FileExistsCheck(name="f", path="../secret.txt")).reason == "workspace_violation"
    assert run(FileMatchesCheck(name="f", path="link", pattern="password")).reason == "workspace_violation"
    assert (
        run(FileMatchesCheck(name="f", path="CHANGELOG.md", pattern=r"(?m)^## 1\.2\.0$")).reason == "passed"
    )
    assert run(FileMatchesCheck(name="f", path="CHANGELOG.md", pattern="2.0.0")).reason == "no_match"


def test_artifact_and_callable_checks(tmp_path: Path) -> None:
    artifacts = {"d1": b"def login(user):\n    ..."}

    def broken() -> bool:
        raise RuntimeError("schema store down")

    run = CheckRunner(
        policy_for(tmp_path),
        artifact_loader=artifacts.get,
        callables={
            "app.checks:ok": lambda: True,
            "app.checks:no": lambda: False,
            "app.checks:broken": broken,
        },
    )
    assert run(ArtifactMatchesCheck(name="a", artifact_digest="d1", pattern="def login")).reason == "passed"
    assert (
        run(ArtifactMatchesCheck(name="a", artifact_digest="d1", pattern="def logout")).reason == "no_match"
    )
    assert run(ArtifactMatchesCheck(name="a", artifact_digest="d2", pattern="x")).reason == "missing_file"
    assert run(CallableCheck(name="c", dotted_path="app.checks:ok")).reason == "passed"
    assert run(CallableCheck(name="c", dotted_path="app.checks:no")).reason == "returned_false"
    raised = run(CallableCheck(name="c", dotted_path="app.checks:broken"))
    assert (raised.reason, raised.output) == ("raised", "RuntimeError: schema store down")
    assert run(CallableCheck(name="c", dotted_path="os:system")).reason == "denied_executable"


def test_the_sandbox_imports_no_framework() -> None:
    imported: set[str] = set()
    for module in Path(sandbox.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    assert not imported & {"django", "rest_framework", "celery", "tiktoken"}
