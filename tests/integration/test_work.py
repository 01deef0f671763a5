"""Work in flight (issue 13) without a worker: a request accepted while the broker is down, the dispatcher's
pacing, leases and their takeovers, fenced writes, ``nexum_requeue``, ``nexum_dispatcher`` and the stuck list.

The broker here is a stand-in whose ``up`` flag decides whether a publish raises what kombu raises for a
refused connection; the tests with a real worker, Redis and PostgreSQL are in ``test_faults.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError

from config.celery import app
from context_app.compilation.tasks import COMPILE, compile_requested
from context_app.resolution.models import Resolve, ResolveRequest
from context_app.resolution.services import resolve_requests
from context_app.resolution.services.resolve_requests import bundle_resolve_run
from context_app.resolution.tasks import RESOLVE, resolve_context, resolve_requested
from nexum.adapters.sandbox.groups import process_start_ticks
from nexum.core.errors import ValidationFailed
from nexum.eventstore.models import Event
from nexum.work import leases
from nexum.work.dispatch import dispatch_due
from nexum.work.models import Work
from nexum_web.webhooks.services import webhook_register
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tests.api.test_foundation_api import assert_error
from tests.integration.compile_world import load_catalog
from tests.integration.test_worker import ROOT, database_url_for_worker, wait_for
from verification_app import runner
from verification_app.models import CheckRun, CompletionRequest
from verification_app.services.completion_runs import completion_run
from verification_app.services.completions import completion_request
from verification_app.tasks import COMPLETION, run_completion


class StandInBroker:
    """Records what is sent while ``up``; raises kombu's connection error while down."""

    def __init__(self) -> None:
        self.up = False
        self.sent: list[tuple[str, tuple, dict | None]] = []

    def publisher(self, name: str):
        def apply_async(args=(), kwargs=None, **options):
            if not self.up:
                raise BrokerOperationalError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")
            self.sent.append((name, tuple(args or ()), kwargs))

        return apply_async


@pytest.fixture
def broker(monkeypatch):
    """A broker that is down until ``broker.up = True``; Celery is not eager (as with a real broker)."""
    stand_in = StandInBroker()
    app.conf.task_always_eager = False  # the conftest fixture restores it
    for task in (run_completion, compile_requested, resolve_requested):
        monkeypatch.setattr(task, "apply_async", stand_in.publisher(task.name))
    return stand_in


def started_task(project, contract: dict) -> Task:
    goal = goal_create(
        project_id=str(project.id),
        objective="Ship",
        tasks=[{"key": "s1", "objective": "Build"}],
        contracts={"s1": contract},
        actor="planner",
    )
    task = Task.objects.get(goal=goal, key="s1")
    return task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")


ECHO = {"checks": [{"kind": "command", "name": "unit", "argv": ["sh", "-c", "echo ok"]}]}


def pending_completion(project) -> CompletionRequest:
    task = started_task(project, ECHO)
    result = completion_request(
        project_id=str(project.id), task_id=str(task.id), answer="done", actor="agent"
    )
    assert result.outcome == "pending" and result.request is not None
    return result.request


def later(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


# --- the log is the outbox: accepted while the broker is down, sent by the dispatcher -----------------------


@pytest.mark.django_db
def test_a_completion_accepted_while_the_broker_is_down_is_202_and_the_dispatcher_sends_it(
    api, project, workspace, broker, settings, caplog, django_capture_on_commit_callbacks
):
    task = started_task(project, ECHO)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/tasks/{task.id}/complete", {"answer": "done"}, format="json")
    assert response.status_code == 202, response.content
    request_id = response.json()["completion"]["request_id"]
    assert response.json()["outcome"] == "pending"
    assert "could not send nexum.verification.run_completion" in caplog.text
    assert not CompletionRequest.objects.get(id=request_id).decided and broker.sent == []

    key = f"completion:{request_id}"
    assert dispatch_due().failed == [key]  # not in flight: the next pass tries; still down, not counted
    due = later(settings.NEXUM_DISPATCH_AFTER_S + 1)
    assert dispatch_due(now=due).failed == [key]  # still down: not counted, tried again next pass
    assert not Work.objects.filter(key=key).exists()

    broker.up = True
    assert dispatch_due(now=due).sent == [key]
    assert broker.sent == [("nexum.verification.run_completion", (request_id,), None)]  # the id alone
    work = Work.objects.get(key=key)
    assert work.sends == 1 and work.next_send_at == due + timedelta(seconds=settings.NEXUM_DISPATCH_AFTER_S)
    assert work.project_id == project.id  # every row knows its project
    assert dispatch_due(now=due + timedelta(seconds=1)).sent == []  # paced
    second = work.next_send_at + timedelta(seconds=1)
    assert dispatch_due(now=second).sent == [key]
    work.refresh_from_db()
    wait = min(2 * settings.NEXUM_DISPATCH_AFTER_S, settings.NEXUM_DISPATCH_BACKOFF_MAX_S)
    assert work.sends == 2 and work.next_send_at == second + timedelta(seconds=wait)


@pytest.mark.django_db
def test_a_compile_queued_while_the_broker_is_down_is_202_and_sent_by_the_dispatcher(
    api, project, workspace, broker, settings, django_capture_on_commit_callbacks
):
    load_catalog(str(project.id))
    task = started_task(project, ECHO)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            f"/api/v1/tasks/{task.id}/compile", {"model": "local", "async": True}, format="json"
        )
    assert response.status_code == 202, response.content
    request_id = response.json()["request_id"]
    assert api.get(f"/api/v1/compiles/{request_id}").json()["status"] == "queued"
    broker.up = True
    assert dispatch_due(now=later(settings.NEXUM_DISPATCH_AFTER_S + 1)).sent == [f"compile:{request_id}"]
    assert broker.sent == [("nexum.compile_context", (request_id,), None)]


@pytest.mark.django_db
def test_an_async_resolve_accepted_while_the_broker_is_down_is_202_and_the_dispatcher_sends_it(
    api, project, workspace, broker, settings, django_capture_on_commit_callbacks
):
    task = started_task(project, ECHO)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            f"/api/v1/tasks/{task.id}/resolve", {"async": True}, format="json", HTTP_IDEMPOTENCY_KEY="r-1"
        )
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "queued" and response.json()["request_id"] == "r-1"
    queued = ResolveRequest.objects.get(request_id="r-1")
    key = RESOLVE.key(queued.id)
    assert broker.sent == [] and dispatch_due().failed == [key]

    broker.up = True
    assert dispatch_due(now=later(settings.NEXUM_DISPATCH_AFTER_S + 1)).sent == [key]
    assert broker.sent == [("nexum.resolve_requested", (str(queued.id),), None)]
    # the same request again is the same queued resolve, and nothing more is written
    events = Event.objects.count()
    again = api.post(
        f"/api/v1/tasks/{task.id}/resolve", {"async": True}, format="json", HTTP_IDEMPOTENCY_KEY="r-1"
    )
    assert again.status_code == 202 and Event.objects.count() == events

    answered = bundle_resolve_run(queued_id=str(queued.id))  # the worker's side
    assert answered.status == "done" and answered.bundle_digest
    assert Resolve.objects.filter(task_id=task.id).count() == 1
    events = Event.objects.count()
    assert bundle_resolve_run(queued_id=str(queued.id)).status == "done"  # a redelivery writes nothing
    assert Event.objects.count() == events and Resolve.objects.filter(task_id=task.id).count() == 1
    shown = api.get(response.json()["url"]).json()
    assert (shown["status"], shown["resolve_id"]) == ("done", str(Resolve.objects.get(task_id=task.id).id))
    assert dispatch_due(now=later(settings.NEXUM_DISPATCH_BACKOFF_MAX_S + 60)).sent == []  # answered: done


@pytest.mark.django_db
def test_a_resolve_message_from_the_release_before_is_recorded_and_answered_once(
    api, project, workspace, broker, django_capture_on_commit_callbacks
):
    task = started_task(project, ECHO)
    message = (str(project.id), str(task.id), "r-old", "agent:coder")  # nexum.resolve_context's arguments
    broker.up = True
    with django_capture_on_commit_callbacks(execute=True):
        queued_id = resolve_context(*message)
    assert broker.sent == [("nexum.resolve_requested", (queued_id,), None)]
    events = Event.objects.count()
    assert resolve_context(*message) == queued_id and Event.objects.count() == events  # redelivered
    assert bundle_resolve_run(queued_id=queued_id).status == "done"
    shown = api.get("/api/v1/resolves/r-old").json()
    assert (shown["status"], shown["resolve_id"]) == ("done", str(Resolve.objects.get(task_id=task.id).id))


@pytest.mark.django_db
def test_a_queued_resolve_refused_when_it_runs_ends_failed_with_the_error(
    api, project, workspace, broker, monkeypatch
):
    task = started_task(project, ECHO)
    response = api.post(f"/api/v1/tasks/{task.id}/resolve", {"async": True}, format="json")
    assert response.status_code == 202, response.content

    def refused(**arguments):
        raise ValidationFailed("the task's goal was cancelled meanwhile", field="task_id")

    monkeypatch.setattr(resolve_requests, "bundle_resolve", refused)
    queued = ResolveRequest.objects.get(request_id=response.json()["request_id"])
    assert resolve_requests.bundle_resolve_run(queued_id=str(queued.id)).status == "failed"
    shown = api.get(response.json()["url"]).json()
    assert shown["status"] == "failed" and shown["error"] == {
        "code": "invalid",
        "message": "the task's goal was cancelled meanwhile",
        "field": "task_id",
    }
    assert_error(api.get("/api/v1/resolves/no-such-request"), 404, "not_found", field="request_id")


@pytest.mark.django_db
def test_the_dispatcher_leaves_leased_requests_alone_and_forgets_answered_ones(project, workspace, broker):
    request = pending_completion(project)
    key = COMPLETION.key(request.id)
    Work.objects.create(
        key=key, kind="completion", request_id=request.id, owner="elsewhere:1:a", expires_at=later(600)
    )
    broker.up = True
    assert dispatch_due(now=later(120)).sent == []
    Work.objects.filter(key=key).update(expires_at=later(-1))
    assert dispatch_due(now=later(120)).sent == [key]

    app.conf.task_always_eager = True
    completion_run(request_id=str(request.id))
    assert dispatch_due().cleaned == 1 and not Work.objects.filter(key=key).exists()


def test_a_projects_completions_beyond_its_cap_wait_their_turn_and_another_projects_are_sent_at_once(
    project, other_project, workspace, broker, settings, django_capture_on_commit_callbacks
):
    from nexum.work.dispatch import send_next

    settings.NEXUM_COMPLETION_IN_FLIGHT_PER_PROJECT = 2
    broker.up = True
    busy = [started_task(project, ECHO) for _ in range(3)]
    quiet = started_task(other_project, ECHO)

    def request(task: Task) -> str:
        with django_capture_on_commit_callbacks(execute=True):
            result = completion_request(
                project_id=str(task.project_id), task_id=str(task.id), answer="done", actor="agent"
            )
        assert result.request is not None
        return str(result.request.id)

    first, second, third = (request(task) for task in busy)
    other = request(quiet)
    assert [args[0] for _, args, _ in broker.sent] == [first, second, other]  # the third waits its turn
    assert dispatch_due().sent == []  # still no room for it

    # The first is answered (its lease row deleted with it): the worker that ran it sends the project's next.
    CompletionRequest.objects.filter(id=first).update(decided=True)
    Work.objects.filter(key=COMPLETION.key(first)).delete()
    assert send_next(COMPLETION, project.id).sent == [COMPLETION.key(third)]


# --- leases ----------------------------------------------------------------------------------------------


@pytest.fixture
def sleeper():
    """A live process of our own (its own session, as a check runs), killed at the end."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        process = subprocess.Popen(["sleep", "60"], start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def holder(
    request_id: str, process: subprocess.Popen, *, expires_in: float = 600, dies: bool = False, **fields
) -> Work:
    """A lease held by ``process`` in this process space (which dies afterwards when ``dies``)."""
    lease = {
        "owner": f"elsewhere:{process.pid}:abc",
        "host": "elsewhere",
        "process_space": leases.process_space(),
        "pid": process.pid,
        "pid_started": process_start_ticks(process.pid),
        "expires_at": later(expires_in),
    }
    key = COMPLETION.key(request_id)
    work = Work.objects.create(key=key, kind="completion", request_id=request_id, **{**lease, **fields})
    if dies:
        process.kill()
        process.wait(timeout=10)
    return work


@pytest.mark.django_db(transaction=True)
def test_a_live_lease_is_busy_until_it_expires_then_it_is_taken_over(sleeper):
    request_id = str(uuid.uuid4())
    holder(request_id, sleeper(), expires_in=30)
    with pytest.raises(leases.Busy) as busy:
        leases.acquire(COMPLETION, request_id)
    assert 29 < busy.value.retry_in_s <= 31
    Work.objects.update(expires_at=later(-1))
    lease = leases.acquire(COMPLETION, request_id)
    try:
        work = Work.objects.get()
        assert work.owner == lease.owner and work.pid == os.getpid() and work.takeovers == 1
        assert work.expires_at > later(0)
    finally:
        lease.close(answered=True)
    assert not Work.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_dead_holder_in_this_process_space_is_taken_over_at_once(sleeper):
    request_id = str(uuid.uuid4())
    holder(request_id, sleeper(), dies=True)
    leases.acquire(COMPLETION, request_id).close(answered=False)
    work = Work.objects.get()
    assert work.takeovers == 1 and work.owner == ""

    other_space = str(uuid.uuid4())
    Work.objects.all().delete()
    holder(other_space, sleeper(), dies=True, process_space="another boot/pid:[1]")
    with pytest.raises(leases.Busy):  # a pid of another process space says nothing
        leases.acquire(COMPLETION, other_space)


@pytest.mark.django_db(transaction=True)
def test_a_takeover_kills_the_check_a_dead_holder_left_running_before_it_runs(sleeper):
    request_id = str(uuid.uuid4())
    check = sleeper()
    holder(request_id, sleeper(), dies=True, check_name="unit", check_pid=check.pid,
           check_started=process_start_ticks(check.pid))  # fmt: skip
    lease = leases.acquire(COMPLETION, request_id)
    try:
        assert check.wait(timeout=1) == -signal.SIGKILL  # gone before acquire returned
    finally:
        lease.close(answered=False)


@pytest.mark.django_db(transaction=True)
def test_a_reused_pid_is_not_mistaken_for_the_leftover_check(sleeper):
    request_id = str(uuid.uuid4())
    unrelated = sleeper()
    holder(request_id, sleeper(), dies=True, check_name="unit", check_pid=unrelated.pid,
           check_started=process_start_ticks(unrelated.pid) + 1)  # fmt: skip
    leases.acquire(COMPLETION, request_id).close(answered=False)
    assert unrelated.poll() is None


@pytest.mark.django_db(transaction=True)
def test_this_process_takes_its_own_stale_lease_over_at_once(monkeypatch):
    request_id = str(uuid.uuid4())
    lease = leases.acquire(COMPLETION, request_id)

    def unreachable(self):
        raise OperationalError("server closed the connection unexpectedly")

    with monkeypatch.context() as patched:  # the database is down when the failed run releases it
        patched.setattr(leases.Lease, "_mine", unreachable)
        lease.close(answered=False)
    assert Work.objects.get().owner == lease.owner
    retry = leases.acquire(COMPLETION, request_id)  # the retry in the same process
    try:
        assert Work.objects.get().owner == retry.owner and Work.objects.get().takeovers == 1
    finally:
        retry.close(answered=True)


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_renews_the_lease_and_a_lost_lease_kills_its_running_check(settings, sleeper):
    settings.NEXUM_LEASE_TTL_S, settings.NEXUM_LEASE_HEARTBEAT_S = 3.0, 0.2
    lease = leases.acquire(COMPLETION, str(uuid.uuid4()))
    try:
        first = Work.objects.get().expires_at
        assert wait_for(lambda: Work.objects.get().expires_at > first, timeout=30), "never renewed"
        lease.before_check("unit")
        check = sleeper()
        lease.on_check_start(check.pid)
        assert Work.objects.get().check_pid == check.pid
        Work.objects.update(owner="thief")  # taken over
        assert check.wait(timeout=5) == -signal.SIGKILL
    finally:
        lease.close(answered=False)
    assert Work.objects.get().owner == "thief"


# --- fenced writes -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_lease_is_taken_over_midway_writes_nothing(project, workspace, broker):
    stolen = "tests.work.steal_the_lease"

    def steal() -> bool:  # a check during which another process takes the lease over
        Work.objects.update(owner="thief")
        return True

    runner.register_check_callable(stolen, steal)
    try:
        task = started_task(project, {"checks": [{"kind": "callable", "name": "c", "dotted_path": stolen}]})
        request = completion_request(
            project_id=str(project.id), task_id=str(task.id), answer="", actor="agent"
        ).request
        assert request is not None
        lease = leases.acquire(COMPLETION, str(request.id))
        assert Work.objects.get().project_id == project.id  # every row knows its project
        with pytest.raises(leases.LeaseLost):
            completion_run(request_id=str(request.id), lease=lease)
        lease.close(answered=False)
    finally:
        runner.unregister_check_callable(stolen)
    assert not CheckRun.objects.filter(request_id=request.id).exists()
    assert not CompletionRequest.objects.get(id=request.id).decided
    assert Work.objects.get().owner == "thief"


@pytest.mark.django_db
def test_a_database_error_during_a_check_stops_the_run_and_is_not_the_checks_failure(
    project, workspace, broker, monkeypatch
):
    request = pending_completion(project)

    def unreachable(project_id, **options):
        raise InterfaceError("connection already closed")

    monkeypatch.setattr(runner, "check_runner", unreachable)
    with pytest.raises(InterfaceError):
        completion_run(request_id=str(request.id))
    assert not CheckRun.objects.filter(request_id=request.id).exists()


def test_the_tasks_that_answer_requests_are_never_acknowledged_as_done_when_they_fail(settings):
    for task in (run_completion, compile_requested):
        assert task.acks_late and task.reject_on_worker_lost and task.acks_on_failure is False
        assert set(task.autoretry_for) == {OperationalError, InterfaceError}
        assert task.retry_backoff and not task.retry_jitter
        assert task.max_retries == settings.NEXUM_TASK_MAX_RETRIES
    visibility = app.conf.broker_transport_options["visibility_timeout"]
    assert visibility > settings.NEXUM_CHECK_MAX_TIMEOUT_S


# --- operators: nexum_requeue, nexum_dispatcher, the stuck list -------------------------------------------


@pytest.mark.django_db
def test_nexum_requeue_sends_a_pending_request_and_refuses_an_unknown_one(project, workspace, broker, capsys):
    request = pending_completion(project)
    with pytest.raises(CommandError, match="broker is unreachable"):
        call_command("nexum_requeue", "--request", str(request.id))
    broker.up = True
    call_command("nexum_requeue", "--request", str(request.id))
    assert f"sent completion:{request.id}" in capsys.readouterr().out
    assert Work.objects.get().sends == 1
    for unknown in (str(uuid.uuid4()), "not-an-id"):
        with pytest.raises(CommandError, match="no pending request"):
            call_command("nexum_requeue", "--request", unknown)


@pytest.mark.django_db
def test_nexum_requeue_stuck_sends_every_request_pending_past_its_lease(
    project, workspace, broker, settings, capsys
):
    request = pending_completion(project)
    broker.up = True
    call_command("nexum_requeue", "--stuck")
    assert "nothing is stuck" in capsys.readouterr().out  # younger than a lease
    settings.NEXUM_LEASE_TTL_S = 0.001
    call_command("nexum_requeue", "--stuck")
    assert f"sent completion:{request.id}" in capsys.readouterr().out


@pytest.mark.django_db
def test_without_a_broker_nexum_requeue_runs_the_request_in_process(project, workspace, broker, monkeypatch):
    request = pending_completion(project)
    monkeypatch.undo()  # the real tasks again, run in process
    app.conf.task_always_eager = True
    call_command("nexum_requeue", "--request", str(request.id))
    request.refresh_from_db()
    assert request.decided and request.outcome == "completed"
    assert not Work.objects.exists()


@pytest.mark.django_db
def test_the_dispatcher_needs_a_broker_and_once_sends_what_is_due(
    project, workspace, broker, settings, capsys
):
    request = pending_completion(project)
    broker.up = True
    settings.NEXUM_DISPATCH_AFTER_S = 0
    call_command("nexum_dispatcher", "--once")
    assert f"sent {COMPLETION.key(request.id)}" in capsys.readouterr().out
    app.conf.task_always_eager = True
    with pytest.raises(CommandError, match="CELERY_BROKER_URL is not set"):
        call_command("nexum_dispatcher", "--once")


def started_dispatcher(log: Path) -> subprocess.Popen:
    """``nexum_dispatcher`` in a process of its own on the test database, once it says it started. Its broker
    is never reached: nothing here is due to be sent."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_worker(),
        "CELERY_BROKER_URL": "redis://127.0.0.1:9/0",
        "PYTHONPATH": str(ROOT),
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "nexum_dispatcher", "--interval", "600"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    assert wait_for(lambda: "dispatcher started" in log.read_text() or process.poll() is not None, 60)
    assert process.poll() is None, log.read_text()
    return process


def stopped(process: subprocess.Popen, within: float) -> bool:
    try:
        process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False
    return True


@pytest.mark.django_db(transaction=True)
def test_two_sigterms_in_a_row_stop_the_dispatcher_at_once_whatever_its_interval(tmp_path):
    """``deploy/serve.sh`` once sent every process two SIGTERMs; the dispatcher's handler then deadlocked on
    the lock of the threading.Event it set."""
    log = tmp_path / "dispatcher.log"
    dispatcher = started_dispatcher(log)
    dispatcher.send_signal(signal.SIGTERM)
    dispatcher.send_signal(signal.SIGTERM)
    assert stopped(dispatcher, within=30), log.read_text()
    assert dispatcher.returncode == 0, log.read_text()
    assert "dispatcher stopped" in log.read_text()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_pass_blocked_on_a_lock_ends_on_a_second_signal_and_its_query_is_cancelled(
    project, settings, tmp_path
):
    if connection.vendor != "postgresql":
        pytest.skip("a row lock that blocks another session's SELECT … FOR UPDATE is PostgreSQL's")
    settings.NEXUM_SOURCE_HTTP_ALLOW = ["127.0.0.1:9"]
    hook = webhook_register(project_id=str(project.id), url="http://127.0.0.1:9/h", actor="test").webhook
    table = hook._meta.db_table
    blocked = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        " AND query LIKE %s"
    )

    def waiting_on_the_webhook() -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute(blocked, [f"%{table}%FOR UPDATE%"])
            return [row[0] for row in cursor.fetchall()]

    with psycopg.connect(database_url_for_worker()) as holder:  # another session holds the webhook's row
        holder.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [hook.id])
        log = tmp_path / "dispatcher.log"
        dispatcher = started_dispatcher(log)
        assert wait_for(waiting_on_the_webhook, 30), log.read_text()  # its first pass waits for the row
        dispatcher.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            dispatcher.wait(timeout=1)  # the first signal lets the pass finish, and the pass cannot
        dispatcher.send_signal(signal.SIGTERM)
        assert stopped(dispatcher, within=30), log.read_text()
        assert wait_for(lambda: not waiting_on_the_webhook(), 10)  # its query was cancelled in the server
        holder.rollback()
    output = log.read_text()
    assert dispatcher.returncode == 0, output
    assert "dispatcher stopped during a pass" in output and 'dispatcher stopped"' in output


@pytest.mark.django_db
def test_the_admin_dashboard_lists_requests_stuck_past_their_lease(
    admin_client, project, workspace, broker, settings
):
    request = pending_completion(project)
    load_catalog(str(project.id))
    queued = COMPILE.model.objects.filter(status="queued")
    assert not queued.exists()
    assert "Stuck requests" not in admin_client.get("/admin/").content.decode()
    settings.NEXUM_LEASE_TTL_S = 0.001
    page = admin_client.get("/admin/").content.decode()
    assert "Stuck requests" in page and str(request.id)[:8] in page and "nexum_requeue --stuck" in page
    Work.objects.create(
        key=COMPLETION.key(request.id), kind="completion", request_id=request.id, owner="w:1:a",
        expires_at=later(60),
    )  # fmt: skip
    assert "Stuck requests" not in admin_client.get("/admin/").content.decode()  # a live lease: running
