from django.apps import AppConfig


class BootstrapConfig(AppConfig):
    """The project's own app, installed last: once every app is ready, it wires them together
    (``config.bootstrap``)."""

    name = "config"
    label = "nexum_config"
    verbose_name = "Nexum's wiring"

    def ready(self) -> None:
        from config.bootstrap import bootstrap

        bootstrap()
