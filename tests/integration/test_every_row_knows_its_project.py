"""Every row knows its project (issue 26): each of Nexum's tables has a ``project_id`` column, so that
distributing the tables by project needs no schema change. The exceptions are named here with the reason."""

from __future__ import annotations

from django.apps import apps

NEXUM_APPS = ("nexum", "context_app", "tasks_app", "verification_app", "nexum_web")

WITHOUT_PROJECT_COLUMN = {
    # Its primary key is the project: the distribution column itself.
    "tasks_app.Project",
    # Content named by its digest, stored once for every project that resolves the same bundle: a shared
    # (reference) table; a row says nothing about who read it, the project's BundleItem rows do.
    "resolution.BundleContent",
}


def test_each_nexum_table_has_a_project_column_or_a_stated_reason():
    missing = sorted(
        model._meta.label
        for model in apps.get_models()
        if model.__module__.startswith(NEXUM_APPS)
        and model._meta.label not in WITHOUT_PROJECT_COLUMN
        and "project_id" not in {field.attname for field in model._meta.concrete_fields}
    )
    assert missing == []
    labels = {model._meta.label for model in apps.get_models()}
    assert labels >= WITHOUT_PROJECT_COLUMN  # no stale exception
