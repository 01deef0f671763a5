from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from nexum.api import views

handler404 = "nexum.urls.not_found"
handler500 = "nexum.api.errors.json_server_error"

api_v1 = [
    path("health", views.HealthView.as_view(), name="health"),
    path("events", views.EventFeedView.as_view(), name="event-feed"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"), namespace="v1")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
]


def not_found(request, exception=None):  # type: ignore[no-untyped-def]
    """JSON 404 under /api/, Django's page elsewhere."""
    from django.views.defaults import page_not_found

    from nexum.api.errors import json_not_found

    if request.path.startswith("/api/"):
        return json_not_found(request, exception)
    return page_not_found(request, exception)
