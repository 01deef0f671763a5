"""The delivery task and its work kind: a delivery is leased while an attempt runs; the dispatcher's pass
records the deliveries due from the log (``prepare``) and sends them, at most
``NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT`` of a project's at a time (a finished attempt sends its project's
next), on the ``webhooks`` queue (``CELERY_TASK_ROUTES``)."""

from __future__ import annotations

from celery import shared_task
from django.db.models import Q

from nexum.work.kinds import WorkKind
from nexum.work.worker import WorkTask, run_leased
from nexum_web.webhooks import services
from nexum_web.webhooks.models import PENDING, WebhookDelivery


@shared_task(bind=True, base=WorkTask, name="nexum.webhooks.deliver")
def webhook_deliver(self: WorkTask, delivery_id: str) -> str | None:
    """One attempt at a webhook delivery; the delivery's state afterwards."""
    return run_leased(
        self,
        DELIVERY,
        delivery_id,
        lambda lease: services.delivery_attempt(delivery_id=delivery_id, lease=lease),
    )


DELIVERY = WorkKind(
    name="webhook",
    task=webhook_deliver,
    model=WebhookDelivery,
    id_field="id",
    pending=Q(state=PENDING),
    prepare=services.deliveries_record,
    in_flight_setting="NEXUM_WEBHOOK_IN_FLIGHT_PER_PROJECT",
    oldest_first=("requested_at", "position"),  # a project's events in log order
)
