"""The HTTP edge answers in the one error shape: unknown paths (404), methods (405, before authentication),
bodies too large (413, unread), JSON nested too deep (400, before decoding) and errors outside the views (500)
— and none of them writes anything. A view's 500, debug on or off, is in tests/api/test_request_ids.py."""

from __future__ import annotations

import base64
import json

import pytest
from django.conf import settings as django_settings
from django.test import RequestFactory
from rest_framework.test import APIClient

from nexum.eventstore.models import Event
from nexum_web.api import parsers
from nexum_web.urls import server_error

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    """Both modes: with DEBUG on, Django would answer these with its HTML pages."""
    settings.DEBUG = request.param
    return request.param


@pytest.fixture
def goal_id(api):
    body = {"objective": "ship", "tasks": [{"key": "a", "objective": "a"}]}
    response = api.post("/api/v1/goals", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "field", "details", "request_id"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/nope", "/api/v1/tasks/x/nope", "/api/docs"])
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_an_unknown_path_under_api_is_a_json_404(debug, api, path, method):
    error = assert_error(api.generic(method, path), 404, "not_found")
    assert path in error["message"]


def test_an_unknown_path_outside_the_api_keeps_djangos_page(debug):
    response = APIClient().get("/nope")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("authenticated", [False, True], ids=["no-token", "token"])
@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("TRACE", "/api/v1/events", "GET, HEAD, OPTIONS"),
        ("TRACE", "/api/v1/health", "GET, HEAD, OPTIONS"),
        ("POST", "/api/v1/events", "GET, HEAD, OPTIONS"),
        ("DELETE", "/api/v1/goals", "GET, HEAD, OPTIONS, POST"),
        ("PATCH", "/api/docs/", "GET, HEAD, OPTIONS"),
    ],
)
def test_a_method_the_endpoint_lacks_is_405_before_authentication(
    debug, project, api, authenticated, method, path, allowed
):
    client = api if authenticated else APIClient()
    before = Event.objects.count()
    response = client.generic(method, path, "{}", content_type="application/json")
    assert_error(response, 405, "method_not_allowed")
    assert response["Allow"] == allowed
    assert Event.objects.count() == before


def test_a_method_the_endpoint_has_still_needs_a_token():
    for method in ("GET", "HEAD", "OPTIONS"):
        assert APIClient().generic(method, "/api/v1/events").status_code == 401


def test_a_body_over_the_limit_is_413_before_it_is_read(debug, api, goal_id):
    """The declared length alone refuses it: the test payload is two bytes, so a read past them would fail."""
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    before = Event.objects.count()
    for url in ("/api/v1/goals", f"/api/v1/goals/{goal_id}/artifacts", f"/api/v1/goals/{goal_id}/facts"):
        for declared in (limit + 1, 10**12):
            response = api.generic(
                "POST", url, b"{}", content_type="application/json", CONTENT_LENGTH=str(declared)
            )
            error = assert_error(response, 413, "too_large")
            assert error["details"] == {"size": declared, "max_bytes": limit}
            assert f"{declared} bytes" in error["message"]
    assert Event.objects.count() == before


def test_the_body_limit_lets_an_artifact_at_the_cap_through_and_the_cap_refuses_one_byte_more(
    api, goal_id, settings, tmp_path
):
    """DATA_UPLOAD_MAX_MEMORY_SIZE follows NEXUM_ARTIFACT_MAX_BYTES: the artifact's own 413 is reachable."""
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    cap = settings.NEXUM_ARTIFACT_MAX_BYTES
    url = f"/api/v1/goals/{goal_id}/artifacts"
    before = Event.objects.count()
    over = {"summary": "big", "content_base64": base64.b64encode(b"x" * (cap + 1)).decode()}
    error = assert_error(api.post(url, over, format="json"), 413, "too_large")
    assert error["details"] == {"size": cap + 1, "max_bytes": cap}  # the artifact's check, not the body's
    assert Event.objects.count() == before

    at_cap = {"summary": "fits", "content_base64": base64.b64encode(b"x" * cap).decode()}
    response = api.post(url, at_cap, format="json")
    assert response.status_code == 201, response.content[:300]
    assert response.json()["content_size"] == cap


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "body",
    [
        nested(1000),
        '{"objective": "ship", "inputs": ' + nested(parsers.MAX_JSON_DEPTH) + "}",
        '{"a": ' * 1000 + "1" + "}" * 1000,
        nested(100_000),
    ],
    ids=["array-1000", "member-65", "object-1000", "array-100000"],
)
def test_json_nested_too_deep_is_400_before_it_is_decoded(debug, api, monkeypatch, body):
    def never_decode(*args, **kwargs):
        raise AssertionError("the decoder was reached")

    monkeypatch.setattr(parsers.json, "loads", never_decode)
    before = Event.objects.count()
    error = assert_error(
        api.post("/api/v1/goals", body, content_type="application/json"), 400, "malformed_request"
    )
    assert f"deeper than {parsers.MAX_JSON_DEPTH} levels" in error["message"]
    assert Event.objects.count() == before


def test_json_at_the_depth_limit_reaches_the_serializer(api):
    body = '{"objective": "ship", "inputs": ' + nested(parsers.MAX_JSON_DEPTH - 1) + "}"
    error = assert_error(api.post("/api/v1/goals", body, content_type="application/json"), 400, "invalid")
    assert error["field"].startswith("inputs")


@pytest.mark.parametrize(
    ("text", "deeper_than_two"),
    [
        ("[[]]", False),
        ("[[[]]]", True),
        ('{"a": {"b": []}}', True),
        ('["[[[[", "{{{{"]', False),  # brackets inside strings are content
        (r'["\"[[[[", 1]', False),  # so are those after an escaped quote
        ("[[], [], [], [], []]", False),  # many openings, shallow
        ('"[[[[[[', False),  # an unterminated string: its brackets do not count either
        ("1", False),
    ],
)
def test_nesting_depth_counts_arrays_and_objects_only(text, deeper_than_two):
    assert parsers.nested_deeper_than(text, 2) is deeper_than_two


def test_the_server_error_handler_answers_json_under_api_and_a_page_elsewhere():
    factory = RequestFactory()
    assert_error(server_error(factory.get("/api/v1/events")), 500, "server_error")
    page = server_error(factory.get("/admin/"))
    assert page.status_code == 500
    assert page["Content-Type"].startswith("text/html")
