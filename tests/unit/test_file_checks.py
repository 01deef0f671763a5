"""File checks open their file once, beneath the project's folder, without blocking (issue 23, item 2).

No bubblewrap here: file checks run in the worker. Another process flips a path between a regular file, a
symlink to a file outside the workspace, a FIFO and a folder while checks read it: whatever the interleaving,
nothing outside is ever read and every check is decided; the worst interleaving is also forced, every time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nexum.adapters.sandbox.policy import SandboxPolicy
from nexum.adapters.sandbox.runner import CheckRunner
from nexum.core.verification.checks.base import CheckResult
from nexum.core.verification.checks.file_exists import FileExistsCheck
from nexum.core.verification.checks.file_matches import FileMatchesCheck

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="openat2 and O_PATH are Linux's")

OUTSIDE_SECRET = "root:OUTSIDE-SECRET-HASH:19000:0:99999:7:::"
TRIES = 600
DECIDED_WITHIN_S = 60.0  # for all the tries together; each takes well under a millisecond


@pytest.fixture(params=["openat2", "component walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of resolving beneath the workspace: the kernel's openat2, and the walk used without it."""
    monkeypatch.setattr(
        "nexum.adapters.sandbox.workspace._openat2_missing", request.param == "component walk"
    )
    return str(request.param)


# Another process (true parallelism, as another check's would be) atomically exchanging the path with each of
# the other entries in turn (renameat2 RENAME_EXCHANGE): the path always exists and flips between a regular
# file, a symlink out, a FIFO and a folder. Bounded: it stops by itself after a minute.
SWAPPER = """
import ctypes, sys, time
exchange = ctypes.CDLL(None, use_errno=True).renameat2
race, *others = (name.encode() for name in sys.argv[1:])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    for other in others:
        exchange(-100, race, -100, other, 2)
    if sys.stdout:
        print("swapping", flush=True)
        sys.stdout = None
"""


def test_a_swapped_path_is_never_read_outside_the_workspace_and_every_check_is_decided(
    tmp_path: Path, resolution: str
) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "shadow"
    workspace.mkdir()
    outside.write_text(OUTSIDE_SECRET + "\n")
    race = workspace / "race.md"
    race.write_text("inside the workspace\n")
    (workspace / ".link").symlink_to(outside)
    os.mkfifo(workspace / ".fifo")
    (workspace / ".folder").mkdir()
    others = [str(workspace / name) for name in (".link", ".fifo", ".folder")]
    run = CheckRunner(SandboxPolicy(workspace_root=workspace))
    checks = [
        FileMatchesCheck(name="matches", path="race.md", pattern="OUTSIDE-SECRET|inside"),
        FileExistsCheck(name="exists", path="race.md"),
    ]
    results: list[CheckResult] = []

    def run_checks() -> None:
        for attempt in range(TRIES):
            results.append(run(checks[attempt % 2]))

    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(race), *others], stdout=subprocess.PIPE)
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == b"swapping\n"
        checker = threading.Thread(target=run_checks, daemon=True)
        checker.start()
        checker.join(timeout=DECIDED_WITHIN_S)
        still_swapping = swapper.poll() is None
    finally:
        swapper.kill()
        swapper.wait(timeout=10)
    assert not checker.is_alive(), f"checks still undecided after {DECIDED_WITHIN_S}s ({len(results)} done)"
    assert len(results) == TRIES and still_swapping  # every check ran while the path kept changing
    assert [result.output for result in results if "HASH:19000" in result.output] == []  # never read
    allowed = {"passed", "no_match", "missing_file", "workspace_violation"}
    assert {result.reason for result in results} <= allowed, {result.reason for result in results}
    for result in results:
        if result.name == "matches" and result.passed:
            assert "matched 'inside'" in result.output, result.output


@pytest.mark.parametrize("swapped_in", ["symlink out", "fifo", "folder"])
def test_a_path_swapped_right_after_it_was_looked_at_is_not_opened_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped_in: str
) -> None:
    """The worst interleaving, every time: the walk looks at ``race.md`` (a regular file), then another check
    swaps it before the open. The open (``O_NOFOLLOW``, non-blocking) of what is there now decides."""
    # openat2 looks and opens in one step
    monkeypatch.setattr("nexum.adapters.sandbox.workspace._openat2_missing", True)
    workspace, outside = tmp_path / "ws", tmp_path / "shadow"
    workspace.mkdir()
    outside.write_text(OUTSIDE_SECRET + "\n")
    race = workspace / "race.md"
    race.write_text("inside the workspace\n")
    real_stat, swapped = os.stat, []

    def stat_then_swap(path: object, *args: object, **kwargs: object) -> os.stat_result:
        found = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        if path == "race.md" and not swapped:
            swapped.append(swapped_in)
            race.unlink()
            {
                "symlink out": lambda: race.symlink_to(outside),
                "fifo": lambda: os.mkfifo(race),
                "folder": race.mkdir,
            }[swapped_in]()
        return found

    monkeypatch.setattr(os, "stat", stat_then_swap)
    result = CheckRunner(SandboxPolicy(workspace_root=workspace))(
        FileMatchesCheck(name="m", path="race.md", pattern="OUTSIDE-SECRET|inside")
    )
    assert swapped == [swapped_in]
    assert "HASH:19000" not in result.output
    expected = {"symlink out": "workspace_violation", "fifo": "missing_file", "folder": "missing_file"}
    assert result.reason == expected[swapped_in], result.output


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
