"""Work kept per tuple object: derived once per object and key, never served for another tuple."""

from __future__ import annotations

from nexum.core import memo


def test_work_is_derived_once_per_tuple_object_and_key() -> None:
    calls: list[int] = []

    def derive(items: tuple[int, ...]) -> int:
        calls.append(len(items))
        return sum(items)

    items = tuple(range(memo.MIN_ITEMS))
    assert memo.remembered(items, ("sum",), derive) == sum(items)
    assert memo.remembered(items, ("sum",), derive) == sum(items)
    assert len(calls) == 1
    assert memo.remembered(tuple(list(items)), ("sum",), derive) == sum(items)  # equal, another object
    assert memo.remembered(items, ("other",), derive) == sum(items)  # another key
    assert len(calls) == 3
    small = tuple(range(3))
    memo.remembered(small, ("sum",), derive)
    memo.remembered(small, ("sum",), derive)
    assert len(calls) == 5  # small tuples are derived every time


def test_the_memo_is_bounded_and_keeps_what_it_describes() -> None:
    memo.forget()
    kept = [tuple(range(n, n + memo.MIN_ITEMS)) for n in range(memo.ENTRIES + 10)]
    for items in kept:
        memo.remembered(items, ("first",), lambda items: items[0])
    assert len(memo._memo) == memo.ENTRIES
    assert all(entry[0] is kept[10 + index] for index, entry in enumerate(memo._memo.values()))
