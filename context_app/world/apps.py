from django.apps import AppConfig


class WorldConfig(AppConfig):
    name = "context_app.world"
    label = "context_app"  # the label the migrations and the tables were made under
    verbose_name = "Context"
