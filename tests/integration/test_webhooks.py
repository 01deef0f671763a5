"""Signed webhooks (issue 18): an operator registers a URL on the allowlist and gets its secret once; each
event of the project's log is then POSTed to it, signed, retried with backoff after a failure, and a receiver
on 127.0.0.1 that verifies every signature sees each event once despite an injected 500.

Issue 23: deliveries are sent at most ``NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT`` of a project's at a time, on a
queue of their own, so with real workers 10,000 deliveries queued for one project to a slow receiver delay
neither another project's completion (decided within 5 s) nor its deliveries; an attempt is counted before
it is sent, so a worker SIGKILLed mid-request is followed by attempt 2 with the same ``Nexum-Delivery-Id``."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings as django_settings
from nexum_client.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, InvalidSignature, verify

from nexum.eventstore import reading, store
from nexum.eventstore.models import Event
from nexum.work.dispatch import dispatch_due
from tests.integration import test_faults
from tests.integration.test_faults import environment, manage, worker_argv
from tests.integration.test_worker import database_url_for_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    """An HTTP receiver on 127.0.0.1 that answers 500 to its first ``fail_first`` requests, then checks the
    signature (400 when bad) and accepts, keeping each event id it accepted (duplicates too)."""

    def __init__(self, fail_first: int = 1) -> None:
        self.secret = ""
        self.fail_first = fail_first
        self.requests: list[dict[str, Any]] = []
        self.accepted: list[int] = []
        self.bad_signatures = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.requests.append({"headers": dict(self.headers), "body": body})
                    failing = len(receiver.requests) <= receiver.fail_first
                    status = 500 if failing else receiver.check(body, self.headers)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/nexum"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def check(self, body: bytes, headers: Any) -> int:
        try:
            verify(self.secret, body, headers[SIGNATURE_HEADER])
        except InvalidSignature:
            self.bad_signatures += 1
            return 400
        event_id = int(headers[EVENT_ID_HEADER])
        assert json.loads(body)["event"]["position"] == event_id
        self.accepted.append(event_id)
        return 200


@pytest.fixture
def receiver(settings) -> Iterator[Receiver]:
    receiver = Receiver()
    settings.NEXUM_SOURCE_HTTP_ALLOW = [f"127.0.0.1:{receiver.port}"]
    settings.NEXUM_WEBHOOK_BACKOFF_S = 0
    settings.NEXUM_DISPATCH_AFTER_S = 0
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()
    receiver.thread.join(timeout=5)


def register(operator_api, url: str) -> dict[str, Any]:
    answer = operator_api.post("/api/v1/webhooks", {"url": url, "description": "ci"}, format="json")
    assert answer.status_code == 201, answer.json()
    return answer.json()


def write_some_events(api) -> None:
    goal = api.post(
        "/api/v1/goals", {"objective": "Ship", "tasks": [{"key": "a", "objective": "Do it"}]}, format="json"
    ).json()
    task_id = goal["tasks"][0]["id"]
    for text in ("the spec expects 401", "tokens expire after 15 minutes"):
        assert api.post(f"/api/v1/tasks/{task_id}/facts", {"text": text}, format="json").status_code == 201
    assert api.post(f"/api/v1/tasks/{task_id}/start", {}, format="json").status_code == 200


def dispatch_until_delivered(passes: int = 10) -> None:
    from nexum_web.webhooks.models import PENDING, WebhookDelivery

    for _ in range(passes):
        dispatch_due()
        if not WebhookDelivery.objects.filter(state=PENDING).exists():
            return
    raise AssertionError("deliveries still pending after the passes")


def test_each_event_reaches_the_receiver_once_signed_despite_a_failed_attempt(
    api, operator_api, project, receiver
):
    from nexum_web.webhooks.models import DELIVERED, WebhookDelivery

    webhook = register(operator_api, receiver.url)
    receiver.secret = webhook["secret"]
    assert webhook["secret"].startswith("whsec_")
    assert webhook["cursor"] == reading.project_head(str(project.id))[1]
    write_some_events(api)
    expected = [
        event.project_position for event in reading.read_project(str(project.id), after=webhook["cursor"])
    ]
    assert len(expected) >= 5

    dispatch_until_delivered()

    assert len(receiver.accepted) == len(set(receiver.accepted))  # each event once
    assert sorted(receiver.accepted) == expected
    assert receiver.bad_signatures == 0
    assert len(receiver.requests) == len(expected) + 1  # the one 500, then every event accepted once
    first = receiver.requests[0]["headers"]
    retried = [
        r["headers"] for r in receiver.requests[1:] if r["headers"][EVENT_ID_HEADER] == first[EVENT_ID_HEADER]
    ]
    assert [h["Nexum-Delivery-Attempt"] for h in (first, *retried)] == ["1", "2"]
    deliveries = WebhookDelivery.objects.filter(webhook_id=webhook["id"])
    assert set(deliveries.values_list("state", flat=True)) == {DELIVERED}

    # The operator sees each delivery with its attempts; the secret is never shown again.
    page = operator_api.get(f"/api/v1/webhooks/{webhook['id']}/deliveries", {"limit": 100}).json()
    failed_once = [d for d in page["results"] if d["attempts"] == 2]
    assert len(failed_once) == 1 and len(page["results"]) == len(expected)
    assert [a["status_code"] for a in failed_once[0]["attempt_log"]] == [500, 200]
    assert "secret" not in operator_api.get("/api/v1/webhooks").json()["results"][0]
    assert "secret" not in operator_api.get(f"/api/v1/webhooks/{webhook['id']}").json()

    # A rebuild of the read models (projects included) leaves webhooks and deliveries alone; nothing new,
    # nothing sent: another pass sends no event twice.
    from nexum.eventstore.projections import rebuild

    rebuild()
    dispatch_due()
    assert len(receiver.requests) == len(expected) + 1
    assert deliveries.count() == len(expected)


def test_webhooks_are_an_operators_and_their_urls_pass_the_allowlist(api, operator_api, receiver):
    from nexum_web.webhooks.models import Webhook

    refused = api.post("/api/v1/webhooks", {"url": receiver.url}, format="json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert api.get("/api/v1/webhooks").status_code == 403
    for url in ("http://127.0.0.1:1/elsewhere", "http://169.254.169.254/latest", "http://2130706433:80/"):
        answer = operator_api.post("/api/v1/webhooks", {"url": url}, format="json")
        assert answer.status_code == 422, url
        assert answer.json()["error"]["code"] == "source_not_allowed"
        assert answer.json()["error"]["field"] == "url"
    bad = operator_api.post("/api/v1/webhooks", {"url": "ftp://127.0.0.1/", "colour": "red"}, format="json")
    assert bad.status_code == 400
    assert not Webhook.objects.exists()
    assert not Event.objects.filter(event_type__startswith="Webhook").exists()


def test_registering_and_removing_a_webhook_are_events_without_its_secret(operator_api, receiver):
    registered = operator_api.post(
        "/api/v1/webhooks", {"url": receiver.url, "description": "ops"}, format="json"
    ).json()
    (event,) = reading.read_stream(f"webhook-{registered['id']}")
    assert (event.event_type, event.event.url, event.event.description) == (
        "WebhookRegistered",
        receiver.url,
        "ops",
    )
    assert event.metadata["actor"] == "operator:operator-1"
    assert registered["secret"] not in json.dumps([event.event.url, event.event.description, event.metadata])
    first = operator_api.delete(f"/api/v1/webhooks/{registered['id']}")
    again = operator_api.delete(f"/api/v1/webhooks/{registered['id']}")
    assert first.status_code == again.status_code == 200
    assert [stored.event_type for stored in reading.read_stream(f"webhook-{registered['id']}")] == [
        "WebhookRegistered",
        "WebhookRemoved",
    ]


def test_a_host_taken_off_the_allowlist_is_not_reached_and_a_removed_webhook_gets_nothing(
    api, operator_api, receiver, settings
):
    from nexum_web.webhooks.models import FAILED, WebhookDelivery

    receiver.fail_first = 0
    webhook = register(operator_api, receiver.url)
    settings.NEXUM_SOURCE_HTTP_ALLOW = []
    write_some_events(api)
    dispatch_due()
    attempted = WebhookDelivery.objects.filter(webhook_id=webhook["id"], attempts__gt=0)
    assert attempted.exists() and all(d.last_error.startswith("refused") for d in attempted)
    assert receiver.requests == []

    removed = operator_api.delete(f"/api/v1/webhooks/{webhook['id']}")
    assert removed.status_code == 200 and removed.json()["active"] is False
    settings.NEXUM_SOURCE_HTTP_ALLOW = [f"127.0.0.1:{receiver.port}"]
    write_some_events(api)
    dispatch_due()
    assert receiver.requests == []
    assert set(WebhookDelivery.objects.values_list("state", flat=True)) == {FAILED}


def test_the_server_and_the_client_sign_alike():
    from nexum_client.webhooks import sign

    from nexum_web.webhooks.signing import signature

    assert signature("whsec_k", b'{"a":1}', 1_700_000_000) == sign("whsec_k", b'{"a":1}', 1_700_000_000)


def test_staff_register_a_webhook_in_the_admin_and_see_its_secret_once(admin_client, project, receiver):
    from nexum_web.webhooks.models import Webhook

    add = "/admin/webhooks/webhook/add/"
    refused = admin_client.post(
        add, {"project": project.id, "url": "http://10.1.2.3/hook", "description": ""}
    )
    assert refused.status_code == 200 and b"allowlist" in refused.content
    assert not Webhook.objects.exists()

    added = admin_client.post(
        add, {"project": project.id, "url": receiver.url, "description": "ops"}, follow=True
    )
    webhook = Webhook.objects.get()
    assert webhook.secret in added.content.decode() and webhook.created_by == "admin:admin"
    page = admin_client.get(f"/admin/webhooks/webhook/{webhook.id}/change/")
    assert page.status_code == 200 and webhook.secret not in page.content.decode()


def test_the_server_and_the_client_name_the_headers_alike():
    import nexum_client.webhooks as client

    from nexum_web.webhooks import signing

    for name in (
        "SIGNATURE_HEADER",
        "DELIVERY_ID_HEADER",
        "EVENT_ID_HEADER",
        "WEBHOOK_ID_HEADER",
        "ATTEMPT_HEADER",
    ):
        assert getattr(signing, name) == getattr(client, name)


# --- fair across projects: a project's backlog holds a bounded share of the webhooks queue ------------------


def pings(project_id: str, count: int) -> None:
    """``count`` events in the project's log, appended in bulk (the cheapest events there are)."""
    from nexum.core.tasks.projects import HealthPinged

    for start in range(0, count, 1000):
        store.append(
            stream_id=f"backlog-{project_id}",
            events=[HealthPinged(ping_id=f"{start + i}") for i in range(min(1000, count - start))],
            expected_version=None,
            project_id=project_id,
        )


@pytest.fixture
def sent_deliveries(monkeypatch) -> list[str]:
    """Celery not eager, the delivery task's messages kept here (in order) instead of published."""
    from config.celery import app
    from nexum_web.webhooks.tasks import webhook_deliver

    sent: list[str] = []
    app.conf.task_always_eager = False  # the conftest fixture restores it
    monkeypatch.setattr(webhook_deliver, "apply_async", lambda args=(), **options: sent.append(args[0]))
    return sent


def test_the_dispatcher_sends_at_most_the_cap_of_a_projects_deliveries_and_the_others_projects_at_once(
    project, other_project, receiver, settings, sent_deliveries
):
    from nexum.work.dispatch import send_next
    from nexum.work.models import Work
    from nexum_web.webhooks.models import WebhookDelivery
    from nexum_web.webhooks.services import webhook_register
    from nexum_web.webhooks.tasks import DELIVERY

    settings.NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT = 3
    settings.NEXUM_DISPATCH_AFTER_S = 15
    flooded = webhook_register(project_id=str(project.id), url=receiver.url, actor="test").webhook
    quiet = webhook_register(project_id=str(other_project.id), url=receiver.url, actor="test").webhook
    pings(str(project.id), 50)
    pings(str(other_project.id), 2)

    first = dispatch_due()
    flooded_deliveries = WebhookDelivery.objects.filter(webhook=flooded).order_by("position")
    quiet_deliveries = WebhookDelivery.objects.filter(webhook=quiet).order_by("position")
    assert flooded_deliveries.count() == 50 and quiet_deliveries.count() == 2  # all recorded
    oldest = [str(d.id) for d in flooded_deliveries[:6]]
    quiet_ids = [str(d.id) for d in quiet_deliveries]
    # The flooded project's three oldest and the quiet one's two, taking turns; nothing more of either.
    assert sorted(sent_deliveries) == sorted(oldest[:3] + quiet_ids)
    turns = ["quiet" if d in quiet_ids else "flooded" for d in sent_deliveries]
    assert turns[:4] in (["quiet", "flooded"] * 2, ["flooded", "quiet"] * 2) and turns[4] == "flooded"
    assert first.sent == [f"webhook:{d}" for d in sent_deliveries]
    assert dispatch_due().sent == []  # all in flight: a second pass sends nothing more

    # A worker finished the oldest (lease row deleted, delivery answered): it sends its project's next.
    WebhookDelivery.objects.filter(id=oldest[0]).update(state="delivered")
    Work.objects.filter(key=f"webhook:{oldest[0]}").delete()
    assert send_next(DELIVERY, project.id).sent == [f"webhook:{oldest[3]}"]
    assert send_next(DELIVERY, project.id).sent == []  # its three slots are taken again

    # Two finished: a hand-off sends one, never more; the slot left free is the next pass's to fill.
    WebhookDelivery.objects.filter(id__in=oldest[1:3]).update(state="delivered")
    Work.objects.filter(key__in=[f"webhook:{d}" for d in oldest[1:3]]).delete()
    assert send_next(DELIVERY, project.id).sent == [f"webhook:{oldest[4]}"]
    assert dispatch_due().sent == [f"webhook:{oldest[5]}"]


def test_deliveries_waiting_their_turn_behind_their_projects_cap_are_not_stuck(
    project, other_project, receiver, settings, sent_deliveries
):
    from datetime import timedelta

    from django.utils import timezone

    from nexum.work.selectors import stuck_requests
    from nexum_web.webhooks.models import WebhookDelivery
    from nexum_web.webhooks.services import deliveries_record, webhook_register

    settings.NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT = 2
    settings.NEXUM_DISPATCH_AFTER_S = 60  # the sent ones stay in flight past a lease's lifetime
    webhook_register(project_id=str(project.id), url=receiver.url, actor="test")
    pings(str(project.id), 5)
    dispatch_due()
    assert len(sent_deliveries) == 2
    webhook_register(project_id=str(other_project.id), url=receiver.url, actor="test")
    pings(str(other_project.id), 1)
    deliveries_record()  # recorded, and not sent yet: its project has room, so it is stuck once old enough

    later = timezone.now() + timedelta(seconds=settings.NEXUM_LEASE_TTL_S + 1)
    stuck = {str(r.request_id) for r in stuck_requests(now=later)}
    assert stuck == {str(WebhookDelivery.objects.get(project_id=other_project.id).id)}


# --- honest retries: an attempt is counted before it is sent ------------------------------------------------


class WorkerDied(BaseException):
    """Stands for the worker process dying mid-request: nothing after it runs."""


def test_an_attempt_is_on_the_record_before_its_request_is_sent_and_a_redelivery_is_the_next_attempt(
    project, receiver, monkeypatch
):
    from nexum_web.webhooks import services
    from nexum_web.webhooks.models import DELIVERED, WebhookAttempt, WebhookDelivery

    receiver.fail_first = 0
    webhook = services.webhook_register(project_id=str(project.id), url=receiver.url, actor="test")
    receiver.secret = webhook.secret
    pings(str(project.id), 1)
    services.deliveries_record()
    delivery = WebhookDelivery.objects.get()
    sent_headers: list[dict[str, str]] = []

    def dies_mid_request(url, body, headers, *, timeout_s):  # type: ignore[no-untyped-def]
        sent_headers.append(headers)
        raise WorkerDied

    monkeypatch.setattr(services, "post", dies_mid_request)
    with pytest.raises(WorkerDied):
        services.delivery_attempt(delivery_id=str(delivery.id))
    delivery.refresh_from_db()
    assert delivery.attempts == 1 and delivery.state == "pending"
    attempt = WebhookAttempt.objects.get(delivery=delivery)
    assert (attempt.number, attempt.duration_ms, attempt.status_code) == (1, None, None)  # no outcome yet
    assert attempt.project_id == delivery.project_id

    monkeypatch.undo()
    assert services.delivery_attempt(delivery_id=str(delivery.id)) == DELIVERED
    again = receiver.requests[-1]["headers"]
    assert sent_headers[0]["Nexum-Delivery-Attempt"] == "1" and again["Nexum-Delivery-Attempt"] == "2"
    assert sent_headers[0]["Nexum-Delivery-Id"] == again["Nexum-Delivery-Id"] == str(delivery.id)
    assert json.loads(receiver.requests[-1]["body"])["delivery_id"] == str(delivery.id)  # signed, in the body
    log = list(WebhookAttempt.objects.filter(delivery=delivery).values_list("number", "status_code", "error"))
    assert log == [(1, None, services.INTERRUPTED), (2, 200, "")]


def test_a_delivery_whose_last_attempt_was_interrupted_is_given_up_without_another_request(
    project, receiver, settings, monkeypatch
):
    from nexum_web.webhooks import services
    from nexum_web.webhooks.models import FAILED, WebhookDelivery

    settings.NEXUM_WEBHOOK_MAX_ATTEMPTS = 1
    services.webhook_register(project_id=str(project.id), url=receiver.url, actor="test")
    pings(str(project.id), 1)
    services.deliveries_record()
    delivery = WebhookDelivery.objects.get()
    monkeypatch.setattr(services, "post", lambda *args, **kwargs: (_ for _ in ()).throw(WorkerDied()))
    with pytest.raises(WorkerDied):
        services.delivery_attempt(delivery_id=str(delivery.id))
    monkeypatch.undo()

    assert services.delivery_attempt(delivery_id=str(delivery.id)) == FAILED
    delivery.refresh_from_db()
    assert delivery.attempts == 1 and delivery.last_error == services.INTERRUPTED
    assert receiver.requests == []


# --- with real workers on Redis ----------------------------------------------------------------------------


class ScriptedReceiver:
    """An HTTP receiver on 127.0.0.1 that answers request number ``i`` (from 0) with ``answer(i)``, keeping
    each request's headers and body; an answer its sender no longer waits for is dropped."""

    def __init__(self, answer: Callable[[int], int]) -> None:
        self.requests: list[dict[str, Any]] = []
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    receiver.requests.append({"headers": dict(self.headers), "body": body})
                    index = len(receiver.requests) - 1
                status = answer(index)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone (timed out, or killed)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.host}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def event_ids(self) -> list[int]:
        return [int(r["headers"][EVENT_ID_HEADER]) for r in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def receivers() -> Iterator[Callable[[Callable[[int], int]], ScriptedReceiver]]:
    started: list[ScriptedReceiver] = []

    def start(answer: Callable[[int], int]) -> ScriptedReceiver:
        started.append(ScriptedReceiver(answer))
        return started[-1]

    yield start
    for receiver in started:
        receiver.close()


@pytest.fixture
def empty_queues() -> Iterator[None]:
    """The broker's queues emptied before and after (this test's database is the only one they name)."""
    from config.celery import app

    app.control.purge()
    yield
    app.control.purge()


processes = test_faults.processes  # the fixture: processes in sessions of their own, all stopped at the end


def started(processes, name: str, argv: list[str], env: dict[str, str]) -> None:
    """Start a worker and wait until it consumes its queues."""
    processes.start(name, argv, env)
    assert wait_for(lambda: " ready." in processes.log(name), timeout=60), processes.log(name)


def queued(queue: str) -> int:
    from config.celery import app

    with app.connection_for_write() as connection:
        return int(connection.default_channel.client.llen(queue))


BACKLOG = 10_000


@pytest.mark.usefixtures("empty_queues")
@pytest.mark.worker
@pytest.mark.skipif(not django_settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set")
def test_a_projects_backlog_of_deliveries_delays_neither_another_projects_completion_nor_its_deliveries(
    project,
    other_project,
    workspace,
    settings,
    processes,
    receivers,
):
    from nexum.eventstore.models import Event as Event
    from nexum_web.webhooks.models import DELIVERED, PENDING, WebhookDelivery
    from nexum_web.webhooks.services import deliveries_record, webhook_register
    from tests.integration.test_work import started_task
    from verification_app.models import CompletionRequest
    from verification_app.services.completions import completion_request

    slow = receivers(lambda index: time.sleep(2) or 200)  # answers after the attempt's 1 s timeout
    quick = receivers(lambda index: 200)
    settings.NEXUM_SOURCE_HTTP_ALLOW = [slow.host, quick.host]
    webhook_register(project_id=str(project.id), url=slow.url, actor="test")
    quiet = webhook_register(project_id=str(other_project.id), url=quick.url, actor="test").webhook
    pings(str(project.id), BACKLOG)
    assert deliveries_record(batch=BACKLOG) == BACKLOG  # the flooded project's deliveries, all pending
    (workspace / other_project.slug).mkdir()
    (workspace / other_project.slug / "report.txt").write_text("done\n")
    task = started_task(
        other_project, {"checks": [{"kind": "file_exists", "name": "report", "path": "report.txt"}]}
    )

    env = {
        **environment(
            database_url_for_worker(), settings.CELERY_BROKER_URL, {"NEXUM_WORKSPACE_ROOT": str(workspace)}
        ),
        "NEXUM_SOURCE_HTTP_ALLOW": f"{slow.host},{quick.host}",
        "NEXUM_WEBHOOK_TIMEOUT_S": "1",
        "NEXUM_WEBHOOK_BACKOFF_S": "600",
        "NEXUM_DISPATCH_AFTER_S": "15",
        "NEXUM_DISPATCH_BACKOFF_MAX_S": "45",
    }
    # As make serve runs them: a pool for the gate's queues, another for the webhooks queue.
    started(processes, "gate worker", worker_argv(queues=("completions", "compiles", "celery")), env)
    started(processes, "webhook worker", worker_argv(queues=("webhooks",)), env)
    processes.start("dispatcher", manage("nexum_dispatcher"), env)
    assert wait_for(lambda: len(slow.requests) >= 2, timeout=30), processes.log(
        "dispatcher"
    )  # the backlog flows

    asked = time.monotonic()
    request = completion_request(
        project_id=str(other_project.id), task_id=str(task.id), answer="done", actor="agent"
    ).request
    assert request is not None
    decided = CompletionRequest.objects.filter(id=request.id, decided=True)
    assert wait_for(decided.exists, timeout=30), processes.log("gate worker")
    took = time.monotonic() - asked
    assert took <= 5, f"the quiet project's completion took {took:.1f} s behind {BACKLOG} deliveries"

    # The quiet project's deliveries, its gate decision's included, pass the flooded project's backlog.
    decision = Event.objects.get(event_type="GateDecided", data__request_id=str(request.id)).project_position
    delivered = WebhookDelivery.objects.filter(webhook=quiet, state=DELIVERED)
    assert wait_for(lambda: decision in quick.event_ids(), timeout=30), processes.log("webhook worker")
    reached = time.monotonic() - asked
    # The receiver has an event before the worker records its delivery: wait for the records to catch up.
    assert wait_for(lambda: delivered.count() == len(set(quick.event_ids())), timeout=30), (
        delivered.count(),
        sorted(set(quick.event_ids())),
    )
    flooded = WebhookDelivery.objects.filter(project_id=project.id)
    assert flooded.filter(state=PENDING, attempts=0).count() > BACKLOG - 100  # still queued behind the cap
    assert queued("webhooks") <= 2 * settings.NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT
    print(f"completion decided in {took:.2f} s; its GateDecided delivered {reached:.1f} s after the request")


@pytest.mark.worker
@pytest.mark.skipif(not django_settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set")
@pytest.mark.usefixtures("empty_queues")
def test_a_worker_killed_mid_delivery_sends_it_again_as_the_next_attempt_with_the_same_delivery_id(
    project, settings, processes, receivers
):
    from nexum_web.webhooks.models import DELIVERED, WebhookAttempt, WebhookDelivery
    from nexum_web.webhooks.services import INTERRUPTED, webhook_register

    release = threading.Event()

    def holds_the_first(index: int) -> int:
        if index == 0:
            release.wait(timeout=60)  # until its sender is killed
        return 200

    receiver = receivers(holds_the_first)
    settings.NEXUM_SOURCE_HTTP_ALLOW = [receiver.host]
    webhook = webhook_register(project_id=str(project.id), url=receiver.url, actor="test")
    pings(str(project.id), 1)
    env = {
        **environment(database_url_for_worker(), settings.CELERY_BROKER_URL, {}),
        "NEXUM_SOURCE_HTTP_ALLOW": receiver.host,
        "NEXUM_WEBHOOK_TIMEOUT_S": "60",
    }
    processes.start("dispatcher", manage("nexum_dispatcher"), env)
    started(processes, "worker", worker_argv(queues=("webhooks",)), env)
    assert wait_for(lambda: len(receiver.requests) == 1, timeout=30), processes.log("worker")

    processes.stop("worker", signal.SIGKILL)  # mid-request: the receiver holds it
    release.set()
    started(processes, "worker", worker_argv(queues=("webhooks",)), env)
    delivery = WebhookDelivery.objects.filter(webhook_id=webhook.webhook.id)
    assert wait_for(lambda: delivery.get().state == DELIVERED, timeout=60), processes.log("worker")

    first, again = (r["headers"] for r in receiver.requests)  # exactly two requests reached the receiver
    assert (first["Nexum-Delivery-Attempt"], again["Nexum-Delivery-Attempt"]) == ("1", "2")
    assert first["Nexum-Delivery-Id"] == again["Nexum-Delivery-Id"] == str(delivery.get().id)
    assert first[EVENT_ID_HEADER] == again[EVENT_ID_HEADER]
    log = list(
        WebhookAttempt.objects.filter(delivery__in=delivery).values_list("number", "status_code", "error")
    )
    assert log == [
        (1, None, INTERRUPTED),
        (2, 200, ""),
    ]  # one attempt succeeded, the killed one has no outcome
    assert delivery.get().attempts == 2
