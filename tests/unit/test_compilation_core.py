"""Pure rules of the compile service: the fold plan, the extractive summarizer and the diff (C11, C12)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nexum.core.compilation.rules import (
    FoldCandidate,
    diff_contexts,
    extractive_summary,
    folds_required,
    most_informative_sentence,
    plan_fold,
    plural,
    summary_budget,
    summary_header,
    term_frequency,
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


@settings(deadline=None)
@given(st.lists(st.integers(0, 500), max_size=60), st.integers(1, 5000))
def test_a_fold_leaves_room_for_its_summary(tokens, threshold):
    items = candidates(tokens)
    folded = plan_fold(items, threshold=threshold)
    if folded:
        assert len(folded) >= 2 and sum(tokens) > threshold
        kept = sum(c.tokens for c in items[len(folded) :])
        assert kept <= threshold // 2
        folded_tokens = sum(c.tokens for c in folded)
        budget = summary_budget(threshold=threshold, kept_tokens=kept, folded_tokens=folded_tokens)
        assert kept + budget <= threshold and budget < max(folded_tokens, 1)
        assert folded == items[: len(folded)]


def test_the_summary_is_deterministic_and_within_its_budget():
    entries = [("progress", f"Step {n}. Then more words here.") for n in range(50)] + [
        ("tool_call", "Called rspec: 2 failures")
    ]
    first = extractive_summary(entries, max_tokens=300, counter=WordCounter())
    assert first == extractive_summary(entries, max_tokens=300, counter=WordCounter())
    assert WordCounter().count(first) <= 300
    assert first.startswith("Earlier work, folded (50 progress notes, 1 tool call):")
    assert first.count("\n- ") == 51 and first.endswith("- Called rspec: 2 failures")


def test_every_entry_gives_its_most_informative_sentence_cut_to_fit_when_needed():
    entries = [
        ("progress", "Looked at it. Tried comparing the expiry as a string; the spec still fails."),
        ("progress", "Looked at it. Ran the suite: 2 passed, 1 failed."),
    ]
    whole = extractive_summary(entries, max_tokens=500, counter=WordCounter())
    assert whole.splitlines()[1:] == [
        "- Tried comparing the expiry as a string; the spec still fails.",
        "- Ran the suite: 2 passed, 1 failed.",
    ]
    cut = extractive_summary(entries, max_tokens=16, counter=WordCounter())
    assert cut.splitlines()[1:] == ["- Tried comparing the expiry…", "- Ran the suite: 2…"]
    assert WordCounter().count(cut) <= 16
    assert extractive_summary(entries, max_tokens=10, counter=WordCounter()) == ""  # no useful summary


def test_the_most_informative_sentence_weighs_rare_terms():
    texts = ["Checked the token. Compared expiry with now using a monotonic clock.", "Checked the token."]
    assert most_informative_sentence(texts[0], term_frequency(texts)).startswith("Compared expiry")
    assert most_informative_sentence("  one\nline  only ") == "one line only"


def test_plural_forms():
    assert [plural(1, "tool call"), plural(2, "tool call"), plural(0, "progress note")] == [
        "1 tool call",
        "2 tool calls",
        "0 progress notes",
    ]


entry_texts = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=200
).filter(lambda text: text.strip())


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["progress", "tool_call"]), entry_texts), min_size=1, max_size=30),
    st.integers(1, 2000),
)
def test_the_summary_is_never_an_empty_body_and_never_over_budget(entries, max_tokens):
    counter = WordCounter()
    summary = extractive_summary(entries, max_tokens=max_tokens, counter=counter)
    if summary:
        lines = summary.splitlines()
        assert counter.count(summary) <= max_tokens
        assert len(lines) == len(entries) + 1 and all(line.startswith("- ") for line in lines[1:])
        assert all(counter.count(line) >= 2 for line in lines[1:])  # a bullet and at least a word
    else:  # only when not even the shortest useful lines fit
        shortest = [f"- {' '.join(' '.join(text.split()).split()[:3])}" for _, text in entries]
        assert counter.count("\n".join([summary_header(entries), *shortest])) > max_tokens
    full = extractive_summary(entries, max_tokens=10_000, counter=counter)
    assert full and len(full.splitlines()) == len(entries) + 1


def test_the_folds_a_threshold_needs_are_the_fewest_oldest_first():
    own = {"a": 30, "b": 30, "s1": 10, "c": 30, "d": 30, "s2": 8, "e": 20}
    folds = [("s1", ["a", "b"]), ("s2", ["s1", "c", "d"])]  # the second folded the first's summary again
    # all unfolded: a b c d e = 140; first applied: s1 c d e = 90; both: s2 e = 28
    assert folds_required(own_tokens=own, folds=folds, threshold=None) == 0
    assert folds_required(own_tokens=own, folds=folds, threshold=200) == 0
    assert folds_required(own_tokens=own, folds=folds, threshold=100) == 1
    assert folds_required(own_tokens=own, folds=folds, threshold=50) == 2
    assert folds_required(own_tokens=own, folds=folds, threshold=10) == 2  # all, even when not enough
    assert folds_required(own_tokens=own, folds=[], threshold=10) == 0


def test_the_diff_names_entries_and_reasons():
    diff = diff_contexts(
        before_included=[("fact", "a"), ("tool", "grep")],
        before_excluded={("fact", "b"): "needed 40 tokens, 3 left"},
        after_included=[("fact", "b"), ("tool", "grep")],
        after_excluded={("fact", "a"): "needed 12 tokens, 0 left"},
    )
    assert [tuple(entry) for entry in diff.entered] == [("fact", "b", "needed 40 tokens, 3 left")]
    assert [tuple(entry) for entry in diff.left] == [("fact", "a", "needed 12 tokens, 0 left")]


def test_a_large_fold_is_summarized_with_few_counts():
    class CountingCounter(WordCounter):
        calls = 0

        def count(self, text: str) -> int:
            CountingCounter.calls += 1
            return super().count(text)

    entries = [("progress", f"Note {n} about the token check, and the clock it reads.") for n in range(5_000)]
    summary = extractive_summary(entries, max_tokens=30_000, counter=CountingCounter())
    assert WordCounter().count(summary) <= 30_000 and summary.endswith("- Note 4999 about the…")
    assert CountingCounter.calls < 20
    CountingCounter.calls = 0
    assert extractive_summary(entries, max_tokens=400, counter=CountingCounter()) == ""
    assert CountingCounter.calls == 0  # two tokens a line cannot fit: refused without counting
