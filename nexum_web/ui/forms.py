"""Forms of the escalation UI: they only shape input; the resolution service decides."""

from __future__ import annotations

from django import forms

REASON = forms.CharField(
    required=False,
    max_length=2000,
    widget=forms.TextInput(attrs={"placeholder": "why (kept with the event)"}),
)


class SupplyFactForm(forms.Form):
    text = forms.CharField(max_length=20000, widget=forms.Textarea(attrs={"rows": 3}))
    subject = forms.CharField(required=False, max_length=500)
    reason = REASON


class PickSideForm(forms.Form):
    chosen = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    reason = REASON

    def __init__(self, *args, digests: list[str], **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.fields["chosen"].choices = [(digest, digest) for digest in digests]


class GrantSourceForm(forms.Form):
    source = forms.ChoiceField()
    scopes = forms.CharField(
        required=False, max_length=2000, help_text="comma-separated; empty for every declared scope"
    )
    reason = REASON

    def __init__(self, *args, sources: list[str], **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.fields["source"].choices = [(name, name) for name in sources]

    def scope_list(self) -> list[str]:
        return [scope.strip() for scope in self.cleaned_data.get("scopes", "").split(",") if scope.strip()]


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=2000)


class ApprovalDecisionForm(forms.Form):
    """An operator's answer to an approval: grant or deny, and why (required: it goes with the event)."""

    decision = forms.ChoiceField(choices=[("grant", "Approve"), ("deny", "Deny")])
    reason = forms.CharField(
        max_length=2000, widget=forms.TextInput(attrs={"placeholder": "why (kept with the event)"})
    )
