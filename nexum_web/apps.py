from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "nexum_web"
    verbose_name = "Web: the REST API and the UI"

    def ready(self) -> None:
        from django.conf import settings

        from nexum.adapters import telemetry

        # Before any request or connection is made: see nexum.adapters.telemetry.
        telemetry.tracing_from_environment(statements=settings.NEXUM_TRACE_SQL)
