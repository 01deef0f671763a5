"""What a compile leaves out: the exclusion records and their compact runs (what the digest covers), the
collector that keeps the runs maximal, the reasons and their codes, and the runs' canonical JSON."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import NamedTuple

from nexum.core.digests import canonical_json, canonical_json_of_strings

BELOW_RELEVANCE = "below the relevance floor"
LINKED_PREFIX = "linked"
"""How the reason of an item there through a named entity starts (``ranking._linked``)."""
DUPLICATE_TOOL = "duplicate"
REASON_CODES = (
    "token_budget",
    "counted_block",
    "tool_count",
    "tool_tokens",
    "duplicate_tool",
    "below_relevance",
)


class ExcludedItem(NamedTuple):
    """An item (or tool) left out, with the tokens it needed, the tokens left when it was tried, and why."""

    kind: str
    id: str
    tokens_needed: int
    tokens_left: int
    reason: str


class ExclusionRun(NamedTuple):
    """Excluded items in their compact, canonical form (what the digest covers; cheap to store).

    Either one item with its own ``reason``, or consecutive items of one kind that did not fit while
    ``tokens_left`` tokens were left, each with the standard reason ``needed N tokens, L left`` (``reason`` is
    then ``None``). Runs are maximal: two neighbouring runs never share kind and ``tokens_left`` with
    ``reason`` ``None``.
    """

    kind: str
    tokens_left: int
    reason: str | None
    ids: tuple[str, ...]
    tokens_needed: tuple[int, ...]


class Exclusions:
    """Collects ``ExclusionRun``s while compiling (runs kept maximal), so many exclusions cost little."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, str | None, list[str], list[int]]] = []

    def add(self, kind: str, item_id: str, needed: int, left: int, reason: str) -> None:
        if reason == budget_reason(needed, left):
            self._extend(kind, left, [item_id], [needed])
        else:
            self.runs.append((kind, left, reason, [item_id], [needed]))

    def add_run(self, kind: str, ids: Sequence[str], needed: Sequence[int], left: int) -> None:
        """Items of one kind (by id) that did not fit while ``left`` tokens were left."""
        if ids:
            self._extend(kind, left, list(ids), list(needed))

    def add_reasoned_run(
        self, kind: str, ids: Sequence[str], needed: Sequence[int], left: int, reason: str
    ) -> None:
        """Items of one kind (by id) left out for one ``reason``, tried while ``left`` tokens were left."""
        if ids:
            self.runs.append((kind, left, reason, list(ids), list(needed)))

    def _extend(self, kind: str, left: int, ids: list[str], needed: list[int]) -> None:
        if self.runs and self.runs[-1][:3] == (kind, left, None):
            self.runs[-1][3].extend(ids)
            self.runs[-1][4].extend(needed)
        else:
            self.runs.append((kind, left, None, ids, needed))

    def frozen(self) -> tuple[ExclusionRun, ...]:
        return tuple(
            ExclusionRun(kind, left, reason, tuple(ids), tuple(needed))
            for kind, left, reason, ids, needed in self.runs
        )


def canonical_runs_json(runs: Sequence[ExclusionRun]) -> str:
    """``canonical_json`` of the runs as lists; the (many) ids written by ``canonical_json_of_strings``."""
    return (
        "["
        + ",".join(
            f"[{canonical_json(kind)},{canonical_json(left)},{canonical_json(reason)},"
            f"{canonical_json_of_strings(ids)},{canonical_json(needed)}]"
            for kind, left, reason, ids, needed in runs
        )
        + "]"
    )


def item_reasons(run: ExclusionRun, write: Callable[[str], str] = str) -> Iterable[str]:
    """The reason of each item of ``run``, in order, each distinct one ``write``-n once: the run's own, or the
    standard ``needed N tokens, L left``."""
    if run.reason is None:
        texts = {tokens: write(budget_reason(tokens, run.tokens_left)) for tokens in set(run.tokens_needed)}
        return map(texts.__getitem__, run.tokens_needed)
    return repeat(write(run.reason), len(run.ids))


def budget_reason(needed: int, left: int) -> str:
    return f"needed {needed} tokens, {left} left"


def tool_count_reason(tool_count: int) -> str:
    return f"tool budget of {tool_count} tools is full"


def tool_tokens_reason(needed: int, left: int) -> str:
    return f"needed {needed} tokens, {left} left for tools"


def counted_block_reason(needed: int, overflow: int) -> str:
    return f"needed {needed} tokens, 0 left (the counted prompt block was {overflow} over budget)"


def reason_code(run: ExclusionRun) -> str:
    """Why a run's items were left out, as one of ``REASON_CODES``: over the token budget by their metadata
    cost (``token_budget``) or once the block was counted (``counted_block``), past the model's tool count
    (``tool_count``) or the tools' token share (``tool_tokens``), a tool given twice (``duplicate_tool``), or
    a fact below the relevance floor (``below_relevance``)."""
    reason = run.reason
    if reason is None:
        return "token_budget"
    if reason == DUPLICATE_TOOL:
        return "duplicate_tool"
    if reason == BELOW_RELEVANCE:
        return "below_relevance"
    if reason.startswith(LINKED_PREFIX):
        return "token_budget"
    if reason.endswith(" tools is full"):
        return "tool_count"
    if reason.endswith(" left for tools"):
        return "tool_tokens"
    return "counted_block"
