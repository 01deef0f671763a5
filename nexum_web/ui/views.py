"""The escalation UI (SPEC I5): server-rendered pages for staff. Each action calls
``context_app.resolution.services.escalations.escalation_resolve``, so it is an event like any other and the
plan gate reads it; the views only shape input and show what the service said. The approvals page (issue 28
item 4) lists what waits for a human's yes and decides through
``verification_app.services.approvals.approval_decide``."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from context_app.resolution.models import Escalation
from context_app.resolution.services import escalations
from nexum.core.errors import DomainError
from nexum.core.resolution.events import SETTLING_ACTIONS
from nexum_web.api.errors import STATUS_BY_KIND
from nexum_web.ui import selectors
from nexum_web.ui.forms import (
    ApprovalDecisionForm,
    CancelForm,
    GrantSourceForm,
    PickSideForm,
    SupplyFactForm,
)
from tasks_app.models import Task
from verification_app.models import Approval
from verification_app.services import approvals

ACTIONS = ("supply_fact", "pick_side", "grant_source", "cancel")


def human_actor(request: HttpRequest) -> str:
    return f"human:{request.user.get_username()}"


@staff_member_required
@require_GET
def escalation_list(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "open")
    if state not in ("open", "resolved", "all"):
        state = "open"
    rows = list(selectors.escalations(state=state)[:500])
    tasks = selectors.tasks_by_id([row.task_id for row in rows])
    entries = [
        {
            "escalation": row,
            "task": tasks.get(str(row.task_id)),
            "kind_label": selectors.KIND_LABELS.get(row.kind, row.kind),
        }
        for row in rows
    ]
    return render(
        request,
        "ui/escalation_list.html",
        {
            "entries": entries,
            "state": state,
            "open_count": Escalation.objects.filter(state="open").count(),
            "resolved_count": Escalation.objects.filter(state="resolved").count(),
        },
    )


def _escalation(escalation_id: str) -> Escalation:
    try:
        pk = uuid.UUID(escalation_id)
    except ValueError:
        raise Http404("no such escalation") from None
    escalation = Escalation.objects.filter(id=pk).first()
    if escalation is None:
        raise Http404("no such escalation")
    return escalation


def _forms(
    escalation: Escalation, evidence: list[selectors.Evidence], data: Any = None, action: str = ""
) -> dict:
    sources = [source.name for source in selectors.grantable_sources(escalation)]
    digests = [entry.digest for entry in evidence]
    bound = {name: (data if action == name else None) for name in ACTIONS}
    return {
        "supply_fact": SupplyFactForm(
            bound["supply_fact"], initial={"subject": (escalation.subjects or [""])[0]}, prefix="supply_fact"
        ),
        "pick_side": PickSideForm(bound["pick_side"], digests=digests, prefix="pick_side"),
        "grant_source": GrantSourceForm(
            bound["grant_source"],
            sources=sources,
            initial={"source": (escalation.sources or [None])[0]},
            prefix="grant_source",
        ),
        "cancel": CancelForm(bound["cancel"], prefix="cancel"),
    }


def _detail(
    request: HttpRequest,
    escalation: Escalation,
    forms: dict | None = None,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    task = Task.objects.select_related("goal").filter(id=escalation.task_id).first()
    evidence = selectors.evidence_of(escalation)
    siblings = (
        Escalation.objects.filter(task_id=escalation.task_id).exclude(id=escalation.id).order_by("-position")
    )
    return render(
        request,
        "ui/escalation_detail.html",
        {
            "escalation": escalation,
            "kind_label": selectors.KIND_LABELS.get(escalation.kind, escalation.kind),
            "task": task,
            "goal": task.goal if task is not None else None,
            "evidence": evidence,
            "forms": forms or _forms(escalation, evidence),
            "gate": selectors.gate_status(task) if task is not None else None,
            "siblings": siblings,
            "error": error,
            "is_conflict": escalation.kind == "conflict",
            "reach": selectors.settlement_reach(escalation),
            "settled_by": _settled_by(escalation),
        },
        status=status,
    )


def _settled_by(escalation: Escalation) -> Escalation | None:
    """The escalation of another task whose settlement closed this one, if any."""
    settled_by = (escalation.resolution_detail or {}).get("settled_by")
    return Escalation.objects.filter(id=settled_by).first() if settled_by else None


@staff_member_required
@require_GET
def escalation_detail(request: HttpRequest, escalation_id: str) -> HttpResponse:
    return _detail(request, _escalation(escalation_id))


@staff_member_required
@require_POST
def escalation_resolve(request: HttpRequest, escalation_id: str) -> HttpResponse:
    escalation = _escalation(escalation_id)
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        return _detail(request, escalation, error="choose one of the actions", status=400)
    evidence = selectors.evidence_of(escalation)
    forms = _forms(escalation, evidence, request.POST, action)
    form = forms[action]
    if not form.is_valid():
        return _detail(
            request, escalation, forms, error="check the form: " + form.errors.as_text(), status=400
        )
    data = form.cleaned_data
    arguments: dict[str, Any] = {"reason": data.get("reason", "")}
    if action == "supply_fact":
        arguments.update(text=data["text"], subject=data["subject"] or None)
    elif action == "pick_side":
        arguments.update(chosen=list(data["chosen"]))
    elif action == "grant_source":
        arguments.update(source=data["source"], scopes=form.scope_list() or None)
    try:
        escalations.escalation_resolve(
            project_id=str(escalation.project_id),
            escalation_id=str(escalation.id),
            action=action,
            actor=human_actor(request),
            **arguments,
        )
    except DomainError as refused:
        status = STATUS_BY_KIND.get(refused.kind, 400)
        return _detail(request, escalation, forms, error=refused.message, status=status)
    task = Task.objects.get(id=escalation.task_id)
    gate = selectors.gate_status(task)
    reach = selectors.settlement_reach(escalation) if action in SETTLING_ACTIONS else None
    settled = f" The settlement {reach.message}." if reach is not None else ""
    messages.success(
        request,
        f"Resolved ({action.replace('_', ' ')}).{settled} {gate.message[0].upper()}{gate.message[1:]}.",
    )
    return redirect(reverse("ui:escalation", args=[escalation.id]))


APPROVAL_TABS = ("pending", "decided", "all")


def _approval_page(request: HttpRequest, *, state: str, error: str = "", status: int = 200) -> HttpResponse:
    approvals = Approval.objects.all()
    if state == "pending":
        approvals = approvals.filter(state="pending")
    elif state == "decided":
        approvals = approvals.exclude(state="pending")
    rows = list(approvals.order_by("-position")[:500])
    tasks = selectors.tasks_by_id([row.task_id for row in rows])
    return render(
        request,
        "ui/approval_list.html",
        {
            "entries": [{"approval": row, "task": tasks.get(str(row.task_id))} for row in rows],
            "state": state,
            "error": error,
            "pending_count": Approval.objects.filter(state="pending").count(),
            "decided_count": Approval.objects.exclude(state="pending").count(),
        },
        status=status,
    )


@staff_member_required
@require_GET
def approval_list(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "pending")
    return _approval_page(request, state=state if state in APPROVAL_TABS else "pending")


@staff_member_required
@require_POST
def approval_decide(request: HttpRequest, approval_id: str) -> HttpResponse:
    try:
        pk = uuid.UUID(approval_id)
    except ValueError:
        raise Http404("no such approval") from None
    approval = Approval.objects.filter(id=pk).first()
    if approval is None:
        raise Http404("no such approval")
    form = ApprovalDecisionForm(request.POST)
    if not form.is_valid():
        error = "check the form: " + form.errors.as_text()
        return _approval_page(request, state="pending", error=error, status=400)
    try:
        decided = approvals.approval_decide(
            project_id=str(approval.project_id),
            approval_id=str(approval.id),
            decision=form.cleaned_data["decision"],
            reason=form.cleaned_data["reason"],
            actor=human_actor(request),
        )
    except DomainError as refused:
        status = STATUS_BY_KIND.get(refused.kind, 400)
        return _approval_page(request, state="pending", error=refused.message, status=status)
    messages.success(request, f"{decided.action} {decided.state}: “{decided.decision_reason}”.")
    return redirect(reverse("ui:approvals"))
