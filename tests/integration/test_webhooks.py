"""Signed webhooks (issue 18): an operator registers a URL on the allowlist and gets its secret once; each
event of the project's log is then POSTed to it, signed, retried with backoff after a failure, and a receiver
on 127.0.0.1 that verifies every signature sees each event once despite an injected 500."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from nexum_client.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, InvalidSignature, verify

from nexum.eventstore import store
from nexum.work.dispatch import dispatch_due

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
    assert webhook["secret"].startswith("whsec_") and webhook["cursor"] == store.head_position()
    write_some_events(api)
    expected = [
        event.position for event in store.read_all(after=webhook["cursor"], project_id=str(project.id))
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
