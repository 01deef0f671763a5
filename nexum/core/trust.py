"""Trust classes, item signatures and the injected-instruction detector (SPEC R3, R4).

Rules:
- Classes are ordered: ``untrusted_retrieved < agent_reported < repository_authored < signed_skill <
  signed_policy < kernel`` and stored by name (``TrustClass`` is the one order; every list of classes derives
  from it). ``agent_reported`` is what the executing agent says about the world: it
  informs, and like retrieved content it is never authority.
- An item never carries a class above its source's highest class (``cap_trust``), nor above what whoever can
  write its source may claim (SPEC R4a): a source the agent can write yields ``agent_reported`` at most
  (``nexum.core.roles.content_ceiling``, applied by the resolver).
- Every class above ``repository_authored`` (``signed_skill``, ``signed_policy`` and ``kernel``) needs an
  HMAC-SHA256 signature that verifies with the project's key; otherwise the item is downgraded to
  ``repository_authored`` (or the source's class when that is lower) and the reason is recorded.
- Untrusted content is data: ``require_authority`` refuses any change of grants, contracts, sources,
  overlays or task state that derives from an item below ``repository_authored``.
- ``looks_like_instruction`` (``nexum.core.injection``) labels text that reads like
  an instruction aimed at the model; the label informs, it never grants or removes authority (authority
  follows the trust class alone).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from enum import IntEnum
from hashlib import sha256

from nexum.core.digests import canonical_json
from nexum.core.errors import PolicyRefused, ValidationFailed


class TrustClass(IntEnum):
    """Ordered trust classes; compare with ``<``/``>=``; persist ``.name``, read back with ``parse``."""

    untrusted_retrieved = 0
    agent_reported = 1
    repository_authored = 2
    signed_skill = 3
    signed_policy = 4
    kernel = 5

    @classmethod
    def parse(cls, value: TrustClass | str, *, field: str = "trust_class") -> TrustClass:
        if isinstance(value, TrustClass):
            return value
        if isinstance(value, str):
            name = value.strip().lower()
            if name.startswith("trust_class_"):
                name = name[len("trust_class_") :]
            if name in cls.__members__:
                return cls[name]
        names = ", ".join(cls.__members__)
        raise ValidationFailed(f"unknown trust class {value!r}; expected one of {names}", field=field)


SIGNED_CLASSES = frozenset({TrustClass.signed_skill, TrustClass.signed_policy, TrustClass.kernel})
"""Classes that must carry a verifying signature."""

DOWNGRADE_MISSING_SIGNATURE = "missing signature"
DOWNGRADE_BAD_SIGNATURE = "signature does not verify"
DOWNGRADE_NO_KEY = "no key configured for project"

UNTRUSTED_CONTENT = "untrusted_content"


def cap_trust(item_class: TrustClass, source_class: TrustClass) -> TrustClass:
    """An item never exceeds its source's class."""
    return min(item_class, source_class)


def is_authoritative(trust_class: TrustClass) -> bool:
    return trust_class >= TrustClass.repository_authored


def require_authority(trust_class: TrustClass | Iterable[TrustClass], action: str) -> None:
    """Refuse ``action`` (creating or changing a grant, contract, source, overlay or task state) when it
    derives from content below ``repository_authored``. Given several classes (an action derived from several
    items), the lowest one decides."""
    classes = [trust_class] if isinstance(trust_class, TrustClass) else list(trust_class)
    lowest = min(classes, default=TrustClass.untrusted_retrieved)
    if not is_authoritative(lowest):
        raise PolicyRefused(
            f"{action} refused: it derives from {lowest.name} content, which is data and never authority",
            code=UNTRUSTED_CONTENT,
            details={"trust_class": lowest.name, "action": action},
        )


# --- signatures ---------------------------------------------------------------------------------------


def _key_bytes(key: bytes | str) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else key


def signing_payload(*, text: str, subject: str | None, locator: str, trust_class: TrustClass) -> bytes:
    """The canonical form a signature covers: text, subject, locator and the claimed class (by name)."""
    return canonical_json(
        {
            "v": 1,
            "text": text,
            "subject": subject,
            "locator": locator,
            "trust_class": TrustClass.parse(trust_class).name,
        }
    ).encode("utf-8")


def sign_item(
    key: bytes | str, *, text: str, subject: str | None, locator: str, trust_class: TrustClass
) -> str:
    """Hex HMAC-SHA256 of the item's canonical form under the project's key."""
    if not key:
        raise ValidationFailed("a signing key must not be empty", field="key")
    payload = signing_payload(text=text, subject=subject, locator=locator, trust_class=trust_class)
    return hmac.new(_key_bytes(key), payload, sha256).hexdigest()


def verify_item_signature(
    key: bytes | str,
    signature: str | None,
    *,
    text: str,
    subject: str | None,
    locator: str,
    trust_class: TrustClass,
) -> bool:
    if not key or not signature or not isinstance(signature, str):
        return False
    expected = sign_item(key, text=text, subject=subject, locator=locator, trust_class=trust_class)
    return hmac.compare_digest(expected, signature.strip().lower())


def effective_trust(
    claimed: TrustClass,
    source_class: TrustClass,
    signature: str | None,
    key: bytes | str | None,
    *,
    text: str,
    subject: str | None,
    locator: str,
) -> tuple[TrustClass, str | None]:
    """The class an item actually carries, and why it was lowered (``None`` when it kept its claim).

    The claim is first capped at the source's class; a signed class then needs a signature over the claimed
    class that verifies with ``key``. A failed check downgrades to ``repository_authored`` when the source
    allows it, else to the source's class.
    """
    capped = cap_trust(claimed, source_class)
    cap_reason = None
    if capped < claimed:
        cap_reason = f"claimed {claimed.name} above the source's highest class {source_class.name}"
    if capped not in SIGNED_CLASSES:
        return capped, cap_reason
    if not key:
        reason = DOWNGRADE_NO_KEY
    elif not signature:
        reason = DOWNGRADE_MISSING_SIGNATURE
    elif not verify_item_signature(
        key, signature, text=text, subject=subject, locator=locator, trust_class=claimed
    ):
        reason = DOWNGRADE_BAD_SIGNATURE
    else:
        return capped, cap_reason
    downgraded = min(TrustClass.repository_authored, source_class)
    return downgraded, reason if cap_reason is None else f"{cap_reason}; {reason}"
