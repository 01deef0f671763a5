from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "nexum_web"
    verbose_name = "Web: the REST API and the UI"
