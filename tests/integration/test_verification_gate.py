"""The verification gate through its services (SPEC V1–V8): contracts, the real sandbox, decisions."""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connections

from context_app.world.services.facts import fact_record
from context_app.world.services.records import artifact_record
from context_app.world.services.scopes import Scope
from nexum.core.errors import DomainError
from nexum.eventstore import projections
from nexum.eventstore.models import Event
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_block, task_start
from tests.conftest import NEEDS_BWRAP
from verification_app import runner, selectors
from verification_app.models import CheckRun
from verification_app.services import completion_runs
from verification_app.services.completion_runs import completion_run
from verification_app.services.completions import CompletionResult, completion_request
from verification_app.services.contracts import contract_register

PYTHON = sys.executable
# 'sleep 600' with a value no other process uses (not even a parallel run of this suite), so survivors can be
# found by their command line.
SLEEP_MARK = f"600.{os.getpid()}{secrets.randbelow(10**6):06d}"


@pytest.fixture
def workspace(tmp_path, settings, project) -> Path:
    """The project's own folder inside a fresh workspace root (where its checks run)."""
    root = tmp_path / "workspace"
    settings.NEXUM_WORKSPACE_ROOT = root
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.NEXUM_CHECK_EXECUTABLES = [PYTHON, "sh", "true", "false"]
    return runner.workspace_folder(str(project.id))


@pytest.fixture
def calls():
    """Registered callables that count their calls."""
    counted: list[str] = []

    def passing() -> bool:
        counted.append("pass")
        return True

    def raising() -> bool:
        counted.append("raise")
        raise RuntimeError("sandbox down")

    runner.register_check_callable("tests.checks:passing", passing)
    runner.register_check_callable("tests.checks:raising", raising)
    yield counted
    runner.unregister_check_callable("tests.checks:passing")
    runner.unregister_check_callable("tests.checks:raising")


def command(name: str, *argv: str, cwd: str = ".", timeout_s: float = 60) -> dict:
    return {"kind": "command", "name": name, "argv": list(argv), "cwd": cwd, "timeout_s": timeout_s}


def callable_check(name: str, path: str) -> dict:
    return {"kind": "callable", "name": name, "dotted_path": path}


def running_task(project, contract: dict | None = None, *, start: bool = True) -> Task:
    goal = goal_create(
        project_id=str(project.id),
        objective="Ship",
        tasks=[{"key": "s1", "objective": "Make the tests pass"}],
        contracts={"s1": contract} if contract is not None else None,
        actor="planner",
    )
    task = Task.objects.get(goal=goal, key="s1")
    if start:
        task = task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
    return task


def complete(task: Task, answer: str = "all tests pass") -> CompletionResult:
    return completion_request(
        project_id=str(task.project_id), task_id=str(task.id), answer=answer, actor="agent"
    )


def state(task: Task) -> str:
    return Task.objects.get(id=task.id).state


# --- the seed's semantics, one test each ----------------------------------------------------------------


@pytest.mark.django_db
def test_running_task_with_passing_checks_completes(project, workspace, calls):
    (workspace / "report.txt").write_text("coverage: 93%\n")
    task = running_task(
        project,
        {
            "checks": [
                command("true", "true"),
                {"kind": "file_exists", "name": "report", "path": "report.txt"},
                {
                    "kind": "file_matches",
                    "name": "coverage",
                    "path": "report.txt",
                    "pattern": r"coverage: 9\d%",
                },
                callable_check("callable", "tests.checks:passing"),
            ]
        },
    )
    result = complete(task)
    assert (result.outcome, result.reason) == ("completed", "all 4 checks passed")
    assert state(task) == "completed"
    runs = list(selectors.request_check_runs(request=result.request))
    assert [(run.name, run.reason, run.exit_code) for run in runs] == [
        ("true", "passed", 0),
        ("report", "passed", None),
        ("coverage", "passed", None),
        ("callable", "passed", None),
    ]
    assert calls == ["pass"]
    transition = Task.objects.get(id=task.id).transitions.order_by("-position").first()
    assert (transition.actor, transition.decision_id) == ("gate", str(result.request.id))


@pytest.mark.django_db
def test_a_task_that_is_not_running_is_skipped_and_no_check_runs(project, workspace, calls):
    task = running_task(project, {"checks": [callable_check("c", "tests.checks:passing")]}, start=False)
    before = Event.objects.count()
    result = complete(task)
    assert result.outcome == "skipped" and result.request is None
    assert "'pending'" in result.reason
    assert calls == [] and Event.objects.count() == before and state(task) == "pending"


@pytest.mark.django_db
def test_an_empty_contract_refuses_completion(project, workspace):
    task = running_task(project)
    result = complete(task)
    assert (result.outcome, result.reason) == ("failed", "no checks registered")
    assert state(task) == "failed"
    task2 = running_task(project, {"checks": []})
    assert complete(task2).outcome == "failed"


@pytest.mark.django_db
def test_require_checks_false_completes_without_checks(project, workspace):
    task = running_task(project, {"checks": [], "require_checks": False})
    assert complete(task).outcome == "completed"
    assert state(task) == "completed"


@pytest.mark.django_db
def test_a_raising_check_fails_the_task(project, workspace, calls):
    task = running_task(project, {"checks": [callable_check("flaky", "tests.checks:raising")]})
    result = complete(task)
    assert result.outcome == "failed" and "flaky (raised)" in result.reason
    run = CheckRun.objects.get(request=result.request)
    assert run.reason == "raised" and "sandbox down" in selectors.stored_text(run.output_sha256)
    assert state(task) == "failed"


@pytest.mark.django_db
def test_on_failure_blocked_blocks_the_task(project, workspace):
    task = running_task(project, {"checks": [command("false", "false")], "on_failure": "blocked"})
    result = complete(task)
    assert result.outcome == "blocked" and state(task) == "blocked"


@pytest.mark.django_db
def test_the_reason_lists_every_failing_check(project, workspace):
    task = running_task(
        project,
        {
            "checks": [
                command("unit", "false"),
                command("lint", "true"),
                {"kind": "file_exists", "name": "docs", "path": "docs/index.md"},
            ]
        },
    )
    result = complete(task)
    assert result.reason == "2 of 3 checks failed: unit (exit_nonzero), docs (missing_file)"
    assert result.request.failing_checks == ["unit", "docs"]


# --- a real command check -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_real_pytest_suite_fails_then_passes_and_the_answer_changes_nothing(project, workspace):
    proj = workspace / "proj"
    proj.mkdir()
    (proj / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (proj / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    pytest_check = command("pytest", PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd="proj")
    task = running_task(project, {"checks": [pytest_check]})

    refused = complete(task, answer="all tests pass")
    assert refused.outcome == "failed" and "pytest (exit_nonzero)" in refused.reason
    run = CheckRun.objects.get(request=refused.request)
    assert run.exit_code == 1 and "1 failed" in selectors.stored_text(run.output_sha256)
    assert run.argv == [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"]

    (proj / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    task = task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
    completed = complete(task, answer="all tests pass")
    assert completed.outcome == "completed" and state(task) == "completed"
    run = CheckRun.objects.get(request=completed.request)
    assert run.exit_code == 0 and "1 passed" in selectors.stored_text(run.output_sha256)
    assert selectors.stored_text(completed.request.answer_sha256) == "all tests pass"


def _live_sleepers() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if cmdline[:2] == [b"sleep", SLEEP_MARK.encode()] and status[status.rfind(")") + 2] not in "ZX":
            found.append(int(entry))
    return found


@pytest.mark.django_db
def test_a_timeout_kills_the_whole_group_and_is_recorded(project, workspace):
    script = f"sleep {SLEEP_MARK} & sleep {SLEEP_MARK}"
    task = running_task(project, {"checks": [command("hang", "sh", "-c", script, timeout_s=2)]})
    started = time.monotonic()
    result = complete(task)
    assert time.monotonic() - started < 60  # well under the 600 s its sleepers would run
    run = CheckRun.objects.get(request=result.request)
    assert (result.outcome, run.reason) == ("failed", "timeout")
    assert "timed out after 2s" in selectors.stored_text(run.output_sha256)
    assert _live_sleepers() == []


# --- the allowlist and the workspace --------------------------------------------------------------------


@pytest.mark.django_db
def test_an_executable_off_the_allowlist_is_refused_at_registration_and_at_run_time(
    project, workspace, settings
):
    task = running_task(project)
    before = Event.objects.count()
    with pytest.raises(DomainError) as refused:
        contract_register(
            project_id=str(project.id),
            task_id=str(task.id),
            contract={"checks": [command("curl", "curl", "http://example.com")]},
            actor="planner",
        )
    assert (refused.value.code, refused.value.kind) == ("denied_executable", "refused")
    assert refused.value.field == "contract.checks[0].argv[0]"
    assert Event.objects.count() == before

    contract_register(
        project_id=str(project.id),
        task_id=str(task.id),
        contract={"checks": [command("touch", "sh", "-c", "touch ran")]},
        actor="planner",
    )
    settings.NEXUM_CHECK_EXECUTABLES = [PYTHON]  # the operator removed sh
    result = complete(task)
    run = CheckRun.objects.get(request=result.request)
    assert (result.outcome, run.reason, run.exit_code) == ("failed", "denied_executable", None)
    assert not (workspace / "ran").exists()


@pytest.mark.django_db
def test_a_working_directory_outside_the_workspace_is_refused(project, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "escape").symlink_to(outside)
    (workspace / "inside").mkdir()
    task = running_task(project)
    for cwd in ("..", "inside/../..", "escape", str(outside)):
        with pytest.raises(DomainError) as refused:
            contract_register(
                project_id=str(project.id),
                task_id=str(task.id),
                contract={"checks": [command("true", "true", cwd=cwd)]},
                actor="planner",
            )
        assert refused.value.code == "workspace_violation", cwd
        assert refused.value.field == "contract.checks[0].cwd"
    # Registered while the link pointed inside; repointed outside before the run: refused when it runs.
    (workspace / "moving").symlink_to(workspace / "inside")
    contract_register(
        project_id=str(project.id),
        task_id=str(task.id),
        contract={"checks": [command("true", "true", cwd="moving")]},
        actor="planner",
    )
    (workspace / "moving").unlink()
    (workspace / "moving").symlink_to(outside)
    result = complete(task)
    assert CheckRun.objects.get(request=result.request).reason == "workspace_violation"


# --- the sandbox: one project's check against another's workspace, a missing sandbox, patterns ----------


@NEEDS_BWRAP
@pytest.mark.django_db
def test_project_a_cannot_see_or_write_project_b_workspace(project, other_project, workspace):
    theirs = runner.workspace_folder(str(other_project.id))
    (theirs / "secret.txt").write_text("globex only\n")
    probe = (
        f"cat {theirs}/secret.txt /workspace/../{other_project.slug}/secret.txt peek/secret.txt;"
        f" touch {theirs}/planted /workspace/../{other_project.slug}/planted peek/planted; ls /workspace/..;"
        " echo probed"
    )
    contract = {
        "checks": [
            command("probe", "sh", "-c", probe),
            {"kind": "file_matches", "name": "peek", "path": "peek/secret.txt", "pattern": "globex"},
        ]
    }
    task = running_task(project, contract)
    (workspace / "peek").symlink_to(theirs)  # after registration, which would refuse the file check
    result = complete(task)
    runs = {run.name: run for run in CheckRun.objects.filter(request=result.request)}
    output = selectors.stored_text(runs["probe"].output_sha256)
    assert "probed" in output and "globex only" not in output, output
    listing = [line for line in output.splitlines() if ":" not in line]  # ls /workspace/.. : the root
    assert "workspace" in listing and other_project.slug not in listing
    assert sorted(path.name for path in theirs.iterdir()) == ["secret.txt"]
    assert runs["peek"].reason == "workspace_violation"  # the link leaves the project's folder
    their_task = running_task(other_project, {"checks": [command("own", "sh", "-c", "cat secret.txt")]})
    own = CheckRun.objects.get(request=complete(their_task).request)
    assert selectors.stored_text(own.output_sha256) == "globex only\n"  # the probe reads what is there


@pytest.mark.django_db
def test_without_a_sandbox_a_command_check_fails_with_sandbox_unavailable(
    project, workspace, monkeypatch, settings
):
    from nexum.adapters.sandbox import bubblewrap

    settings.NEXUM_SANDBOX = "bwrap"  # the default, whatever this machine's test run uses
    monkeypatch.setattr(bubblewrap, "find_bwrap", lambda: None)
    task = running_task(project, {"checks": [command("marker", "sh", "-c", "touch ran")]})  # registered
    result = complete(task)
    run = CheckRun.objects.get(request=result.request)
    assert (result.outcome, run.reason) == ("failed", "sandbox_unavailable")
    assert "marker (sandbox_unavailable)" in result.reason
    assert "apt-get install bubblewrap" in selectors.stored_text(run.output_sha256)
    assert not (workspace / "ran").exists()


def test_manage_py_check_says_when_checks_cannot_be_sandboxed(settings, monkeypatch):
    from io import StringIO

    from django.core.management import call_command

    from nexum.adapters.sandbox import bubblewrap
    from verification_app.system_checks import sandbox_ready

    settings.NEXUM_SANDBOX = "bwrap"
    monkeypatch.setattr(bubblewrap, "find_bwrap", lambda: None)
    said = StringIO()
    call_command("check", stderr=said)
    assert "nexum.W001" in said.getvalue() and "apt-get install bubblewrap" in said.getvalue()
    settings.NEXUM_SANDBOX = "none"
    assert [message.id for message in sandbox_ready()] == ["nexum.W002"]
    settings.NEXUM_SANDBOX = "off"
    assert [message.id for message in sandbox_ready()] == ["nexum.E004"]


@pytest.mark.django_db
def test_a_root_worker_without_a_host_user_says_so_at_start_and_runs_no_command_check(
    project, workspace, monkeypatch, settings
):
    from nexum.adapters.sandbox import bubblewrap
    from verification_app.system_checks import sandbox_ready

    settings.NEXUM_SANDBOX = "bwrap"
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # as `make run` and CI as root are
    monkeypatch.setattr(bubblewrap, "probe", lambda bwrap, user=None: None)
    monkeypatch.setattr(bubblewrap, "find_bwrap", lambda: "/usr/bin/bwrap")
    assert sandbox_ready() == []  # the default host user (65534) is in place
    settings.NEXUM_SANDBOX_HOST_UID = None  # NEXUM_SANDBOX_HOST_UID=0: no user to drop to
    [warning] = sandbox_ready()
    assert warning.id == "nexum.W001" and "NEXUM_SANDBOX_HOST_UID" in warning.msg, warning.msg
    task = running_task(project, {"checks": [command("marker", "sh", "-c", "touch ran")]})
    result = complete(task)
    run = CheckRun.objects.get(request=result.request)
    assert (result.outcome, run.reason) == ("failed", "sandbox_unavailable")
    assert "would belong to host root" in selectors.stored_text(run.output_sha256)
    assert not (workspace / "ran").exists()


@NEEDS_BWRAP
@pytest.mark.django_db
def test_the_project_folder_is_given_to_the_sandbox_user_and_a_check_owns_what_it_makes(project, workspace):
    if os.geteuid() != 0:
        pytest.skip("only a root worker gives the folder to another user")
    task = running_task(
        project, {"checks": [command("plant", "sh", "-c", "cp /bin/sh owned && chmod 4755 owned")]}
    )
    assert complete(task).outcome == "completed"
    assert (workspace.stat().st_uid, workspace.stat().st_gid) == (65534, 65534)
    planted = (workspace / "owned").stat()
    assert (planted.st_uid, planted.st_mode & 0o6000) == (65534, 0)


@pytest.mark.django_db
def test_a_catastrophic_pattern_ends_at_once(project, workspace):
    (workspace / "input.txt").write_text("a" * 40 + "!")
    task = running_task(project, start=False)
    scope = Scope(project_id=str(project.id), goal_id=str(task.goal_id), task_id=str(task.id))
    item = artifact_record(scope=scope, summary="x", content=b"a" * 40 + b"!", actor="ci")
    contract_register(
        project_id=str(project.id),
        task_id=str(task.id),
        contract={
            "checks": [
                {"kind": "file_matches", "name": "file", "path": "input.txt", "pattern": "^(a+)+$"},
                {"kind": "artifact_matches", "name": "artifact", "artifact_digest": item.content_sha256,
                 "pattern": "^(a+)+$"},
            ]
        },
        actor="planner",
    )  # fmt: skip
    task = task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
    started = time.monotonic()
    result = complete(task)
    assert time.monotonic() - started < 60  # a backtracking engine needs about 2**40 steps: hours
    runs = {
        run.name: (run.reason, run.duration_ms) for run in CheckRun.objects.filter(request=result.request)
    }
    assert {name: reason for name, (reason, _) in runs.items()} == {
        "file": "no_match",
        "artifact": "no_match",
    }
    assert all(duration < 60_000 for _, duration in runs.values())


@pytest.mark.django_db
def test_a_stored_contract_that_todays_rules_refuse_fails_the_task_with_the_reason(
    project, workspace, monkeypatch
):
    """A contract registered under older rules (a lookaround pattern, before checks moved to RE2) ends its
    completion request with a failed decision that says why, rather than leaving it pending."""
    from nexum.core.verification.checks import file_matches

    (workspace / "report.txt").write_text("coverage: 93%\n")
    with monkeypatch.context() as older_rules:
        older_rules.setattr(file_matches, "require_pattern", lambda pattern: pattern)
        task = running_task(
            project,
            {"checks": [{"kind": "file_matches", "name": "lookahead", "path": "report.txt",
                         "pattern": "coverage(?=:)"}]},
        )  # fmt: skip

    result = complete(task)

    assert result.outcome == "failed"
    assert state(task) == "failed"
    assert "contract revision 1 can no longer be run (checks[0]: pattern is not a regular expression RE2" in (
        result.reason
    )
    assert "an operator must register a new contract" in result.reason
    assert not CheckRun.objects.filter(request=result.request).exists()


# --- V8: untrusted content cannot define a contract -----------------------------------------------------


@pytest.mark.django_db
def test_untrusted_content_cannot_register_or_change_a_contract(project, workspace):
    task = running_task(project, start=False)
    scope = Scope(project_id=str(project.id), goal_id=str(task.goal_id), task_id=str(task.id))
    web = fact_record(scope=scope, text="a web page", trust_class="untrusted_retrieved", actor="resolver")
    repo = fact_record(scope=scope, text="the README", trust_class="repository_authored", actor="resolver")
    contract = {"checks": [], "require_checks": False}
    before = Event.objects.count()
    for kwargs in ({"trust_class": "untrusted_retrieved"}, {"derived_from": [str(repo.id), str(web.id)]}):
        with pytest.raises(DomainError) as refused:
            contract_register(
                project_id=str(project.id), task_id=str(task.id), contract=contract, actor="a", **kwargs
            )
        assert (refused.value.code, refused.value.kind) == ("untrusted_content", "refused")
    with pytest.raises(DomainError) as refused:
        goal_create(
            project_id=str(project.id),
            objective="x",
            tasks=[{"key": "s1", "objective": "y"}],
            contracts={"s1": contract},
            contract_origin={"derived_from": [str(web.id)]},
            actor="a",
        )
    assert refused.value.code == "untrusted_content"
    assert Event.objects.count() == before
    registered = contract_register(
        project_id=str(project.id),
        task_id=str(task.id),
        contract=contract,
        derived_from=[str(repo.id)],
        actor="a",
    )
    assert (registered.revision, registered.trust_class) == (1, "repository_authored")


@pytest.mark.django_db
def test_a_running_tasks_contract_cannot_be_replaced(project, workspace):
    task = running_task(project, {"checks": [command("false", "false")]})
    with pytest.raises(DomainError) as refused:
        contract_register(
            project_id=str(project.id),
            task_id=str(task.id),
            contract={"checks": [], "require_checks": False},
            actor="agent",
        )
    assert refused.value.code == "contract_frozen"


# --- artifacts, idempotency, concurrency ----------------------------------------------------------------


@pytest.mark.django_db
def test_artifact_matches_reads_the_projects_artifact_by_digest(project, other_project, workspace):
    task = running_task(project, start=False)
    scope = Scope(project_id=str(project.id), goal_id=str(task.goal_id), task_id=str(task.id))
    item = artifact_record(scope=scope, summary="results", content=b"37 passed, 0 failed", actor="ci")
    other_goal = running_task(other_project, start=False)
    other_scope = Scope(project_id=str(other_project.id), goal_id=str(other_goal.goal_id), task_id=None)
    secret = artifact_record(scope=other_scope, summary="x", content=b"secret 0 failed", actor="ci")
    contract_register(
        project_id=str(project.id),
        task_id=str(task.id),
        contract={
            "checks": [
                {"kind": "artifact_matches", "name": "green", "artifact_digest": item.content_sha256,
                 "pattern": r"\b0 failed"},
                {"kind": "artifact_matches", "name": "probe", "artifact_digest": secret.content_sha256,
                 "pattern": "secret"},
            ]
        },
        actor="planner",
    )  # fmt: skip
    task = task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
    result = complete(task)
    runs = {run.name: run.reason for run in CheckRun.objects.filter(request=result.request)}
    assert runs == {"green": "passed", "probe": "missing_file"}  # another project's content is not there


@pytest.fixture
def queued():
    """Celery not eager: requests are recorded and left pending (the on-commit enqueue never fires inside
    the test's transaction), so a test can play the worker by hand."""
    from config.celery import app

    app.conf.task_always_eager = False
    yield
    app.conf.task_always_eager = True


@pytest.mark.django_db
def test_a_redelivered_run_reuses_recorded_check_runs_and_decides_once(
    project, workspace, calls, queued, monkeypatch
):
    contract = {
        "checks": [callable_check("a", "tests.checks:passing"), callable_check("b", "tests.checks:passing")]
    }
    task = running_task(project, contract)
    pending = complete(task)
    assert pending.outcome == "pending" and state(task) == "running"
    request_id = str(pending.request.id)

    def killed(*args, **kwargs):
        raise SystemExit("worker killed after running the checks")

    monkeypatch.setattr(completion_runs, "_decide", killed)
    with pytest.raises(SystemExit):
        completion_run(request_id=request_id)
    assert calls == ["pass", "pass"] and CheckRun.objects.filter(request_id=request_id).count() == 2
    monkeypatch.undo()

    decided = completion_run(request_id=request_id)  # the redelivery
    assert decided.outcome == "completed" and calls == ["pass", "pass"]
    before = Event.objects.count()
    assert completion_run(request_id=request_id).outcome == "completed"  # and once more
    assert Event.objects.count() == before
    assert Event.objects.filter(stream_id=f"completion-{request_id}", event_type="GateDecided").count() == 1
    assert state(task) == "completed"


@pytest.mark.django_db
def test_a_request_whose_task_moved_on_is_skipped_without_running_checks(project, workspace, calls, queued):
    task = running_task(project, {"checks": [callable_check("a", "tests.checks:passing")]})
    pending = complete(task)
    task_block(project_id=str(project.id), task_id=str(task.id), actor="operator")
    decided = completion_run(request_id=str(pending.request.id))
    assert decided.outcome == "skipped" and "moved on" in decided.reason
    assert calls == [] and state(task) == "blocked"


@pytest.mark.django_db
def test_a_second_request_while_one_is_pending_is_409(project, workspace, queued):
    task = running_task(project, {"checks": [command("true", "true")]})
    first = complete(task)
    with pytest.raises(DomainError) as refused:
        complete(task, answer="again")
    assert refused.value.code == "completion_pending"
    assert refused.value.details["request_id"] == str(first.request.id)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_completions_produce_exactly_one_decision(project, workspace):
    task = running_task(project, {"checks": [command("slow", "sh", "-c", "sleep 0.3")]})
    barrier = threading.Barrier(2)

    def attempt(answer: str) -> str:
        try:
            barrier.wait()
            return complete(task, answer=answer).outcome
        except DomainError as error:
            return error.code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = sorted(pool.map(attempt, ["one", "two"]))
    assert outcomes in (["completed", "completion_pending"], ["completed", "skipped"])
    assert Event.objects.filter(event_type="GateDecided").count() == 1
    assert Event.objects.filter(event_type="TaskCompleted").count() == 1
    assert state(task) == "completed"


# --- read side ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_latest_check_runs_for_the_compile_service(project, workspace):
    task = running_task(project, {"checks": [command("unit", "sh", "-c", "echo 2 failed; exit 1")]})
    assert selectors.latest_check_runs(task_id=task.id) == []
    complete(task)
    rows = selectors.latest_check_runs(task_id=task.id)
    assert [(r["name"], r["passed"], r["reason"]) for r in rows] == [("unit", False, "exit_nonzero")]
    assert rows[0]["output"] == "2 failed\n"
    fresh = running_task(project)
    assert selectors.latest_check_runs(task_id=fresh.id) == []


@pytest.mark.django_db
def test_rebuilt_verification_read_models_equal_the_live_ones(project, workspace, calls):
    task = running_task(project, {"checks": [command("false", "false")]})
    complete(task)
    contract_register(
        project_id=str(project.id),
        task_id=str(task.id),
        contract={"checks": [callable_check("c", "tests.checks:passing")]},
        actor="planner",
    )
    task = task_start(project_id=str(project.id), task_id=str(task.id), actor="a")
    complete(task)
    skipped = running_task(project, {"checks": []}, start=False)
    complete(skipped)
    live = projections.snapshot()
    assert live["verification_app_checkrun"] and live["verification_app_completionrequest"]
    assert live["verification_app_contract"]
    projections.rebuild()
    assert projections.snapshot() == live
