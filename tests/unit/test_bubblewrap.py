"""What the sandbox mounts, and how it refuses to run when it cannot isolate a check; no database.

Most of these need no bwrap: they show the refusals (``sandbox_unavailable``, nothing runs) and the mount
plan. Those that run a check are marked and skipped, saying why, where bwrap is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nexum.adapters.sandbox import bubblewrap, probe
from nexum.adapters.sandbox.bubblewrap import SandboxUnavailable, install_prefixes, plan_mounts
from nexum.adapters.sandbox.commands import run_command
from nexum.adapters.sandbox.pids_cgroup import CgroupUnavailable, PidsCgroup, find_parent
from nexum.adapters.sandbox.policy import SandboxPolicy
from nexum.core.errors import ValidationFailed
from nexum.core.verification.checks.command import CommandCheck
from tests.conftest import NEEDS_BWRAP

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-specific")


def touch_marker(workspace: Path) -> CommandCheck:
    return CommandCheck(name="marker", argv=("sh", "-c", f"touch {workspace}/ran"), timeout_s=30)


# --- the mount plan ---


def test_a_venv_interpreter_brings_the_interpreter_it_was_made_from() -> None:
    prefixes = install_prefixes(sys.executable)
    assert os.path.realpath(sys.prefix) in prefixes
    assert os.path.realpath(sys.base_prefix) in prefixes


def test_the_plan_mounts_what_checks_need_and_not_the_trees_around_it(tmp_path: Path) -> None:
    repository = Path(__file__).resolve().parents[2]
    plan = plan_mounts(
        workspace=str(tmp_path),
        executables=[sys.executable, "/bin/sh"],
        private=[str(repository)],
    )
    assert "/usr" in plan.read_only and "/etc/ld.so.cache" in plan.read_only
    assert os.path.realpath(sys.prefix) in plan.read_only
    assert os.path.realpath(sys.base_prefix) in plan.read_only
    for never in ("/", "/etc", "/root", "/home", "/var", "/run", str(repository)):
        assert never not in plan.read_only
    assert ("usr/bin", "/bin") in plan.symlinks or "/bin" in plan.read_only
    assert plan.workspace == os.path.realpath(tmp_path)
    assert plan.inside_path(f"{os.path.realpath(tmp_path)}/sub") == "/workspace/sub"


def test_a_mount_that_would_show_a_hidden_or_private_path_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "workspace" / "acme").mkdir(parents=True)
    (data / "workspace" / "globex" / "bin").mkdir(parents=True)
    tool = data / "workspace" / "globex" / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    hidden = [str(data), str(data / "workspace")]
    acme = str(data / "workspace" / "acme")
    refusals = [
        {"extra_read_only": [str(tmp_path)]},  # a folder above the data directory
        {"extra_read_only": ["/etc"]},  # all of /etc, shadow file included
        {"executables": [str(tool)]},  # an executable in another project's folder
    ]
    for options in refusals:
        with pytest.raises(SandboxUnavailable, match="no check may see"):
            plan_mounts(**{"workspace": acme, "executables": [], "hidden": hidden, **options})  # type: ignore[arg-type]
    with pytest.raises(SandboxUnavailable, match=f"would show {data}"):
        plan_mounts(workspace=str(tmp_path), executables=[], hidden=hidden)  # a workspace holding the data
    with pytest.raises(SandboxUnavailable, match="does not exist"):
        plan_mounts(workspace=acme, executables=[], extra_read_only=[str(tmp_path / "gone")])


# --- refusing to run unsandboxed ---


def test_without_bwrap_command_checks_are_refused_saying_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bubblewrap, "find_bwrap", lambda: None)
    policy = SandboxPolicy(workspace_root=tmp_path, allowed_executables=frozenset({"sh"}))
    result = run_command(touch_marker(tmp_path), policy)
    assert (result.passed, result.reason, result.exit_code) == (False, "sandbox_unavailable", None)
    assert "apt-get install bubblewrap" in result.output and "NEXUM_SANDBOX=none" in result.output
    assert not (tmp_path / "ran").exists()
    assert probe.sandbox_unavailable(policy) == result.output


def test_a_bwrap_that_cannot_build_the_sandbox_is_reported_in_its_own_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tempfile.TemporaryDirectory() as reachable:  # a root worker runs bwrap as the sandbox's host user
        os.chmod(reachable, 0o755)
        fake = Path(reachable, "bwrap")
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
        fake.chmod(0o755)
        monkeypatch.setattr(bubblewrap, "find_bwrap", lambda: str(fake))
        workspace = tmp_path / "ws"
        workspace.mkdir()
        policy = SandboxPolicy(workspace_root=workspace, allowed_executables=frozenset({"sh"}))
        result = run_command(touch_marker(workspace), policy)
    assert result.reason == "sandbox_unavailable"
    assert "No permissions to create a new namespace" in result.output
    assert "user namespaces must be allowed" in result.output
    assert not (workspace / "ran").exists()


def test_none_runs_unsandboxed_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bubblewrap, "find_bwrap", lambda: None)
    policy = SandboxPolicy(workspace_root=tmp_path, allowed_executables=frozenset({"sh"}), isolation="none")
    assert run_command(touch_marker(tmp_path), policy).reason == "passed"
    assert (tmp_path / "ran").exists()  # it wrote through the host's own path: nothing was hidden
    with pytest.raises(ValidationFailed, match="isolation must be one of bwrap, none"):
        SandboxPolicy(workspace_root=tmp_path, isolation="off")


def test_a_root_worker_without_a_pids_cgroup_refuses_checks_unless_the_limit_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_cgroup(configured: str | None = None) -> Path:
        raise CgroupUnavailable("no cgroup hierarchy with the pids controller is mounted")

    monkeypatch.setattr(probe, "find_parent", no_cgroup)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(bubblewrap, "probe", lambda bwrap, user=None: None)
    monkeypatch.setattr(bubblewrap, "find_bwrap", lambda: "/usr/bin/bwrap")
    policy = SandboxPolicy(workspace_root=tmp_path, allowed_executables=frozenset({"sh"}))
    result = run_command(touch_marker(tmp_path), policy)
    assert result.reason == "sandbox_unavailable"
    assert "does not enforce RLIMIT_NPROC" in result.output and "NEXUM_CHECK_MAX_PROCESSES=0" in result.output
    assert not (tmp_path / "ran").exists()
    unlimited = SandboxPolicy(
        workspace_root=tmp_path, allowed_executables=frozenset({"sh"}), max_processes=None
    )
    assert probe.sandbox_unavailable(unlimited) is None


@NEEDS_BWRAP
def test_the_probe_accepts_the_installed_bwrap() -> None:
    bwrap = bubblewrap.find_bwrap()
    assert bwrap is not None
    assert bubblewrap.probe(bwrap) is None


def test_a_pids_cgroup_per_check_is_limited_and_removed_with_the_orphans_of_dead_workers() -> None:
    if os.geteuid() != 0:
        pytest.skip("creating pids cgroups needs root (the only case where the sandbox uses them)")
    parent = find_parent()
    finished = subprocess.Popen(["true"])
    finished.wait()
    orphan = parent / f"check-{finished.pid}-leftover"  # the cgroup of a worker that died mid-check
    orphan.mkdir()
    cgroup = PidsCgroup.create(parent, 7)
    try:
        assert not orphan.exists()
        assert (cgroup.path / "pids.max").read_text().strip() == "7"
        assert cgroup.members() == []
    finally:
        assert cgroup.remove() == []
    assert not cgroup.path.exists()
