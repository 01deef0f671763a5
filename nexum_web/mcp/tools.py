"""The MCP tools and resources: each one an API operation, described by the API's own OpenAPI schema.

A tool is a row of ``TOOLS``: its name, what it tells the model, and the API operation it calls (method and
path; the record tools have a second path for a goal). Its input schema is built from that operation in the
OpenAPI schema (``schemas``), so the arguments a tool takes are exactly what the endpoint accepts, and the
endpoint's strict serializer validates them; where the API takes a free-form map a strict host cannot
describe, the tool takes a list (``Reshaped``) or leaves the member to another tool (``omitted``). Its output
schema is built from the operation's success answers, with a refusal's error object beside them. Operator
tools are marked: an agent token calling one is refused by the API's role check, as over HTTP. The order of
``TOOLS`` is the order clients list them in.
"""

from __future__ import annotations

from nexum_web.mcp.shapes import SOURCES_ARGUMENT, compile_summary, compile_summary_schema, sources_map
from nexum_web.mcp.specs import McpTool, Reshaped, ResourceSpec

_AS_AGENT = "Recorded as you; its trust class is at most your token's ceiling (agent_reported for an agent)."

TOOLS: dict[str, McpTool] = {
    spec.name: spec
    for spec in [
        McpTool(
            "record_fact",
            f"Record a fact on a task (task_id) or shared by its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/facts",
            goal_path="/api/v1/goals/{goal_id}/facts",
        ),
        McpTool(
            "record_decision",
            f"Record a decision and its rationale on a task (task_id) or its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/decisions",
            goal_path="/api/v1/goals/{goal_id}/decisions",
        ),
        McpTool(
            "record_failure",
            f"Record what failed on a task (its attempt by default). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/failures",
        ),
        McpTool(
            "record_progress",
            f"Record a progress note on a task (task_id) or its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/progress",
            goal_path="/api/v1/goals/{goal_id}/progress",
        ),
        McpTool(
            "record_tool_call",
            f"Record a tool call made for a task (its arguments are kept as a digest). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/tool-calls",
        ),
        McpTool(
            "record_artifact",
            "Record an artifact (uri, summary, optional content as content_text or content_base64, stored "
            f"by sha256) on a task (task_id) or its goal (goal_id). {_AS_AGENT}",
            "POST",
            "/api/v1/tasks/{task_id}/artifacts",
            goal_path="/api/v1/goals/{goal_id}/artifacts",
        ),
        McpTool(
            "retract_fact",
            "Retract a current fact (fact_id) with a reason; it stays in the history. Only a fact at or "
            "below your token's ceiling: an agent cannot retract what an operator recorded (403 naming "
            "trust_class).",
            "POST",
            "/api/v1/facts/{fact_id}/retract",
            destructive=True,
            idempotent=True,
        ),
        McpTool(
            "supersede_fact",
            "Replace a current fact (fact_id) by a new one in the same scope; returns the new fact. Only a "
            "fact at or below your token's ceiling: an agent cannot supersede what an operator recorded (403 "
            f"naming trust_class). {_AS_AGENT}",
            "POST",
            "/api/v1/facts/{fact_id}/supersede",
            destructive=True,
            idempotent=True,
        ),
        McpTool(
            "verify_fact",
            "Mark a current fact verified (an optional note says how you checked it); a superseded or "
            "retracted fact is refused.",
            "POST",
            "/api/v1/facts/{fact_id}/verify",
        ),
        McpTool(
            "get_fact",
            "A fact with its history: recorded, verified, superseded or retracted, by whom and when.",
            "GET",
            "/api/v1/facts/{fact_id}",
        ),
        McpTool(
            "list_items",
            "World-state items (facts, decisions, failures, artifacts, progress notes, tool calls) of the "
            "project, a goal or a task, filtered by kind; current: true leaves out superseded and retracted "
            "facts. Paginated: pass next_cursor back as cursor.",
            "GET",
            "/api/v1/items",
        ),
        McpTool(
            "create_goal",
            "Create a goal with its plan: an objective and its tasks (key, objective, depends_on by key, "
            "risk, inputs, constraints, success_criteria). Returns the goal with its tasks' ids. Contracts "
            "are an operator's: an operator registers each with set_contract.",
            "POST",
            "/api/v1/goals",
            omitted={
                "contracts": "an operator registers each task's contract with set_contract",
                "contract_origin": "an operator registers each task's contract with set_contract",
            },
        ),
        McpTool(
            "get_goal",
            "A goal with its tasks in plan order: state, version, dependencies.",
            "GET",
            "/api/v1/goals/{goal_id}",
        ),
        McpTool(
            "compile_context",
            "Compile the task's context for one model call under the model word's budget: the prompt block, "
            "the tools to expose, the budget and tokens per section; excluded items are counted per kind and "
            "reason (the full list is the resource nexum://contexts/{digest}). Facts not relevant enough to "
            "the step are left out (below the relevance floor); focus (what you are working on now) ranks "
            "them.",
            "POST",
            "/api/v1/tasks/{task_id}/compile",
            shape=compile_summary,
            shape_schema=compile_summary_schema,
        ),
        McpTool(
            "report_usage",
            "After the model call made with a compiled context (digest), report what the provider counted: "
            "its usage's prompt_tokens and completion_tokens, the provider and model, the cost if known. The "
            "answer's drift is (prompt_tokens - Nexum's count) / Nexum's count; operators see it per model "
            "card and raise the card's safety margin when it drifts.",
            "POST",
            "/api/v1/contexts/{digest}/usage",
        ),
        McpTool(
            "get_compile",
            "A queued compile (compile_context with async: true): queued, done with its context, or failed.",
            "GET",
            "/api/v1/compiles/{request_id}",
        ),
        McpTool(
            "resolve_context",
            "Resolve the task's context from the sources its grants allow: the bundle (items with origin, "
            "trust class, staleness, conflicts), whether it is complete, why it stopped, escalations opened.",
            "POST",
            "/api/v1/tasks/{task_id}/resolve",
            reshaped={"sources": Reshaped(SOURCES_ARGUMENT, sources_map)},
            open_world=True,
        ),
        McpTool(
            "start_task",
            "Start a pending task whose dependencies are completed, or retry a failed one (attempt + 1).",
            "POST",
            "/api/v1/tasks/{task_id}/start",
            idempotent=True,
        ),
        McpTool(
            "fail_task",
            "Give up the running attempt of a task (running → failed, with a reason); start_task retries it "
            "(attempt + 1). expected_version: the version you acted on (a moved-on task is refused, 409).",
            "POST",
            "/api/v1/tasks/{task_id}/fail",
            idempotent=True,
        ),
        McpTool(
            "block_task",
            "Stop a running task that needs a human or an operator (running → blocked, with a reason); an "
            "operator unblocks it. Open escalations are listed by list_escalations.",
            "POST",
            "/api/v1/tasks/{task_id}/block",
            idempotent=True,
        ),
        McpTool(
            "request_completion",
            "Ask the verification gate to complete a running task. The contract's checks decide; your answer "
            "is recorded beside them and never decides. outcome: completed, failed, blocked, skipped, or "
            "pending (poll with get_completion and the completion's id).",
            "POST",
            "/api/v1/tasks/{task_id}/complete",
            idempotent=True,
        ),
        McpTool(
            "get_completion",
            "A completion request: its status, outcome, reason, failing checks and each check run's output.",
            "GET",
            "/api/v1/completions/{request_id}",
        ),
        McpTool(
            "list_tasks",
            "The project's tasks (goals excluded), filtered by goal and state, paginated.",
            "GET",
            "/api/v1/tasks",
        ),
        McpTool(
            "get_task",
            "A task or goal: state, version, attempt, dependencies and its transitions.",
            "GET",
            "/api/v1/tasks/{task_id}",
        ),
        McpTool(
            "list_escalations",
            "Escalations of the project or a task (task), open or resolved (state): context gaps and "
            "conflicts a human closes. Paginated: pass next_cursor back as cursor.",
            "GET",
            "/api/v1/escalations",
        ),
        McpTool(
            "request_approval",
            "Ask an operator to approve an action before you take it: one of your own (action, e.g. "
            "deploy, with arguments_digest: the sha256 of its arguments) or, after a denial, the task's "
            "start or complete again. Returns the approval (pending); read the answer with get_approval.",
            "POST",
            "/api/v1/tasks/{task_id}/approvals",
        ),
        McpTool(
            "get_approval",
            "An approval: pending, granted or denied, with the operator's reason. start_task and "
            "request_completion of a task that needs one are refused (approval_required, naming it) until "
            "it is granted.",
            "GET",
            "/api/v1/approvals/{approval_id}",
        ),
        McpTool(
            "list_approvals",
            "Approvals of the project or a task (task), by state (pending, granted, denied). Paginated: "
            "pass next_cursor back as cursor.",
            "GET",
            "/api/v1/approvals",
        ),
        McpTool(
            "decide_approval",
            "Grant or deny a pending approval with a reason. An agent token is refused: an agent never "
            "approves its own step.",
            "POST",
            "/api/v1/approvals/{approval_id}/decision",
            operator=True,
        ),
        McpTool(
            "set_contract",
            "Register or replace a task's verification contract. An agent token is refused: the executing "
            "agent never sets its own bar.",
            "PUT",
            "/api/v1/tasks/{task_id}/contract",
            operator=True,
            destructive=True,
        ),
        McpTool(
            "fork",
            "Fork a task (task_id) or a goal with its plan (goal_id) from a past log position "
            "(at_position: a compile's or an event's position): a new goal whose world is the source's as "
            "it stood then, every task pending; the source is untouched. Retrying with the same "
            "idempotency_key returns the first fork. An agent token is refused.",
            "POST",
            "/api/v1/tasks/{task_id}/fork",
            goal_path="/api/v1/goals/{goal_id}/fork",
            operator=True,
            omitted={"key": "pass idempotency_key"},
            idempotent=True,
        ),
    ]
}

RESOURCES = [
    ResourceSpec(
        "nexum://tasks/{task_id}",
        "task",
        "A task: state, version, attempt, dependencies, transitions.",
        "/api/v1/tasks/{task_id}",
    ),
    ResourceSpec(
        "nexum://contexts/{digest}",
        "compiled context",
        "A stored compiled context: prompt block, tools, included items, exclusions per reason, budget.",
        "/api/v1/contexts/{digest}",
    ),
    ResourceSpec(
        "nexum://bundles/{digest}",
        "bundle",
        "A resolved context bundle: items with origin and trust, denials, conflicts, stop reason.",
        "/api/v1/bundles/{digest}",
    ),
]
