from dataclasses import dataclass

import pytest

from nexum.core.events import (
    DomainEvent,
    InvalidEvent,
    UnknownEventType,
    event_from_data,
    event_to_data,
    event_type,
    upcast,
    validate_event,
)
from nexum.core.resolution.events import SourceRegistered
from nexum.core.tasks.projects import AgentTokenIssued, ProjectCreated


@event_type("TestShaped")
@dataclass(frozen=True)
class Shaped(DomainEvent):
    name: str
    count: int
    ratio: float
    flag: bool
    tags: tuple[str, ...]
    extra: dict
    note: str | None = None


GOOD = {"name": "a", "count": 2, "ratio": 0.5, "flag": True, "tags": ["x", "y"], "extra": {"k": 1}}


def test_round_trip_through_data():
    event = event_from_data("TestShaped", GOOD)
    assert event == Shaped("a", 2, 0.5, True, ("x", "y"), {"k": 1})
    assert event_to_data(event) == {**GOOD, "note": None}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"count": "2"}, "count"),
        ({"count": True}, "count"),
        ({"count": 2.5}, "count"),
        ({"flag": "yes"}, "flag"),
        ({"tags": "x"}, "tags"),
        ({"tags": [1]}, "tags"),
        ({"extra": [1]}, "extra"),
        ({"note": 5}, "note"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_malformed_data_is_refused_naming_the_field(change, field):
    with pytest.raises(InvalidEvent) as raised:
        event_from_data("TestShaped", {**GOOD, **change})
    assert raised.value.field == field


def test_missing_field_is_refused():
    data = dict(GOOD)
    del data["name"]
    with pytest.raises(InvalidEvent, match="missing field 'name'"):
        event_from_data("TestShaped", data)


def test_unknown_type_is_refused():
    with pytest.raises(UnknownEventType, match="unknown event type 'NoSuchThing'"):
        event_from_data("NoSuchThing", {})


def test_data_must_be_an_object():
    with pytest.raises(InvalidEvent):
        event_from_data("TestShaped", ["not", "an", "object"])


def test_events_built_in_code_are_validated_too():
    with pytest.raises(InvalidEvent):
        validate_event(Shaped("a", "not-an-int", 0.5, True, (), {}))  # type: ignore[arg-type]


def test_project_created_v1_is_upcast_to_v2():
    assert ProjectCreated.schema_version == 2
    stored_v1 = {"project_id": "p", "slug": "acme", "name": "Acme"}
    assert upcast("ProjectCreated", 1, stored_v1) == {**stored_v1, "description": ""}
    event = event_from_data("ProjectCreated", stored_v1, schema_version=1)
    assert event == ProjectCreated(project_id="p", slug="acme", name="Acme", description="")


def test_agent_token_issued_v1_is_upcast_to_an_agents_token():
    assert AgentTokenIssued.schema_version == 2
    stored_v1 = {"token_id": "t", "name": "bot", "key_prefix": "nx_abc", "key_sha256": "0" * 64}
    event = event_from_data("AgentTokenIssued", stored_v1, schema_version=1)
    assert event == AgentTokenIssued(**stored_v1, role="agent")


def test_source_registered_v1_is_upcast_to_an_operators_source():
    """Before R4a a source did not say who can write it; every resolve derives it again from the path."""
    assert SourceRegistered.schema_version == 2
    stored_v1 = {
        "source_id": "s",
        "name": "repo",
        "kind": "folder",
        "config": {"path": "repo"},
        "declared_scopes": ["*"],
        "highest_trust": "repository_authored",
        "ttl_seconds": None,
        "track_revision": True,
    }
    event = event_from_data("SourceRegistered", stored_v1, schema_version=1)
    assert event == SourceRegistered(**{**stored_v1, "declared_scopes": ("*",)}, writable_by="operator")


def test_a_schema_newer_than_the_code_is_refused():
    with pytest.raises(InvalidEvent, match="newer than this code knows"):
        upcast("ProjectCreated", 3, {})


def test_a_missing_upcaster_is_reported():
    with pytest.raises(InvalidEvent, match="no upcaster for TestShaped"):
        upcast("TestShaped", 0, GOOD)
