"""Model cards and the budget each one gets (SPEC B1–B5)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelBudget:
    """What one model call may use.

    ``context_tokens`` is the token budget of the compiled context (prompt block plus charged tool schemas);
    ``tool_count`` caps the tools exposed; ``reserve_output_tokens`` is held back for the answer;
    ``window`` is the physical window after any overlay.
    """

    size_class: str
    context_tokens: int
    tool_count: int
    reasoning: str
    reserve_output_tokens: int
    window: int
