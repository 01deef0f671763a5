from django.urls import path

from nexum_web.ui import views

app_name = "ui"

urlpatterns = [
    path("", views.escalation_list, name="escalations"),
    path("approvals/", views.approval_list, name="approvals"),
    path("approvals/<str:approval_id>/decide", views.approval_decide, name="approval-decide"),
    path("<str:escalation_id>/", views.escalation_detail, name="escalation"),
    path("<str:escalation_id>/resolve", views.escalation_resolve, name="escalation-resolve"),
]
