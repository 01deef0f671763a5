from django.apps import AppConfig


class WorkConfig(AppConfig):
    name = "nexum.work"
    label = "work"
    verbose_name = "Work in flight"
