from django.apps import AppConfig


class UiConfig(AppConfig):
    name = "nexum_web.ui"
    label = "nexum_ui"
    verbose_name = "Escalation UI and dashboard"
