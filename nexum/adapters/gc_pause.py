"""Holding off Python's cyclic garbage collector while a request builds many acyclic objects at once."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic collector held off for the block: building tens of thousands of objects (a goal's items
    for a cold compile, a fork's carried rows and their events), none in a cycle, triggers full collections
    that each walk every object of the process (a fifth of a cold compile's time at 10k items, as much of a
    fork's). Reference counting still frees everything; the collector runs again afterwards, unless it was
    off before (a thread that finds it paused by another thread leaves it to that one)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
