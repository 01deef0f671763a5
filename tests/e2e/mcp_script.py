"""The script the stand-in model follows in tests/e2e/test_mcp_frameworks.py, whatever framework runs it:
plain Python with no framework import, because the langchain-mcp-adapters run imports it in an interpreter
of its own (tests/e2e/langchain_mcp/run_agent.py).

The model works a task through Nexum's MCP tools only. Its second call is a slip the tool's input schema
allows and the API refuses (``record_progress`` claiming ``trust_class: repository_authored``, above an
agent token's ceiling: 403 ``forbidden``; a slip the schema catches, a missing argument, some clients refuse
before Nexum sees it). Its third call is the correction, and it can only make it from the refusal's text: it
reads the field the API names and the ceiling it states, and claims that. Clients hand the refusal over in
either of the forms the server sends: its text (``… (field: trust_class)``, langchain-mcp-adapters and the
Agents SDK) or its structured content, the API's error object (PydanticAI). When that text did not reach it,
it gives up without asking the gate, so a completed task shows the refusal arrived as a tool result the
model read and the run went on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

PROGRESS = "the expiry check is in place"
ANSWER = "verify_token refuses expired tokens; the gate completed the task"
GAVE_UP = "the refused call's error did not reach me, so I cannot correct it"
SLIP_TRUST = "repository_authored"
# The API's words for a claim above the ceiling (nexum/core/roles.py) and how the tool result's text names
# the field.
ABOVE_CEILING = re.compile(r"may claim at most (?P<ceiling>\w+), not \w+")
NAMED_FIELD = re.compile(r"\(field: (?P<field>\w+)\)$")


@dataclass(frozen=True)
class Step:
    """One model turn: a call of the MCP tool ``tool`` with ``arguments``, or the final ``answer``."""

    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None


def refusal_of(answer: str) -> tuple[str, str] | None:
    """The API's message and the field it names, from a tool answer that is the refusal's text or its error
    object as JSON; None for any other answer."""
    try:
        document = json.loads(answer)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        error = document["error"]
        return (error["message"], error["field"]) if error.get("field") else None
    named = NAMED_FIELD.search(answer.strip())
    return (answer, named["field"]) if named else None


def corrected(arguments: dict[str, Any], answer: str) -> dict[str, Any] | None:
    """The arguments with the field the refusal names set to the ceiling it states, or None when the answer
    is no refusal of a claim above the ceiling."""
    refusal = refusal_of(answer)
    if refusal is None:
        return None
    message, field_name = refusal
    ceiling = ABOVE_CEILING.search(message)
    if ceiling is None or field_name not in arguments:
        return None
    return {**arguments, field_name: ceiling["ceiling"]}


@dataclass
class McpScript:
    """The model's plan for ``task_id``, one step per model call; ``seen`` keeps the tool answers each call
    was shown (their text, in order)."""

    task_id: str
    seen: list[list[str]] = field(default_factory=list)

    @property
    def slip(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "text": PROGRESS, "trust_class": SLIP_TRUST}

    def next_step(self, tool_answers: list[str]) -> Step:
        self.seen.append(list(tool_answers))
        if len(tool_answers) == 0:
            return Step("start_task", {"task_id": self.task_id})
        if len(tool_answers) == 1:
            return Step("record_progress", self.slip)
        if len(tool_answers) == 2:
            fixed = corrected(self.slip, tool_answers[-1])
            if fixed is None:
                return Step(answer=GAVE_UP)
            return Step("record_progress", fixed)
        if len(tool_answers) == 3:
            return Step("request_completion", {"task_id": self.task_id, "answer": ANSWER})
        return Step(answer=ANSWER)
