"""The compile service's pure rules (SPEC C11, C12): which items a compaction folds, the default summarizer,
and the diff of two compiled contexts. The compiler itself is ``compiler.py`` and the modules it runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from nexum.core.tokens import TokenCounter
from nexum.core.world.relevance import terms_of

COMPACTED_KINDS = ("progress", "tool_call")


# --- compaction (C11) -------------------------------------------------------------------------------------


class FoldCandidate(NamedTuple):
    """A progress note or tool call of a task: its id, kind (``progress`` or ``tool_call``), stored tokens
    and log position."""

    id: str
    kind: str
    tokens: int
    position: int


_tokens = attrgetter("tokens")


def plan_fold(candidates: Sequence[FoldCandidate], *, threshold: int) -> list[FoldCandidate]:
    """The items to fold of ``candidates`` (a task's notes and tool calls, oldest first: by position, then
    id): none while the total is within ``threshold``; otherwise the oldest ones, leaving the newest that fit
    in half the threshold (the summary gets the rest, ``summary_budget``, so the task is within the threshold
    after the fold). Folding fewer than two items would not shrink anything, so that returns none either."""
    total = sum(map(_tokens, candidates))
    if total <= threshold or threshold < 1:
        return []
    keep_tokens = threshold // 2
    kept = 0
    cut = len(candidates)
    while cut > 0 and kept + candidates[cut - 1].tokens <= keep_tokens:
        kept += candidates[cut - 1].tokens
        cut -= 1
    folded = list(candidates[:cut])
    return folded if len(folded) >= 2 else []


def summary_budget(*, threshold: int, kept_tokens: int, folded_tokens: int) -> int:
    """Tokens a fold's summary may take: what the threshold leaves beside the entries kept, and less than
    the entries it replaces (a summary as long as its entries shrinks nothing)."""
    return max(0, min(threshold - kept_tokens, folded_tokens - 1))


def folds_required(
    *,
    own_tokens: Mapping[str, int],
    folds: Sequence[tuple[str, Sequence[str]]],
    threshold: int | None,
) -> int:
    """How many of a task's folds (oldest first, each ``(summary_id, folded_ids)``) a compile must show as
    summaries to keep the task's progress notes and tool calls within ``threshold``: the fewest, oldest
    first, after which they are (all of them when even then they are not; none without a threshold).
    ``own_tokens`` holds the tokens of every one of those items, folded or not, and of the summaries."""
    if threshold is None or not folds:
        return 0
    # Every fold applied: no folded item shows (a summary folded again is one), then the newest unapplied.
    shown = set(own_tokens).difference(*(folded_ids for _, folded_ids in folds))
    totals = [sum(own_tokens[item_id] for item_id in shown)]
    for summary_id, folded_ids in reversed(folds):
        shown.discard(summary_id)
        shown.update(item_id for item_id in folded_ids if item_id in own_tokens)
        totals.append(sum(own_tokens[item_id] for item_id in shown))
    totals.reverse()  # totals[k]: the oldest k folds applied
    return next((applied for applied, total in enumerate(totals) if total <= threshold), len(folds))


Summarizer = Callable[..., str]
"""``summarize(entries, *, max_tokens, counter) -> str``; ``entries`` are ``(kind, text)``, oldest first.
An empty string means no useful summary fits in ``max_tokens``: the fold does not happen."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
MIN_LINE_WORDS = 3
"""A folded entry's line keeps at least this many words of its sentence, or the summary does not fit."""
_ELLIPSIS = "…"
EXTEND_MAX_ENTRIES = 64
"""Up to this many entries, the words a common cut leaves over go to the newest lines first."""


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 tool call``, ``2 tool calls``."""
    return f"{count} {singular if count == 1 else plural_form or singular + 's'}"


def extractive_summary(entries: Sequence[tuple[str, str]], *, max_tokens: int, counter: TokenCounter) -> str:
    """The default summarizer: deterministic and extractive. A header counting the folded entries, then one
    line per entry, oldest first: its most informative sentence (``most_informative_sentence``). When the
    lines do not fit in ``max_tokens`` every line is cut to the same number of words (the most that fit,
    with a mark where a sentence was cut), and what that leaves goes to the newest lines first; when not
    even ``MIN_LINE_WORDS`` per entry fit, the answer is empty: no summary that keeps a line of every entry
    fits, and the fold does not happen.

    The text is counted a logarithmic number of times (binary searches on words per line; the leftover is
    shared out only for folds of up to ``EXTEND_MAX_ENTRIES``), so a fold of many thousand entries stays
    fast."""
    # Each line costs at least two tokens (its bullet and a word): a cheap refusal before any reading.
    if not entries or 2 * len(entries) > max_tokens:
        return ""
    header = summary_header(entries)
    frequency = term_frequency(text for _, text in entries)
    sentences = [most_informative_sentence(text, frequency) for _, text in entries]
    words = [sentence.split() or [kind] for sentence, (kind, _) in zip(sentences, entries, strict=True)]

    def render(cap: int, caps: Mapping[int, int] | None = None) -> str:
        lines = []
        for index, line in enumerate(words):
            keep = caps.get(index, cap) if caps else cap
            lines.append(" ".join(line) if len(line) <= keep else " ".join(line[:keep]) + _ELLIPSIS)
        return "\n".join([header, *(f"- {line}" for line in lines)])

    longest = max(map(len, words))
    whole = render(longest)
    if counter.count(whole) <= max_tokens:
        return whole
    low, high = MIN_LINE_WORDS, longest - 1
    if counter.count(render(low)) > max_tokens:
        return ""
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count(render(middle)) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    if len(words) > EXTEND_MAX_ENTRIES:
        return render(low)
    # What the common cut leaves goes to the lines it cut, newest first, each as far as it fits.
    caps: dict[int, int] = {}
    for index in reversed(range(len(words))):
        more, most = low, len(words[index])
        while more < most:
            middle = (more + most + 1) // 2
            if counter.count(render(low, {**caps, index: middle})) <= max_tokens:
                more = middle
            else:
                most = middle - 1
        caps[index] = more
    return render(low, caps)


def summary_header(entries: Sequence[tuple[str, str]]) -> str:
    """``Earlier work, folded (3 progress notes, 1 tool call):``"""
    notes = sum(1 for kind, _ in entries if kind == "progress")
    calls = len(entries) - notes
    counts = [plural(notes, "progress note")] if notes else []
    counts += [plural(calls, "tool call")] if calls else []
    return f"Earlier work, folded ({', '.join(counts)}):"


def term_frequency(texts: Iterable[str]) -> dict[str, int]:
    """In how many of ``texts`` each term occurs."""
    frequency: dict[str, int] = {}
    for text in texts:
        for term in set(terms_of(text)):
            frequency[term] = frequency.get(term, 0) + 1
    return frequency


def most_informative_sentence(text: str, frequency: Mapping[str, int] | None = None) -> str:
    """The sentence (split after ``.``, ``!`` or ``?`` and a space) of ``text`` carrying the most
    information: the most distinct terms, each weighted by how rare it is among the texts folded with it
    (``frequency``, from ``term_frequency``: a term every entry shares tells little); the first wins a tie.
    Whitespace is collapsed, so the sentence is one line."""
    line = " ".join(text.split())
    sentences = [sentence for sentence in _SENTENCE_END.split(line) if terms_of(sentence)]
    if len(sentences) <= 1:
        return sentences[0] if sentences else line
    counts = frequency or {}
    best, best_score = sentences[0], -1.0
    for sentence in sentences:
        score = sum(1.0 / counts.get(term, 1) for term in set(terms_of(sentence)))
        if score > best_score:
            best, best_score = sentence, score
    return best


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
