from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from context_app import api as world_api
from context_app.catalog import api as catalog_api
from context_app.compilation import api as compile_api
from context_app.resolution import api as resolution_api
from nexum.api import stream, views
from nexum.api.errors import json_not_found, json_server_error
from nexum.mcp.http import mcp_endpoint
from tasks_app import api as tasks_api
from verification_app import api as verification_api

api_v1 = [
    path("health", views.HealthView.as_view(), name="health"),
    path("events", views.EventFeedView.as_view(), name="event-feed"),
    path("events/stream", stream.EventStreamView.as_view(), name="event-stream"),
    path("goals", tasks_api.GoalListCreateView.as_view(), name="goals"),
    path("goals/<str:goal_id>", tasks_api.GoalDetailView.as_view(), name="goal"),
    path("goals/<str:goal_id>/tasks/<str:key>", tasks_api.GoalTaskDetailView.as_view(), name="goal-task"),
    path("tasks", tasks_api.TaskListView.as_view(), name="tasks"),
    path("tasks/<str:task_id>", tasks_api.TaskDetailView.as_view(), name="task"),
    path("tasks/<str:task_id>/start", tasks_api.TaskStartView.as_view(), name="task-start"),
    path("tasks/<str:task_id>/fail", tasks_api.TaskFailView.as_view(), name="task-fail"),
    path("tasks/<str:task_id>/block", tasks_api.TaskBlockView.as_view(), name="task-block"),
    path("tasks/<str:task_id>/unblock", tasks_api.TaskUnblockView.as_view(), name="task-unblock"),
    path("tasks/<str:task_id>/cancel", tasks_api.TaskCancelView.as_view(), name="task-cancel"),
    path("tasks/<str:task_id>/complete", verification_api.TaskCompleteView.as_view(), name="task-complete"),
    path(
        "tasks/<str:task_id>/completions",
        verification_api.TaskCompletionListView.as_view(),
        name="task-completions",
    ),
    path("tasks/<str:task_id>/contract", verification_api.TaskContractView.as_view(), name="task-contract"),
    path("completions/<str:request_id>", verification_api.CompletionDetailView.as_view(), name="completion"),
    path("goals/<str:scope_id>/facts", world_api.GoalFactView.as_view(), name="goal-facts"),
    path("goals/<str:scope_id>/decisions", world_api.GoalDecisionView.as_view(), name="goal-decisions"),
    path("goals/<str:scope_id>/artifacts", world_api.GoalArtifactView.as_view(), name="goal-artifacts"),
    path("goals/<str:scope_id>/progress", world_api.GoalProgressView.as_view(), name="goal-progress"),
    path("goals/<str:scope_id>/tools", world_api.GoalToolsView.as_view(), name="goal-tools"),
    path("tasks/<str:scope_id>/facts", world_api.TaskFactView.as_view(), name="task-facts"),
    path("tasks/<str:scope_id>/decisions", world_api.TaskDecisionView.as_view(), name="task-decisions"),
    path("tasks/<str:scope_id>/artifacts", world_api.TaskArtifactView.as_view(), name="task-artifacts"),
    path("tasks/<str:scope_id>/failures", world_api.TaskFailureView.as_view(), name="task-failures"),
    path("tasks/<str:scope_id>/progress", world_api.TaskProgressView.as_view(), name="task-progress"),
    path("tasks/<str:scope_id>/tool-calls", world_api.TaskToolCallView.as_view(), name="task-tool-calls"),
    path("tasks/<str:scope_id>/tools", world_api.TaskToolsView.as_view(), name="task-tools"),
    path("facts/<str:fact_id>", world_api.FactDetailView.as_view(), name="fact"),
    path("facts/<str:fact_id>/verify", world_api.FactVerifyView.as_view(), name="fact-verify"),
    path("facts/<str:fact_id>/retract", world_api.FactRetractView.as_view(), name="fact-retract"),
    path("facts/<str:fact_id>/supersede", world_api.FactSupersedeView.as_view(), name="fact-supersede"),
    path("items", world_api.ItemListView.as_view(), name="items"),
    path("items/<str:item_id>", world_api.ItemDetailView.as_view(), name="item"),
    path("artifacts/<str:item_id>/content", world_api.ArtifactContentView.as_view(), name="artifact-content"),
    path("tools", world_api.ToolListView.as_view(), name="tools"),
    path("tools/<str:name>", world_api.ToolDetailView.as_view(), name="tool"),
    path("models", catalog_api.ModelsView.as_view(), name="models"),
    path("models/catalog", catalog_api.ModelCatalogView.as_view(), name="model-catalog"),
    path("models/<str:word>/overlay", catalog_api.ModelOverlayView.as_view(), name="model-overlay"),
    path("sources", resolution_api.SourceListCreateView.as_view(), name="sources"),
    path("goals/<str:scope_id>/grants", resolution_api.GoalGrantView.as_view(), name="goal-grants"),
    path("tasks/<str:scope_id>/grants", resolution_api.TaskGrantView.as_view(), name="task-grants"),
    path("tasks/<str:task_id>/questions", resolution_api.TaskQuestionsView.as_view(), name="task-questions"),
    path("tasks/<str:task_id>/resolve", resolution_api.TaskResolveView.as_view(), name="task-resolve"),
    path("tasks/<str:task_id>/bundle", resolution_api.TaskBundleView.as_view(), name="task-bundle"),
    path(
        "tasks/<str:task_id>/plan-gate/override",
        resolution_api.PlanGateOverrideView.as_view(),
        name="task-plan-gate-override",
    ),
    path("bundles/<str:digest>", resolution_api.BundleDetailView.as_view(), name="bundle"),
    path("escalations", resolution_api.EscalationListView.as_view(), name="escalations"),
    path("escalations/<str:escalation_id>", resolution_api.EscalationDetailView.as_view(), name="escalation"),
    path(
        "escalations/<str:escalation_id>/resolve",
        resolution_api.EscalationResolveView.as_view(),
        name="escalation-resolve",
    ),
    path("tasks/<str:task_id>/compile", compile_api.TaskCompileView.as_view(), name="task-compile"),
    path("tasks/<str:task_id>/contexts", compile_api.TaskContextListView.as_view(), name="task-contexts"),
    path("compiles/<str:request_id>", compile_api.CompileRequestView.as_view(), name="compile-request"),
    path("contexts/<str:digest>", compile_api.ContextDetailView.as_view(), name="context"),
    path("contexts/<str:digest>/replay", compile_api.ContextReplayView.as_view(), name="context-replay"),
    path(
        "contexts/<str:digest>/diff/<str:other>", compile_api.ContextDiffView.as_view(), name="context-diff"
    ),
]

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("escalations/", include("nexum.ui.urls")),
    path("api/v1/", include((api_v1, "api"), namespace="v1")),
    path("mcp", mcp_endpoint, name="mcp"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/",
        views.self_contained(SpectacularSwaggerView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("api/redoc/", views.self_contained(SpectacularRedocView.as_view(url_name="schema")), name="redoc"),
    # Last: any other path under /api/ is a JSON 404, with or without DEBUG (whose 404 page is HTML).
    re_path(r"^api/", csrf_exempt(json_not_found)),
]


def server_error(request: HttpRequest) -> HttpResponse:
    """An exception outside the API views (they answer their own): JSON under /api/, else Django's page."""
    if request.path.startswith("/api/"):
        return json_server_error(request)
    return defaults.server_error(request)


handler500 = server_error
