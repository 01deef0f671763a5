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
    content = {
        "chain": CHAIN_VERSION,
        "previous": previous_hash,
        "stream": stream_id,
        "type": event_type,
        "schema_version": schema_version,
        "data": data,
        "metadata": metadata,
        "project": project_id,
        "project_position": project_position,
        "recorded_at": timestamp_text(recorded_at),
    }
    text = canonical_json(content)
    if "e+" in text or "E+" in text:
        # Rare: a float written with an exponent. Hash it as the database stores it (see the module doc).
        text = canonical_json(_as_stored(content))
    return sha256_hex(text)


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
