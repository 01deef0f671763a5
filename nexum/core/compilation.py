"""The compile service's events and pure rules (SPEC C8, C10–C12): compile requests, compiled contexts,
compaction folds, the default summarizer and the diff of two compiled contexts.

Streams. Every compile request has its own stream ``compile-<request_id>``: an asynchronous request starts
it with ``ContextCompileRequested`` (version 1) and ends it with ``ContextCompiled`` or
``ContextCompileFailed``; a synchronous compile writes ``ContextCompiled`` as version 1. The request id is
the idempotency key, and the stream version is the guard: a redelivered message finds the request already
answered and appends nothing. Folds of a task's progress and tool calls go to ``compaction-<task_id>``.

Events carry ids, digests and numbers only, never prompt text (R10): the prompt block lives in the
content-addressed store of compiled contexts, keyed by its digest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from nexum.core.events import Event, event_type
from nexum.core.tokens import TokenCounter

REQUEST_QUEUED = "queued"
REQUEST_DONE = "done"
REQUEST_FAILED = "failed"

EVIDENCE_KINDS = ("diagnostic", "code")
COMPACTED_KINDS = ("progress", "tool_call")


def compile_stream(request_id: str) -> str:
    return f"compile-{request_id}"


def compaction_stream(task_id: str) -> str:
    return f"compaction-{task_id}"


# --- events -----------------------------------------------------------------------------------------------


@event_type("ContextCompileRequested")
@dataclass(frozen=True)
class ContextCompileRequested(Event):
    """An asynchronous compile was asked for; a worker answers it (``evidence_digest``: the request's extra
    evidence in the evidence store, or ``None``)."""

    request_id: str
    task_id: str
    goal_id: str
    model_word: str
    overrides: dict[str, int] = field(default_factory=dict)
    compaction: bool | None = None
    evidence_digest: str | None = None


@event_type("ContextCompiled")
@dataclass(frozen=True)
class ContextCompiled(Event):
    """A context was compiled for a task at log ``position`` with ``budget`` (the ``ModelBudget`` as a
    mapping, kept so a replay uses the very budget the compile had) and stored under ``digest``."""

    request_id: str
    task_id: str
    goal_id: str
    digest: str
    model_word: str
    position: int
    budget: dict[str, Any]
    encoding: str
    bundle_digest: str | None = None
    evidence_digest: str | None = None
    prompt_tokens: int = 0
    tool_tokens: int = 0
    included_count: int = 0
    excluded_count: int = 0


@event_type("ContextCompileFailed")
@dataclass(frozen=True)
class ContextCompileFailed(Event):
    """An asynchronous compile was refused (budget too small, the model word unknown by now, …)."""

    request_id: str
    task_id: str
    code: str
    message: str
    field: str | None = None


@event_type("ContextCompacted")
@dataclass(frozen=True)
class ContextCompacted(Event):
    """The oldest progress notes and tool calls of a task were folded into the summary item ``summary_id``
    (a progress note recorded in the same transaction). The folded items stay in the log and in the world
    state; the compiler sees the summary instead of them."""

    fold_id: str
    task_id: str
    goal_id: str
    summary_id: str
    folded_ids: list[str]
    folded_tokens: int
    threshold: int
    encoding: str
    summarizer: str


# --- compaction (C11) -------------------------------------------------------------------------------------


class FoldCandidate(NamedTuple):
    """A progress note or tool call of a task, oldest first: its id, kind, tokens and rendered text."""

    id: str
    kind: str
    tokens: int
    position: int


def plan_fold(candidates: Sequence[FoldCandidate], *, threshold: int) -> list[FoldCandidate]:
    """The items to fold: none while the total is within ``threshold``; otherwise the oldest ones, leaving
    the newest that fit in half the threshold (so the summary, capped at a quarter, cannot retrigger at
    once). Folding fewer than two items would not shrink anything, so that returns none either."""
    total = sum(candidate.tokens for candidate in candidates)
    if total <= threshold or threshold < 1:
        return []
    keep_tokens = threshold // 2
    kept = 0
    cut = len(candidates)
    ordered = sorted(candidates, key=lambda candidate: (candidate.position, candidate.id))
    while cut > 0 and kept + ordered[cut - 1].tokens <= keep_tokens:
        kept += ordered[cut - 1].tokens
        cut -= 1
    folded = ordered[:cut]
    return folded if len(folded) >= 2 else []


def summary_token_cap(threshold: int) -> int:
    return max(16, threshold // 4)


Summarizer = Callable[..., str]
"""``summarize(entries, *, max_tokens, counter) -> str``; ``entries`` are ``(kind, text)``, oldest first."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
LINE_CHARS = 160


def extractive_summary(entries: Sequence[tuple[str, str]], *, max_tokens: int, counter: TokenCounter) -> str:
    """The default summarizer: deterministic and extractive. A header, then the first sentence (at most
    ``LINE_CHARS`` characters) of every folded entry, oldest first; when that exceeds ``max_tokens`` the
    oldest lines give way first, and a line says how many were left out.

    Each line is counted once (the newest that fit are chosen from those counts), and the text is counted
    again only to correct for joins, so a fold of many thousand entries stays linear."""
    notes = sum(1 for kind, _ in entries if kind == "progress")
    calls = len(entries) - notes
    header = f"Summary of {len(entries)} earlier entries ({notes} progress notes, {calls} tool calls):"
    lines = [f"- {_first_sentence(text)}" for _, text in entries]

    def render(start: int) -> str:
        omitted = [f"- … {start} older entries omitted"] if start else []
        return "\n".join([header, *omitted, *lines[start:]])

    room = max_tokens - counter.count(render(len(lines))) - 8
    start, used = len(lines), 0
    while start > 0:
        cost = counter.count(lines[start - 1]) + 1
        if used + cost > room:
            break
        used += cost
        start -= 1
    text = render(start)
    while counter.count(text) > max_tokens and start < len(lines):
        start += 1
        text = render(start)
    return text if counter.count(text) <= max_tokens else header


def _first_sentence(text: str) -> str:
    line = " ".join(text.split())
    line = _SENTENCE_END.split(line, maxsplit=1)[0]
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


# --- diff (C12) -------------------------------------------------------------------------------------------


class DiffEntry(NamedTuple):
    kind: str
    id: str
    reason: str | None
    """Why it is out of the other context (an exclusion reason), or ``None`` when it was not a candidate."""


@dataclass(frozen=True)
class ContextDiff:
    entered: tuple[DiffEntry, ...]
    left: tuple[DiffEntry, ...]


def diff_contexts(
    *,
    before_included: Iterable[Sequence[str]],
    before_excluded: Mapping[tuple[str, str], str],
    after_included: Iterable[Sequence[str]],
    after_excluded: Mapping[tuple[str, str], str],
) -> ContextDiff:
    """Items (``(kind, id)``; exposed tools as ``("tool", name)``) included in ``after`` but not in
    ``before`` entered, with the reason ``before`` left them out; items included in ``before`` but not in
    ``after`` left, with the reason ``after`` left them out. Sorted by kind and id."""
    before = {(kind, item_id) for kind, item_id in before_included}
    after = {(kind, item_id) for kind, item_id in after_included}
    entered = tuple(DiffEntry(*key, before_excluded.get(key)) for key in sorted(after - before))
    left = tuple(DiffEntry(*key, after_excluded.get(key)) for key in sorted(before - after))
    return ContextDiff(entered, left)
