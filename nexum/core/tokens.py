"""The token-counting port. The core receives a counter; the tiktoken adapter lives outside the core."""

from __future__ import annotations

from typing import Protocol


class TokenCounter(Protocol):
    """Counts tokens of a text with one tokenizer encoding."""

    encoding: str

    def count(self, text: str) -> int: ...
