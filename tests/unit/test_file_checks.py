"""File checks open their file once, beneath the project's folder, without blocking (issue 23, item 2).

No bubblewrap here: file checks run in the worker. A swapper flips a path between a regular file, a symlink to
a file outside the workspace, a FIFO and a folder while checks read it: whatever the interleaving, nothing
outside is ever read and every check is decided.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from nexum import sandbox
from nexum.core.gate import FileExistsCheck, FileMatchesCheck
from nexum.sandbox import CheckRunner, SandboxPolicy

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="openat2 and O_PATH are Linux's")

OUTSIDE_SECRET = "root:OUTSIDE-SECRET-HASH:19000:0:99999:7:::"
TRIES = 600
DECIDED_WITHIN_S = 60.0  # for all the tries together; each takes well under a millisecond


@pytest.fixture(params=["openat2", "component walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of resolving beneath the workspace: the kernel's openat2, and the walk used without it."""
    monkeypatch.setattr(sandbox, "_openat2_missing", request.param == "component walk")
    return str(request.param)


def swap_forever(race: Path, outside: Path, stop: threading.Event, made: dict[str, int]) -> None:
    """Flip ``race`` between a file, a symlink out, a FIFO and a folder until ``stop`` (bounded in count)."""
    kinds = ("file", "link", "fifo", "folder")
    for turn in range(1_000_000):
        if stop.is_set():
            return
        with contextlib.suppress(OSError):
            if race.is_dir() and not race.is_symlink():
                race.rmdir()
            else:
                race.unlink()
        kind = kinds[turn % len(kinds)]
        with contextlib.suppress(OSError):
            if kind == "file":
                race.write_text("inside the workspace\n")
            elif kind == "link":
                race.symlink_to(outside)
            elif kind == "fifo":
                os.mkfifo(race)
            else:
                race.mkdir()
            made[kind] += 1


def test_a_swapped_path_is_never_read_outside_the_workspace_and_every_check_is_decided(
    tmp_path: Path, resolution: str
) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "shadow"
    workspace.mkdir()
    outside.write_text(OUTSIDE_SECRET + "\n")
    race = workspace / "race.md"
    run = CheckRunner(SandboxPolicy(workspace_root=workspace))
    checks = [
        FileMatchesCheck(name="matches", path="race.md", pattern="OUTSIDE-SECRET|inside"),
        FileExistsCheck(name="exists", path="race.md"),
    ]
    stop, made = threading.Event(), {"file": 0, "link": 0, "fifo": 0, "folder": 0}
    results: list[sandbox.CheckResult] = []

    def run_checks() -> None:
        for attempt in range(TRIES):
            results.append(run(checks[attempt % 2]))

    swapper = threading.Thread(target=swap_forever, args=(race, outside, stop, made), daemon=True)
    checker = threading.Thread(target=run_checks, daemon=True)
    swapper.start()
    started = time.monotonic()
    checker.start()
    checker.join(timeout=DECIDED_WITHIN_S)
    stop.set()
    swapper.join(timeout=10)
    assert not checker.is_alive(), f"checks still undecided after {DECIDED_WITHIN_S}s ({len(results)} done)"
    assert len(results) == TRIES, time.monotonic() - started
    assert min(made.values()) > 0, made  # the swapper made every kind while the checks ran
    assert [result.output for result in results if "HASH:19000" in result.output] == []  # never read
    allowed = {"passed", "no_match", "missing_file", "workspace_violation"}
    assert {result.reason for result in results} <= allowed, {result.reason for result in results}
    for result in results:
        if result.name == "matches" and result.passed:
            assert "matched 'inside'" in result.output, result.output


def test_each_kind_of_path_gets_its_own_answer_at_once(tmp_path: Path, resolution: str) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "shadow"
    (workspace / "docs").mkdir(parents=True)
    outside.write_text(OUTSIDE_SECRET + "\n")
    (workspace / "docs" / "CHANGELOG.md").write_text("## 1.2.0\n")
    (workspace / "latest.md").symlink_to("docs/CHANGELOG.md")  # inside: followed, as before
    (workspace / "up.md").symlink_to("docs/../../shadow")
    (workspace / "abs.md").symlink_to(outside)
    os.mkfifo(workspace / "pipe.md")  # no writer: a blocking open would wait forever
    run = CheckRunner(SandboxPolicy(workspace_root=workspace))

    def matches(path: str) -> tuple[str, str]:
        result = run(FileMatchesCheck(name="m", path=path, pattern="1.2.0|OUTSIDE"))
        return result.reason, result.output

    def exists(path: str) -> str:
        return run(FileExistsCheck(name="e", path=path)).reason

    assert matches("latest.md")[0] == "passed"
    assert matches("docs/../latest.md")[0] == "passed"
    assert matches("pipe.md") == ("missing_file", "pipe.md is not a regular file")
    assert matches("docs") == ("missing_file", "docs is not a regular file")
    assert matches("gone.md") == ("missing_file", "gone.md does not exist")
    for escaping in ("up.md", "abs.md", "../shadow", str(outside), "docs/CHANGELOG.md/../../../shadow"):
        reason, output = matches(escaping)
        assert reason in ("workspace_violation", "missing_file") and "OUTSIDE" not in output, escaping
    assert matches("up.md")[0] == matches("abs.md")[0] == matches("../shadow")[0] == "workspace_violation"
    assert "leads outside the workspace" in matches("abs.md")[1]
    assert [exists(path) for path in ("latest.md", "pipe.md", "docs", "gone.md", "abs.md")] == [
        "passed",
        "passed",
        "passed",  # file_exists accepts any kind of entry, as it always did
        "missing_file",
        "workspace_violation",
    ]


def test_a_file_check_reads_at_most_max_read_bytes(tmp_path: Path, resolution: str) -> None:
    (tmp_path / "big.log").write_bytes(b"x" * 5000 + b"MARKER")
    policy = SandboxPolicy(workspace_root=tmp_path, max_read_bytes=5000)
    assert (
        CheckRunner(policy)(FileMatchesCheck(name="m", path="big.log", pattern="MARKER")).reason == "no_match"
    )
    wider = SandboxPolicy(workspace_root=tmp_path, max_read_bytes=5006)
    assert CheckRunner(wider)(FileMatchesCheck(name="m", path="big.log", pattern="MARKER")).reason == "passed"
