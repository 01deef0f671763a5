"""The evidence a compile is given besides the world state's items (not stored world state): the latest
completion request's check runs, the resolver's latest bundle and the compile request's own, as context items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from context_app.resolution import selectors as resolution_selectors
from nexum.core.compilation.model import ContextItem
from nexum.core.durations import human_age
from nexum.core.tokens import TokenCounter
from nexum.core.world.items import DEFAULT_TRUST_CLASS
from verification_app import selectors as verification_selectors

CHECK_RUN_ORIGIN = "verification gate, latest completion request"
REQUEST_EVIDENCE_ORIGIN = "supplied with the compile request"
JUST_NOW_SECONDS = 60
CHECK_OUTPUT_CHARS = 4000


def request_evidence_items(evidence: Sequence[Mapping[str, Any]], counter: TokenCounter) -> list[ContextItem]:
    """Evidence a compile request supplied (already validated by the service), ids prefixed ``request:``."""
    return [
        ContextItem.from_text(
            entry["kind"],
            f"request:{entry['id']}",
            entry["text"],
            counter=counter,
            trust_class=entry.get("trust_class") or DEFAULT_TRUST_CLASS,
            origin=entry.get("origin") or REQUEST_EVIDENCE_ORIGIN,
            given=True,
        )
        for entry in evidence
    ]


def check_run_evidence(task_id: str, counter: TokenCounter) -> list[ContextItem]:
    """The latest completion request's check runs, as diagnostics (the end of a long log kept)."""
    items = []
    for run in verification_selectors.latest_check_runs(task_id=task_id):
        output = run["output"] or ""
        if len(output) > CHECK_OUTPUT_CHARS:  # the end of a log is where the error is
            output = "…" + output[-CHECK_OUTPUT_CHARS:]
        verdict = "passed" if run["passed"] else "failed"
        head = f"Check {run['name']}: {verdict}" + (f" ({run['reason']})" if run["reason"] else "")
        text = f"{head}\n{output}".strip() if output.strip() else head
        items.append(
            ContextItem.from_text(
                "diagnostic",
                f"check:{run['name']}",
                text,
                counter=counter,
                origin=CHECK_RUN_ORIGIN,
                given=True,
            )
        )
    return items


def latest_bundle_items(task_id: str, counter: TokenCounter) -> tuple[str | None, list[ContextItem]]:
    """The resolver's latest bundle: its facts and code, each with its trust class, origin
    (``source:locator``) and when it was observed, measured against the resolve's own time ("observed 2
    days ago"; a stale item says so as the resolver recorded it: "stale: observed 3 years ago (TTL 30
    days)"), minus the items a human rejected when settling a conflict. Returns the bundle's digest too
    (recorded on the compiled context). No clock is read: a replay renders the same words."""
    bundle = resolution_selectors.latest_bundle(task_id=task_id)
    if bundle is None:
        return None, []
    items = [
        ContextItem.from_text(
            entry.kind,
            f"bundle:{entry.digest}",
            entry.text,
            counter=counter,
            trust_class=entry.trust_class,
            origin=entry.origin,
            observed=observed_words(entry.observed_at, bundle.resolved_at, entry.stale_reason),
            given=True,
        )
        for entry in bundle.usable_items
        if entry.text.strip()
    ]
    return bundle.digest, items


def observed_words(observed_at: str | None, resolved_at: datetime | None, stale_reason: str | None) -> str:
    """When a retrieved item was observed, as people say it, against the time of the resolve that read it
    ("observed 2 days ago", "observed just now" under a minute), and why it is stale when it is."""
    observed = "observed at an unknown time"
    if observed_at and resolved_at is not None:
        age = (resolved_at - datetime.fromisoformat(observed_at)).total_seconds()
        observed = "observed just now" if age < JUST_NOW_SECONDS else f"observed {human_age(age)}"
    if not stale_reason:
        return observed
    if stale_reason.startswith("observed "):  # the resolver's own words already say when
        return f"stale: {stale_reason}"
    return f"{observed} · stale: {stale_reason}"
