"""The context compiler: world state + a model budget → the prompt block for one model call (SPEC C2–C7, C9).

Allocation order (each step spends what the previous ones left):

1. Tools (C2): deduplicated by name, pinned first, then by score, then by word overlap with the goal and step,
   the name breaking ties; capped at ``budget.tool_count``. The canonical JSON of each exposed tool's name,
   description and schema is counted and charged (``charge_tool_schemas``) and may never exceed half of
   ``budget.context_tokens``.
2. Pinned (C3): goal, current step, constraints, success criteria. Never dropped; when they alone do not fit
   they are truncated proportionally, token by token, and each truncated section is recorded.
3. Evidence (C4): diagnostics, then code snippets, each by relevance, packed atomically into
   ``evidence_share`` of what remains; space it does not use flows on to state.
4. State (C5): failures (newest first) → decisions (newest first) → facts (verified first, then relevance) →
   artifacts (newest first) → progress (newest first); atomic, first fit, every item left out is recorded with
   the tokens it needed and the tokens that were left.

From version 4 the query is the whole step (goal, the parent step's objective, objective, inputs,
constraints, success criteria and the request's ``focus``), words are normalized (``relevance.stems_of``), and
the budget is a ceiling, not a target: a fact scoring below ``relevance_floor`` times the best fact's score
(from version 5: that share of the way from the typical candidate's score to the best) is left out with
reason ``below_relevance`` however much room is left. Among the relevant facts relevance
orders and verification only breaks near-ties (``VERIFIED_BOOST``): a verified fact never displaces a clearly
more relevant one. The pinned sections, failures, decisions, artifacts and progress have no floor.

From version 5 relevance is by meaning as well as words (``relevance_scores``): BM25 over the normalized
words of the step's own text (``query_text``) fused with the cosine of the item's int8 vector and the
query's, both made when written or asked by the embedder the compile records (``nexum.core.world.vectors``:
exact integer arithmetic, so the same on every machine and in replay). Evidence has the floor too. A fact
below the floor that shares a named entity (a path, an identifier, a table, a flag:
``nexum.core.world.entities``) with a relevant fact or with the step's inputs and focus is relevant through
that link (one hop, ``ranking._linked``); left out for room, its record says what linked it.

Selection works on item metadata only (stored token count, line count, sort keys, terms). Item text is
fetched once, for the included items only, and the only texts tokenized at compile time are the pinned
texts, the tool schemas, a few fixed labels and the final prompt block. The final block is always counted:
``count(prompt_block) + charged tool tokens <= budget.context_tokens`` holds for every output (C6); when the
estimates were too low the lowest-priority items are dropped (and recorded) until it does.

Everything in the output is derived from sorted, stable keys (ties by id), so the same input in any order
gives the same prompt block and digest (C7). Retrieved content (``untrusted_retrieved``, or a class the
compiler does not know) is rendered as quoted data with its origin, every line prefixed, so it cannot pose as
an instruction or a section (C9). So is, from version 3, retrieved content at ``agent_reported`` (a source the
agent can write yields nothing higher, SPEC R4a), labelled with its class (``quoted_in``). The agent's own
records (``agent_reported`` items it recorded) are not retrieved content: they render as recorded; their class
still keeps them from ever being authority (``nexum.core.trust``).

This module runs the phases in turn; each has its own module beside it: ``ranking`` (the query and each
section's order), ``packing`` (what fits, with ``costs``: what an item costs before the block is counted),
``rendering`` (the block's text) and ``exclusions`` (what was left out, and why), over the types of
``model`` and the ``versions``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from array import array
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from itertools import compress

from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation.exclusions import canonical_runs_json, counted_block_reason
from nexum.core.compilation.model import (
    CompiledContext,
    CompileInput,
    ContextItem,
    MissingItemText,
    SectionTokens,
    TextLoader,
)
from nexum.core.compilation.packing import Packed, fit_pinned, pack
from nexum.core.compilation.ranking import RankedSection, RankedSections, rank_sections
from nexum.core.compilation.rendering import render_block
from nexum.core.compilation.versions import COMPILER_VERSION, COMPILER_VERSIONS, MEANING_FROM
from nexum.core.digests import canonical_json, canonical_json_of_members, sha256_hex
from nexum.core.errors import ValidationFailed
from nexum.core.tokens import TokenCounter

PhaseTimer = Callable[[str], AbstractContextManager[object]]
"""Wraps each named phase of a compile (``rank``, ``pack``, ``render``): a caller's timing or tracing
(``nexum.adapters.telemetry.phase_span``), so the core names its phases and imports no tracer."""

_UNTIMED = contextlib.nullcontext()


def untimed(name: str) -> AbstractContextManager[object]:
    """The default phase timer: nothing around any phase."""
    return _UNTIMED


def compile_context(
    compile_input: CompileInput,
    *,
    budget: ModelBudget,
    counter: TokenCounter,
    load_texts: TextLoader | None = None,
    version: int = COMPILER_VERSION,
    sections: RankedSections | None = None,
    phase: PhaseTimer = untimed,
) -> CompiledContext:
    """Compile the context for one model call. Pure: the same arguments give the same result. ``version``
    is the renderer's (``COMPILER_VERSIONS``): an older one only to replay a context stored by it (version 1
    shows every fold's summary, as it did).

    With folds, the compile is tried with the folds from ``folds_required`` on unfolded, then with one more
    folded each time, oldest first, until every entry of the folds left unfolded is included (with all
    folded it always is): a larger budget shows the entries a smaller one folded. Items a fold hides are
    listed as excluded, saying which summary or entries stand in for them.

    ``sections`` are the input's evidence and state sections ranked (``rank_sections(compile_input,
    counter)``, or equal values kept by a caller that compiles the same large world again); computed here
    when not given. ``phase(name)`` wraps the ranking (when done here), packing and rendering of each try.

    Raises ``ValidationFailed`` for malformed input (wrong kinds, duplicate ids, a bad budget or tool schema),
    ``BudgetTooSmall`` when not even the cut pinned skeleton fits, ``MissingItemText`` when an included item
    has no text and the loader does not supply it.
    """
    if budget.context_tokens < 1 or budget.tool_count < 0:
        raise ValidationFailed("the budget needs context_tokens >= 1 and tool_count >= 0", field="budget")
    if version not in COMPILER_VERSIONS:
        raise ValidationFailed(f"unknown compiler version {version!r}", field="compiler_version")
    folds = compile_input.folds
    required = compile_input.folds_required
    if isinstance(required, bool) or not isinstance(required, int) or not 0 <= required <= len(folds):
        raise ValidationFailed("folds_required must be from 0 to the number of folds", field="folds_required")
    if not folds:
        return _compile(compile_input, budget, counter, load_texts, version, (), sections, phase)
    start = len(folds) if version < 2 else required
    for applied in range(start, len(folds) + 1):
        view, hidden = _fold_view(compile_input, applied)
        records = () if version < 2 else hidden
        view_sections = None if sections is None else _sections_without(sections, hidden)
        result = _compile(view, budget, counter, load_texts, version, records, view_sections, phase)
        included = set(result.included)
        out = {(kind, item_id) for kind, item_id, _, _ in hidden}
        if all(key in included for fold in folds[applied:] for key in fold.folded if key not in out):
            return result
    raise AssertionError("unreachable: with every fold applied no entry is left to show")


def _fold_view(
    compile_input: CompileInput, applied: int
) -> tuple[CompileInput, tuple[tuple[str, str, int, str], ...]]:
    """The input with the oldest ``applied`` folds showing their summaries and the others their entries,
    and the items hidden, each with its stored tokens and the reason (``(kind, id, tokens, reason)``). A
    summary a later fold folded again is an entry of that fold: shown when that fold is not applied and
    its own fold is."""
    folds = compile_input.folds
    hidden: dict[tuple[str, str], str] = {}
    for number, fold in enumerate(folds):
        if number < applied:
            why = (
                "this model's compaction"
                if number < compile_input.folds_required
                else "its entries did not fit"
            )
            for key in fold.folded:
                hidden[key] = f"folded into summary {fold.summary[1]} ({why})"
        else:
            hidden.setdefault(fold.summary, f"its {len(fold.folded)} folded entries are shown instead")
    key = frozenset(hidden)
    progress = _without(compile_input.progress, hidden=key)
    evidence = _without(compile_input.evidence, hidden=key)
    view = dataclasses.replace(
        compile_input, progress=progress, evidence=evidence, folds=(), folds_required=0
    )
    tokens = {
        (item.kind, item.id): item.token_count
        for item in (*compile_input.progress, *compile_input.evidence)
        if (item.kind, item.id) in hidden
    }
    records = tuple(
        (kind, item_id, tokens.get((kind, item_id), 0), hidden[(kind, item_id)])
        for kind, item_id in sorted(hidden)
    )
    return view, records


def _without(
    items: tuple[ContextItem, ...], *, hidden: frozenset[tuple[str, str]]
) -> tuple[ContextItem, ...]:
    return tuple(item for item in items if (item.kind, item.id) not in hidden)


def _sections_without(
    sections: RankedSections, hidden: Sequence[tuple[str, str, int, str]]
) -> RankedSections:
    """``sections`` less the items a fold view hides; the rest keep their rank (each section is ranked item
    by item, so leaving items out does not reorder the others)."""
    out = {(kind, item_id) for kind, item_id, _, _ in hidden}
    if not out:
        return sections
    kept_sections = []
    for section in sections:
        keep = [(item.kind, item.id) not in out for item in section.items]
        kept_sections.append(
            RankedSection(
                tuple(compress(section.items, keep)),
                tuple(compress(section.ids, keep)),
                array("q", compress(section.costs, keep)),
            )
        )
    return RankedSections(*kept_sections)


def _compile(
    compile_input: CompileInput,
    budget: ModelBudget,
    counter: TokenCounter,
    load_texts: TextLoader | None,
    version: int,
    hidden: Sequence[tuple[str, str, int, str]],
    sections: RankedSections | None,
    phase: PhaseTimer,
) -> CompiledContext:
    """One compile of a view without folds; ``hidden`` are the items the folds took out, recorded last."""
    if sections is None:
        with phase("rank"):
            sections = rank_sections(compile_input, counter, version)
    with phase("pack"):
        packed = pack(compile_input, budget, counter, version, sections)
    with phase("render"):
        return _render(compile_input, budget, counter, load_texts, version, hidden, packed)


def _render(
    compile_input: CompileInput,
    budget: ModelBudget,
    counter: TokenCounter,
    load_texts: TextLoader | None,
    version: int,
    hidden: Sequence[tuple[str, str, int, str]],
    packed: Packed,
) -> CompiledContext:
    """The block rendered and counted, items dropped until it fits (C6), and the result with its digest."""
    context_budget = budget.context_tokens
    tool_names, tool_tokens, pinned, evidence, evidence_tokens, state, state_tokens, exclusions = packed
    texts = _load_texts([entry.item for entry in (*evidence, *state)], load_texts)

    # C6 safety net: count the real block; drop lowest-priority items, then cut pinned further, until it fits.
    while True:
        prompt_block = render_block(pinned.text, evidence, state, texts, version)
        prompt_tokens = counter.count(prompt_block)
        overflow = prompt_tokens + tool_tokens - context_budget
        if overflow <= 0:
            break
        if not (state or evidence):  # only reachable with a counter that is not a pure function
            pinned = fit_pinned(compile_input, pinned.allowance - overflow, counter)
            continue
        dropped = 0
        while (state or evidence) and dropped < overflow:
            entry = state.pop() if state else evidence.pop()
            dropped += entry.cost
            if entry.section == "evidence":
                evidence_tokens -= entry.cost
            else:
                state_tokens -= entry.cost
            exclusions.add(
                entry.item.kind, entry.item.id, entry.cost, 0, counted_block_reason(entry.cost, overflow)
            )

    for kind, item_id, tokens, reason in hidden:
        exclusions.add(kind, item_id, tokens, 0, reason)
    context = CompiledContext(
        prompt_block=prompt_block,
        tools=tool_names,
        included=tuple((entry.item.kind, entry.item.id) for entry in (*evidence, *state)),
        exclusion_runs=exclusions.frozen(),
        truncated=pinned.truncations,
        section_tokens=SectionTokens(tool_tokens, pinned.tokens, evidence_tokens, state_tokens),
        prompt_tokens=prompt_tokens,
        tool_tokens=tool_tokens,
        budget=budget,
        encoding=counter.encoding,
        digest="",
        compiler_version=version,
        embedder=compile_input.embedder if version >= MEANING_FROM else "",
    )
    runs_json = canonical_runs_json(context.exclusion_runs)
    members = {
        key: runs_json if key == "exclusion_runs" else canonical_json(value)
        for key, value in context.canonical_form().items()
    }
    digest = sha256_hex(canonical_json_of_members(members))
    return dataclasses.replace(context, digest=digest, exclusion_runs_json=runs_json)


def _load_texts(items: Sequence[ContextItem], load_texts: TextLoader | None) -> dict[tuple[str, str], str]:
    texts = {(item.kind, item.id): item.text for item in items if item.text is not None}
    missing = [item for item in items if item.text is None]
    if missing:
        if load_texts is None:
            raise MissingItemText(
                f"{missing[0].kind} {missing[0].id!r} has no text and no text loader was given", field="items"
            )
        loaded = load_texts(tuple(missing))
        for item in missing:
            text = loaded.get((item.kind, item.id))
            if not isinstance(text, str):
                raise MissingItemText(f"no text was loaded for {item.kind} {item.id!r}", field="items")
            texts[(item.kind, item.id)] = text
    return texts
