"""Work derived from an immutable tuple, kept per tuple object (framework-free).

A caller that compiles the same large world again (an agent loop) passes the same item tuples: a tuple and
its items are immutable, so what was derived from one tuple object (its validation, its order, its metadata
costs, the tuple joined with a few more items) holds for as long as that object lives. The memo keeps each
tuple it describes, so the tuple's id cannot be reused while its entry exists. Results are the same with or
without it; only the time differs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

_T = TypeVar("_T")

MIN_ITEMS = 200  # below this, deriving again is as cheap as looking up
ENTRIES = 128

_memo: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = OrderedDict()
_lock = threading.Lock()


def remembered(items: tuple[Any, ...], key: tuple[Hashable, ...], derive: Callable[[Any], _T]) -> _T:
    """``derive(items)``, computed once per tuple object and ``key`` (what else the result depends on)."""
    if len(items) < MIN_ITEMS:
        return derive(items)
    memo_key = (id(items), *key)
    with _lock:
        entry = _memo.get(memo_key)
        if entry is not None and entry[0] is items:
            _memo.move_to_end(memo_key)
            return entry[1]  # type: ignore[no-any-return]
    value = derive(items)
    with _lock:
        _memo[memo_key] = (items, value)
        while len(_memo) > ENTRIES:
            _memo.popitem(last=False)
    return value


def forget() -> None:
    """Drop everything kept (a benchmark's cold start)."""
    with _lock:
        _memo.clear()
