"""Request ids and the log of a 500 (issue 13): every response names its request, every error body carries the
same id, and a 500 is logged with its traceback under that id with debug off as well as on."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
from rest_framework.test import APIClient

from nexum.adapters.logs import JsonFormatter
from nexum_web.api.views import HealthView
from tests.api.test_foundation_api import assert_error

pytestmark = pytest.mark.django_db


def test_every_response_names_its_request_and_an_error_body_names_the_same(api):
    ok = api.get("/api/v1/tasks")
    assert ok.status_code == 200 and re.fullmatch(r"[0-9a-f]{32}", ok["X-Request-ID"])
    missing = api.get("/api/v1/tasks/00000000-0000-0000-0000-000000000000")
    error = assert_error(missing, 404, "not_found")
    assert error["request_id"] == missing["X-Request-ID"] != ok["X-Request-ID"]
    unrouted = api.get("/api/v1/no-such-endpoint")
    assert assert_error(unrouted, 404, "not_found")["request_id"] == unrouted["X-Request-ID"]


def test_a_sane_incoming_request_id_is_kept_and_anything_else_is_replaced(api):
    kept = api.get("/api/v1/tasks", HTTP_X_REQUEST_ID="lb-7f3a.9:2_x")
    assert kept["X-Request-ID"] == "lb-7f3a.9:2_x"
    for insane in ("", "x" * 129, "two words", "naïve", "a/b"):
        replaced = api.get("/api/v1/tasks", HTTP_X_REQUEST_ID=insane)
        assert replaced.status_code == 200
        assert re.fullmatch(r"[0-9a-f]{32}", replaced["X-Request-ID"]), insane


@pytest.fixture
def log_lines():
    """What the configured handler of Django's records writes, as parsed JSON lines."""
    [handler] = [h for h in logging.getLogger("django").handlers if isinstance(h.formatter, JsonFormatter)]
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        handler.setStream(previous)


@pytest.mark.parametrize("debug", [False, True])
def test_a_500_is_logged_with_its_traceback_and_request_id_whether_debug_is_on_or_off(
    settings, monkeypatch, log_lines, debug
):
    settings.DEBUG = debug

    def explode(self, request):
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(HealthView, "get", explode)
    client = APIClient()
    client.raise_request_exception = False
    response = client.get("/api/v1/health", HTTP_X_REQUEST_ID="req-500")
    assert response.status_code == 500 and response["X-Request-ID"] == "req-500"
    [record] = [line for line in log_lines() if line["level"] == "ERROR"]
    assert record["logger"] == "django.request" and record["request_id"] == "req-500"
    assert record["status_code"] == 500
    assert (
        record["exc_info"].startswith("Traceback")
        and "RuntimeError: the disk is on fire" in record["exc_info"]
    )
    assert response.json() == {  # with debug on too: never Django's debug page under /api/
        "error": {
            "code": "server_error",
            "message": "internal error; the operator has the details under this request_id",
            "field": None,
            "details": {},
            "request_id": "req-500",
        }
    }
    assert "Traceback" not in response.content.decode() and "on fire" not in response.content.decode()
