from django.apps import AppConfig


class ResolutionConfig(AppConfig):
    name = "context_app.resolution"
    label = "resolution"
    verbose_name = "Context resolver"

    def ready(self) -> None:
        import nexum.core.resolution.events  # noqa: F401  (registers the event types)
