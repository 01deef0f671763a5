"""The ``Nexum-Signature`` header: HMAC-SHA256 with the webhook's secret over ``b"<t>." + body`` (the exact
bytes sent), ``t`` the Unix time of the attempt. The same scheme as ``nexum_client.webhooks``, which
receivers use to verify; a test checks that the two agree."""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "Nexum-Signature"
EVENT_ID_HEADER = "Nexum-Event-Id"
WEBHOOK_ID_HEADER = "Nexum-Webhook-Id"
ATTEMPT_HEADER = "Nexum-Delivery-Attempt"
DELIVERY_ID_HEADER = "Nexum-Delivery-Id"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes, timestamp: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"
