"""A browser follows the event stream (issue 29): a single-use, short-lived stream ticket in place of the
bearer header EventSource cannot send, accepted on the stream only; CORS for the configured origins, with the
preflight answered without a token for them and nothing for the others."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from nexum.eventstore import reading
from tasks_app.models import AgentToken
from tasks_app.services.tokens import agent_token_revoke
from tests.api.test_event_stream import STREAM, parse, read

TICKETS = "/api/v1/events/stream/tickets"
ORIGIN = "http://app.example.test"


def ticket_of(api: APIClient) -> dict:
    response = api.post(TICKETS)
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.django_db
def test_a_ticket_opens_its_projects_stream_once(api, other_api, project):
    plan = {"objective": "Ship", "tasks": [{"key": "s1", "objective": "A"}]}
    assert api.post("/api/v1/goals", plan, format="json").status_code == 201
    assert other_api.post("/api/v1/goals", plan, format="json").status_code == 201
    issued = ticket_of(api)
    assert issued["ticket"].startswith("nxst_")
    assert issued["stream_url"] == f"{STREAM}?ticket={issued['ticket']}"
    browser = APIClient()  # no Authorization header, as an EventSource

    response = browser.get(issued["stream_url"] + "&timeout=0", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200
    mine = [event.project_position for event in reading.read_all(project_id=str(project.id))]
    assert [message["id"] for message in parse(read(response))] == mine

    again = browser.get(STREAM, {"ticket": issued["ticket"], "timeout": 0})
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "authentication_failed"
    assert "used already" in again.json()["error"]["message"]


@pytest.mark.django_db
def test_an_expired_unknown_foreign_or_revoked_ticket_is_401_saying_why(api, project, settings):
    browser = APIClient()
    expired = ticket_of(api)["ticket"]
    later = timezone.now() + timedelta(seconds=settings.NEXUM_EVENT_STREAM_TICKET_S + 1)
    with mock.patch("nexum_web.api.stream_tickets.timezone.now", return_value=later):
        response = browser.get(STREAM, {"ticket": expired, "timeout": 0})
    assert response.status_code == 401 and "expired" in response.json()["error"]["message"]

    unknown = browser.get(STREAM, {"ticket": "nxst_" + "x" * 43, "timeout": 0})
    assert unknown.status_code == 401 and unknown.json()["error"]["message"] == "unknown stream ticket"

    bearer_key = api._credentials["HTTP_AUTHORIZATION"].split()[1]
    as_ticket = browser.get(STREAM, {"ticket": bearer_key, "timeout": 0})
    assert as_ticket.status_code == 401 and "a token is not a ticket" in as_ticket.json()["error"]["message"]

    both = api.get(STREAM, {"ticket": ticket_of(api)["ticket"], "timeout": 0})
    assert both.status_code == 401 and "not both" in both.json()["error"]["message"]

    revoked = ticket_of(api)["ticket"]
    token = AgentToken.objects.get(project=project, name="agent-1")
    agent_token_revoke(token_id=str(token.id), reason="test", actor="test")
    gone = browser.get(STREAM, {"ticket": revoked, "timeout": 0})
    assert gone.status_code == 401 and "revoked" in gone.json()["error"]["message"]


@pytest.mark.django_db
def test_a_ticket_is_no_credential_anywhere_but_the_stream(api):
    browser = APIClient()
    ticket = ticket_of(api)["ticket"]
    for path in ("/api/v1/events", "/api/v1/tasks", TICKETS):
        response = browser.get(path, {"ticket": ticket}) if path != TICKETS else browser.post(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "not_authenticated"
    assert browser.get(STREAM, {"ticket": ticket, "timeout": 0}).status_code == 200  # still unused


@pytest.mark.django_db
def test_the_schema_documents_the_ticket_as_the_streams_other_credential(api):
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    stream = schema["paths"][STREAM]["get"]
    assert {"streamTicket": []} in stream["security"] and {"bearerToken": []} in stream["security"]
    assert "ticket" not in [parameter["name"] for parameter in stream.get("parameters", [])]
    assert schema["components"]["securitySchemes"]["streamTicket"] == {
        "type": "apiKey",
        "in": "query",
        "name": "ticket",
        "description": schema["components"]["securitySchemes"]["streamTicket"]["description"],
    }
    assert schema["paths"][TICKETS]["post"]["security"] == [{"bearerToken": []}]


@pytest.mark.django_db
def test_cors_answers_a_configured_origins_preflight_without_a_token_and_nothing_for_others(api, settings):
    settings.NEXUM_CORS_ORIGINS = [ORIGIN]
    anonymous = APIClient()
    preflight = anonymous.options(
        TICKETS,
        HTTP_ORIGIN=ORIGIN,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="authorization",
    )
    assert preflight.status_code == 204
    assert preflight["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in preflight["Access-Control-Allow-Methods"]
    assert "Authorization" in preflight["Access-Control-Allow-Headers"]
    assert "Last-Event-ID" in preflight["Access-Control-Allow-Headers"]
    assert "Origin" in preflight["Vary"]
    assert not preflight.has_header("Access-Control-Allow-Credentials")

    foreign = anonymous.options(
        TICKETS, HTTP_ORIGIN="http://evil.example.test", HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST"
    )
    assert foreign.status_code == 401
    assert not any(header.startswith("Access-Control-") for header in foreign.headers)

    answered = api.get("/api/v1/tasks", HTTP_ORIGIN=ORIGIN)
    assert answered.status_code == 200 and answered["Access-Control-Allow-Origin"] == ORIGIN
    assert "X-Request-ID" in answered["Access-Control-Expose-Headers"]
    refused = anonymous.get("/api/v1/tasks", HTTP_ORIGIN=ORIGIN)
    assert refused.status_code == 401 and refused["Access-Control-Allow-Origin"] == ORIGIN
    other = api.get("/api/v1/tasks", HTTP_ORIGIN="http://evil.example.test")
    assert not other.has_header("Access-Control-Allow-Origin")


@pytest.mark.django_db
def test_without_configured_origins_no_answer_carries_cors_headers(api, settings):
    settings.NEXUM_CORS_ORIGINS = []
    response = api.get("/api/v1/tasks", HTTP_ORIGIN=ORIGIN)
    assert response.status_code == 200
    assert not response.has_header("Access-Control-Allow-Origin")
    preflight = APIClient().options(TICKETS, HTTP_ORIGIN=ORIGIN, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
    assert preflight.status_code == 401 and not preflight.has_header("Access-Control-Allow-Origin")
