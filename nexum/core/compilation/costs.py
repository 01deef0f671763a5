"""What an item costs in tokens before the block is counted: conservative estimates from its stored metadata
(``lower_costs``) and the fixed labels of the rendering, counted once per compile (``Costs``)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from nexum.core.compilation.model import ContextItem
from nexum.core.compilation.rendering import (
    SECTION_TITLES,
    VERIFIED_LABEL,
    origin_line,
    quote_footer,
    untrusted_header,
)
from nexum.core.tokens import TokenCounter

# Conservative estimates of what rendering adds to an item's stored token count (cl100k-like BPE: a bullet
# and a newline are about one token each; an indent or a quote prefix is one or two, plus boundary effects).
ITEM_OVERHEAD = 3
LINE_OVERHEAD = 2
QUOTED_LINE_OVERHEAD = 3
HEADER_OVERHEAD = 2
# Held back from evidence and state: BPE counts are not additive across joins.
MIN_SAFETY_MARGIN = 8
SAFETY_MARGIN_RATIO = 0.005


def verified_label_tokens(counter: TokenCounter) -> int:
    """What the verified label adds to a verified fact's cost in the counter's encoding."""
    return counter.count(VERIFIED_LABEL)


class Costs:
    """Token costs of fixed labels, counted once per compile; untrusted headers counted per included item."""

    def __init__(self, counter: TokenCounter, version: int) -> None:
        self.counter = counter
        self.version = version
        self.origin_lines = version >= 2
        self._origin_extra: dict[tuple[str | None, str | None], int] = {}
        self.headers = {
            section: counter.count(f"## {title}\n") + HEADER_OVERHEAD
            for section, title in SECTION_TITLES.items()
        }
        self._footers: dict[str, int] = {}

    def quoted_extra(self, item: ContextItem) -> int:
        header = self.counter.count(untrusted_header(item, self.version))
        footer = quote_footer(item)
        if footer not in self._footers:
            self._footers[footer] = self.counter.count(footer) + LINE_OVERHEAD
        extra = header + LINE_OVERHEAD + self._footers[footer]
        return extra + item.line_count * (QUOTED_LINE_OVERHEAD - LINE_OVERHEAD)

    def origin_extra(self, item: ContextItem) -> int:
        """What an item's origin line adds (counted once per distinct origin in a compile)."""
        key = (item.origin, item.observed)
        extra = self._origin_extra.get(key)
        if extra is None:
            extra = self._origin_extra[key] = self.counter.count(origin_line(item)) + LINE_OVERHEAD
        return extra


def lower_costs(items: Sequence[ContextItem], verified_label: int) -> array[int]:
    """Each item's cost from metadata: stored tokens, bullet, indented continuation lines, and for a verified
    fact the label (``verified_label`` tokens; 0 for other sections). Quoted items cost more
    (``Costs.quoted_extra``), added only when such an item would otherwise fit."""
    base = ITEM_OVERHEAD - LINE_OVERHEAD
    if verified_label:
        return array(
            "q",
            (
                item.token_count
                + LINE_OVERHEAD * item.line_count
                + base
                + (verified_label if item.verified else 0)
                for item in items
            ),
        )
    return array("q", (item.token_count + LINE_OVERHEAD * item.line_count + base for item in items))
