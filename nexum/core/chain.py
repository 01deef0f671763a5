"""The hash chain of a project's log (issue 27): each event's hash covers its content and the hash of the
event before it in its project's log, so a changed, removed or reordered event breaks every link after it.

The hash of an event is the sha256 (hex) of the canonical JSON (``nexum.core.digests.canonical_json``:
sorted keys, no whitespace, UTF-8) of the object::

    {"chain": 1, "previous": <the previous event's hash, GENESIS for the first>, "stream": <stream id>,
     "type": <event type>, "schema_version": <n>, "data": <the data as stored>, "metadata": <as stored>,
     "project": <project id as a lowercase hyphenated UUID, or null>, "project_position": <n>,
     "recorded_at": <UTC, "YYYY-MM-DDTHH:MM:SS.ffffffZ">}

Numbers are hashed as the database gives them back: a float with an integral value is hashed as the integer
(PostgreSQL's jsonb turns ``1e+16`` into ``10000000000000000``), so the hash of what was appended equals the
hash of what is read. The stream ``version`` is not covered: a stream's versions are checked by the unique
``(stream_id, version)`` constraint, and the chain by the project's gapless positions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nexum.core.digests import canonical_json, sha256_hex

CHAIN_VERSION = 1
GENESIS = "0" * 64


@dataclass(frozen=True)
class ChainedEvent:
    """What the chain covers of one stored event, with the hashes stored beside it."""

    position: int
    stream_id: str
    event_type: str
    schema_version: int
    data: Any
    metadata: Mapping[str, Any]
    project_id: str | None
    project_position: int
    recorded_at: datetime
    previous_hash: str
    event_hash: str


@dataclass(frozen=True)
class ChainBreak:
    """The first event of a project's log whose stored hashes do not match what it holds."""

    position: int
    project_id: str | None
    project_position: int
    event_type: str
    reason: str

    def describe(self) -> str:
        project = self.project_id or "(no project)"
        return (
            f"event {self.position} ({self.event_type}) of project {project} at project position "
            f"{self.project_position}: {self.reason}"
        )


def timestamp_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_hash(
    *,
    previous_hash: str,
    stream_id: str,
    event_type: str,
    schema_version: int,
    data: Any,
    metadata: Mapping[str, Any],
    project_id: str | None,
    project_position: int,
    recorded_at: datetime,
) -> str:
    return event_hash_of_text(
        previous_hash=previous_hash,
        stream_id=stream_id,
        event_type=event_type,
        schema_version=schema_version,
        data_text=canonical_json(data),
        metadata_text=canonical_json(metadata),
        project_id=project_id,
        project_position=project_position,
        recorded_at_text=timestamp_text(recorded_at),
    )


def event_hash_of_text(
    *,
    previous_hash: str,
    stream_id: str,
    event_type: str,
    schema_version: int,
    data_text: str,
    metadata_text: str,
    project_id: str | None,
    project_position: int,
    recorded_at_text: str,
) -> str:
    """``event_hash`` given the canonical JSON of the data and metadata and the timestamp's text, which an
    append computes once (the data's text is also what it sends to the database)."""
    # canonical_json of the object in the module docstring, written out in its sorted key order: an encoder
    # per value (as canonical_json makes) would cost more than the hash.
    text = (
        f'{{"chain":{CHAIN_VERSION},"data":{_as_stored_text(data_text)},'
        f'"metadata":{_as_stored_text(metadata_text)},"previous":{_string(previous_hash)},'
        f'"project":{_string(project_id) if project_id is not None else "null"},'
        f'"project_position":{int(project_position)},"recorded_at":{_string(recorded_at_text)},'
        f'"schema_version":{int(schema_version)},"stream":{_string(stream_id)},"type":{_string(event_type)}}}'
    )
    return sha256_hex(text)


_STRING = json.JSONEncoder(ensure_ascii=False).encode

canonical_text = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
"""``canonical_json`` with one encoder made once (``json.dumps`` with options makes one per call): an append
serializes every event's data with it."""


def _string(value: str) -> str:
    return _STRING(value)


def _as_stored_text(text: str) -> str:
    if "e+" in text or "E+" in text:
        # Rare: a float written with an exponent. Hash it as the database stores it (see the module doc).
        return canonical_json(_as_stored(json.loads(text)))
    return text


def hash_of(event: ChainedEvent, previous_hash: str) -> str:
    return event_hash(
        previous_hash=previous_hash,
        stream_id=event.stream_id,
        event_type=event.event_type,
        schema_version=event.schema_version,
        data=event.data,
        metadata=event.metadata,
        project_id=event.project_id,
        project_position=event.project_position,
        recorded_at=event.recorded_at,
    )


def first_break(
    events: Iterable[ChainedEvent], *, after_position: int = 0, after_hash: str = GENESIS
) -> ChainBreak | None:
    """Walk one project's events in project-position order, from the one after ``after_position`` (whose hash
    is ``after_hash``), and return the first that does not link or does not hash to what it stores."""
    expected_place = after_position + 1
    previous = after_hash
    for event in events:
        found = _mismatch(event, expected_place, previous)
        if found is not None:
            return ChainBreak(
                event.position, event.project_id, event.project_position, event.event_type, found
            )
        previous = event.event_hash
        expected_place += 1
    return None


def _mismatch(event: ChainedEvent, expected_place: int, previous: str) -> str | None:
    if event.project_position != expected_place:
        return f"expected project position {expected_place} (an event is missing or out of place)"
    if event.previous_hash != previous:
        return "its previous_hash is not the hash of the event before it"
    if hash_of(event, previous) != event.event_hash:
        return "its content does not hash to its stored event_hash (changed after it was appended)"
    return None


def _as_stored(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _as_stored(member) for key, member in value.items()}
    if isinstance(value, list):
        return [_as_stored(member) for member in value]
    return value
