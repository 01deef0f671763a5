"""The compile service's pure rules (SPEC C11, C12): which items a compaction folds, the default summarizer,
and the diff of two compiled contexts. ``compiler.py`` holds the compiler itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from nexum.core.tokens import TokenCounter

EVIDENCE_KINDS = ("diagnostic", "code")
COMPACTED_KINDS = ("progress", "tool_call")


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
