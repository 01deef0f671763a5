from django.apps import AppConfig


class CompilationConfig(AppConfig):
    name = "context_app.compilation"
    label = "compilation"
    verbose_name = "Compiled contexts"
