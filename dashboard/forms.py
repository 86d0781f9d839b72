"""The dashboard's filter forms: they turn query strings into the typed filters selectors take."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django import forms
from django.http import QueryDict
from django.utils import timezone

from dashboard.selectors.audit import AUDIT_DIMENSIONS, AUDIT_SORTS, DEFAULT_GROUP, AuditQuery
from dashboard.selectors.overview import OverviewFilters
from dashboard.selectors.runs import Cursor, RunFilters
from dashboard.selectors.sessions import SESSION_SORTS, SessionQuery
from dashboard.selectors.spend import SpendFilters
from telemetry.models import Run

RANGES = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
RANGE_CHOICES = [(name, f"last {name}") for name in RANGES]
DEFAULT_RANGE = "24h"
FINISH_REASONS = ["stop", "length", "tool_calls", "stopped", "content_filter"]


def _blank(choices: list[tuple[str, str]], label: str = "any") -> list[tuple[str, str]]:
    return [("", label), *choices]


def _as_utc(moment: datetime | None) -> datetime | None:
    """`datetime-local` inputs carry no zone: the dashboard shows and reads times in UTC."""
    if moment is None:
        return None
    if timezone.is_naive(moment):
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _with_default_range(data: QueryDict) -> QueryDict:
    """The range select shows the range in force: the default one when none was asked for."""
    if not data.get("range"):
        data = data.copy()
        data["range"] = DEFAULT_RANGE
    return data


def set_choices(form: forms.Form, name: str, choices: list[tuple[str, str]]) -> None:
    field = form.fields[name]
    assert isinstance(field, forms.ChoiceField)
    field.choices = choices


class OrganizationChoiceMixin(forms.Form):
    def set_organization_choices(self, organizations: list[tuple[int, str]]) -> None:
        set_choices(
            self, "organization", _blank([(str(pk), name) for pk, name in organizations], "all")
        )


class OverviewForm(OrganizationChoiceMixin):
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False)
    organization = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    model = forms.ChoiceField(required=False)
    deployment = forms.ChoiceField(required=False)

    def __init__(
        self,
        data: QueryDict,
        *,
        organizations: list[tuple[int, str]],
        models: list[str],
        deployments: list[str],
    ) -> None:
        super().__init__(_with_default_range(data))
        self.set_organization_choices(organizations)
        set_choices(self, "model", _blank([(m, m) for m in models], "all"))
        set_choices(self, "deployment", _blank([(d, d) for d in deployments], "all"))

    def filters(self, *, now: datetime) -> OverviewFilters:
        data = self.cleaned_data if self.is_valid() else {}
        span = RANGES[data.get("range") or DEFAULT_RANGE]
        return OverviewFilters(
            since=now - span,
            until=now,
            organization_id=data.get("organization"),
            model=data.get("model") or "",
            deployment=data.get("deployment") or "",
        )


class RunFilterForm(OrganizationChoiceMixin):
    organization = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    key = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    model = forms.CharField(required=False, max_length=200)
    deployment = forms.CharField(required=False, max_length=100)
    status = forms.ChoiceField(choices=_blank(Run.Status.choices), required=False)
    finish_reason = forms.CharField(required=False, max_length=32)
    session = forms.CharField(required=False, max_length=128)
    end_user = forms.CharField(required=False, max_length=256)
    since = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    before = forms.CharField(required=False, widget=forms.HiddenInput)
    after = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(
        self,
        data: QueryDict,
        *,
        organizations: list[tuple[int, str]],
        keys: list[tuple[int, str]],
    ) -> None:
        super().__init__(data)
        self.set_organization_choices(organizations)
        set_choices(self, "key", _blank([(str(pk), label) for pk, label in keys], "all"))

    def filters(self) -> RunFilters:
        data = self.cleaned_data if self.is_valid() else {}
        return RunFilters(
            organization_id=data.get("organization"),
            api_key_id=data.get("key"),
            model=(data.get("model") or "").strip(),
            deployment=(data.get("deployment") or "").strip(),
            status=data.get("status") or "",
            finish_reason=(data.get("finish_reason") or "").strip(),
            session=(data.get("session") or "").strip(),
            end_user=(data.get("end_user") or "").strip(),
            since=_as_utc(data.get("since")),
            until=_as_utc(data.get("until")),
        )

    def cursors(self) -> tuple[Cursor | None, Cursor | None]:
        """The keyset cursors: page before (older than) or after (newer than) a run."""
        data = self.cleaned_data if self.is_valid() else {}
        return Cursor.parse(data.get("before") or ""), Cursor.parse(data.get("after") or "")


class SessionForm(OrganizationChoiceMixin):
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False)
    organization = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    sort = forms.ChoiceField(choices=[(s, s) for s in SESSION_SORTS], required=False)

    def __init__(self, data: QueryDict, *, organizations: list[tuple[int, str]]) -> None:
        super().__init__(_with_default_range(data))
        self.set_organization_choices(organizations)

    def query(self, *, now: datetime) -> SessionQuery:
        data = self.cleaned_data if self.is_valid() else {}
        span = RANGES[data.get("range") or DEFAULT_RANGE]
        return SessionQuery(
            since=now - span,
            organization_id=data.get("organization"),
            sort=data.get("sort") or "-last_seen",
        )


class AuditForm(OrganizationChoiceMixin):
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    organization = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    group = forms.MultipleChoiceField(
        choices=[(d, d.replace("_", " ")) for d in AUDIT_DIMENSIONS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    sort = forms.ChoiceField(choices=[(s, s) for s in AUDIT_SORTS], required=False)
    # Text, not a number field: a page that is no number (an edited URL) is the first page,
    # rather than a form error that would drop the other filters.
    page = forms.CharField(required=False, max_length=9, widget=forms.HiddenInput)

    def __init__(self, data: QueryDict, *, organizations: list[tuple[int, str]]) -> None:
        super().__init__(data)
        self.set_organization_choices(organizations)

    def page_number(self) -> int:
        page = (self.cleaned_data.get("page") or "") if self.is_valid() else ""
        return int(page) if page.isascii() and page.isdigit() else 1

    def query(self, *, today: date) -> AuditQuery:
        data = self.cleaned_data if self.is_valid() else {}
        since = data.get("since") or today - timedelta(days=6)
        until = data.get("until") or today
        return AuditQuery(
            since=since,
            until=until,
            organization_id=data.get("organization"),
            group=tuple(d for d in AUDIT_DIMENSIONS if d in (data.get("group") or DEFAULT_GROUP)),
            sort=data.get("sort") or "-cost",
        )


# The Spend page's CSV downloads: one per table on the page.
SPEND_TABLES = [
    "organization",
    "key",
    "end_user",
    "model",
    "deployment",
    "errors",
    "latency",
    "ttft",
]


class SpendForm(OrganizationChoiceMixin):
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False)
    organization = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    table = forms.ChoiceField(choices=_blank([(t, t) for t in SPEND_TABLES]), required=False)

    def __init__(self, data: QueryDict, *, organizations: list[tuple[int, str]]) -> None:
        super().__init__(_with_default_range(data))
        self.set_organization_choices(organizations)

    def filters(self, *, now: datetime) -> SpendFilters:
        data = self.cleaned_data if self.is_valid() else {}
        span = RANGES[data.get("range") or DEFAULT_RANGE]
        return SpendFilters(
            since=now - span,
            until=now,
            organization_id=data.get("organization"),
            # A day's step beyond a day: 30 days of hours is 720 points a line.
            bucket="day" if span > timedelta(days=1) else "hour",
        )

    def csv_table(self) -> str:
        return (self.cleaned_data.get("table") or "") if self.is_valid() else ""
