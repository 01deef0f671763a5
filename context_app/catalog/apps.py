from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "context_app.catalog"
    label = "catalog"
    verbose_name = "Model catalog and overlays"
