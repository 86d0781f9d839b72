"""The Keys page's forms: a new key (organization, name, optional budget and rate limits), and a
new name for a key."""

from __future__ import annotations

from django import forms

from accounts.models import (
    BUDGET_USD_MAX,
    BUDGET_USD_MIN,
    PER_MINUTE_MAX,
    ApiKey,
    Organization,
    SpendLimits,
)
from accounts.services import KeyLimits

NAME_MAX = ApiKey._meta.get_field("name").max_length


class KeyCreateForm(forms.Form):
    organization = forms.ModelChoiceField(
        queryset=Organization.objects.order_by("name"), empty_label="choose…"
    )
    name = forms.CharField(max_length=NAME_MAX, required=False, strip=True)
    # The same bounds as the model's: its column's 14 digits, to the micro-dollar.
    budget_usd = forms.DecimalField(
        label="Budget (USD)",
        required=False,
        min_value=BUDGET_USD_MIN,
        max_value=BUDGET_USD_MAX,
        max_digits=14,
        decimal_places=6,
    )
    budget_period = forms.ChoiceField(
        choices=SpendLimits.BudgetPeriod.choices,
        initial=SpendLimits.BudgetPeriod.MONTH,
        widget=forms.Select(attrs={"class": "choices"}),
    )
    requests_per_minute = forms.IntegerField(
        label="Requests/min", required=False, min_value=1, max_value=PER_MINUTE_MAX
    )
    tokens_per_minute = forms.IntegerField(
        label="Tokens/min", required=False, min_value=1, max_value=PER_MINUTE_MAX
    )

    def limits(self) -> KeyLimits:
        data = self.cleaned_data
        return KeyLimits(
            budget_usd=data["budget_usd"],
            budget_period=data["budget_period"],
            requests_per_minute=data["requests_per_minute"],
            tokens_per_minute=data["tokens_per_minute"],
        )


class KeyRenameForm(forms.Form):
    name = forms.CharField(max_length=NAME_MAX, required=False, strip=True)
