"""An agent loop driven through the Python client (``nexum-client``), with a scripted stand-in for the model.

What a real agent does, against a running Nexum (``make run``, then ``make demo-agent``):

1. The planner (the demo's operator token) copies the example repository ``examples/auth-service`` (one
   failing test: ``verify_token`` never enforces expiry) into a fresh checkout inside the project's workspace
   folder, and creates a goal with one task whose verification contract runs the repository's pytest suite
   there. The agent can never set that bar itself.
2. The agent (the demo's agent token) resolves the task's context, starts the task, and then, for each
   attempt: compiles its context for the model, lets the model act (tool calls that edit the checkout, a
   fact, a decision, progress), records each step, and asks the gate to complete the task, polling until
   the gate decides.
3. The scripted model gets its first fix wrong (the comparison the wrong way round), so the gate's pytest
   run refuses the completion; the agent records the failure, starts the task again (attempt 2), compiles a
   context that now carries that failure, and the model, reading it, gets the fix right: the gate completes
   the task.

No network but the Nexum server: the model is a script, the tools run on the checkout. The checkout must be
where the server's command check sees it (the project's workspace folder, ``--workspace``), so this runs on
the server's machine.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexum_client import Completion, Context, Nexum

REPOSITORY = Path(__file__).resolve().parent / "auth-service"
TOKENS_FILE = "auth_service/tokens.py"
MODEL_WORD = "local"
BUGGY_LINES = "    # BUG (the demo's failing spec): the expiry is never enforced.\n    del expiry\n"
WRONG_FIX = '    if now < expiry:\n        raise InvalidToken("expired token")\n'
RIGHT_FIX = '    if now >= expiry:\n        raise InvalidToken("expired token")\n'


# --- the planner's part (an operator) ----------------------------------------------------------------------


def plan_task(operator: Nexum, *, workspace: Path, python: str = sys.executable) -> tuple[str, Path]:
    """A fresh checkout of the example repository in the project's workspace folder, and a goal with one
    task whose contract runs its pytest suite there. The task's id and the checkout."""
    folder = f"agent-loop/{uuid.uuid4().hex[:8]}"
    checkout = workspace / folder
    shutil.copytree(REPOSITORY, checkout, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    check = {
        "kind": "command",
        "name": "auth-service pytest",
        "argv": [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        "cwd": folder,
        "timeout_s": 120,
    }
    goal = operator.create_goal(
        "Make verify_token refuse expired tokens",
        tasks=[
            {
                "key": "fix",
                "objective": "Make verify_token refuse expired tokens",
                "inputs": [TOKENS_FILE],
                "success_criteria": ["the auth-service test suite passes"],
                "risk": "low",
            }
        ],
        contracts={"fix": {"checks": [check], "on_failure": "failed"}},
    )
    return goal.task("fix").id, checkout


# --- the model's stand-in and the tools it calls -----------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """What the model answered: tool calls to make, a finding, a decision, and its claim of success."""

    tool_calls: list[ToolCall]
    fact: str
    decision: str
    rationale: str
    answer: str


class ScriptedModel:
    """Stands in for the model, deterministically. It reads the prompt block it is given: while that carries
    no refusal by the gate it proposes a fix that compares the wrong way round; once the context shows the
    gate's failure (``test_a_fresh_token_verifies`` failed), it flips the comparison."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def turn(self, context: Context) -> Turn:
        self.prompts.append(context.prompt_block)
        saw_failure = "test_a_fresh_token_verifies" in context.prompt_block
        if not saw_failure:
            edit = {"path": TOKENS_FILE, "old": BUGGY_LINES, "new": WRONG_FIX}
            decision = "Refuse the token in verify_token once it has expired"
        else:
            edit = {"path": TOKENS_FILE, "old": WRONG_FIX, "new": RIGHT_FIX}
            decision = "Flip the expiry comparison: a token is expired when now >= expires_at"
        return Turn(
            tool_calls=[ToolCall("read_file", {"path": TOKENS_FILE}), ToolCall("edit_file", edit)],
            fact="verify_token parses expires_at from the token but never compares it with now",
            decision=decision,
            rationale="the failing spec test_an_expired_token_is_rejected expects InvalidToken",
            answer="verify_token now refuses expired tokens; the test suite passes",
        )


class Tools:
    """The tools the model may call, run on the checkout; each returns the summary that is recorded."""

    def __init__(self, checkout: Path) -> None:
        self.checkout = checkout

    def run(self, call: ToolCall) -> str:
        handler: Callable[..., str] = getattr(self, call.tool)
        return handler(**call.arguments)

    def read_file(self, path: str) -> str:
        text = (self.checkout / path).read_text()
        return f"read {path}: {len(text.splitlines())} lines"

    def edit_file(self, path: str, old: str, new: str) -> str:
        target = self.checkout / path
        text = target.read_text()
        if old not in text:
            return f"edit_file {path}: the lines to replace were not found; nothing changed"
        target.write_text(text.replace(old, new, 1))
        return f"edit_file {path}: replaced {len(old.splitlines())} lines with {len(new.splitlines())}"

    def diff(self, path: str) -> str:
        before = (REPOSITORY / path).read_text().splitlines(keepends=True)
        after = (self.checkout / path).read_text().splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}"))


# --- the agent's loop --------------------------------------------------------------------------------------


@dataclass
class LoopResult:
    task_id: str
    outcome: str
    attempts: int
    completions: list[Completion] = field(default_factory=list)
    context_digests: list[str] = field(default_factory=list)


def drive_task(
    agent: Nexum,
    task_id: str,
    *,
    checkout: Path,
    model: ScriptedModel,
    model_word: str = MODEL_WORD,
    max_attempts: int = 3,
    say: Callable[[str], None] = print,
) -> LoopResult:
    """Resolve, start, then compile → act → record → complete until the gate completes the task (or
    ``max_attempts`` are spent, or the gate blocks it)."""
    tools = Tools(checkout)
    resolution = agent.resolve(task_id)
    say(f"resolve: bundle {resolution.bundle_digest[:12]} complete={resolution.complete}")
    task = agent.start(task_id)
    result = LoopResult(task_id=task_id, outcome=task.state, attempts=0)
    while result.attempts < max_attempts:
        result.attempts += 1
        context = agent.compile(task_id, model_word)
        result.context_digests.append(context.digest)
        say(f"attempt {task.attempt}: compiled {context.total_tokens} tokens for {model_word!r}")
        turn = model.turn(context)
        for call in turn.tool_calls:
            summary = tools.run(call)
            agent.record_tool_call(task_id, call.tool, summary, arguments=call.arguments)
            say(f"  tool {call.tool}: {summary}")
        agent.record_fact(turn.fact, task_id=task_id, subject="verify_token expiry")
        agent.record_decision(turn.decision, task_id=task_id, rationale=turn.rationale)
        agent.record_artifact(
            f"the patch to {TOKENS_FILE} (attempt {task.attempt})",
            task_id=task_id,
            uri=f"file:{TOKENS_FILE}",
            media_type="text/x-diff",
            content_text=tools.diff(TOKENS_FILE),
        )
        agent.record_progress(
            f"attempt {task.attempt}: patched {TOKENS_FILE}; asking the gate", task_id=task_id
        )
        completion = agent.complete(task_id, turn.answer)
        result.completions.append(completion)
        result.outcome = completion.outcome
        say(f"  gate: {completion.outcome} {completion.reason}".rstrip())
        if completion.outcome != "failed":
            break
        agent.record_failure(task_id, _failure_text(completion))
        task = agent.start(task_id, reason="retry after the gate refused the completion")
    return result


def _failure_text(completion: Completion) -> str:
    """The gate's refusal in the words the next context should carry: the reason and the failing tests."""
    failing = [
        line.strip()
        for run in completion.check_runs
        for line in (run.get("output") or "").splitlines()
        if line.startswith("FAILED")
    ]
    return f"The gate refused the completion: {completion.reason}. " + "; ".join(failing)


# --- the command line --------------------------------------------------------------------------------------


def _server_workspace_root() -> Path:
    """Where the server keeps its projects' workspaces, read from the environment as its settings do."""
    data_dir = Path(os.environ.get("NEXUM_DATA_DIR", "data"))
    return Path(os.environ.get("NEXUM_WORKSPACE_ROOT", data_dir / "workspace"))


def command_line(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The demo agents' command line (this loop's and the framework examples'): the server, the two demo
    tokens, the workspace as the server sees it, the model word."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default=os.environ.get("NEXUM_URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--token", default=os.environ.get("NEXUM_DEMO_TOKEN", "nx_demo_local_development_only")
    )
    parser.add_argument(
        "--operator-token",
        default=os.environ.get("NEXUM_DEMO_OPERATOR_TOKEN", "nx_demo_operator_local_development_only"),
    )
    parser.add_argument(
        "--workspace",
        type=Path,
        default=_server_workspace_root() / "demo",
        help="the demo project's workspace folder as the server sees it (default: data/workspace/demo)",
    )
    parser.add_argument("--model", default=MODEL_WORD, help="the catalog word to compile for")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = command_line(__doc__.split("\n\n")[0], argv)
    with Nexum(args.url, args.operator_token) as operator:
        task_id, checkout = plan_task(operator, workspace=args.workspace.resolve())
    print(f"planned task {task_id}; checkout {checkout}")
    with Nexum(args.url, args.token) as agent:
        result = drive_task(agent, task_id, checkout=checkout, model=ScriptedModel(), model_word=args.model)
    print(f"task {task_id}: {result.outcome} after {result.attempts} attempts")
    return 0 if result.outcome == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
