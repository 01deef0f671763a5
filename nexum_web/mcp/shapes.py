"""Where a tool differs from its API operation: ``compile_context`` answers with a compile summary (and its
schema) instead of the whole compiled context, and ``resolve_context`` takes its sources as a list, which
strict hosts can describe, instead of the API's free-form map.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nexum_web.mcp.json_schema import as_json_schema

_BUDGET_REASON = re.compile(r"needed \d+ tokens, \d+ left")

# The compiled context's members a compile summary passes on as they are.
SUMMARY_KEPT = (
    "digest",
    "model",
    "position",
    "budget",
    "prompt_block",
    "tools",
    "section_tokens",
    "total_tokens",
)


def compile_summary(body: dict[str, Any]) -> dict[str, Any]:
    """What a model call needs from a compile: the prompt block, the tools and the budget, with the excluded
    items counted per kind and reason instead of listed (the whole context is the resource
    ``nexum://contexts/{digest}``). A queued compile's answer is passed on as it is."""
    context = body.get("context") if isinstance(body, dict) else None
    if not isinstance(context, dict):
        return body
    exclusions = context.get("exclusions") or {}
    summary: dict[str, dict[str, int]] = {}
    for run in exclusions.get("runs", []):  # a run without a reason: each needed more tokens than were left
        reason = run["reason"]
        reason = "over budget" if reason is None or _BUDGET_REASON.fullmatch(reason) else reason
        per_kind = summary.setdefault(run["kind"], {})
        per_kind[reason] = per_kind.get(reason, 0) + run["count"]
    kept = SUMMARY_KEPT
    return {
        "request_id": body.get("request_id"),
        **{name: context.get(name) for name in kept},
        "included": len(context.get("included", [])),
        "truncated": context.get("truncated", []),
        "excluded": {"count": exclusions.get("count", 0), "by_kind_and_reason": summary},
        "resource": f"nexum://contexts/{context.get('digest')}",
    }


def compile_summary_schema(components: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of ``compile_summary``'s answer: the kept members as the compiled context declares
    them."""
    context = as_json_schema(components["CompiledContext"], components)
    members = context["properties"]
    kept = SUMMARY_KEPT
    count = {"type": "integer", "minimum": 0}
    return {
        "type": "object",
        "properties": {
            "request_id": {"type": "string"},
            **{name: members[name] for name in kept},
            "included": {**count, "description": "how many items the context holds"},
            "truncated": members["truncated"],
            "excluded": {
                "type": "object",
                "properties": {
                    "count": count,
                    "by_kind_and_reason": {
                        "type": "object",
                        "description": "excluded items counted per kind, then per reason",
                        "additionalProperties": {"type": "object", "additionalProperties": count},
                    },
                },
                "required": ["count", "by_kind_and_reason"],
            },
            "resource": {"type": "string", "description": "the whole context: read this resource"},
        },
        "required": ["request_id", *kept, "included", "truncated", "excluded", "resource"],
    }


SCOPE = {"type": "string", "minLength": 1, "maxLength": 500}
SOURCES_ARGUMENT = {
    "type": "array",
    "description": "only these sources, each with the scopes to read (none: all the scopes it declares); "
    "default: every source of the project, all its scopes",
    "items": {
        "type": "object",
        "properties": {
            "source": {"type": "string", "minLength": 1, "description": "a source's name"},
            "scopes": {"type": "array", "items": SCOPE, "description": "none: all its declared scopes"},
        },
        "required": ["source"],
        "additionalProperties": False,
    },
}


def sources_map(sources: Any) -> dict[str, list[str]]:
    """``[{source, scopes?}]`` as the API's ``{source: [scopes]}``; a source named twice is refused."""
    if not isinstance(sources, list):
        raise ValueError("sources must be a list of {source, scopes}")
    by_name: dict[str, list[str]] = {}
    for entry in sources:
        name = entry.get("source") if isinstance(entry, dict) else None
        scopes = entry.get("scopes", []) if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or set(entry) - {"source", "scopes"}:
            raise ValueError("each of sources is {source: a name, scopes?: a list of scopes}")
        if name in by_name:
            raise ValueError(f"source {name!r} is named twice in sources")
        by_name[name] = scopes
    return by_name
