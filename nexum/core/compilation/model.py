"""The compiler's value types: the items, step and tools a compile reads (``CompileInput``), what it returns
(``CompiledContext``) and its errors, with the constants they need."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import islice, repeat
from json.encoder import encode_basestring as _json_string  # what json.dumps writes for a str
from typing import Any, NamedTuple

from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation.exclusions import ExcludedItem, ExclusionRun, item_reasons, reason_code
from nexum.core.compilation.versions import COMPILER_VERSION, MEANING_FROM
from nexum.core.errors import ValidationFailed
from nexum.core.tokens import TokenCounter
from nexum.core.trust import TrustClass
from nexum.core.world.relevance import terms_of

DEFAULT_RELEVANCE_FLOOR = 0.2
"""A fact (from version 5, an evidence item too) is relevant when its score is above 0 and at least this
share of the way from the typical candidate's score to the best one of its section (version 4: this share of
the best score). Chosen on bench/context_quality.py (README: Context quality) with version 5: at
``quick`` 0.2 kept 72.3 % of the needed facts in 5,800 prompt tokens, 0.15 71.9 % in 7,200, 0.25 70.5 % in
3,800; at ``frontier`` it kept the prompt near 7,300 tokens instead of filling 44,000."""

_TRUST_RANK = {trust.name: int(trust) for trust in TrustClass}
_QUOTE_BELOW = int(TrustClass.agent_reported)
_QUOTE_RETRIEVED_BELOW = int(TrustClass.repository_authored)
UNTRUSTED_LABEL = "untrusted"

EVIDENCE_KINDS = ("diagnostic", "code")
STATE_KINDS = ("failure", "decision", "fact", "artifact", "progress")


class BudgetTooSmall(ValidationFailed):
    """Even the section headers of the pinned content, with every pinned text cut to nothing, do not fit."""

    code = "budget_too_small"


class MissingItemText(ValidationFailed):
    code = "missing_item_text"


@dataclass(frozen=True, slots=True, weakref_slot=True)
class ContextItem:
    """One world-state or evidence item as the compiler sees it: metadata, with the text loaded on demand.

    ``token_count`` and ``line_count`` describe ``text`` (the item's rendered text) in the compile's encoding;
    they are computed when the item is stored (SPEC W4) and the compiler trusts them for selection.
    ``origin`` says where the item comes from (``source:path#L1-35``, a URL, a check) and ``observed``
    when, as people read it ("observed 2 days ago", "stale: observed 3 years ago (TTL 30 days)"); a
    retrieved item (one with ``observed``) and every evidence item render with them on an origin line.
    ``text`` may be given inline; when it is ``None`` the compile's ``load_texts`` fetches it, and only for
    items that are included. ``position`` is the recorded order (higher is newer); ``verified`` matters for
    facts; ``terms`` are the item's relevance terms (``relevance.terms_of`` of its text, subject or summary).
    """

    kind: str
    id: str
    token_count: int
    line_count: int = 1
    position: int = 0
    verified: bool = False
    terms: tuple[str, ...] = ()
    trust_class: str = "repository_authored"
    origin: str | None = None
    observed: str | None = None
    text: str | None = field(default=None, repr=False, compare=False)
    stems: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    """``relevance.stems_of(terms)`` when the store computed it once (the candidate cache does); else computed
    when ranked."""
    vector: bytes | None = field(default=None, repr=False, compare=False)
    """The item's int8 vector by the compile's embedder (``nexum.core.world.vectors``), computed when it was
    stored; ``None``: none by that embedder (it then ranks by its words alone)."""
    entities: tuple[str, ...] = field(default=(), repr=False, compare=False)
    """The named entities of the item's text (``nexum.core.world.entities.entities_of``), for second hops."""
    given: bool = False
    """Chosen for this compile by whoever supplied it — the request's own evidence, the latest check runs, the
    resolver's answers to the step's questions — so relevant by construction: never below the floor."""

    def __post_init__(self) -> None:
        if self.token_count < 0 or self.line_count < 1:
            raise ValidationFailed(
                f"{self.kind} {self.id!r}: token_count must be >= 0 and line_count >= 1", field="token_count"
            )

    @classmethod
    def from_text(
        cls,
        kind: str,
        id: str,
        text: str,
        *,
        counter: TokenCounter,
        position: int = 0,
        verified: bool = False,
        trust_class: str = "repository_authored",
        origin: str | None = None,
        observed: str | None = None,
        terms: tuple[str, ...] | None = None,
        given: bool = False,
    ) -> ContextItem:
        """An item with its metadata computed from ``text`` (what a store does once, when it records one)."""
        return cls(
            kind=kind,
            id=id,
            token_count=counter.count(text),
            line_count=max(1, len(text.splitlines())),
            position=position,
            verified=verified,
            terms=terms_of(text) if terms is None else terms,
            trust_class=trust_class,
            origin=origin,
            observed=observed,
            text=text,
            given=given,
        )

    def quoted_in(self, version: int) -> bool:
        """Rendered as quoted data (C9) by renderer ``version``: below ``agent_reported`` (an unknown trust
        class is treated as untrusted), and from version 3 retrieved content below ``repository_authored``
        too (what a source the agent can write yields, R4a)."""
        rank = _TRUST_RANK.get(self.trust_class, -1)
        if version >= 3 and self.observed is not None:
            return rank < _QUOTE_RETRIEVED_BELOW
        return rank < _QUOTE_BELOW

    def quote_label(self) -> str:
        """How quoted data names its class: ``untrusted``, or ``agent_reported`` (the agent can write it)."""
        return "agent_reported" if self.trust_class == "agent_reported" else UNTRUSTED_LABEL

    @property
    def has_origin_line(self) -> bool:
        """Rendered under an origin line (version 2): retrieved items and evidence."""
        return self.observed is not None or self.kind in EVIDENCE_KINDS


@dataclass(frozen=True, slots=True)
class Step:
    id: str
    objective: str
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str = ""
    schema: Mapping[str, Any] = field(default_factory=dict, hash=False)
    pinned: bool = False
    score: float | None = None


class Fold(NamedTuple):
    """A compaction fold (C11): the summary item that stands for the ``folded`` items, each as ``(kind, id)``
    in the compiler's kinds (a tool call is a ``diagnostic``)."""

    summary: tuple[str, str]
    folded: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CompileInput:
    """Everything one compile reads, besides the budget and the token counter.

    ``evidence`` holds items of kind ``diagnostic`` or ``code``; each state list holds items of its own kind.

    ``folds`` are the task's folds, oldest first, and the lists hold the folded items and the summaries
    alike. The compile shows each fold's summary or its entries, never both: the oldest ``folds_required``
    folds (what this model's compaction threshold needs) always show their summaries; of the others, the
    entries are shown when all of them fit, and otherwise the oldest folds give way to their summaries until
    those left unfolded fit whole (``compile_context``).
    """

    goal: str
    step: Step
    constraints: tuple[str, ...] = ()
    success_criteria: tuple[str, ...] = ()
    failures: tuple[ContextItem, ...] = ()
    decisions: tuple[ContextItem, ...] = ()
    facts: tuple[ContextItem, ...] = ()
    artifacts: tuple[ContextItem, ...] = ()
    progress: tuple[ContextItem, ...] = ()
    evidence: tuple[ContextItem, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    evidence_share: float = 0.6
    charge_tool_schemas: bool = True
    folds: tuple[Fold, ...] = ()
    folds_required: int = 0
    parent_objective: str = ""
    """The objective of the step this one refines (its parent, unless that is the goal): part of the query."""
    focus: str = ""
    """What the agent is working on right now (the compile request's ``focus``): part of the query, and
    rendered in the current step, so the digest covers it."""
    relevance_floor: float = DEFAULT_RELEVANCE_FLOOR
    query_vector: bytes = b""
    """The int8 vector of the step's query text (``query_text``) by ``embedder``; empty: no embedder."""
    embedder: str = ""
    """``name@version`` of the embedder that made every vector of this compile (part of the digest from
    version 5); empty: relevance by words alone."""

    def __post_init__(self) -> None:
        for name in (
            "constraints",
            "success_criteria",
            "failures",
            "decisions",
            "facts",
            "artifacts",
            "progress",
            "evidence",
            "tools",
            "folds",
        ):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        share = self.evidence_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
            raise ValidationFailed("evidence_share must be a number from 0 to 1", field="evidence_share")
        floor = self.relevance_floor
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0.0 <= floor <= 1.0:
            raise ValidationFailed("relevance_floor must be a number from 0 to 1", field="relevance_floor")


class Truncation(NamedTuple):
    """A pinned section cut to fit: its tokens before and after (texts only, without headers)."""

    section: str
    original_tokens: int
    kept_tokens: int


class SectionTokens(NamedTuple):
    """Tokens per section. ``tools`` and ``pinned`` are counted; ``evidence`` and ``state`` are the (slightly
    conservative) amounts charged for the included items, headers and separators."""

    tools: int
    pinned: int
    evidence: int
    state: int


@dataclass(frozen=True)
class CompiledContext:
    """The result of one compile. ``excluded`` lists every item and tool left out (built on first access from
    ``exclusion_runs``); ``included`` lists the evidence and state items in the block, in block order."""

    prompt_block: str
    tools: tuple[str, ...]
    included: tuple[tuple[str, str], ...]
    exclusion_runs: tuple[ExclusionRun, ...]
    truncated: tuple[Truncation, ...]
    section_tokens: SectionTokens
    prompt_tokens: int
    tool_tokens: int
    budget: ModelBudget
    encoding: str
    digest: str
    exclusion_runs_json: str = field(default="", repr=False, compare=False)
    """The canonical JSON of ``exclusion_runs`` (as digested and as stored); empty when not computed."""
    compiler_version: int = COMPILER_VERSION
    embedder: str = ""
    """``name@version`` of the embedder whose vectors ranked this compile (from version 5; empty: none)."""

    @cached_property
    def excluded(self) -> tuple[ExcludedItem, ...]:
        rows: list[ExcludedItem] = []
        make = partial(tuple.__new__, ExcludedItem)
        for run in self.exclusion_runs:
            left = repeat(run.tokens_left)
            rows.extend(map(make, zip(repeat(run.kind), run.ids, run.tokens_needed, left, item_reasons(run))))
        return tuple(rows)

    def exclusion_summary(self) -> dict[str, Any]:
        """What was left out, without an entry per item: the total, the count per reason code
        (``reason_code``), and each run's kind, reason, tokens left and size, in the order of ``excluded``."""
        by_reason: dict[str, int] = {}
        for run in self.exclusion_runs:
            code = reason_code(run)
            by_reason[code] = by_reason.get(code, 0) + len(run.ids)
        return {
            "count": sum(by_reason.values()),
            "by_reason": dict(sorted(by_reason.items())),
            "runs": [
                {
                    "kind": run.kind,
                    "reason": run.reason,
                    "tokens_left": run.tokens_left,
                    "count": len(run.ids),
                }
                for run in self.exclusion_runs
            ],
        }

    def excluded_json(self, start: int = 0, stop: int | None = None) -> str:
        """``excluded`` as a JSON array of objects (``kind``, ``id``, ``tokens_needed``, ``tokens_left``,
        ``reason``), written straight from the runs: a context of a large world excludes tens of thousands of
        items, and building an object per record (and collecting them) cost more than the compile. ``start``
        and ``stop`` slice the list as ``excluded[start:stop]`` would (a page of it)."""
        parts: list[str] = []
        offset = 0
        for run in self.exclusion_runs:
            first, offset = offset, offset + len(run.ids)
            low, high = (
                max(start - first, 0),
                len(run.ids) if stop is None else min(stop - first, len(run.ids)),
            )
            if low >= high:
                continue
            head = f'{{"kind":{_json_string(run.kind)},"id":'
            tail = f',"tokens_left":{run.tokens_left},"reason":'
            reasons = islice(item_reasons(run, _json_string), low, high)
            parts.extend(
                f'{head}{item_id},"tokens_needed":{tokens}{tail}{reason}}}'
                for item_id, tokens, reason in zip(
                    map(_json_string, run.ids[low:high]), run.tokens_needed[low:high], reasons, strict=True
                )
            )
        return "[" + ",".join(parts) + "]"

    @property
    def total_tokens(self) -> int:
        """What this context costs against ``budget.context_tokens``: the block plus charged tool schemas."""
        return self.prompt_tokens + self.tool_tokens

    def canonical_form(self) -> dict[str, Any]:
        """What ``digest`` is the digest of (``digests.digest_of``): every member above but the digest."""
        form: dict[str, Any] = {
            "compiler_version": self.compiler_version,
            "prompt_block": self.prompt_block,
            "tools": list(self.tools),
            "included": [list(pair) for pair in self.included],
            "exclusion_runs": [list(run) for run in self.exclusion_runs],
            "truncated": [list(record) for record in self.truncated],
            "section_tokens": self.section_tokens._asdict(),
            "prompt_tokens": self.prompt_tokens,
            "tool_tokens": self.tool_tokens,
            "budget": self.budget.as_data(),
            "encoding": self.encoding,
        }
        if self.compiler_version >= MEANING_FROM:
            form["embedder"] = self.embedder
        return form

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form for storage and the API: canonical form, digest and exclusion records."""
        return {
            **self.canonical_form(),
            "excluded": [record._asdict() for record in self.excluded],
            "truncated": [record._asdict() for record in self.truncated],
            "digest": self.digest,
        }


TextLoader = Callable[[Sequence[ContextItem]], Mapping[tuple[str, str], str]]
"""Fetches the texts of the given (included) items in one call, keyed by ``(kind, id)``."""


class Entry(NamedTuple):
    """An item packed into the block: its section (``evidence`` or a state kind), the item, and the tokens
    charged for it (its section's header too when it is the section's first)."""

    section: str
    item: ContextItem
    cost: int
