"""A model card (SPEC B1): one catalog word and the model it routes to, with its geometry and budget knobs,
validated on construction. Below both the overlays (which pick a card's live window) and the budgets (which
size a compile from a card and its overlay), so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeGuard

from nexum.core.errors import ValidationFailed

Tier = Literal["local", "cloud"]
TIERS: tuple[str, ...] = ("local", "cloud")
DEFAULT_ENCODING = "cl100k_base"
SAFETY_MARGIN_PERCENT_MAX = 90


def is_int(value: object) -> TypeGuard[int]:
    """A real integer: ``True``/``False`` are not counts and floats are never accepted, even ``8000.0``."""
    return isinstance(value, int) and not isinstance(value, bool)


def _validate_count(owner: str, name: str, value: object, *, minimum: int) -> None:
    if value is None:
        return
    if not is_int(value) or value < minimum:
        kind = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise ValidationFailed(f"{owner}: {name} must be {kind} or absent, got {value!r}", field=name)


def _validate_text(owner: str, name: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValidationFailed(f"{owner}: {name} must be a non-empty string, got {value!r}", field=name)


@dataclass(frozen=True, kw_only=True)
class BudgetOverrides:
    """Explicit overrides, the first rung of B3's precedence. ``None`` means "not overridden"."""

    context_tokens: int | None = None
    tool_count: int | None = None

    def __post_init__(self) -> None:
        _validate_count("budget overrides", "context_tokens", self.context_tokens, minimum=1)
        _validate_count("budget overrides", "tool_count", self.tool_count, minimum=0)


@dataclass(frozen=True, kw_only=True)
class ModelCard:
    """One catalog entry: a word and the model it routes to, with its geometry and budget knobs.

    ``capabilities`` may be given as any iterable of strings and is stored as a tuple in the given order
    (a bare string is refused: ``"quick"`` would otherwise read as five capabilities).
    """

    word: str
    model_id: str
    tier: Tier
    context_window: int | None = None
    max_output_tokens: int | None = None
    capabilities: tuple[str, ...] = ()
    latency_class: str | None = None
    encoding: str = DEFAULT_ENCODING
    preferred_context_tokens: int | None = None
    max_tool_count: int | None = None
    overrides: BudgetOverrides = field(default_factory=BudgetOverrides)
    safety_margin_tokens: int | None = None
    safety_margin_percent: int | None = None

    def __post_init__(self) -> None:
        _validate_text("model card", "word", self.word)
        owner = f"model card {self.word!r}"
        _validate_text(owner, "model_id", self.model_id)
        if self.tier not in TIERS:
            raise ValidationFailed(
                f"{owner}: tier must be 'local' or 'cloud', got {self.tier!r}", field="tier"
            )
        _validate_count(owner, "context_window", self.context_window, minimum=1)
        _validate_count(owner, "max_output_tokens", self.max_output_tokens, minimum=1)
        _validate_count(owner, "preferred_context_tokens", self.preferred_context_tokens, minimum=1)
        _validate_count(owner, "max_tool_count", self.max_tool_count, minimum=0)
        _validate_count(owner, "safety_margin_tokens", self.safety_margin_tokens, minimum=0)
        _validate_count(owner, "safety_margin_percent", self.safety_margin_percent, minimum=0)
        if self.safety_margin_percent is not None and self.safety_margin_percent > SAFETY_MARGIN_PERCENT_MAX:
            raise ValidationFailed(
                f"{owner}: safety_margin_percent must be at most {SAFETY_MARGIN_PERCENT_MAX}, got "
                f"{self.safety_margin_percent!r}",
                field="safety_margin_percent",
            )
        if self.safety_margin_tokens is not None and self.safety_margin_percent is not None:
            raise ValidationFailed(
                f"{owner}: declare safety_margin_tokens or safety_margin_percent, not both",
                field="safety_margin_percent",
            )
        if isinstance(self.capabilities, str | bytes) or not hasattr(self.capabilities, "__iter__"):
            raise ValidationFailed(
                f"{owner}: capabilities must be a list of strings, got {self.capabilities!r}",
                field="capabilities",
            )
        capabilities = tuple(self.capabilities)
        for capability in capabilities:
            _validate_text(owner, "capabilities", capability)
        object.__setattr__(self, "capabilities", capabilities)
        if self.latency_class is not None:
            _validate_text(owner, "latency_class", self.latency_class)
        _validate_text(owner, "encoding", self.encoding)
        if not isinstance(self.overrides, BudgetOverrides):
            raise ValidationFailed(f"{owner}: overrides must be BudgetOverrides", field="overrides")
