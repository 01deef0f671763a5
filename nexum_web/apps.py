from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "nexum_web"
    verbose_name = "Web: the REST API, the UI and who reacts to what"

    def ready(self) -> None:
        from nexum import telemetry
        from nexum_web import handlers

        handlers.register_all()
        telemetry.tracing_from_environment()  # before any request or connection: see nexum.telemetry
