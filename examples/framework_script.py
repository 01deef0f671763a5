"""What the three framework examples share: the task they work on (examples/agent_loop.py plans it: a
checkout of examples/auth-service and a goal whose contract runs its pytest suite), the file tools, and the
script their stand-in model follows.

The scripted model acts only on what its system prompt carries: it reads the file the compiled context
names as the task's input and replaces the buggy lines with the fix. A prompt without Nexum's context (the
task's objective and input) gets no tool call, only an answer saying the context is missing, and the gate
then refuses the task, so a run that completes shows the compile arrived where the framework puts it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_loop import (
    BUGGY_LINES,
    RIGHT_FIX,
    TOKENS_FILE,
    Tools,
    command_line,
    plan_task,
)

__all__ = ["Script", "ScriptStep", "command_line", "example_main", "file_tools", "plan_task"]

OBJECTIVE = "Make verify_token refuse expired tokens"
ANSWER = "verify_token now refuses expired tokens: it raises InvalidToken once now >= expires_at"
NO_CONTEXT = "I was given no task context, so I changed nothing"


@dataclass(frozen=True)
class ScriptStep:
    """One model turn: a tool call (``tool`` and ``arguments``) or the final ``answer``."""

    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None


@dataclass
class Script:
    """The stand-in model's plan, one step per model call; ``system_prompts`` keeps what each call saw."""

    system_prompts: list[str] = field(default_factory=list)

    def next_step(self, system_prompt: str, tool_answers: int) -> ScriptStep:
        """The step after ``tool_answers`` tool results, given the system prompt of this call."""
        self.system_prompts.append(system_prompt)
        if OBJECTIVE not in system_prompt or TOKENS_FILE not in system_prompt:
            return ScriptStep(answer=NO_CONTEXT)
        if tool_answers == 0:
            return ScriptStep(tool="read_file", arguments={"path": TOKENS_FILE})
        if tool_answers == 1:
            edit = {"path": TOKENS_FILE, "old": BUGGY_LINES, "new": RIGHT_FIX}
            return ScriptStep(tool="edit_file", arguments=edit)
        return ScriptStep(answer=ANSWER)


def file_tools(checkout: Path) -> tuple[Any, Any]:
    """``read_file`` and ``edit_file`` on the checkout, as plain typed functions every framework takes."""
    tools = Tools(checkout)

    def read_file(path: str) -> str:
        """Read a file of the repository; answers how many lines it has."""
        return tools.read_file(path)

    def edit_file(path: str, old: str, new: str) -> str:
        """Replace the lines ``old`` of a repository file by ``new``."""
        return tools.edit_file(path, old, new)

    return read_file, edit_file


def example_main(description: str, run: Any, compiles: Any, argv: list[str] | None = None) -> int:
    """What each framework example's ``main`` does: plan the demo task as the operator, work it as the agent
    through ``run(agent, task_id, checkout=, model_word=)``, say how many compiles (``compiles(result)``) and
    what the gate decided; 0 when it completed the task."""
    from nexum_client import Nexum

    args = command_line(description, argv)
    with Nexum(args.url, args.operator_token) as operator:
        task_id, checkout = plan_task(operator, workspace=args.workspace.resolve())
    with Nexum(args.url, args.token) as agent:
        result = run(agent, task_id, checkout=checkout, model_word=args.model)
    print(f"task {task_id}: {compiles(result)} compiles; gate: {result.completion.outcome}")
    return 0 if result.completion.outcome == "completed" else 1
