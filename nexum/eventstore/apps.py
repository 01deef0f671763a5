from django.apps import AppConfig


class EventStoreConfig(AppConfig):
    name = "nexum.eventstore"
    label = "eventstore"
    verbose_name = "Event log"

    def ready(self) -> None:
        # Bind shared tasks to Nexum's Celery app before any task is sent.
        from config import celery  # noqa: F401
