"""Pure rules of the compile service: the fold plan, the extractive summarizer and the diff (C11, C12)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nexum.core.compilation.rules import (
    FoldCandidate,
    diff_contexts,
    extractive_summary,
    plan_fold,
    summary_token_cap,
)


class WordCounter:
    encoding = "words"

    def count(self, text: str) -> int:
        return len(text.split())


def candidates(tokens: list[int]) -> list[FoldCandidate]:
    return [FoldCandidate(f"i{n:03d}", "progress", t, n) for n, t in enumerate(tokens)]


def test_nothing_is_folded_within_the_threshold():
    assert plan_fold(candidates([10, 10, 10]), threshold=30) == []


def test_the_oldest_are_folded_leaving_the_newest_within_half():
    folded = plan_fold(candidates([10] * 10), threshold=60)
    assert [c.id for c in folded] == [f"i{n:03d}" for n in range(7)]


@given(st.lists(st.integers(0, 500), max_size=60), st.integers(1, 5000))
def test_a_fold_leaves_room_for_its_summary(tokens, threshold):
    items = candidates(tokens)
    folded = plan_fold(items, threshold=threshold)
    if folded:
        assert len(folded) >= 2 and sum(tokens) > threshold
        kept = sum(c.tokens for c in items[len(folded) :])
        assert kept <= threshold // 2
        assert kept + summary_token_cap(threshold) <= threshold or threshold < 64
        assert folded == items[: len(folded)]


def test_the_summary_is_deterministic_and_within_its_cap():
    entries = [("progress", f"Step {n}. Then more words here.") for n in range(50)] + [
        ("tool_call", "Called rspec: 2 failures")
    ]
    first = extractive_summary(entries, max_tokens=60, counter=WordCounter())
    assert first == extractive_summary(entries, max_tokens=60, counter=WordCounter())
    assert WordCounter().count(first) <= 60
    assert first.startswith("Summary of 51 earlier entries (50 progress notes, 1 tool calls)")
    assert "older entries omitted" in first and first.endswith("- Called rspec: 2 failures")
    whole = extractive_summary(entries[:3], max_tokens=500, counter=WordCounter())
    assert "- Step 0." in whole and "Then more" not in whole


def test_the_diff_names_entries_and_reasons():
    diff = diff_contexts(
        before_included=[("fact", "a"), ("tool", "grep")],
        before_excluded={("fact", "b"): "needed 40 tokens, 3 left"},
        after_included=[("fact", "b"), ("tool", "grep")],
        after_excluded={("fact", "a"): "needed 12 tokens, 0 left"},
    )
    assert [tuple(entry) for entry in diff.entered] == [("fact", "b", "needed 40 tokens, 3 left")]
    assert [tuple(entry) for entry in diff.left] == [("fact", "a", "needed 12 tokens, 0 left")]


def test_a_large_fold_is_summarized_in_linear_time():
    class CountingCounter(WordCounter):
        calls = 0

        def count(self, text: str) -> int:
            CountingCounter.calls += 1
            return super().count(text)

    entries = [("progress", f"Note {n} about the token check.") for n in range(20_000)]
    summary = extractive_summary(entries, max_tokens=400, counter=CountingCounter())
    assert WordCounter().count(summary) <= 400 and summary.endswith("- Note 19999 about the token check.")
    assert CountingCounter.calls < 1_000
