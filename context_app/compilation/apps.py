from django.apps import AppConfig


class CompilationConfig(AppConfig):
    name = "context_app.compilation"
    label = "compilation"
    verbose_name = "Compiled contexts"

    def ready(self) -> None:
        # The Celery app discovers ``<app>.tasks`` of the top-level apps only; register ours here.
        from context_app.compilation import tasks  # noqa: F401
