"""A project's log and the content it names, out of one installation and into another (issue 27;
the format is docs/EXPORT.md).

An export is JSON lines: a header, the project's events in project-position order exactly as stored (with
their chain hashes), then the content-addressed blobs the log names: artifacts (bytes, base64), stored
compiled contexts, compile evidence and bundles, each with the digest it is named by; a blob the installation
no longer holds is a ``pruned`` line with its digest. Tokens are not carried: the log keeps only each key's
sha256 (never the key), and an import revokes every token it brings in, so no credential of the source
works on the target.

An import checks the whole file before it writes anything: the header, every line's shape, the project's
chain (``nexum.core.chain``) and every blob's digest; a refusal names the line. Then, in one transaction,
it appends the events as they were (ids, positions and hashes kept), which rebuilds the read models through
the projections, stores the blobs, revokes the tokens, and replays every stored context: a context that
does not replay to its digest undoes the whole import.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from context_app.compilation.models import CompileEvidence, ContextCompilation, StoredContext
from context_app.compilation.services.replays import context_replay
from context_app.resolution.models import BundleContent, Resolve
from context_app.world.artifacts import default_store
from context_app.world.models import WorldItem
from nexum.core import chain
from nexum.core.digests import canonical_json, digest_of, sha256_hex
from nexum.core.errors import ValidationFailed
from nexum.eventstore import importing
from nexum.eventstore.models import Event
from nexum.eventstore.verification import chained_events
from tasks_app.models import AgentToken, Project
from tasks_app.services.tokens import agent_token_revoke
from verification_app.models import CheckRun, CompletionRequest

FORMAT = "nexum.project-export"
FORMAT_VERSION = 1
IMPORT_ACTOR = "command:nexum_import"
TOKEN_REVOKE_REASON = "not carried over by nexum_import: issue new tokens on this installation"

# The blob kinds, each with the table its rows are stored in (artifacts are bytes in the artifact store).
ROW_BLOBS: dict[str, type[models.Model]] = {
    "context": StoredContext,
    "evidence": CompileEvidence,
    "bundle": BundleContent,
}
BLOB_KINDS = ("artifact", *ROW_BLOBS)


class ImportRefused(ValidationFailed):
    code = "import_refused"


@dataclass(frozen=True)
class ImportReport:
    project_id: str
    slug: str
    events: int
    blobs: dict[str, int]
    pruned: int
    replayed: int
    tokens_revoked: int


# --- export -------------------------------------------------------------------------------------------------


def export_lines(project: Project) -> Iterator[str]:
    """The export of ``project``, line by line (each a JSON text without its newline)."""
    project_id = str(project.id)
    events = list(chained_events(project_id))
    blobs = list(_blob_lines(project_id))
    counts = {kind: sum(1 for line in blobs if line["kind"] == kind) for kind in BLOB_KINDS}
    yield _line(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "chain_version": chain.CHAIN_VERSION,
            "project": {"id": project_id, "slug": project.slug},
            "exported_at": chain.timestamp_text(timezone.now()),
            "events": len(events),
            "head_hash": events[-1].event_hash if events else chain.GENESIS,
            "blobs": counts,
            "pruned": sum(1 for line in blobs if _pruned(line)),
        }
    )
    keys = dict(_idempotency_keys(project_id))
    versions = dict(_versions(project_id))
    for event in events:
        yield _line(
            {
                "kind": "event",
                "position": event.position,
                "project_position": event.project_position,
                "stream_id": event.stream_id,
                "version": versions[event.position],
                "type": event.event_type,
                "schema_version": event.schema_version,
                "data": event.data,
                "metadata": event.metadata,
                "idempotency_key": keys.get(event.position),
                "recorded_at": chain.timestamp_text(event.recorded_at),
                "previous_hash": event.previous_hash,
                "event_hash": event.event_hash,
            }
        )
    for blob in blobs:
        yield _line(blob)


def _idempotency_keys(project_id: str) -> Iterator[tuple[int, str]]:
    rows = Event.objects.filter(project_id=project_id, idempotency_key__isnull=False)
    yield from rows.values_list("position", "idempotency_key").iterator()


def _versions(project_id: str) -> Iterator[tuple[int, int]]:
    yield from Event.objects.filter(project_id=project_id).values_list("position", "version").iterator()


def _blob_lines(project_id: str) -> Iterator[dict[str, Any]]:
    artifacts = default_store()
    for sha256 in sorted(_artifact_digests(project_id)):
        if artifacts.exists(sha256):
            content = artifacts.read(sha256)
            yield {"kind": "artifact", "digest": sha256, "content": base64.b64encode(content).decode("ascii")}
        else:
            yield {"kind": "pruned", "blob": "artifact", "digest": sha256}
    contexts = StoredContext.objects.filter(project_id=project_id).order_by("digest")
    kept = set()
    for context in contexts.iterator():
        kept.add(context.digest)
        yield _row_line("context", context.digest, context)
    named = ContextCompilation.objects.filter(project_id=project_id).exclude(digest="")
    for digest in sorted(set(named.values_list("digest", flat=True)) - kept):
        yield {"kind": "pruned", "blob": "context", "digest": digest}
    for evidence in CompileEvidence.objects.filter(project_id=project_id).order_by("digest").iterator():
        yield _row_line("evidence", evidence.digest, evidence)
    bundle_digests = set(
        Resolve.objects.filter(project_id=project_id).values_list("bundle_digest", flat=True)
    )
    bundles = {bundle.digest: bundle for bundle in BundleContent.objects.filter(digest__in=bundle_digests)}
    for digest in sorted(bundle_digests - {""}):
        if digest in bundles:
            yield _row_line("bundle", digest, bundles[digest])
        else:
            yield {"kind": "pruned", "blob": "bundle", "digest": digest}


def _pruned(line: Mapping[str, Any]) -> bool:
    """A blob retention pruned: a ``pruned`` line (content gone), or a context's or bundle's row kept with
    its ``pruned_at`` (its content is recompiled from the log when read)."""
    return line["kind"] == "pruned" or bool(line.get("row", {}).get("pruned_at"))


def _artifact_digests(project_id: str) -> set[str]:
    """The artifact-store content the project's read models name: artifacts, check output, answers."""
    named = set(WorldItem.objects.filter(project_id=project_id).values_list("content_sha256", flat=True))
    named |= set(CheckRun.objects.filter(project_id=project_id).values_list("output_sha256", flat=True))
    named |= set(
        CompletionRequest.objects.filter(project_id=project_id).values_list("answer_sha256", flat=True)
    )
    return named - {""}


def _row_line(kind: str, digest: str, row: models.Model) -> dict[str, Any]:
    fields = {field.attname: _json_value(getattr(row, field.attname)) for field in row._meta.concrete_fields}
    return {"kind": kind, "digest": digest, "row": fields, "row_sha256": sha256_hex(canonical_json(fields))}


def _json_value(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return chain.timestamp_text(value)
    return value


def _line(value: Mapping[str, Any]) -> str:
    return canonical_json(value)


# --- import -------------------------------------------------------------------------------------------------


@dataclass
class _Parsed:
    project_id: str
    slug: str
    events: list[importing.ImportedEvent]
    artifacts: dict[str, bytes]
    rows: dict[str, list[dict[str, Any]]]
    pruned: int


def import_lines(lines: Iterable[str]) -> ImportReport:
    """Check the whole export, then write it in one transaction (see the module docstring)."""
    parsed = _parse(lines)
    if Project.objects.filter(slug=parsed.slug).exclude(id=parsed.project_id).exists():
        raise ImportRefused(
            f"line 1: a different project is already called {parsed.slug!r} here", field="project"
        )
    artifacts = default_store()
    for content in parsed.artifacts.values():
        artifacts.validate_size(len(content))
    with transaction.atomic():
        importing.import_project_log(project_id=parsed.project_id, events=parsed.events)
        # The artifact store is written only once the log is accepted; content-addressed files left by an
        # import undone below are harmless (the same content reuses them).
        for content in parsed.artifacts.values():
            artifacts.put(content)
        written = {kind: _write_rows(model, parsed.rows[kind]) for kind, model in ROW_BLOBS.items()}
        revoked = _revoke_tokens(parsed.project_id)
        replayed = _replay_all(parsed.project_id)
    return ImportReport(
        project_id=parsed.project_id,
        slug=parsed.slug,
        events=len(parsed.events),
        blobs={"artifact": len(parsed.artifacts), **written},
        pruned=parsed.pruned,
        replayed=replayed,
        tokens_revoked=revoked,
    )


def _parse(lines: Iterable[str]) -> _Parsed:
    numbered = enumerate(lines, start=1)
    header = _header(next(numbered, (1, "")))
    project_id, slug = header["project"]["id"], header["project"]["slug"]
    events: list[importing.ImportedEvent] = []
    artifacts: dict[str, bytes] = {}
    rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ROW_BLOBS}
    pruned = 0
    previous = chain.GENESIS
    for number, text in numbered:
        if not text.strip():
            continue
        line = _json(number, text)
        kind = line.get("kind")
        if kind == "event":
            if artifacts or pruned or any(rows.values()):
                raise ImportRefused(f"line {number}: an event after the blobs", field="file")
            event = _event(number, line, project_id)
            found = chain.first_break(
                [_chained(event, project_id)], after_position=len(events), after_hash=previous
            )
            if found is not None:
                raise ImportRefused(f"line {number}: the chain breaks at {found.describe()}", field="file")
            events.append(event)
            previous = event.event_hash
        elif kind == "artifact":
            digest, content = _artifact(number, line)
            artifacts[digest] = content
        elif kind in ROW_BLOBS:
            rows[kind].append(_row(number, kind, line))
        elif kind == "pruned":
            if line.get("blob") not in BLOB_KINDS or not _is_digest(line.get("digest")):
                raise ImportRefused(
                    f"line {number}: a pruned line names a blob kind and its digest", field="file"
                )
            pruned += 1
        else:
            raise ImportRefused(f"line {number}: unknown line kind {kind!r}", field="file")
    if len(events) != header["events"]:
        raise ImportRefused(
            f"line 1: the header announces {header['events']} events, the file holds {len(events)}"
            " (the file is truncated or was edited)",
            field="file",
        )
    if previous != header["head_hash"]:
        raise ImportRefused("line 1: the last event's hash is not the header's head_hash", field="file")
    return _Parsed(project_id, slug, events, artifacts, rows, pruned)


def _header(first: tuple[int, str]) -> dict[str, Any]:
    header = _json(1, first[1]) if first[1].strip() else None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ImportRefused(f"line 1: not a Nexum project export (no {FORMAT!r} header)", field="file")
    if header.get("version") != FORMAT_VERSION:
        raise ImportRefused(
            f"line 1: export format version {header.get('version')!r}; this installation reads version"
            f" {FORMAT_VERSION}",
            field="file",
        )
    if header.get("chain_version") != chain.CHAIN_VERSION:
        raise ImportRefused(f"line 1: chain version {header.get('chain_version')!r} is unknown", field="file")
    project = header.get("project")
    if (
        not isinstance(project, dict)
        or not _is_uuid(project.get("id"))
        or not isinstance(project.get("slug"), str)
    ):
        raise ImportRefused("line 1: the header's project needs an id (a UUID) and a slug", field="file")
    if not isinstance(header.get("events"), int) or not _is_digest(header.get("head_hash")):
        raise ImportRefused("line 1: the header needs an event count and a head_hash", field="file")
    return header


_EVENT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "position": int,
    "project_position": int,
    "stream_id": str,
    "version": int,
    "type": str,
    "schema_version": int,
    "data": (dict, list),
    "metadata": dict,
    "recorded_at": str,
    "previous_hash": str,
    "event_hash": str,
}


def _event(number: int, line: dict[str, Any], project_id: str) -> importing.ImportedEvent:
    for name, kind in _EVENT_FIELDS.items():
        if not isinstance(line.get(name), kind) or isinstance(line.get(name), bool):
            raise ImportRefused(f"line {number}: an event needs {name!r}", field="file")
    key = line.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise ImportRefused(f"line {number}: idempotency_key is a string or null", field="file")
    try:
        recorded_at = datetime.strptime(line["recorded_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError as error:
        raise ImportRefused(
            f"line {number}: recorded_at is not a UTC timestamp: {error}", field="file"
        ) from error
    return importing.ImportedEvent(
        position=line["position"],
        stream_id=line["stream_id"],
        version=line["version"],
        event_type=line["type"],
        schema_version=line["schema_version"],
        data=line["data"],
        metadata=line["metadata"],
        idempotency_key=key,
        project_position=line["project_position"],
        recorded_at=recorded_at,
        previous_hash=line["previous_hash"],
        event_hash=line["event_hash"],
    )


def _chained(event: importing.ImportedEvent, project_id: str) -> chain.ChainedEvent:
    return chain.ChainedEvent(
        position=event.position,
        stream_id=event.stream_id,
        event_type=event.event_type,
        schema_version=event.schema_version,
        data=event.data,
        metadata=event.metadata,
        project_id=project_id,
        project_position=event.project_position,
        recorded_at=event.recorded_at,
        previous_hash=event.previous_hash,
        event_hash=event.event_hash,
    )


def _artifact(number: int, line: dict[str, Any]) -> tuple[str, bytes]:
    digest = line.get("digest")
    try:
        content = base64.b64decode(line.get("content", ""), validate=True)
    except (binascii.Error, TypeError) as error:
        raise ImportRefused(f"line {number}: the artifact's content is not base64", field="file") from error
    if not _is_digest(digest) or sha256_hex(content) != digest:
        raise ImportRefused(
            f"line {number}: the artifact's bytes do not hash to its digest {digest}", field="file"
        )
    return digest, content


def _row(number: int, kind: str, line: dict[str, Any]) -> dict[str, Any]:
    row, digest = line.get("row"), line.get("digest")
    if not isinstance(row, dict) or not _is_digest(digest) or row.get("digest") != digest:
        raise ImportRefused(f"line {number}: a {kind} line needs its digest and its row", field="file")
    if sha256_hex(canonical_json(row)) != line.get("row_sha256"):
        raise ImportRefused(
            f"line {number}: the {kind} {digest} does not hash to its row_sha256", field="file"
        )
    named = {"bundle": "content", "evidence": "items"}.get(kind)
    if named is not None and digest_of(row.get(named)) != digest:
        raise ImportRefused(
            f"line {number}: the {kind}'s content does not hash to its digest {digest}", field="file"
        )
    return row


def _write_rows(model: type[models.Model], rows: list[dict[str, Any]]) -> int:
    """Store the blobs this installation does not hold yet (a bundle may be shared with another project)."""
    fields = {field.attname: field for field in model._meta.concrete_fields}
    instances = [
        model(**{name: fields[name].to_python(value) for name, value in row.items() if name in fields})
        for row in rows
    ]
    pk = model._meta.pk.attname
    held = set(
        model._base_manager.filter(pk__in=[getattr(i, pk) for i in instances]).values_list("pk", flat=True)
    )
    fresh = [instance for instance in instances if getattr(instance, pk) not in held]
    model._base_manager.bulk_create(fresh)
    return len(fresh)


def _revoke_tokens(project_id: str) -> int:
    live = list(
        AgentToken.objects.filter(project_id=project_id, revoked_at__isnull=True).values_list("id", flat=True)
    )
    for token_id in live:
        agent_token_revoke(token_id=str(token_id), reason=TOKEN_REVOKE_REASON, actor=IMPORT_ACTOR)
    return len(live)


def _replay_all(project_id: str) -> int:
    digests = list(
        StoredContext.objects.filter(project_id=project_id)
        .order_by("digest")
        .values_list("digest", flat=True)
    )
    for digest in digests:
        outcome = context_replay(project_id=project_id, digest=digest)
        if not outcome.matches:
            raise ImportRefused(
                f"stored context {digest} replays to {outcome.replayed_digest}, not its digest:"
                " nothing imported",
                field="file",
            )
    return len(digests)


def _json(number: int, text: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ImportRefused(f"line {number}: not JSON ({error.msg})", field="file") from error
    if not isinstance(value, dict):
        raise ImportRefused(f"line {number}: not a JSON object", field="file")
    return value


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return isinstance(value, str)
