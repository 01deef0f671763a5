"""What the resolver may read (R2): the grant in force for a task, the scopes it covers, and the plan of
calls it allows, with a denial for every request it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

from nexum.core.resolution.model import (
    ANY_SCOPE,
    DENY_GRANT_EXPIRED,
    DENY_OUTSIDE_GRANT,
    DENY_SCOPE_NOT_DECLARED,
    DENY_SCOPE_NOT_GRANTED,
    DENY_UNKNOWN_SOURCE,
    Denial,
    GrantedScopes,
    PlannedCall,
    RetrievalPlan,
    SourceSpec,
    require_aware,
    utc_iso,
)


@dataclass(frozen=True)
class GrantRecord:
    """A grant as recorded (not revoked)."""

    scopes: Mapping[str, Sequence[str]]
    expires_at: datetime | None


def effective_grant(grants: Sequence[GrantRecord], now: datetime) -> GrantedScopes | None:
    """The one grant the resolver applies now: the union of the task's and its goal's grants in force.

    With none in force but some expired, the union of the expired ones with their latest expiry, so that every
    retrieval is denied as ``grant_expired`` (and says so). A source only named by an expired grant, while
    another grant is in force, is simply outside the grant.
    """
    active = [g for g in grants if g.expires_at is None or now < g.expires_at]
    chosen = active or list(grants)
    if not chosen:
        return None
    merged: dict[str, set[str]] = {}
    for grant in chosen:
        for name, scopes in grant.scopes.items():
            merged.setdefault(name, set()).update(scopes)
    expires_at = None
    if not active:
        expires_at = max(g.expires_at for g in chosen if g.expires_at is not None)
    return GrantedScopes(scopes={name: tuple(sorted(s)) for name, s in merged.items()}, expires_at=expires_at)


def scope_covers(granted: str, requested: str) -> bool:
    """Does the granted scope include the requested one? Equal, ``*``, a ``/``-ended prefix, or a glob."""
    if granted in (ANY_SCOPE, requested):
        return True
    if requested == ANY_SCOPE:
        return False
    if granted.endswith("/") and requested.startswith(granted):
        return True
    return any(ch in granted for ch in "*?[") and fnmatchcase(requested, granted)


def authorize(
    grant: GrantedScopes | None, source: str, scopes: Sequence[str], now: datetime
) -> tuple[tuple[str, ...], Denial | None]:
    """The scopes of ``source`` that ``grant`` allows now, and the denial for the rest (``None`` if none)."""
    require_aware(now, "now")
    requested = tuple(sorted(set(scopes)))
    if grant is None:
        return (), Denial(source, requested, DENY_OUTSIDE_GRANT, "no grant covers this task")
    if grant.expires_at is not None and now >= grant.expires_at:
        return (), Denial(
            source, requested, DENY_GRANT_EXPIRED, f"grant expired at {utc_iso(grant.expires_at)}"
        )
    if source not in grant.scopes:
        return (), Denial(source, requested, DENY_OUTSIDE_GRANT, f"source {source!r} is outside the grant")
    granted = grant.scopes[source]
    allowed = tuple(scope for scope in requested if any(scope_covers(g, scope) for g in granted))
    refused = tuple(scope for scope in requested if scope not in allowed)
    if refused:
        return allowed, Denial(
            source,
            refused,
            DENY_SCOPE_NOT_GRANTED,
            f"scope(s) {', '.join(refused)} not granted on {source!r}",
        )
    return allowed, None


def plan_retrievals(
    grant: GrantedScopes | None,
    sources: Sequence[SourceSpec],
    *,
    now: datetime,
    requested: Mapping[str, Sequence[str]] | None = None,
) -> RetrievalPlan:
    """Which sources may be called with which scopes, and what is denied. ``requested`` defaults to every
    declared source with all its declared scopes; a requested scope must be one the source declares."""
    by_name = {spec.name: spec for spec in sources}
    if requested is None:
        requested = {spec.name: spec.declared_scopes for spec in sources}
    calls: list[PlannedCall] = []
    denials: list[Denial] = []
    for name in sorted(requested):
        scopes = tuple(sorted(set(requested[name])))
        spec = by_name.get(name)
        if spec is None:
            denials.append(Denial(name, scopes, DENY_UNKNOWN_SOURCE, f"no source named {name!r} is declared"))
            continue
        if not scopes:
            scopes = spec.declared_scopes
        undeclared = tuple(s for s in scopes if not any(scope_covers(d, s) for d in spec.declared_scopes))
        if undeclared:
            denials.append(
                Denial(
                    name,
                    undeclared,
                    DENY_SCOPE_NOT_DECLARED,
                    f"scope(s) {', '.join(undeclared)} not declared by source {name!r}",
                )
            )
            scopes = tuple(s for s in scopes if s not in undeclared)
            if not scopes:
                continue
        allowed, denial = authorize(grant, name, scopes, now)
        if denial is not None:
            denials.append(denial)
        if allowed:
            calls.append(PlannedCall(name, allowed))
    return RetrievalPlan(calls=tuple(calls), denials=tuple(denials))
