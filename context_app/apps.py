from django.apps import AppConfig


class ContextAppConfig(AppConfig):
    name = "context_app"
    verbose_name = "Context"

    def ready(self) -> None:
        from context_app import checks  # noqa: F401  (registers the start-up checks)
