"""An import checks the whole export before it writes anything (issue 27): a changed event, a missing one,
a blob that does not hash to its digest, a foreign or newer file, or a project already here is refused with a
message naming the line, and nothing is written (no event, no blob)."""

from __future__ import annotations

import base64
import json

import pytest

from context_app.world.artifacts import default_store
from context_app.world.services.records import artifact_record
from context_app.world.services.scopes import scope_resolve
from nexum.core.digests import canonical_json, sha256_hex
from nexum.eventstore.importing import ImportCollision
from nexum.eventstore.models import Event
from nexum_web.portability import ImportRefused, export_lines, import_lines
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.tokens import agent_token_issue

pytestmark = pytest.mark.postgres
SECRET_BYTES = b"the artifact's bytes\n"


@pytest.fixture
def export(project) -> list[dict]:
    goal = goal_create(
        project_id=str(project.id), objective="ship it", tasks=[{"key": "a", "objective": "do a"}], actor="t"
    )
    task = Task.objects.get(goal_id=goal.id, key="a")
    scope = scope_resolve(project_id=str(project.id), task_id=str(task.id))
    artifact_record(scope=scope, uri="artifact://x", summary="log", content=SECRET_BYTES, actor="t")
    agent_token_issue(project_id=str(project.id), name="bot", role="agent", actor="t")
    return [json.loads(line) for line in export_lines(project)]


def _refused(lines: list[dict], match: str, error: type[Exception] = ImportRefused) -> None:
    events = Event.objects.count()
    with pytest.raises(error, match=match):
        import_lines(canonical_json(line) for line in lines)
    assert Event.objects.count() == events


def _first(lines: list[dict], kind: str) -> int:
    return next(index for index, line in enumerate(lines) if line.get("kind") == kind)


def test_the_export_names_the_project_its_events_and_blobs(export, project):
    header = export[0]
    assert (header["format"], header["version"], header["project"]["slug"]) == (
        "nexum.project-export",
        1,
        "acme",
    )
    events = [line for line in export if line.get("kind") == "event"]
    assert header["events"] == len(events) == Event.objects.filter(project_id=project.id).count()
    assert [event["project_position"] for event in events] == list(range(1, len(events) + 1))
    assert header["head_hash"] == events[-1]["event_hash"]
    artifact = export[_first(export, "artifact")]
    assert artifact["digest"] == sha256_hex(SECRET_BYTES)


def test_a_project_already_here_is_refused(export):
    _refused(export, "already has events here", ImportCollision)


def test_a_changed_event_is_refused_naming_its_line(export):
    at = _first(export, "event") + 2
    export[at]["data"]["objective"] = "edited"
    _refused(export, rf"^line {at + 1}: the chain breaks at event {export[at]['position']} ")


def test_a_missing_event_is_refused(export):
    at = _first(export, "event") + 1
    del export[at]
    _refused(export, rf"^line {at + 1}: the chain breaks .* expected project position 2")


def test_a_truncated_log_is_refused(export):
    last = max(index for index, line in enumerate(export) if line.get("kind") == "event")
    del export[last]
    _refused(export, r"^line 1: the header announces 5 events, the file holds 4 \(the file is truncated")


def test_an_artifact_that_does_not_hash_to_its_digest_is_refused_and_not_stored(export):
    at = _first(export, "artifact")
    tampered = b"other bytes"
    export[at]["content"] = base64.b64encode(tampered).decode()
    _refused(export, rf"^line {at + 1}: the artifact's bytes do not hash to its digest")
    assert not default_store().exists(sha256_hex(tampered))


def test_a_foreign_or_newer_file_is_refused(export):
    _refused([{"hello": "world"}], "^line 1: not a Nexum project export")
    newer = [{**export[0], "version": 2}, *export[1:]]
    _refused(newer, "^line 1: export format version 2; this installation reads version 1")
    _refused([export[0], {"kind": "mystery"}], "^line 2: unknown line kind 'mystery'")
    with pytest.raises(ImportRefused, match=r"^line 2: not JSON"):
        import_lines([canonical_json(export[0]), "{not json"])


def test_a_pruned_line_names_a_kind_and_a_digest(export):
    at = _first(export, "artifact")
    export[at] = {"kind": "pruned", "blob": "artifact", "digest": "not a digest"}
    _refused(export, rf"^line {at + 1}: a pruned line names a blob kind and its digest")
