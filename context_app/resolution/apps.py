from django.apps import AppConfig


class ResolutionConfig(AppConfig):
    name = "context_app.resolution"
    label = "resolution"
    verbose_name = "Context resolver"
