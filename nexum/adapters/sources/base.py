"""The source port (SPEC R1, R11): the plugin base class every source kind subclasses, the failures a source
raises, ``fetch`` (which turns any failure into a failed result) and the simple query matching the built-in
kinds share. Sources do I/O (files, git, HTTP), so they live outside ``nexum.core``, but they import no
Django and are unit-testable on their own.

Trust follows who can write (SPEC R4a): every source has ``writable_by`` (``agent`` or ``operator``,
``config.writable_by``); a path source over a folder the agent can write (inside the workspace root) is the
agent's whatever was declared, and its ``highest_trust`` is at most ``agent_reported``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from nexum.adapters.source_policy import SourcePolicy
from nexum.core.errors import ValidationFailed
from nexum.core.injection import looks_like_instruction
from nexum.core.resolution.model import (
    ANY_SCOPE,
    LABEL_SUSPECTED_INSTRUCTION,
    Freshness,
    RetrievedItem,
    SourceResult,
    SourceSpec,
)
from nexum.core.roles import AGENT, OPERATOR, content_ceiling, validate_role
from nexum.core.trust import TrustClass

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class SourceFailure(Exception):
    """A source could not answer. ``kind`` is ``unreachable``, ``timeout``, ``too_large``, ``malformed`` or
    ``error``."""

    kind = "error"

    def __init__(self, source: str, message: str, *, kind: str | None = None) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message
        if kind is not None:
            self.kind = kind


class SourceUnavailable(SourceFailure):
    """The source is down: connection refused, timed out, or answering with a server error."""

    kind = "unreachable"


class SourceResponseRejected(SourceFailure):
    """The source answered, but with something we refuse to read (too large, malformed)."""

    kind = "malformed"


class SourceRefused(SourceFailure):
    """The operator's source policy refused the read (a path or an address outside what it allows)."""

    kind = "refused"


# --- the port ---------------------------------------------------------------------------------------------


class SourcePlugin(ABC):
    """One source behind the typed port (R1). A kind subclasses it in a module of its own in this package,
    registered with ``@source_kind("<kind>")`` (``registry.py``), and implements ``from_config`` and
    ``retrieve``. ``compiles_as`` is the compiler section its retrieved items go to: ``fact`` (knowledge)
    or ``code`` (a repository's files, shown as code evidence)."""

    kind: ClassVar[str]
    compiles_as: ClassVar[str] = "fact"
    allowed_trust: ClassVar[frozenset[TrustClass]] = frozenset(
        {TrustClass.untrusted_retrieved, TrustClass.repository_authored}
    )
    default_trust: ClassVar[TrustClass] = TrustClass.repository_authored
    config_keys: ClassVar[frozenset[str]] = frozenset(
        {"scopes", "highest_trust", "ttl_seconds", "track_revision", "writable_by"}
    )

    def __init__(
        self,
        name: str,
        *,
        declared_scopes: Sequence[str] = (ANY_SCOPE,),
        highest_trust: TrustClass | None = None,
        freshness: Freshness | None = None,
        writable_by: str = OPERATOR,
        clock: Clock = utc_now,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValidationFailed("a source needs a name", field="name")
        trust = (
            self.default_trust
            if highest_trust is None
            else TrustClass.parse(highest_trust, field="highest_trust")
        )
        if trust not in self.allowed_trust:
            allowed = ", ".join(t.name for t in sorted(self.allowed_trust))
            raise ValidationFailed(
                f"a {self.kind} source cannot be {trust.name}; allowed: {allowed}", field="highest_trust"
            )
        scopes = tuple(declared_scopes)
        if not scopes or not all(isinstance(s, str) and s.strip() for s in scopes):
            raise ValidationFailed("scopes must be a non-empty list of strings", field="scopes")
        self.name = name
        self.declared_scopes = tuple(sorted(set(scopes)))
        self.declared_trust = trust
        self.freshness = freshness or Freshness()
        self.clock = clock
        self.writable_by = validate_role(writable_by, field="writable_by")

    @property
    def highest_trust(self) -> TrustClass:
        """The class the source's items carry at most: what it was configured with, and never more than
        whoever can write it allows (R4a: what the agent can write is at most ``agent_reported``)."""
        return min(self.declared_trust, content_ceiling(self.writable_by))

    def written_by(self, writer: str | None) -> None:
        """Record who the server found can write the source (a path inside the workspace: the agent). The
        agent wins over whatever the operator declared: it can write there, whatever was claimed."""
        if writer == AGENT:
            self.writable_by = AGENT

    @property
    def spec(self) -> SourceSpec:
        return SourceSpec(
            name=self.name,
            kind=self.kind,
            declared_scopes=self.declared_scopes,
            highest_trust=self.highest_trust,
            freshness=self.freshness,
            writable_by=self.writable_by,
        )

    def current_revision(self) -> str | None:
        """The source's current revision, or ``None`` when it has none (TTL-only sources)."""
        return None

    @abstractmethod
    def retrieve(self, query: str, scopes: Sequence[str], limit: int) -> list[RetrievedItem]:
        """Items matching ``query`` within ``scopes`` (already authorized), at most ``limit`` of them."""

    # helpers for subclasses

    @classmethod
    def common_options(cls, config: Mapping[str, Any], *, default_freshness: Freshness) -> dict[str, Any]:
        unknown = sorted(set(config) - cls.config_keys)
        if unknown:
            raise ValidationFailed(
                f"unknown {cls.kind} source option(s): {', '.join(unknown)}", field=unknown[0]
            )
        options: dict[str, Any] = {}
        if "scopes" in config:
            scopes = config["scopes"]
            if isinstance(scopes, str) or not isinstance(scopes, list | tuple):
                raise ValidationFailed("scopes must be a list of strings", field="scopes")
            options["declared_scopes"] = tuple(scopes)
        if "highest_trust" in config:
            options["highest_trust"] = TrustClass.parse(config["highest_trust"], field="highest_trust")
        if "writable_by" in config:
            options["writable_by"] = validate_role(config["writable_by"], field="writable_by")
        ttl = config.get("ttl_seconds", default_freshness.ttl_seconds)
        track = config.get("track_revision", default_freshness.track_revision)
        if not isinstance(track, bool):
            raise ValidationFailed("track_revision must be true or false", field="track_revision")
        options["freshness"] = Freshness(ttl_seconds=ttl, track_revision=track)
        return options

    @classmethod
    @abstractmethod
    def from_config(
        cls, name: str, config: Mapping[str, Any], *, policy: SourcePolicy, clock: Clock = utc_now
    ) -> SourcePlugin:
        """Build the source from its stored configuration, confined by ``policy``; malformed options raise
        ``ValidationFailed``, options the policy refuses ``SourceNotAllowed``."""

    def _validate_scopes(self, scopes: Sequence[str]) -> tuple[str, ...]:
        if isinstance(scopes, str):
            raise ValidationFailed("scopes must be a list", field="scopes")
        return tuple(sorted(set(scopes)))

    def _validate_limit(self, limit: int) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValidationFailed("limit must be a non-negative integer", field="limit")
        return limit


def fetch(source: SourcePlugin, query: str, scopes: Sequence[str], limit: int) -> SourceResult:
    """Call ``source`` and wrap the outcome. Any failure (including a bug in a plugin) becomes a failed result
    so the resolve goes on and the bundle records the source as unavailable (R11)."""
    try:
        revision = source.current_revision()
        items = source.retrieve(query, scopes, limit)
    except SourceFailure as failure:
        return SourceResult.failed(source.name, failure.message, kind=failure.kind)
    except ValidationFailed:
        raise  # the caller asked for something malformed: that is the caller's error, not an outage
    except Exception as exc:  # a plugin's bug must not fail the resolve
        return SourceResult.failed(source.name, f"{type(exc).__name__}: {exc}", kind="error")
    return SourceResult.ok(source.name, items, current_revision=revision, writable_by=source.writable_by)


# --- query matching ---------------------------------------------------------------------------------------

_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "in", "is",
        "it", "of", "on", "or", "should", "the", "this", "to", "was", "what", "when", "where", "which", "who",
        "why", "with",
    }
)  # fmt: skip


def query_terms(query: str) -> tuple[str, ...]:
    terms = {t for t in re.findall(r"[a-z0-9_]+", query.casefold()) if len(t) > 1 and t not in _STOPWORDS}
    return tuple(sorted(terms))


def match_score(terms: Sequence[str], text: str, *, bonus_text: str = "") -> int:
    """Simple term matching: occurrences of each term in ``text``, plus 3 per term found in ``bonus_text``
    (a path or a heading)."""
    lowered, bonus = text.casefold(), bonus_text.casefold()
    return sum(lowered.count(term) + (3 if term in bonus else 0) for term in terms)


def labels_of(item_text: str, trust: TrustClass) -> tuple[str, ...]:
    """The labels a retrieved item carries: ``suspected_instruction`` when content below
    ``repository_authored`` reads like an instruction to the model."""
    if trust < TrustClass.repository_authored and looks_like_instruction(item_text):
        return (LABEL_SUSPECTED_INSTRUCTION,)
    return ()


def parse_observed_at(value: Any, clock: Clock) -> datetime:
    """When a record says its content was observed (never later than now), else now."""
    now = clock()
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return min(parsed, now)
    return now


def record_claim(record: Mapping[str, Any]) -> tuple[TrustClass | None, str | None]:
    """The trust class a record claims (None: none, or not one) and its signature, if any."""
    claimed = record.get("trust_class")
    signature = record.get("signature")
    trust = None
    if isinstance(claimed, str):
        try:
            trust = TrustClass.parse(claimed)
        except ValidationFailed:
            trust = None
    return trust, signature if isinstance(signature, str) else None
