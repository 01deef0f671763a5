from django.apps import AppConfig


class VerificationAppConfig(AppConfig):
    name = "verification_app"
    verbose_name = "Verification"

    def ready(self) -> None:
        from verification_app import checks  # noqa: F401  (registers the sandbox's system check)
