from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from nexum_web.api import (
    approvals,
    catalog,
    compilation,
    contexts,
    facts,
    forks,
    project_settings,
    resolution,
    stream,
    tasks,
    tools,
    usage,
    verification,
    views,
    world,
)
from nexum_web.api.errors import json_not_found, json_server_error
from nexum_web.api.metrics import MetricsView
from nexum_web.mcp.http import mcp_endpoint
from nexum_web.webhooks import api as webhooks_api

api_v1 = [
    path("health", views.HealthView.as_view(), name="health"),
    path("events", views.EventFeedView.as_view(), name="event-feed"),
    path("events/stream", stream.EventStreamView.as_view(), name="event-stream"),
    path("events/stream/tickets", stream.StreamTicketView.as_view(), name="event-stream-tickets"),
    path("goals", tasks.GoalListCreateView.as_view(), name="goals"),
    path("goals/<str:goal_id>", tasks.GoalDetailView.as_view(), name="goal"),
    path("goals/<str:goal_id>/tasks/<str:key>", tasks.GoalTaskDetailView.as_view(), name="goal-task"),
    path("tasks", tasks.TaskListView.as_view(), name="tasks"),
    path("tasks/<str:task_id>", tasks.TaskDetailView.as_view(), name="task"),
    path("tasks/<str:task_id>/start", tasks.TaskStartView.as_view(), name="task-start"),
    path("tasks/<str:task_id>/fail", tasks.TaskFailView.as_view(), name="task-fail"),
    path("tasks/<str:task_id>/block", tasks.TaskBlockView.as_view(), name="task-block"),
    path("tasks/<str:task_id>/unblock", tasks.TaskUnblockView.as_view(), name="task-unblock"),
    path("tasks/<str:task_id>/cancel", tasks.TaskCancelView.as_view(), name="task-cancel"),
    path("tasks/<str:task_id>/fork", forks.TaskForkView.as_view(), name="task-fork"),
    path("goals/<str:goal_id>/fork", forks.GoalForkView.as_view(), name="goal-fork"),
    path("tasks/<str:task_id>/complete", verification.TaskCompleteView.as_view(), name="task-complete"),
    path(
        "tasks/<str:task_id>/completions",
        verification.TaskCompletionListView.as_view(),
        name="task-completions",
    ),
    path("tasks/<str:task_id>/contract", verification.TaskContractView.as_view(), name="task-contract"),
    path("completions/<str:request_id>", verification.CompletionDetailView.as_view(), name="completion"),
    path("goals/<str:scope_id>/facts", world.GoalFactView.as_view(), name="goal-facts"),
    path("goals/<str:scope_id>/decisions", world.GoalDecisionView.as_view(), name="goal-decisions"),
    path("goals/<str:scope_id>/artifacts", world.GoalArtifactView.as_view(), name="goal-artifacts"),
    path("goals/<str:scope_id>/progress", world.GoalProgressView.as_view(), name="goal-progress"),
    path("goals/<str:scope_id>/tools", tools.GoalToolsView.as_view(), name="goal-tools"),
    path("tasks/<str:scope_id>/facts", world.TaskFactView.as_view(), name="task-facts"),
    path("tasks/<str:scope_id>/decisions", world.TaskDecisionView.as_view(), name="task-decisions"),
    path("tasks/<str:scope_id>/artifacts", world.TaskArtifactView.as_view(), name="task-artifacts"),
    path("tasks/<str:scope_id>/failures", world.TaskFailureView.as_view(), name="task-failures"),
    path("tasks/<str:scope_id>/progress", world.TaskProgressView.as_view(), name="task-progress"),
    path("tasks/<str:scope_id>/tool-calls", world.TaskToolCallView.as_view(), name="task-tool-calls"),
    path("tasks/<str:scope_id>/tools", tools.TaskToolsView.as_view(), name="task-tools"),
    path("facts/<str:fact_id>", facts.FactDetailView.as_view(), name="fact"),
    path("facts/<str:fact_id>/verify", facts.FactVerifyView.as_view(), name="fact-verify"),
    path("facts/<str:fact_id>/retract", facts.FactRetractView.as_view(), name="fact-retract"),
    path("facts/<str:fact_id>/supersede", facts.FactSupersedeView.as_view(), name="fact-supersede"),
    path("items", world.ItemListView.as_view(), name="items"),
    path("items/<str:item_id>", world.ItemDetailView.as_view(), name="item"),
    path("artifacts/<str:item_id>/content", world.ArtifactContentView.as_view(), name="artifact-content"),
    path("tools", tools.ToolListView.as_view(), name="tools"),
    path("tools/<str:name>", tools.ToolDetailView.as_view(), name="tool"),
    path("models", catalog.ModelsView.as_view(), name="models"),
    path("models/catalog", catalog.ModelCatalogView.as_view(), name="model-catalog"),
    path("models/<str:word>/overlay", catalog.ModelOverlayView.as_view(), name="model-overlay"),
    path("sources", resolution.SourceListCreateView.as_view(), name="sources"),
    path("goals/<str:scope_id>/grants", resolution.GoalGrantView.as_view(), name="goal-grants"),
    path("tasks/<str:scope_id>/grants", resolution.TaskGrantView.as_view(), name="task-grants"),
    path("tasks/<str:task_id>/questions", resolution.TaskQuestionsView.as_view(), name="task-questions"),
    path("tasks/<str:task_id>/resolve", resolution.TaskResolveView.as_view(), name="task-resolve"),
    path("tasks/<str:task_id>/bundle", resolution.TaskBundleView.as_view(), name="task-bundle"),
    path("resolves/<str:request_id>", resolution.ResolveRequestView.as_view(), name="resolve-request"),
    path(
        "tasks/<str:task_id>/plan-gate/override",
        resolution.PlanGateOverrideView.as_view(),
        name="task-plan-gate-override",
    ),
    path("bundles/<str:digest>", resolution.BundleDetailView.as_view(), name="bundle"),
    path("escalations", resolution.EscalationListView.as_view(), name="escalations"),
    path("escalations/<str:escalation_id>", resolution.EscalationDetailView.as_view(), name="escalation"),
    path(
        "escalations/<str:escalation_id>/resolve",
        resolution.EscalationResolveView.as_view(),
        name="escalation-resolve",
    ),
    path(
        "project/compile-settings",
        project_settings.ProjectCompileSettingsView.as_view(),
        name="compile-settings",
    ),
    path(
        "project/approval-settings", approvals.ProjectApprovalSettingsView.as_view(), name="approval-settings"
    ),
    path("approvals", approvals.ApprovalListView.as_view(), name="approvals"),
    path("approvals/<str:approval_id>", approvals.ApprovalDetailView.as_view(), name="approval"),
    path(
        "approvals/<str:approval_id>/decision",
        approvals.ApprovalDecisionView.as_view(),
        name="approval-decision",
    ),
    path("tasks/<str:task_id>/approvals", approvals.TaskApprovalRequestView.as_view(), name="task-approvals"),
    path("project/retention", project_settings.ProjectRetentionView.as_view(), name="retention"),
    path("tasks/<str:task_id>/compile", compilation.TaskCompileView.as_view(), name="task-compile"),
    path("tasks/<str:task_id>/contexts", compilation.TaskContextListView.as_view(), name="task-contexts"),
    path("compiles/<str:request_id>", compilation.CompileRequestView.as_view(), name="compile-request"),
    path("contexts/<str:digest>", contexts.ContextDetailView.as_view(), name="context"),
    path("contexts/<str:digest>/excluded", contexts.ContextExcludedView.as_view(), name="context-excluded"),
    path("contexts/<str:digest>/replay", contexts.ContextReplayView.as_view(), name="context-replay"),
    path("contexts/<str:digest>/usage", usage.ContextUsageView.as_view(), name="context-usage"),
    path("usage", usage.UsageTotalsView.as_view(), name="usage"),
    path("contexts/<str:digest>/diff/<str:other>", contexts.ContextDiffView.as_view(), name="context-diff"),
    path("webhooks", webhooks_api.WebhookListCreateView.as_view(), name="webhooks"),
    path("webhooks/<str:webhook_id>", webhooks_api.WebhookDetailView.as_view(), name="webhook"),
    path(
        "webhooks/<str:webhook_id>/deliveries",
        webhooks_api.WebhookDeliveryListView.as_view(),
        name="webhook-deliveries",
    ),
]

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("escalations/", include("nexum_web.ui.urls")),
    path("api/v1/", include((api_v1, "api"), namespace="v1")),
    path("metrics", MetricsView.as_view(), name="metrics"),  # Prometheus' scrape (README: "Metrics")
    path("mcp", mcp_endpoint, name="mcp"),
    path("mcp/", mcp_endpoint, name="mcp-slash"),  # hosts configured with the slash get the same endpoint
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
    """An exception outside the API views (they answer their own): JSON under /api/ and /mcp, else Django's
    page."""
    if request.path.startswith(("/api/", "/mcp")):
        return json_server_error(request)
    return defaults.server_error(request)


handler500 = server_error
