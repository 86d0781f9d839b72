"""The Keys page's forms: a new key (organization, name, optional budget, rate limits, models and
expiry), and a new name for a key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.http import QueryDict
from django.utils import timezone

from accounts.models import (
    BUDGET_USD_MAX,
    BUDGET_USD_MIN,
    PER_MINUTE_MAX,
    ApiKey,
    Organization,
    SpendLimits,
)
from accounts.services import KeyLimits, KeyPolicy

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
    models = forms.MultipleChoiceField(
        label="Models",
        required=False,
        help_text="The only models the key may use; none chosen: every model.",
    )
    expires_at = forms.DateTimeField(
        label="Expires (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def __init__(
        self,
        data: QueryDict | None = None,
        *,
        organizations: frozenset[int] | None,
        models: list[str],
        **kwargs: Any,
    ) -> None:
        """`organizations`: those a key may be made for (None: every one); `models`: the
        catalog's."""
        super().__init__(data, **kwargs)
        field = self.fields["organization"]
        assert isinstance(field, forms.ModelChoiceField)
        if organizations is not None:
            field.queryset = Organization.objects.filter(pk__in=organizations).order_by("name")
        choices = self.fields["models"]
        assert isinstance(choices, forms.MultipleChoiceField)
        choices.choices = [(name, name) for name in models]

    def clean_expires_at(self) -> datetime | None:
        moment: datetime | None = self.cleaned_data.get("expires_at")
        if moment is None:
            return None
        # `datetime-local` carries no zone: the dashboard reads and shows times in UTC.
        moment = moment.replace(tzinfo=UTC) if timezone.is_naive(moment) else moment
        if moment <= timezone.now():
            raise forms.ValidationError("An expiry must be in the future.")
        return moment.astimezone(UTC)

    def policy(self) -> KeyPolicy:
        data = self.cleaned_data
        return KeyPolicy(allowed_models=tuple(data["models"]), expires_at=data["expires_at"])

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
