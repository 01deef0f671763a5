"""A project's webhooks as events: an operator registering one, and removing it (issue 25: configuration is
recorded in the log like every other change, so the feed, the stream, the export and the chain carry it).

The events hold what was configured, never the signing secret: the webhook's row (``nexum_web.webhooks``)
keeps the secret and the delivery cursor, operational state written in the same transaction as the event.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexum.core.events import DomainEvent, event_type


def webhook_stream(webhook_id: str) -> str:
    return f"webhook-{webhook_id}"


@event_type("WebhookRegistered")
@dataclass(frozen=True)
class WebhookRegistered(DomainEvent):
    """An operator had the project's events sent to ``url`` from here on."""

    webhook_id: str
    url: str
    description: str


@event_type("WebhookRemoved")
@dataclass(frozen=True)
class WebhookRemoved(DomainEvent):
    """An operator stopped a webhook: nothing more is recorded or sent to it."""

    webhook_id: str
