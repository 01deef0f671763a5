"""Verifying Nexum's webhook deliveries on the receiving side.

Each delivery is one event, POSTed as JSON with these headers:

- ``Nexum-Signature: t=<unix seconds>,v1=<hex>``: HMAC-SHA256 with the webhook's secret (its UTF-8 bytes)
  over ``b"<t>." + body``, the body's exact bytes as received;
- ``Nexum-Delivery-Id``: this event's delivery to this webhook, the same on every attempt (also the body's
  ``delivery_id``, which the signature covers): receivers deduplicate on it, since a delivery can arrive
  more than once (at least once is what is promised; a worker that dies before it records the answer sends
  it again);
- ``Nexum-Event-Id``: the event's position in its project's log, gapless (the same event sent to two
  webhooks has one event id and two delivery ids);
- ``Nexum-Webhook-Id`` and ``Nexum-Delivery-Attempt`` (1, 2 …: every attempt that may have reached the
  receiver is counted, so a redelivery carries the next number).
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Nexum-Signature"
EVENT_ID_HEADER = "Nexum-Event-Id"
WEBHOOK_ID_HEADER = "Nexum-Webhook-Id"
ATTEMPT_HEADER = "Nexum-Delivery-Attempt"
DELIVERY_ID_HEADER = "Nexum-Delivery-Id"
DEFAULT_TOLERANCE_S = 300


class InvalidSignature(Exception):
    """The delivery's signature is missing, malformed, wrong, or its timestamp is too old or too new."""


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Nexum-Signature`` header's value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(
    secret: str,
    body: bytes,
    signature_header: str | None,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> int:
    """Check a delivery's signature; its timestamp when good, else ``InvalidSignature``. A timestamp more
    than ``tolerance_s`` away from ``now`` is refused (a replayed old delivery)."""
    if not signature_header:
        raise InvalidSignature(f"no {SIGNATURE_HEADER} header")
    members = dict(part.split("=", 1) for part in signature_header.split(",") if "=" in part)
    timestamp_text, given = members.get("t", ""), members.get("v1", "")
    if not timestamp_text.isdigit() or not given:
        raise InvalidSignature(f"malformed {SIGNATURE_HEADER} header")
    timestamp = int(timestamp_text)
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    if not hmac.compare_digest(expected, given):
        raise InvalidSignature("the signature does not match the body")
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        raise InvalidSignature(f"the timestamp is more than {tolerance_s:.0f} s away")
    return timestamp
