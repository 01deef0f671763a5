from django.apps import AppConfig


class EventStoreConfig(AppConfig):
    name = "nexum.eventstore"
    label = "eventstore"
    verbose_name = "Event log"
