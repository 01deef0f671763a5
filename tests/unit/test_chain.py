"""The hash chain's rules (``nexum.core.chain``), without a database."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from nexum.core import chain
from nexum.core.digests import canonical_json, sha256_hex

AT = datetime(2026, 12, 4, 19, 30, 1, 250, tzinfo=UTC)
PROJECT = "3f2b5c1e-8d7a-4c3b-9e1f-0a2b3c4d5e6f"


def _event(place: int, previous: str, data: dict | None = None) -> chain.ChainedEvent:
    fields = {
        "stream_id": f"task-{place}",
        "event_type": "TaskStarted",
        "schema_version": 1,
        "data": data if data is not None else {"task_id": str(place), "note": "ünïcode"},
        "metadata": {"actor": "test"},
        "project_id": PROJECT,
        "project_position": place,
        "recorded_at": AT,
    }
    own = chain.event_hash(previous_hash=previous, **fields)
    return chain.ChainedEvent(position=100 + place, previous_hash=previous, event_hash=own, **fields)


def _log(length: int) -> list[chain.ChainedEvent]:
    events, previous = [], chain.GENESIS
    for place in range(1, length + 1):
        events.append(_event(place, previous))
        previous = events[-1].event_hash
    return events


def test_the_hash_is_the_sha256_of_the_documented_canonical_object():
    event = _event(1, chain.GENESIS)
    documented = {
        "chain": 1,
        "previous": chain.GENESIS,
        "stream": event.stream_id,
        "type": event.event_type,
        "schema_version": 1,
        "data": event.data,
        "metadata": event.metadata,
        "project": PROJECT,
        "project_position": 1,
        "recorded_at": "2026-12-04T19:30:01.000250Z",
    }
    assert event.event_hash == sha256_hex(canonical_json(documented))


def test_an_intact_log_has_no_break():
    assert chain.first_break(_log(5)) is None


def test_a_changed_event_is_named():
    log = _log(4)
    log[2] = dataclasses.replace(log[2], data={"task_id": "3", "note": "altered"})
    found = chain.first_break(log)
    assert (found.position, found.project_position, found.event_type) == (103, 3, "TaskStarted")
    assert "does not hash" in found.reason
    assert f"event 103 (TaskStarted) of project {PROJECT} at project position 3" in found.describe()


def test_a_removed_or_reordered_event_is_named():
    log = _log(4)
    assert chain.first_break([log[0], log[2], log[3]]).project_position == 3
    swapped = chain.first_break([log[0], log[2], log[1], log[3]])
    assert swapped.position == 103 and "missing or out of place" in swapped.reason


def test_a_rehashed_event_breaks_the_link_to_the_next():
    log = _log(3)
    forged = _event(2, log[0].event_hash, data={"task_id": "2", "note": "forged"})
    found = chain.first_break([log[0], forged, log[2]])
    assert found.project_position == 3 and "previous_hash" in found.reason


def test_a_float_hashes_as_the_database_gives_it_back():
    written = _event(1, chain.GENESIS, data={"score": 1e16, "small": 1.5e-07})
    read_back = _event(1, chain.GENESIS, data={"score": 10000000000000000, "small": 1.5e-07})
    assert written.event_hash == read_back.event_hash
