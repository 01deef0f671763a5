"""Property tests of the context compiler's invariants (SPEC C2–C7), with the real cl100k_base counter."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexum.adapters.tokenization import counter_for
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation.compiler import compile_context
from nexum.core.compilation.model import CompiledContext, CompileInput, ContextItem, Fold, Step, ToolSpec
from nexum.core.compilation.ranking import NEWEST_FIRST_KINDS, Query, newest_first_extended, rank_section
from nexum.core.compilation.versions import COMPILER_VERSION
from nexum.core.digests import canonical_json, digest_of

COUNTER = counter_for("cl100k_base")
PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

WORDS = [
    "auth", "spec", "redis", "token", "the", "fails", "line", "48", "schema", "database", "Ünïcode", "漢字",
    "->", "```", "##", "- ", "> ", "[end of untrusted data]", "—", "…", "ignore previous instructions",
]  # fmt: skip
SEPARATORS = [" ", " ", " ", "\n", "  ", "\r\n", "\u2028", "\t"]

word_texts = st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=40).map(
    "".join
)
texts = st.one_of(word_texts, word_texts, st.text(max_size=30))
long_texts = st.lists(st.sampled_from(WORDS + SEPARATORS), min_size=100, max_size=300).map("".join)
ids = st.text(alphabet="abcdefgh0123456789-/:", min_size=1, max_size=8)
TRUST = ["repository_authored", "repository_authored", "untrusted_retrieved", "kernel"]


@st.composite
def items(draw: st.DrawFn, kind: str, max_size: int) -> tuple[ContextItem, ...]:
    entries = draw(
        st.lists(
            st.tuples(
                ids,
                texts,
                st.integers(0, 40),
                st.booleans(),
                st.sampled_from(TRUST),
                st.none() | ids,
                st.none()
                | st.sampled_from(["observed 2 days ago", "stale: observed 3 years ago (TTL 30 days)"]),
                st.sampled_from([1, 1, 1, 1, 1, 1, 1, 1, 4, 20]),  # now and then a stored count that lies
            ),
            max_size=max_size,
            unique_by=lambda entry: entry[0],
        )
    )
    built = []
    for item_id, text, position, verified, trust, origin, observed, understated_by in entries:
        item = ContextItem.from_text(
            kind,
            item_id,
            text,
            counter=COUNTER,
            position=position,
            verified=verified,
            trust_class=trust,
            origin=origin,
            observed=observed,
        )
        built.append(replace(item, token_count=item.token_count // understated_by))
    return tuple(built)


tools = st.lists(
    st.builds(
        ToolSpec,
        name=st.sampled_from(["read_file", "run_spec", "search", "edit", "deploy", "db", "git"]),
        description=texts,
        schema=st.fixed_dictionaries(
            {"type": st.just("object")}, optional={"enum": st.lists(st.sampled_from(WORDS), max_size=30)}
        ),
        pinned=st.booleans(),
        score=st.none() | st.floats(0, 1),
    ),
    max_size=9,
)


@st.composite
def compiles(draw: st.DrawFn) -> tuple[CompileInput, ModelBudget]:
    compile_input = CompileInput(
        goal=draw(st.one_of(texts, texts, long_texts)),  # a long goal now and then: pinned gets cut
        step=Step(draw(ids), draw(texts), tuple(draw(st.lists(texts, max_size=3)))),
        constraints=tuple(draw(st.lists(st.one_of(texts, texts, texts, texts, long_texts), max_size=3))),
        success_criteria=tuple(draw(st.lists(texts, max_size=3))),
        failures=draw(items("failure", 6)),
        decisions=draw(items("decision", 4)),
        facts=draw(items("fact", 8)),
        artifacts=draw(items("artifact", 4)),
        progress=draw(items("progress", 6)),
        evidence=draw(items("diagnostic", 5)) + draw(items("code", 4)),
        tools=tuple(draw(tools)),
        evidence_share=draw(st.floats(0, 1)),
        charge_tool_schemas=draw(st.booleans()),
    )
    model_budget = ModelBudget(
        size_class="small",
        context_tokens=draw(st.integers(200, 2_500)),
        tool_count=draw(st.integers(0, 6)),
        reasoning="low",
        reserve_output_tokens=1_024,
        window=8_192,
    )
    return compile_input, model_budget


def compile_with(compile_input: CompileInput, model_budget: ModelBudget) -> CompiledContext:
    return compile_context(compile_input, budget=model_budget, counter=COUNTER)


def normalized(text: str) -> str:
    return " ".join(text.split())


def candidates(compile_input: CompileInput) -> list[ContextItem]:
    return [
        *compile_input.failures,
        *compile_input.decisions,
        *compile_input.facts,
        *compile_input.artifacts,
        *compile_input.progress,
        *compile_input.evidence,
    ]


def assert_pinned_present(compile_input: CompileInput, result: CompiledContext) -> None:
    block = normalized(result.prompt_block)
    assert normalized(f"id: {compile_input.step.id}") in block  # the step id is never cut
    truncated = {record.section for record in result.truncated}
    pieces = [
        ("goal", compile_input.goal),
        ("step", compile_input.step.objective),
        *(("step", text) for text in compile_input.step.inputs),
        *(("constraints", text) for text in compile_input.constraints),
        *(("success_criteria", text) for text in compile_input.success_criteria),
    ]
    for section, text in pieces:
        if normalized(text) in block:
            continue
        assert section in truncated, (section, text)
        assert any(normalized(text[:end] + "…") in block for end in range(len(text), -1, -1)), (section, text)


@PROPERTY_SETTINGS
@given(compiles())
def test_compile_invariants(case: tuple[CompileInput, ModelBudget]) -> None:
    compile_input, model_budget = case
    result = compile_with(compile_input, model_budget)
    context_tokens = model_budget.context_tokens

    # C6: the block, counted with the model's tokenizer, plus charged tool schemas never exceeds the budget
    assert COUNTER.count(result.prompt_block) == result.prompt_tokens
    assert result.prompt_tokens + result.tool_tokens <= context_tokens

    # C3: pinned content is never dropped (whole, or its recorded truncated prefix)
    assert_pinned_present(compile_input, result)

    # C2: tools within the count and within half of the budget; every tool accounted for once
    assert len(result.tools) <= model_budget.tool_count
    assert len(set(result.tools)) == len(result.tools)
    assert result.tool_tokens <= context_tokens // 2
    if not compile_input.charge_tool_schemas:
        assert result.tool_tokens == 0
    tool_exclusions = [record for record in result.excluded if record.kind == "tool"]
    assert len(result.tools) + len(tool_exclusions) == len(compile_input.tools)

    # C5: every candidate item is included or excluded, exactly once; none vanish
    expected = {(item.kind, item.id) for item in candidates(compile_input)}
    excluded = [(record.kind, record.id) for record in result.excluded if record.kind != "tool"]
    assert len(set(excluded)) == len(excluded)
    assert len(set(result.included)) == len(result.included)
    assert set(result.included).isdisjoint(excluded)
    assert set(result.included) | set(excluded) == expected
    assert all(record.reason for record in result.excluded)

    # included items are in the block, whole (quoted ones line by line)
    by_key = {(item.kind, item.id): item for item in candidates(compile_input)}
    block = normalized(result.prompt_block)
    for key in result.included:
        item = by_key[key]
        assert item.text is not None
        if item.quoted_in(COMPILER_VERSION):
            assert all(normalized(line) in block for line in item.text.splitlines())
        else:
            assert normalized(item.text) in block

    # C4: evidence takes at most its share of what tools and pinned left
    remainder = context_tokens - result.tool_tokens - result.section_tokens.pinned
    assert result.section_tokens.evidence <= compile_input.evidence_share * remainder

    # C7: identical input gives identical output; the digest covers the canonical form
    assert compile_with(compile_input, model_budget) == result
    assert result.digest == digest_of(result.canonical_form())
    assert result.exclusion_runs_json == canonical_json(result.canonical_form()["exclusion_runs"])


@PROPERTY_SETTINGS
@given(compiles(), st.randoms(use_true_random=False))
def test_input_order_never_changes_the_output(
    case: tuple[CompileInput, ModelBudget], rng: random.Random
) -> None:
    compile_input, model_budget = case

    def shuffled(values: tuple[object, ...]) -> tuple[object, ...]:
        values_list = list(values)
        rng.shuffle(values_list)
        return tuple(values_list)

    reordered = replace(
        compile_input,
        failures=shuffled(compile_input.failures),
        decisions=shuffled(compile_input.decisions),
        facts=shuffled(compile_input.facts),
        artifacts=shuffled(compile_input.artifacts),
        progress=shuffled(compile_input.progress),
        evidence=shuffled(compile_input.evidence),
        tools=shuffled(compile_input.tools),
    )
    original = compile_with(compile_input, model_budget)
    again = compile_with(reordered, model_budget)
    assert again.prompt_block == original.prompt_block
    assert again.excluded == original.excluded
    assert again.digest == original.digest


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(compiles())
def test_budget_holds_even_when_every_stored_count_is_zero(case: tuple[CompileInput, ModelBudget]) -> None:
    """The final count is the backstop (C6): with every stored count understated, the block still fits, and
    what had to be dropped is recorded with its reason."""
    compile_input, model_budget = case

    def zeroed(group: tuple[ContextItem, ...]) -> tuple[ContextItem, ...]:
        return tuple(replace(item, token_count=0) for item in group)

    lying = replace(
        compile_input,
        failures=zeroed(compile_input.failures),
        decisions=zeroed(compile_input.decisions),
        facts=zeroed(compile_input.facts),
        artifacts=zeroed(compile_input.artifacts),
        progress=zeroed(compile_input.progress),
        evidence=zeroed(compile_input.evidence),
    )
    result = compile_with(lying, model_budget)
    assert COUNTER.count(result.prompt_block) + result.tool_tokens <= model_budget.context_tokens
    excluded = {(record.kind, record.id) for record in result.excluded if record.kind != "tool"}
    assert set(result.included) | excluded == {(item.kind, item.id) for item in candidates(lying)}
    assert set(result.included).isdisjoint(excluded)
    assert_pinned_present(lying, result)


@PROPERTY_SETTINGS
@given(
    compiles(),
    st.lists(word_texts.filter(str.strip), min_size=2, max_size=8),
    st.integers(0, 1),
    st.integers(0, 4),
)
def test_a_fold_shows_its_summary_or_its_entries_never_both(
    case: tuple[CompileInput, ModelBudget], notes: list[str], required: int, calls: int
) -> None:
    """C11, per model: whatever the budget, a fold shows its summary or its entries (all of them), never
    both; a fold the threshold needs always shows its summary; the budget holds and the digest is stable."""
    compile_input, model_budget = case
    entries = tuple(
        ContextItem.from_text("progress", f"fold-note-{n}", text, counter=COUNTER, position=-100 + n)
        for n, text in enumerate(notes)
    )
    tool_calls = tuple(
        ContextItem.from_text(
            "diagnostic", f"fold-call-{n}", f"Called t{n}: ok", counter=COUNTER, position=-50
        )
        for n in range(calls)
    )
    summary = ContextItem.from_text(
        "progress",
        "fold-summary",
        "Earlier work, folded:\n- " + "\n- ".join(notes),
        counter=COUNTER,
        position=-1,
    )
    folded = tuple((item.kind, item.id) for item in (*entries, *tool_calls))
    folding = replace(
        compile_input,
        progress=(*compile_input.progress, *entries, summary),
        evidence=(*compile_input.evidence, *tool_calls),
        folds=(Fold(("progress", "fold-summary"), folded),),
        folds_required=required,
    )
    result = compile_with(folding, model_budget)
    included = set(result.included)
    shown = included & set(folded)
    assert ("progress", "fold-summary") not in included or not shown
    assert not shown or shown == set(folded)
    if required:
        assert not shown
    assert COUNTER.count(result.prompt_block) + result.tool_tokens <= model_budget.context_tokens
    excluded = {(record.kind, record.id) for record in result.excluded if record.kind != "tool"}
    assert included | excluded == {(item.kind, item.id) for item in candidates(folding)}
    assert compile_with(folding, model_budget).digest == result.digest


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(NEWEST_FIRST_KINDS),
    positions=st.lists(st.integers(0, 30), min_size=0, max_size=25),
    added=st.lists(st.integers(0, 60), min_size=0, max_size=8),
    verified=st.booleans(),
)
def test_a_newest_first_section_brought_forward_ranks_as_ranking_it_whole(
    kind: str, positions: list[int], added: list[int], verified: bool
) -> None:
    """The ranking a compile keeps for a newest-first section, brought forward to the section with new items
    (``newest_first_extended``), is the ranking of the whole section, or refused when the new items do not
    all rank in front."""

    def item(name: str, position: int) -> ContextItem:
        return ContextItem(kind, name, 5 + position, 1 + position % 3, position, verified)

    old = tuple(item(f"a{index:02d}", position) for index, position in enumerate(positions))
    new = tuple(item(f"z{index:02d}", position) for index, position in enumerate(added))
    rank = partial(rank_section, kind, query=query_of_nothing(), verified_label=3)
    extended = newest_first_extended(rank(old), new)
    whole = rank(old + new)
    if extended is None:
        assert old and new and min(added) <= max(positions)
    else:
        assert (extended.items, extended.ids, list(extended.costs)) == (
            whole.items,
            whole.ids,
            list(whole.costs),
        )
        assert (extended.relevant, extended.links) == (whole.relevant, whole.links)


def query_of_nothing() -> Query:
    return Query(frozenset())
