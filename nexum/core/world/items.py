"""World-state items (SPEC W1–W4): their events, their rendered text, and the rules for changing facts.

Items: facts, decisions, failures, artifacts, progress notes and tool calls, each scoped to a goal (shared by
every task of the goal) or to one task (W2). Each item lives in its own stream (``fact-<id>``, …); only facts
change after they are recorded (verify, supersede, retract: W3), and the fact's stream version guards those
changes. The project's tool registry and the tool narrowing of a goal or task are world state too.

Rendered text (W4). ``render_<kind>`` gives the exact text of an item as the compiler puts it in the prompt
block, without the bullet, the indentation of continuation lines, the ``[verified] `` label of a verified
fact or the quoting of untrusted content: those belong to the compiler, which writes them
(``nexum.core.compilation.rendering``) and charges them separately (``costs``). The token count stored with
an item is the count of that rendered text, computed once per encoding when the item is recorded and carried
in the event, so a rebuild never re-tokenizes. A tool's text is ``render_tool``: the canonical JSON the
compiler charges for a tool's schema.

Relevance terms: ``item_terms`` keeps the subject's terms and the first words of the text (at most
``MAX_TERMS``), so a compiler ranks items by BM25 without loading their texts.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nexum.core.digests import canonical_json
from nexum.core.errors import Forbidden, IllegalTransition, ValidationFailed
from nexum.core.events import DomainEvent, event_type
from nexum.core.tokens import TokenCounter
from nexum.core.trust import TrustClass
from nexum.core.world.relevance import terms_of

ITEM_KINDS = ("fact", "decision", "failure", "artifact", "progress", "tool_call")
STREAM_PREFIX = {
    "fact": "fact",
    "decision": "decision",
    "failure": "failure",
    "artifact": "artifact",
    "progress": "progress",
    "tool_call": "toolcall",
}
FACT_CURRENT = "current"
FACT_SUPERSEDED = "superseded"
FACT_RETRACTED = "retracted"
FACT_STATUSES = (FACT_CURRENT, FACT_SUPERSEDED, FACT_RETRACTED)

# Items are recorded with an unsigned class only; signed classes need a signature (R3). Through the API a
# caller records at most its role's ceiling (``nexum.core.roles``); this default is for the system's own
# writes (an operator's, the escalation UI's).
RECORDABLE_TRUST_CLASSES = tuple(c.name for c in TrustClass if c <= TrustClass.repository_authored)
DEFAULT_TRUST_CLASS = TrustClass.repository_authored.name

MAX_TERMS = 32
TEXT_MAX = 20_000
SHORT_MAX = 500
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def item_stream(kind: str, item_id: str) -> str:
    return f"{STREAM_PREFIX[kind]}-{item_id}"


def fork_stream(goal_id: str) -> str:
    """The stream of the items a fork carried into its goal (``ItemsCarried``)."""
    return f"fork-{goal_id}"


def tool_stream(project_id: str, name: str) -> str:
    return f"tool-{project_id}-{name}"


def tool_scope_stream(scope_id: str) -> str:
    return f"toolscope-{scope_id}"


def token_counts_stream(project_id: str) -> str:
    return f"tokencounts-{project_id}"


# --- rendered text --------------------------------------------------------------------------------------


def render_fact(text: str, *, subject: str = "", source: str = "") -> str:
    """``<subject>: <text> (source: <source>)``; subject and source only when given."""
    head = f"{subject}: {text}" if subject else text
    return f"{head} (source: {source})" if source else head


def render_decision(text: str, *, rationale: str = "") -> str:
    return f"{text}\nRationale: {rationale}" if rationale else text


def render_failure(text: str, *, attempt: int | None = None) -> str:
    return f"Attempt {attempt}: {text}" if attempt is not None else text


def render_artifact(*, uri: str, summary: str, excerpt: str = "", media_type: str = "") -> str:
    """``<uri> (<media type>): <summary>``, then the excerpt on the following lines."""
    label = uri or "artifact"
    if media_type:
        label = f"{label} ({media_type})"
    head = f"{label}: {summary}"
    return f"{head}\nExcerpt:\n{excerpt}" if excerpt else head


def render_progress(text: str) -> str:
    return text


def render_tool_call(*, tool: str, arguments_digest: str, result_summary: str) -> str:
    """The tool, the first 12 hex digits of its arguments' digest (tells repeated calls apart), the result."""
    return f"Called {tool} (arguments {arguments_digest[:12]}): {result_summary}"


def render_tool(*, name: str, description: str, schema: Mapping[str, Any]) -> str:
    """Exactly what the compiler counts and charges for an exposed tool (C2)."""
    return canonical_json({"name": name, "description": description, "schema": dict(schema)})


def render_item(kind: str, fields: Mapping[str, Any]) -> str:
    """The rendered text of an item of ``kind`` from its stored fields (a read-model row or event data)."""
    if kind == "fact":
        return render_fact(
            fields["text"], subject=fields.get("subject") or "", source=fields.get("source") or ""
        )
    if kind == "decision":
        return render_decision(fields["text"], rationale=fields.get("rationale") or "")
    if kind == "failure":
        return render_failure(fields["text"], attempt=fields.get("attempt"))
    if kind == "artifact":
        return render_artifact(
            uri=fields.get("uri") or "",
            summary=fields["text"],
            excerpt=fields.get("excerpt") or "",
            media_type=fields.get("media_type") or "",
        )
    if kind == "progress":
        return render_progress(fields["text"])
    if kind == "tool_call":
        return render_tool_call(
            tool=fields["tool"], arguments_digest=fields["arguments_digest"], result_summary=fields["text"]
        )
    raise ValidationFailed(
        f"unknown item kind {kind!r}; expected one of {', '.join(ITEM_KINDS)}", field="kind"
    )


MEANING_KINDS = ("fact", "tool_call")
"""The item kinds ranked by relevance to the step: each gets a vector and its named entities when stored."""


def meaning_text(kind: str, fields: Mapping[str, Any]) -> str | None:
    """The text an item of ``kind`` is embedded and its entities read from: a fact's ``subject: text`` (its
    source says where it came from, not what it is about), a tool call's rendered text; ``None`` for the
    kinds ranked by recency."""
    if kind == "fact":
        return render_fact(fields["text"], subject=fields.get("subject") or "")
    if kind == "tool_call":
        return render_item(kind, fields)
    return None


def item_terms(*parts: str, limit: int = MAX_TERMS) -> tuple[str, ...]:
    """The first ``limit`` relevance terms of the parts, in order (subject first, then the text)."""
    terms: list[str] = []
    for part in parts:
        terms.extend(terms_of(part or ""))
        if len(terms) >= limit:
            break
    return tuple(terms[:limit])


def line_count(text: str) -> int:
    return max(1, len(text.splitlines()))


def token_counts(text: str, counters: Iterable[TokenCounter]) -> dict[str, int]:
    """The token count of ``text`` per encoding (W4): what an item's event carries."""
    return {counter.encoding: counter.count(text) for counter in sorted(counters, key=lambda c: c.encoding)}


# --- events -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ItemRecorded(DomainEvent):
    """Fields every item event carries: its id, scope, text, trust, and its token counts per encoding."""

    item_id: str
    goal_id: str
    task_id: str | None
    text: str
    trust_class: str
    token_counts: dict[str, int]
    terms: list[str]


@event_type("FactRecorded")
@dataclass(frozen=True)
class FactRecorded(_ItemRecorded):
    source: str = ""
    subject: str = ""
    observed_at: str | None = None
    """ISO 8601 as sent; ``None`` means 'when recorded'."""
    verified: bool = False
    supersedes: str | None = None


@event_type("FactVerified")
@dataclass(frozen=True)
class FactVerified(DomainEvent):
    fact_id: str
    note: str = ""


@event_type("FactSuperseded")
@dataclass(frozen=True)
class FactSuperseded(DomainEvent):
    fact_id: str
    superseded_by: str
    reason: str = ""


@event_type("FactRetracted")
@dataclass(frozen=True)
class FactRetracted(DomainEvent):
    fact_id: str
    reason: str


@event_type("DecisionRecorded")
@dataclass(frozen=True)
class DecisionRecorded(_ItemRecorded):
    rationale: str = ""


@event_type("FailureRecorded")
@dataclass(frozen=True)
class FailureRecorded(_ItemRecorded):
    attempt: int | None = None


@event_type("ArtifactRecorded")
@dataclass(frozen=True)
class ArtifactRecorded(_ItemRecorded):
    """``text`` is the summary. The content, if any, is in the artifact store under ``content_sha256``."""

    uri: str = ""
    excerpt: str = ""
    media_type: str = ""
    content_sha256: str | None = None
    content_size: int | None = None


@event_type("ProgressRecorded")
@dataclass(frozen=True)
class ProgressRecorded(_ItemRecorded):
    pass


@event_type("ToolCallRecorded")
@dataclass(frozen=True)
class ToolCallRecorded(_ItemRecorded):
    """``text`` is the result summary; the arguments are kept only as their digest."""

    tool: str = ""
    arguments_digest: str = ""


ITEM_EVENTS: dict[str, type[_ItemRecorded]] = {
    "fact": FactRecorded,
    "decision": DecisionRecorded,
    "failure": FailureRecorded,
    "artifact": ArtifactRecorded,
    "progress": ProgressRecorded,
    "tool_call": ToolCallRecorded,
}


CARRIED_FIELDS = (
    "kind",
    "item_id",
    "forked_from",
    "task_id",
    "text",
    "trust_class",
    "token_counts",
    "terms",
    "entities_text",
    "position",
    "actor",
    "status",
    "verified",
    "supersedes",
    "superseded_by",
    "source",
    "subject",
    "observed_at",
    "rationale",
    "attempt",
    "uri",
    "excerpt",
    "media_type",
    "content_sha256",
    "content_size",
    "tool",
    "arguments_digest",
)
"""What a carried item holds: its row as it stood at the fork's position, under its new id."""
CARRY_BATCH = 1000
"""Items per ``ItemsCarried`` event: a fork of a large goal is a few events of one append."""


@event_type("ItemsCarried")
@dataclass(frozen=True)
class ItemsCarried(DomainEvent):
    """World items a fork carries into its goal, each as it stood at the fork's position (``CARRIED_FIELDS``),
    under a new id, with ``forked_from`` naming the item it was copied from. ``position`` is the origin's
    place in the recorded order (the compiler's "newer"), kept so that the fork ranks its items as the
    source did; the item's own stream starts empty (a carried fact's first change is version 1)."""

    goal_id: str
    source_goal_id: str
    items: tuple[dict[str, Any], ...]


def carried_item_id(fork_goal_id: str, origin_id: str) -> str:
    """A carried item's id: the origin's first 64 bits, then 64 bits of the fork's and the origin's hash.
    Ids sort as their origins do (the compiler breaks ties by id), and differ per fork."""
    origin = uuid.UUID(origin_id).hex
    suffix = hashlib.sha256(f"{fork_goal_id}/{origin_id}".encode()).hexdigest()[:16]
    return str(uuid.UUID(origin[:16] + suffix))


@event_type("ItemTokensCounted")
@dataclass(frozen=True)
class ItemTokensCounted(DomainEvent):
    """Token counts of existing items in an encoding they were not counted in when recorded (W4)."""

    encoding: str
    counts: dict[str, int]
    """item id → tokens of its rendered text."""


@event_type("ToolDefined")
@dataclass(frozen=True)
class ToolDefined(DomainEvent):
    """A tool registered or redefined in the project's registry (the whole definition, every time)."""

    tool_id: str
    name: str
    description: str
    schema: dict[str, Any]
    pinned: bool
    score: float | None
    token_counts: dict[str, int]
    terms: list[str] = field(default_factory=list)


@event_type("ToolRemoved")
@dataclass(frozen=True)
class ToolRemoved(DomainEvent):
    tool_id: str
    name: str


@event_type("ToolScopeSet")
@dataclass(frozen=True)
class ToolScopeSet(DomainEvent):
    """A goal or task narrows the tools (``allowed``: names, or ``None`` for all) and pins some of them."""

    scope_id: str
    goal_id: str
    task_id: str | None
    allowed: list[str] | None
    pinned: list[str]


# --- fact rules (decide) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactState:
    fact_id: str
    status: str
    verified: bool
    trust_class: TrustClass


def decide_verify(fact: FactState, *, note: str) -> list[DomainEvent]:
    _require_current(fact, "verified")
    if fact.verified:
        raise IllegalTransition(f"fact {fact.fact_id} is already verified", field="fact_id")
    return [FactVerified(fact_id=fact.fact_id, note=note)]


def decide_retract(fact: FactState, *, reason: str, ceiling: TrustClass) -> list[DomainEvent]:
    _require_current(fact, "retracted")
    _require_within(fact, ceiling, "retract")
    if not reason.strip():
        raise ValidationFailed("a retraction needs a reason", field="reason")
    return [FactRetracted(fact_id=fact.fact_id, reason=reason)]


def decide_supersede(
    fact: FactState, *, new_fact_id: str, reason: str, ceiling: TrustClass
) -> list[DomainEvent]:
    _require_current(fact, "superseded")
    _require_within(fact, ceiling, "supersede")
    if new_fact_id == fact.fact_id:
        raise ValidationFailed("a fact cannot supersede itself", field="fact_id")
    return [FactSuperseded(fact_id=fact.fact_id, superseded_by=new_fact_id, reason=reason)]


def _require_within(fact: FactState, ceiling: TrustClass, action: str) -> None:
    """A caller changes only what is at or below its own ceiling (SPEC R4a): an agent's word cannot erase
    what an operator recorded."""
    if fact.trust_class > ceiling:
        raise Forbidden(
            f"fact {fact.fact_id} has trust_class {fact.trust_class.name}, above your token's ceiling"
            f" {ceiling.name}: you may {action} only facts at or below it",
            field="trust_class",
            details={"trust_class": fact.trust_class.name, "ceiling": ceiling.name, "action": action},
        )


def _require_current(fact: FactState, action: str) -> None:
    if fact.status != FACT_CURRENT:
        raise IllegalTransition(
            f"fact {fact.fact_id} is {fact.status} and cannot be {action}",
            field="fact_id",
            details={"status": fact.status},
        )


# --- tools ------------------------------------------------------------------------------------------------


def validate_tool_name(name: str, *, field_name: str = "name") -> str:
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise ValidationFailed(
            "a tool name is 1–64 letters, digits, '_', '-' or '.'", field=field_name, details={"name": name}
        )
    return name


def effective_tools(
    registry: Iterable[tuple[str, bool]],
    scopes: Iterable[tuple[list[str] | None, list[str]]],
) -> list[tuple[str, bool]]:
    """The tools a task may use: the registry ``(name, pinned)`` narrowed by each scope (goal, then task).

    Each scope's ``allowed`` (``None``: no narrowing) intersects the set; a scope's ``pinned`` names pin
    tools that are still allowed. Sorted by name.
    """
    tools = dict(registry)
    for allowed, pinned in scopes:
        if allowed is not None:
            keep = set(allowed)
            tools = {name: is_pinned for name, is_pinned in tools.items() if name in keep}
        for name in pinned:
            if name in tools:
                tools[name] = True
    return sorted(tools.items())
