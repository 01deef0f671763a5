from django.apps import AppConfig


class VerificationAppConfig(AppConfig):
    name = "verification_app"
    verbose_name = "Verification"
