"""Trust classes, item signatures and the injected-instruction detector (SPEC R3, R4).

Rules:
- Classes are ordered: ``untrusted_retrieved < agent_reported < repository_authored < signed_skill <
  signed_policy < kernel`` and stored by name (``TRUST_CLASSES``, lowest first, is the one order; every other
  list of classes derives from it). ``agent_reported`` is what the executing agent says about the world: it
  informs, and like retrieved content it is never authority.
- An item never carries a class above its source's highest class (``cap_trust``).
- Every class above ``repository_authored`` (``signed_skill``, ``signed_policy`` and ``kernel``) needs an
  HMAC-SHA256 signature that verifies with the project's key; otherwise the item is downgraded to
  ``repository_authored`` (or the source's class when that is lower) and the reason is recorded.
- Untrusted content is data: ``require_authority`` refuses any change of grants, contracts, sources,
  overlays or task state that derives from an item below ``repository_authored``.
- ``looks_like_instruction`` labels text that reads like an instruction aimed at the model; the label informs,
  it never grants or removes authority (authority follows the trust class alone).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import html
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator
from enum import IntEnum
from hashlib import sha256
from typing import Any
from urllib.parse import unquote

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


TRUST_CLASSES: tuple[str, ...] = tuple(TrustClass.__members__)
"""Every class by name, lowest first."""

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


# --- injected-instruction detector ----------------------------------------------------------------------

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"), None)
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})

_PRIOR = r"(?:previous|prior|preceding|above|earlier|foregoing|former|original|initial|existing|old|system)"
_RULES = (
    r"(?:instructions?|directions?|directives?|rules?|prompts?|messages?|context|guidelines?|guidance|"
    r"constraints?|policies|policy|orders?|commands?|restrictions?|safeguards?|programming|guardrails?)"
)
_AGENT = (
    r"(?:you|yourself|me|us|this (?:agent|task|user|session|bot|model|assistant)|the (?:agent|assistant|"
    r"model|bot|user|caller|requester)|agents?|assistants?|llms?)"
)
_AI = r"(?:ai|a\.i\.|assistant|agent|llm|language model|model|chatbot|bot|copilot|gpt|chatgpt|claude|gemini)"
_KERNEL_OBJECT = (
    r"(?:grants?|contracts?|overlays?|trust[ _-]?class|trust level|plan gate|verification gate|"
    r"success criteria|task state|allowlist|guardrails?)"
)

_INSTRUCTION_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern)
    for pattern in (
        # "ignore (all) previous instructions" and its many spellings
        rf"\b(?:ignore|disregard|forget|override|overwrite|bypass|skip|drop|abandon|discard|neglect|"
        rf"ditch|throw away|set aside|put aside|stop following|do not follow|don't follow)\b"
        rf"(?:\s+\w+){{0,4}}?\s+{_PRIOR}\b(?:\s+\w+){{0,2}}?\s+{_RULES}\b",
        rf"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all|any|every|each|the|your|these|those|my)?\s*"
        rf"(?:\w+\s+)?{_RULES}\b",
        r"\b(?:ignore|disregard|forget)\s+(?:everything|all(?: of)? (?:that|this|the above)|the above|"
        r"what (?:you were|i|we) (?:told|said)|anything (?:you were|above))",
        r"(?:^|[.!?:;>\-*\n]\s*|\b(?:please|now|just|kindly|simply|so)\s+)disregard\b",
        r"\bdisregard (?:all|any|every|everything|the|your|these|those|this|that|previous|prior|above)\b",
        # new identity / role play
        r"\byou are now\b",
        r"\bfrom now on,? (?:you|your|the assistant|the agent|act|behave|respond|always|only)\b",
        r"\byou (?:will|must|shall|should) now (?:act|behave|respond|be|become|follow|obey|do|ignore)\b",
        r"\b(?:act|behave|respond) as (?:if you (?:are|were)|an? |the )(?:unrestricted|unfiltered|jailbroken|"
        r"root|admin|administrator|system|developer|superuser|kernel|different|new|evil|dan\b)",
        r"\bpretend (?:to be|that you are|you are|you're)\b",
        r"\b(?:your|the) new (?:instructions?|task|role|goal|objective|directive|persona|orders?|rules?|"
        r"system prompt)\b",
        r"\bnew (?:system )?instructions?\s*[:\-]",
        r"\b(?:developer|god|admin|debug|jailbreak|unrestricted) mode\b",
        r"\bjailbr(?:ea|o)k",
        r"\bdo anything now\b",
        # fake role markers
        r"(?:^|\n)\s*(?:[#>*_`\[(]{0,4}\s*)?(?:system|assistant|developer|sys)\s*(?:prompt|message)?"
        r"\s*[*_`\])]{0,3}\s*:",
        r"<\|?\s*im_(?:start|end|sep)\s*\|?>",
        r"<\|\s*(?:system|assistant|user|developer|endoftext|eot_id|start_header_id|end_header_id)\s*\|>",
        r"<<\s*/?\s*sys\s*>>",
        r"\[\s*/?\s*inst\s*\]",
        r"\[\s*/?\s*(?:system|sys|assistant|developer)(?: message| prompt)?\s*\]",
        r"#{1,6}\s*(?:system|assistant|developer|instruction|instructions|response)\b\s*(?:prompt|message)?"
        r"\s*(?::|\n|$)",
        r"</?\s*(?:system|system_prompt|system-prompt|sys|instructions?|developer|assistant)\s*>",
        r"\b(?:begin|start|end) (?:of )?(?:the )?(?:system|developer|hidden|new) (?:prompt|message|"
        r"instructions?)\b",
        r"\b(?:system|admin|administrator|developer|security|kernel|operator) (?:override|notice|message|"
        r"instruction|command|update|alert)\s*[:\-!]",
        # permissions and kernel objects
        rf"\b(?:grant|give|assign|elevate|escalate|add|upgrade|raise|change|set|update|modify|extend|"
        rf"expand|widen|promote|unlock|enable)\s+(?:{_AGENT}\s+)?(?:\w+\s+){{0,2}}(?:access|permissions?|"
        rf"privileges?|rights|scopes?|roles?|trust(?: class| level)?|clearance|admin|root|sudo)\b"
        rf"(?:\s+\w+){{0,3}}\s+(?:to|for|on)\s+{_AGENT}\b",
        rf"\b(?:grant|give|assign|elevate|escalate|upgrade|promote)\s+{_AGENT}\s+(?:\w+\s+){{0,2}}"
        rf"(?:access|permissions?|privileges?|rights|scopes?|roles?|trust|clearance|admin|root|sudo)\b",
        r"\b(?:elevate|escalate|upgrade|raise)\s+(?:your|my|its|the agent's|the assistant's|our)\s+"
        r"(?:permissions?|privileges?|access|rights|role|trust)",
        rf"\b(?:change|set|update|modify|edit|rewrite|replace|delete|remove|revoke|disable|turn off|"
        rf"override|bypass|skip|circumvent|relax|loosen|weaken)\s+(?:the |this |your |its |all |any )?"
        rf"(?:current |existing )?{_KERNEL_OBJECT}\b(?:\s+\w+){{0,4}}?\s+(?:so\b|because\b|now\b|"
        rf"to (?:allow|permit|include|grant|give|add|remove|drop|disable|skip|empty|raise|increase|extend|"
        rf"expand|widen|kernel|all|any|everything|none|nothing|true|false))",
        r"\b(?:trust[ _-]?class|trust level)\s*(?:to|=|:|is now|should be|must be)\s*['\"]?"
        r"(?:kernel|signed[ _-]?policy|signed[ _-]?skill|repository[ _-]?authored)",
        r"\bmark (?:this|the|my|your|current|every|all)\s+(?:\w+\s+)?(?:task|step|goal|check|checks|"
        r"contract|plan)s?\s+(?:as\s+)?(?:completed?|done|passed|succeeded|successful|verified|approved)\b",
        r"\b(?:approve|authorize|whitelist|allowlist)\s+(?:this|my|all|every|any)\s+(?:\w+\s+)?(?:change|"
        r"request|task|plan|step|deployment|command|access)",
        r"\b(?:approve|merge|deploy|accept|sign off)\b[^.\n]{0,40}\bwithout (?:any )?"
        r"(?:review|approval|checks|verification|tests)",
        r"\b(?:bypass|skip|disable|circumvent|turn off|switch off)\s+(?:the |all |any )?(?:plan gate|gate|"
        r"verification|safety|security|guardrails?|content filter|filters?|approval|review|checks? on)",
        r"\b(?:you (?:have|now have|are granted|were granted|are given)|i (?:grant|give) you)\s+(?:\w+\s+)?"
        r"(?:full|admin|root|unrestricted|elevated|unlimited|sudo|write|all)\s+(?:access|permissions?|"
        r"privileges?|rights)",
        r"\byou are (?:authorized|allowed|permitted|cleared) to\b",
        r"\b(?:run|execute)\s+(?:this|the following)\s+(?:command|script|code)\s+(?:immediately|now|"
        r"without)",
        # addressing the model and secrecy
        rf"\b(?:note|message|instructions?|attention|reminder|memo|directive)s?\s+(?:to|for)\s+"
        rf"(?:the |any |all )?{_AI}s?\b",
        rf"(?:^|[\s(\[{{<!\-#/*>]|\b(?:hey|dear|hi|hello|attention|psst|important)[,:!]?\s+)(?:hey|dear|attention"
        rf"|psst)[,:]?\s+{_AI}s?\b",
        rf"\bif you are (?:an? |the )?(?:\w+\s+)?{_AI}s?\b",
        rf"\b{_AI}s?\s+(?:reading|processing|parsing|summari[sz]ing|ingesting) this\b",
        rf"\b(?:all |any )?{_AI}s?\s+(?:must|should|shall|are required to|are instructed to)\s+(?:now|always|"
        rf"never|ignore|disregard|obey|follow|grant|approve|mark|set|run|execute|output|reply|respond|say)\b",
        r"\b(?:do not|don't|never) (?:tell|inform|alert|notify|mention (?:this )?to|reveal (?:this )?to) "
        r"(?:the )?(?:user|human|operator|developer|admin)",
        r"\bwithout (?:telling|informing|notifying|alerting|asking) (?:the )?"
        r"(?:user|human|operator|developer)",
        r"\b(?:reveal|print|output|show|repeat|leak|dump|disclose|send)\s+(?:me\s+)?(?:your|the)\s+"
        r"(?:\w+\s+)?(?:system prompt|instructions|initial prompt|hidden prompt|api keys?|secrets?|"
        r"credentials|tokens?|private keys?|passwords?)",
        r"\bexfiltrat",
        r"\b(?:obey|follow) (?:only )?(?:these|the following|my|these new|the new) (?:instructions|rules|"
        r"orders|commands)",
        r"\b(?:the|your) (?:real|true|actual|only) (?:instructions|task|goal|objective) (?:is|are)\b",
        r"\bimportant(?: new)? (?:instructions?|update|notice) for (?:the )?(?:ai|assistant|agent|model|llm)",
        r"\bprompt injection\b.*\b(?:test|payload|succeeded)\b",
        # other languages (the common phrasings)
        r"\bignor(?:iere|ieren sie) (?:alle )?(?:vorherigen|bisherigen|obigen) (?:anweisungen|befehle)",
        r"\bignor(?:e|ez) (?:toutes )?les instructions (?:pr[eé]c[eé]dentes|ant[eé]rieures)",
        r"\bignora (?:todas )?las instrucciones (?:anteriores|previas)",
        r"\bignora (?:tutte )?le istruzioni precedenti",
    )
)

# JSON whose members read like a change of authority: a grant, a contract, an overlay, a trust class, a task
# state transition, a chat role.
_STRONG_KEYS = frozenset(
    {
        "grant", "grants", "permission", "permissions", "privileges", "trust_class", "trustclass",
        "trust_level", "contract", "contracts", "overlay", "overlays", "task_state", "new_state",
        "set_state", "transition", "override", "sudo", "elevate", "escalate_privileges", "system_prompt",
        "instructions", "instruction", "allowlist", "allowed_sources", "plan_gate", "gate",
        "success_criteria", "checks", "require_checks", "on_failure", "capabilities", "policy", "policies",
    }
)  # fmt: skip
_WEAK_KEYS = frozenset(
    {
        "scopes", "scope", "sources", "state", "role", "action", "expires_at", "context_tokens",
        "auto_compact_tokens", "admin", "access", "approve", "approved", "task_id", "stream_id", "actor",
        "verified", "risk", "trust",
    }
)  # fmt: skip
_ROLE_VALUES = frozenset({"system", "developer", "assistant", "admin", "root", "kernel"})
_STATE_VALUES = frozenset({"completed", "complete", "running", "passed", "approved", "cancelled", "verified"})

_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_HIDDEN_CHANNELS = (
    re.compile(r"<!--(.*?)(?:-->|$)", re.S),  # HTML comments
    re.compile(
        r"\[([^\]]*)\]\(([^)\s]*)(?:\s+[\"']([^\"']*)[\"'])?\)"
    ),  # Markdown links: text, target, title
    re.compile(r"(?:^|\s)(?:#|//|--|;)\s?(.*)$", re.M),  # line comments
    re.compile(r"/\*(.*?)(?:\*/|$)", re.S),  # block comments
    re.compile(r"(?:\"\"\"|''')(.*?)(?:\"\"\"|'''|$)", re.S),  # docstrings
    re.compile(r"\b(?:alt|title|aria-label|data-[\w-]+)\s*=\s*[\"']([^\"']*)[\"']"),  # attributes
)


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    text = html.unescape(text)
    if "%" in text:
        text = unquote(text)
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    text = re.sub(r"[ \t\u00a0]+", " ", text)
    return re.sub(r"\n\s*\n+", "\n", text)


def _variants(text: str) -> Iterator[str]:
    normalized = _normalize(text)
    yield normalized
    collapsed = re.sub(r"\s+", " ", normalized)
    yield collapsed
    # "i.g.n.o.r.e" / "i g n o r e" spelled out letter by letter, and 1337-speak
    yield re.sub(r"(?<=\b\w)[.\-_ ](?=\w\b)", "", collapsed)
    yield collapsed.translate(_LEET)
    # punctuation used to split trigger words ("ig-nore", "in*structions")
    yield re.sub(r"(?<=[a-z])[*_\-.~|](?=[a-z])", "", collapsed)


def _matches_patterns(text: str) -> bool:
    return any(pattern.search(variant) for variant in _variants(text) for pattern in _INSTRUCTION_PATTERNS)


def _json_values(text: str) -> Iterator[Any]:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", text):
        try:
            value, _end = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict | list):
            yield value


def _walk_objects(value: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    if depth > 8:
        return
    if isinstance(value, dict):
        yield value
        for member in value.values():
            yield from _walk_objects(member, depth + 1)
    elif isinstance(value, list):
        for member in value:
            yield from _walk_objects(member, depth + 1)


def _object_is_authority_change(obj: dict[str, Any]) -> bool:
    keys = {re.sub(r"[\s\-]+", "_", str(key).strip().lower()) for key in obj}
    if keys & _STRONG_KEYS:
        return True
    role = str(obj.get("role", "")).strip().lower()
    if role in _ROLE_VALUES and ({"content", "text", "message"} & keys):
        return True
    for key in ("state", "status", "new_state", "to"):
        if str(obj.get(key, "")).strip().lower() in _STATE_VALUES and (
            {"task", "task_id", "stream_id", "step", "transition", "actor", "reason"} & keys
        ):
            return True
    action = str(obj.get("action", obj.get("type", obj.get("op", "")))).strip().lower()
    if re.search(
        r"grant|approve|elevate|override|set_trust|complete|overlay|contract|revoke|permission", action
    ):
        return True
    return len(keys & _WEAK_KEYS) >= 3


def _has_authority_json(text: str) -> bool:
    if "{" not in text:
        return False
    for value in _json_values(text):
        if any(_object_is_authority_change(obj) for obj in _walk_objects(value)):
            return True
    # JSON-ish text that does not parse (single quotes, trailing commas, truncated)
    keys = re.findall(r"[\"']\s*([A-Za-z_][\w\- ]{0,40}?)\s*[\"']\s*:", text)
    normalized = {re.sub(r"[\s\-]+", "_", key.strip().lower()) for key in keys}
    return bool(normalized & _STRONG_KEYS) or len(normalized & _WEAK_KEYS) >= 3


def _decoded_blobs(text: str) -> Iterator[str]:
    for match in _BASE64_RUN.finditer(text):
        blob = match.group(0)
        if blob.isalpha() or blob.isdigit():
            continue  # a word or a number, not an encoding
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                raw = decode(blob + "=" * (-len(blob) % 4))
            except (binascii.Error, ValueError):
                continue
            try:
                decoded = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            printable = sum(ch.isprintable() or ch.isspace() for ch in decoded)
            if decoded and printable / len(decoded) > 0.9:
                yield decoded
                break
    for match in re.finditer(r"(?:[0-9a-fA-F]{2}){12,}", text):  # hex-encoded text
        try:
            decoded = bytes.fromhex(match.group(0)).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        if decoded.isprintable():
            yield decoded


def _hidden_channel_texts(text: str) -> Iterator[str]:
    for pattern in _HIDDEN_CHANNELS:
        for match in pattern.finditer(text):
            for part in match.groups():
                if part and part.strip():
                    yield part.strip()


def looks_like_instruction(text: str, *, _depth: int = 0) -> bool:
    """True when ``text`` reads like an instruction aimed at the model rather than data about the world.

    Deterministic and conservative about ordinary prose: it looks for override phrases ("ignore previous
    instructions", "disregard …", "you are now …"), fake chat-role markers, attempts to grant or change
    permissions, trust classes, contracts, overlays or task state (in prose or as JSON), the same phrases
    hidden in comments, Markdown links or HTML comments, and base64/hex/percent-encoded copies of them.
    """
    if not text or not text.strip():
        return False
    if _matches_patterns(text) or _has_authority_json(text):
        return True
    for hidden in _hidden_channel_texts(text):
        if hidden != text and (_matches_patterns(hidden) or _has_authority_json(hidden)):
            return True
    if _depth < 2:
        for decoded in _decoded_blobs(text):
            if looks_like_instruction(decoded, _depth=_depth + 1):
                return True
    return False
