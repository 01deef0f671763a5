"""What the adapters share: one compile per model call, kept so a run can be audited, and the summary of a
tool's result as the tool-call endpoint takes it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nexum_client.client import Nexum
from nexum_client.models import Context

# A tool call's result summary is bounded by the API (20 000 characters); the model already saw the whole
# result, the log keeps what a reader of the history needs.
SUMMARY_MAX = 2_000


def missing_framework(extra: str, error: ImportError) -> ImportError:
    return ImportError(f"{error}; install it with: pip install 'nexum-client[{extra}]'")


def result_summary(result: Any) -> str:
    """The recorded summary of a tool's result: its text, cut to ``SUMMARY_MAX`` characters, never blank."""
    text = result if isinstance(result, str) else _as_text(result)
    text = text.strip()
    if not text:
        return "(the tool returned nothing)"
    if len(text) > SUMMARY_MAX:
        return text[: SUMMARY_MAX - 1] + "…"
    return text


def _as_text(result: Any) -> str:
    try:
        return json.dumps(result, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


def arguments_of(raw: Any) -> Any:
    """A tool call's arguments as JSON: frameworks hand them over parsed or as the model's JSON text."""
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:
            return {"unparsed": raw}
    return raw


@dataclass
class TaskCompiler:
    """Compiles the task's context for ``model`` (a catalog word) before each model call and keeps every
    context it compiled, in order: ``contexts[-1]`` is what the model saw last."""

    nexum: Nexum
    task_id: str
    model: str
    focus: str | None = None
    contexts: list[Context] = field(default_factory=list)

    def compile(self) -> Context:
        context = self.nexum.compile(self.task_id, self.model, focus=self.focus)
        self.contexts.append(context)
        return context

    def record_tool_call(self, tool: str, arguments: Any, result: Any) -> None:
        record_tool_call(self.nexum, self.task_id, tool, arguments, result)


def record_tool_call(nexum: Nexum, task_id: str, tool: str, arguments: Any, result: Any) -> None:
    """Record one tool call the framework ran: its arguments (the server keeps their digest) and a summary
    of its result."""
    nexum.record_tool_call(task_id, tool, result_summary(result), arguments=arguments)


def with_context(base_prompt: str | None, context: Context) -> str:
    """The system prompt with the compiled context after the framework's own instructions."""
    if base_prompt:
        return f"{base_prompt}\n\n{context.prompt_block}"
    return context.prompt_block
