"""The command sandbox (SPEC V1, V4, V8) with real processes in a temporary workspace; no database."""

from __future__ import annotations

import ast
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nexum import sandbox
from nexum.core.gate import (
    ArtifactMatchesCheck,
    CallableCheck,
    CommandCheck,
    Contract,
    FileExistsCheck,
    FileMatchesCheck,
    gate_task_completion,
)
from nexum.sandbox import CheckRunner, SandboxPolicy, run_command

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox's guarantees are Linux-specific")

VENV_PYTHON = str(Path(sys.executable).parent / "python")


def policy_for(workspace: Path, *allowed: str, **options: object) -> SandboxPolicy:
    return SandboxPolicy(workspace_root=workspace, allowed_executables=frozenset(allowed), **options)  # type: ignore[arg-type]


def check(*argv: str, cwd: str = ".", timeout_s: float = 30, max_output_bytes: int = 65536) -> CommandCheck:
    return CommandCheck(
        name="cmd", argv=argv, cwd=cwd, timeout_s=timeout_s, max_output_bytes=max_output_bytes
    )


def live_members_of_group(pgid: int) -> list[int]:
    """Pids of non-zombie processes whose process group is ``pgid``, by an independent /proc scan."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rfind(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(entry))
    return members


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
    contract = Contract(checks=(CommandCheck(name="marker", argv=("sh", "-c", "test -f done")),))
    assert gate_task_completion("running", contract, "all tests pass", runner).outcome == "failed"
    (tmp_path / "done").write_text("")
    assert gate_task_completion("running", contract, "", runner).outcome == "completed"


# --- timeouts and process groups ---


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    policy = policy_for(tmp_path, "sh")
    started = time.monotonic()
    result = run_command(check("sh", "-c", "echo $$; sleep 600 & sleep 600", timeout_s=2), policy)
    elapsed = time.monotonic() - started

    assert elapsed < 4
    assert (result.passed, result.reason) == (False, "timeout")
    pgid = int(result.output.split()[0])  # sh leads its own session and group: $$ is the group id
    assert live_members_of_group(pgid) == []
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        pass  # the group is gone altogether
    else:  # only zombies waiting for a reaper (PID 1 of a container may not reap) may remain
        assert live_members_of_group(pgid) == []


def test_background_processes_left_by_a_finished_command_are_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_command(check("sh", "-c", "echo $$; sleep 600 & echo done"), policy_for(tmp_path, "sh"))
    assert time.monotonic() - started < 4
    assert result.reason == "passed"
    assert "done" in result.output
    assert live_members_of_group(int(result.output.split()[0])) == []


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
    assert set(variables) <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "NEXUM_CHECK", "PWD", "SHLVL", "_"}


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
    tree = ast.parse(Path(sandbox.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"django", "rest_framework", "celery", "tiktoken"}
