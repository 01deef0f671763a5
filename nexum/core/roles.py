"""Who may set the bar: the role a caller's token carries (SPEC I2, V8, R4).

- ``agent``, the executing model: records world items, compiles, resolves its context, asks for completion,
  starts, fails and blocks its tasks, and reads. What it records is at most ``agent_reported``.
- ``operator``, the planner: all of that, and the policy writes — contracts, sources, grants, the model
  catalog and overlays, the tool registry and tool scopes, required questions, escalation resolutions,
  plan-gate overrides, unblocking and cancelling tasks. What it records is at most ``repository_authored``.

Who can write content is a role too (SPEC R4a): a source the agent can write (its workspace) yields content
at most ``agent_reported`` (``content_ceiling``).

Staff humans in the admin and the escalation UI act as operators. No caller claims a trust class above its
role's ceiling: the signed classes come only from sources with a verifying signature, ``kernel`` from none.
"""

from __future__ import annotations

from typing import Final

from nexum.core.errors import Forbidden, ValidationFailed
from nexum.core.trust import TrustClass

AGENT: Final = "agent"
OPERATOR: Final = "operator"
ROLES: Final = (AGENT, OPERATOR)

TRUST_CEILINGS: Final = {AGENT: TrustClass.agent_reported, OPERATOR: TrustClass.repository_authored}


def validate_role(role: object, *, field: str = "role") -> str:
    if role not in ROLES:
        raise ValidationFailed(f"{field} must be one of {', '.join(ROLES)}", field=field, code="invalid_role")
    return role  # type: ignore[return-value]


def content_ceiling(writable_by: str) -> TrustClass:
    """The highest class content can carry given who can change it (SPEC R4a): what the executing agent can
    write is at most ``agent_reported``, whatever its source claims; an operator's content is bounded by its
    source alone (and signed classes by their signatures)."""
    writer = validate_role(writable_by, field="writable_by")
    return TRUST_CEILINGS[AGENT] if writer == AGENT else TrustClass.kernel


def actor_of(role: str, name: str) -> str:
    """How the log names a token's holder: ``agent:<name>`` or ``operator:<name>``."""
    return f"{validate_role(role)}:{name}"


def require_operator(role: str, action: str, *, field: str | None = None) -> None:
    """Refuse ``action`` (a policy write) unless the caller is an operator: 403 ``forbidden``."""
    if role != OPERATOR:
        raise Forbidden(
            f"{action} needs an operator token; an {role} token may record, compile, resolve, ask for"
            " completion and start, fail or block its tasks",
            field=field,
            details={"role": role, "needs": OPERATOR, "action": action},
        )


def trust_ceiling(role: str) -> TrustClass:
    return TRUST_CEILINGS[validate_role(role)]


def caller_trust(claimed: TrustClass | str | None, *, role: str, field: str = "trust_class") -> TrustClass:
    """The trust class a caller's write carries: its claim, or its role's ceiling when it claims none.

    A claim above the ceiling is refused (403 ``forbidden``), never silently capped: the caller learns that
    its word does not carry that weight.
    """
    ceiling = trust_ceiling(role)
    if claimed is None:
        return ceiling
    trust = TrustClass.parse(claimed, field=field)
    if trust > ceiling:
        raise Forbidden(
            f"an {role} token may claim at most {ceiling.name}, not {trust.name}; signed classes come only"
            " from sources with a verifying signature",
            field=field,
            details={"role": role, "ceiling": ceiling.name, "claimed": trust.name},
        )
    return trust
