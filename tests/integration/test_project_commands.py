"""Projects and tokens by command (``nexum_project``, ``nexum_token``) and in the admin: each action an event
through the services, every refused input a clear message with nothing written, a key shown once and stored
as its sha256, a revoked token refused from the next request on."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from context_app.catalog.models import CatalogCard
from context_app.catalog.selectors import catalog_version
from nexum.eventstore.models import Event
from tasks_app.models import AgentToken, Project

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def written() -> tuple[int, int, int]:
    return Event.objects.count(), Project.objects.count(), AgentToken.objects.count()


def refused(*args: str) -> str:
    """Run a command that must refuse: its message, after checking that nothing was written."""
    before = written()
    with pytest.raises(CommandError) as error:
        run(*args)
    assert written() == before, args
    return str(error.value)


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


# --- nexum_project ----------------------------------------------------------------------------------------


def test_create_records_the_project_with_the_default_catalog_and_list_shows_it():
    out, _ = run("nexum_project", "create", "acme", "--name", "Acme Corp", "--description", "our shop")
    assert "created project acme (Acme Corp)" in out and "quick" in out
    project = Project.objects.get(slug="acme")
    assert (project.name, project.description) == ("Acme Corp", "our shop")
    assert catalog_version(str(project.id)) == 1
    assert set(CatalogCard.objects.filter(project=project).values_list("word", flat=True)) == {
        "quick",
        "local",
        "frontier",
    }
    assert list(Event.objects.order_by("position").values_list("event_type", "metadata__actor")) == [
        ("ProjectCreated", "command:nexum_project"),
        ("ModelCatalogReplaced", "command:nexum_project"),
    ]
    run("nexum_project", "create", "globex")
    assert Project.objects.get(slug="globex").name == "globex"  # the name defaults to the slug
    run("nexum_token", "issue", "acme", "bot", "--role", "agent")
    listing, _ = run("nexum_project", "list")
    lines = listing.splitlines()
    assert lines[0].split() == ["SLUG", "NAME", "CATALOG", "VERSION", "ACTIVE", "TOKENS", "CREATED"]
    assert lines[1].split()[:5] == ["acme", "Acme", "Corp", "1", "1"]
    assert lines[2].split()[:4] == ["globex", "globex", "1", "0"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("acme",), "a project with slug 'acme' already exists"),
        (("Acme",), "a project slug is 1–63 lowercase letters"),
        (("my project",), "a project slug is 1–63 lowercase letters"),
        (("_acme",), "a project slug is 1–63 lowercase letters"),
        (("acme\n",), "a project slug is 1–63 lowercase letters"),
        (("a" * 64,), "a project slug is 1–63 lowercase letters"),
        (("",), "a project slug is 1–63 lowercase letters"),
        (("new", "--name", "   "), "a project needs a name"),
        (("new", "--name", "x" * 201), "at most 200 printable characters"),
        (("new", "--name", "two\nlines"), "at most 200 printable characters"),
        ((), "the following arguments are required: slug"),
        (("a", "b"), "unrecognized arguments: b"),
    ],
)
def test_create_refuses_bad_input_and_writes_nothing(project, args, message):
    assert message in refused("nexum_project", "create", *args)


def test_a_command_without_its_action_is_refused():
    assert "required: {create,list}" in refused("nexum_project")
    assert "required: {issue,revoke,list}" in refused("nexum_token")
    assert "invalid choice: 'delete'" in refused("nexum_token", "delete", "acme", "bot")


def test_from_the_command_line_a_refusal_exits_non_zero_with_its_reason(tmp_path):
    env = {**os.environ, "NEXUM_DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)  # an empty SQLite file of its own: the refusals come before any table
    manage = [sys.executable, str(ROOT / "manage.py")]
    slug = subprocess.run(
        [*manage, "nexum_project", "create", "Bad Slug"], env=env, capture_output=True, text=True
    )
    assert slug.returncode == 1 and "a project slug is 1–63 lowercase letters" in slug.stderr
    assert slug.stdout == ""
    role = subprocess.run(
        [*manage, "nexum_token", "issue", "acme", "bot"], env=env, capture_output=True, text=True
    )
    assert role.returncode == 2 and "the following arguments are required: --role" in role.stderr


# --- nexum_token ------------------------------------------------------------------------------------------


def test_issue_revoke_and_list_are_events_and_a_revoked_token_is_refused_at_once(project):
    key, note = run("nexum_token", "issue", "acme", "deployer", "--role", "operator")
    key = key.strip()
    assert "issued operator token 'deployer' in project acme" in note and key[:8] in note
    client = bearer(key)
    assert client.get("/api/v1/events").status_code == 200  # the same client, just before
    out, _ = run("nexum_token", "revoke", "acme", "deployer", "--reason", "left the team")
    assert out.strip() == "revoked operator token 'deployer' of project acme"
    after = client.get("/api/v1/events")
    assert after.status_code == 401 and after.json()["error"]["code"] == "authentication_failed"
    issued, revoked = Event.objects.filter(stream_id=f"project-{project.id}").order_by("position")[1:]
    assert (issued.event_type, issued.metadata["actor"], issued.data["role"]) == (
        "AgentTokenIssued",
        "command:nexum_token",
        "operator",
    )
    assert (revoked.event_type, revoked.data["reason"]) == ("AgentTokenRevoked", "left the team")
    listing, _ = run("nexum_token", "list", "acme")
    header, row = listing.splitlines()
    assert header.split() == ["NAME", "ROLE", "KEY", "PREFIX", "ISSUED", "REVOKED"]
    assert row.split()[:3] == ["deployer", "operator", key[:8]] and row.split()[-1] != "-"
    assert key not in listing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("issue", "nope", "bot", "--role", "agent"), "no project with slug 'nope'"),
        (("issue", "acme", "taken", "--role", "agent"), "project acme already has a token named 'taken'"),
        (("issue", "acme", "two words", "--role", "agent"), "a token name is 1–100 letters"),
        (("issue", "acme", "agent:x", "--role", "agent"), "a token name is 1–100 letters"),
        (("issue", "acme", "", "--role", "agent"), "a token name is 1–100 letters"),
        (("issue", "acme", "x" * 101, "--role", "agent"), "a token name is 1–100 letters"),
        (("issue", "acme", "bot\n", "--role", "agent"), "a token name is 1–100 letters"),
        (("issue", "acme", "bot", "--role", "planner"), "invalid choice: 'planner'"),
        (("issue", "acme", "bot"), "the following arguments are required: --role"),
        (("revoke", "acme", "ghost"), "project acme has no token named 'ghost'"),
        (("revoke", "nope", "taken"), "no project with slug 'nope'"),
        (("revoke", "acme", "gone"), "token 'gone' of project acme was already revoked"),
        (("list", "nope"), "no project with slug 'nope'"),
    ],
)
def test_token_commands_refuse_bad_input_and_write_nothing(project, args, message):
    run("nexum_token", "issue", "acme", "taken", "--role", "agent")
    run("nexum_token", "issue", "acme", "gone", "--role", "agent")
    run("nexum_token", "revoke", "acme", "gone")
    assert message in refused("nexum_token", *args)


# --- the admin --------------------------------------------------------------------------------------------


def test_the_admin_creates_a_project_with_its_catalog_through_the_service(admin_client):
    response = admin_client.post(
        "/admin/tasks_app/project/add/", {"slug": "initech", "name": "Initech", "description": ""}
    )
    assert response.status_code == 302, response.content
    project = Project.objects.get(slug="initech")
    assert catalog_version(str(project.id)) == 1
    page = admin_client.get(f"/admin/tasks_app/project/{project.pk}/change/").content.decode()
    assert "initech" in page and "Created at" in page
    assert set(Event.objects.values_list("event_type", "metadata__actor")) == {
        ("ProjectCreated", "admin:admin"),
        ("ModelCatalogReplaced", "admin:admin"),
    }
    before = written()
    for body, message in (
        ({"slug": "initech", "name": "Again"}, b"already exists"),
        ({"slug": "init_tech", "name": "Initech"}, b"a project slug is 1"),
        ({"slug": "init tech", "name": "Initech"}, b"Enter a valid"),
        ({"slug": "other", "name": "  "}, b"This field is required"),
    ):
        page = admin_client.post("/admin/tasks_app/project/add/", body)
        assert page.status_code == 200 and message in page.content, page.content
    assert written() == before


def test_the_admin_shows_an_issued_key_once_and_revokes_with_an_action(admin_client, project):
    add_url = "/admin/tasks_app/agenttoken/add/"
    response = admin_client.post(add_url, {"project": str(project.id), "name": "ops-bot", "role": "operator"})
    assert response.status_code == 200, response.content
    assert "no-store" in response["Cache-Control"]
    token = AgentToken.objects.get(name="ops-bot")
    page = response.content.decode()
    key = page.split('id="issued-key" type="text" readonly size="60" value="')[1].split('"')[0]
    assert token.key_prefix == key[:8] and key.startswith("nx_")
    client = bearer(key)
    assert client.get("/api/v1/events").status_code == 200
    Event.objects.get(event_type="AgentTokenIssued", metadata__actor="admin:admin")
    for url in ("/admin/tasks_app/agenttoken/", f"/admin/tasks_app/agenttoken/{token.pk}/change/", "/admin/"):
        shown = admin_client.get(url)
        assert shown.status_code == 200 and key.encode() not in shown.content  # never again
    detail = admin_client.get(f"/admin/tasks_app/agenttoken/{token.pk}/change/").content.decode()
    assert token.key_prefix in detail and "Issued at" in detail and "Revoked at" in detail
    before = written()
    taken = admin_client.post(add_url, {"project": str(project.id), "name": "ops-bot", "role": "agent"})
    assert taken.status_code == 200 and b"already exists" in taken.content
    bad = admin_client.post(add_url, {"project": str(project.id), "name": "ops bot", "role": "boss"})
    assert b"a token name is 1" in bad.content and b"Select a valid choice" in bad.content
    assert written() == before

    revoke = admin_client.post(
        "/admin/tasks_app/agenttoken/", {"action": "revoke_tokens", "_selected_action": [str(token.pk)]}
    )
    assert revoke.status_code == 302
    assert client.get("/api/v1/events").status_code == 401
    revoked = Event.objects.get(event_type="AgentTokenRevoked")
    assert (revoked.metadata["actor"], revoked.data["reason"]) == ("admin:admin", "revoked in the admin")
    again = admin_client.post(
        "/admin/tasks_app/agenttoken/",
        {"action": "revoke_tokens", "_selected_action": [str(token.pk)]},
        follow=True,
    )
    assert b"were already revoked" in again.content
    assert Event.objects.filter(event_type="AgentTokenRevoked").count() == 1


def test_a_revoked_token_ends_its_open_event_stream_at_once(project):
    key, _ = run("nexum_token", "issue", "acme", "watcher", "--role", "agent")
    client = bearer(key.strip())
    response = client.get("/api/v1/events/stream", {"timeout": 20}, HTTP_ACCEPT="text/event-stream")
    frames = iter(response.streaming_content)
    assert next(frames) == b"retry: 1000\n\n"
    started = time.monotonic()
    run("nexum_token", "revoke", "acme", "watcher")
    rest = b"".join(frames).decode()  # ends long before the 20 s the stream was asked for
    assert time.monotonic() - started < 5
    last = rest.rstrip("\n").split("\n\n")[-1].splitlines()
    assert last[0] == "event: error"
    assert json.loads(last[1].removeprefix("data: "))["error"]["code"] == "authentication_failed"
    again = client.get("/api/v1/events/stream", {"timeout": 0}, HTTP_ACCEPT="text/event-stream")
    assert again.status_code == 401
