"""Authentication, the error format, the event feed, health and the schema."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from nexum.core.tasks.projects import HealthPinged
from nexum.eventstore import store
from tasks_app.services.tokens import agent_token_revoke

pytestmark = pytest.mark.django_db


def assert_error(response, status: int, code: str, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    if field is not None:
        assert error["field"] == field
    assert error["request_id"] == response["X-Request-ID"]  # every error names its request
    return error


def test_no_token_is_401():
    assert_error(APIClient().get("/api/v1/events"), 401, "not_authenticated")


def test_unknown_token_is_401():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer nx_nope")
    assert_error(client.get("/api/v1/events"), 401, "authentication_failed")


def test_malformed_authorization_header_is_401():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer two words")
    assert_error(client.get("/api/v1/events"), 401, "authentication_failed")


def test_revoked_token_is_401(project):
    from tasks_app.services.tokens import agent_token_issue

    issued = agent_token_issue(project_id=str(project.id), name="short-lived", actor="test")
    agent_token_revoke(token_id=str(issued.token.id), reason="rotated", actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.key}")
    assert_error(client.get("/api/v1/events"), 401, "authentication_failed")


def test_staff_session_without_agent_token_is_refused(admin_client):
    response = admin_client.get("/api/v1/events")
    assert response.status_code in (401, 403)


def test_feed_pages_through_the_projects_events_in_order(api, project):
    stream = f"project-{project.id}-pings"
    for n in range(5):
        store.append(
            stream_id=stream,
            events=[HealthPinged(ping_id=str(n))],
            expected_version=n,
            project_id=str(project.id),
        )
    first = api.get("/api/v1/events", {"limit": 3}).json()
    assert first["next_cursor"] == str(first["results"][-1]["position"])  # the cursor is a log position
    second = api.get("/api/v1/events", {"cursor": first["next_cursor"], "limit": 100}).json()
    assert second["next_cursor"] is None
    events = first["results"] + second["results"]
    positions = [e["position"] for e in events]
    assert positions == sorted(positions)
    pings = [e["data"]["ping_id"] for e in events if e["type"] == "HealthPinged"]
    assert pings == ["0", "1", "2", "3", "4"]
    assert {
        "position",
        "stream_id",
        "version",
        "type",
        "schema_version",
        "data",
        "metadata",
        "recorded_at",
    } <= set(events[0])


def test_feed_never_shows_another_projects_events(api, other_api, other_project):
    store.append(
        stream_id="secret",
        events=[HealthPinged(ping_id="other")],
        expected_version=0,
        project_id=str(other_project.id),
    )
    mine = api.get("/api/v1/events").json()["results"]
    assert all(e["stream_id"] != "secret" for e in mine)
    theirs = other_api.get("/api/v1/events").json()["results"]
    assert any(e["stream_id"] == "secret" for e in theirs)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"cursor": "-1"}, "cursor"),
        ({"cursor": "abc"}, "cursor"),
        ({"cursor": "99999999999999999999"}, "cursor"),
        ({"cursor": ""}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"limit": "100000"}, "limit"),
        ({"limit": "1.5"}, "limit"),
    ],
)
def test_bad_feed_parameters_are_400_naming_the_field(api, query, field):
    assert_error(api.get("/api/v1/events", query), 400, "invalid", field)


@pytest.mark.parametrize("query", [{"after": "3"}, {"limit": "5", "page": "2"}])
def test_unknown_feed_parameters_are_400_and_name_the_parameter(api, query):
    assert_error(
        api.get("/api/v1/events", query), 400, "unknown_parameter", sorted(set(query) - {"limit"})[0]
    )


def test_unknown_endpoint_is_json_404(api):
    assert_error(api.get("/api/v1/nothing-here"), 404, "not_found")


def test_wrong_method_is_405(api):
    assert_error(api.post("/api/v1/events", {}, format="json"), 405, "method_not_allowed")


def test_health_reports_database_and_broker():
    response = APIClient().get("/api/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["broker"]["ok"] is True


def test_openapi_schema_and_docs_are_served():
    client = APIClient()
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert "/api/v1/events" in schema.json()["paths"]
    assert client.get("/api/docs/").status_code == 200


def test_the_schema_declares_the_bearer_scheme_on_every_operation_but_health():
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert schema["components"]["securitySchemes"]["bearerToken"]["scheme"] == "bearer"
    operations = {
        (method.upper(), path): operation
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }
    assert len(operations) > 50
    public = {
        key
        for key, operation in operations.items()
        if {"bearerToken": []} not in operation.get("security", [])
    }
    assert public == {("GET", "/api/v1/health")}
    assert operations[("GET", "/api/v1/health")]["security"] == [{}]
    other = {
        key for key, operation in operations.items() if operation.get("security") != [{"bearerToken": []}]
    }
    assert other == {("GET", "/api/v1/health"), ("GET", "/api/v1/events/stream")}  # or a stream ticket
    assert operations[("GET", "/api/v1/events/stream")]["security"] == [
        {"streamTicket": []},
        {"bearerToken": []},
    ]


def test_domain_errors_map_to_their_statuses():
    """Every kind of domain error has its documented HTTP status through the one handler."""
    from nexum.core import errors
    from nexum_web.api.errors import STATUS_BY_KIND, exception_handler

    expected = {
        errors.ValidationFailed: 400,
        errors.Forbidden: 403,
        errors.NotFound: 404,
        errors.Conflict: 409,
        errors.ConcurrencyError: 409,
        errors.IllegalTransition: 409,
        errors.TooLarge: 413,
        errors.PolicyRefused: 422,
        errors.TooMany: 429,
        errors.Unavailable: 503,
    }
    for error_class, status in expected.items():
        response = exception_handler(error_class("boom", field="f"), {})
        assert response.status_code == status
        assert response.data["error"] == {
            "code": error_class.code,
            "message": "boom",
            "field": "f",
            "details": {},
            "request_id": None,  # outside an HTTP request
        }
    assert set(STATUS_BY_KIND.values()) == {400, 403, 404, 409, 413, 422, 429, 503}
