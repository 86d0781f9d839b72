"""The dashboard's filter forms: they turn query strings into the typed filters selectors take."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

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
# Named ranges the runs list filters by: (label, from (included), to (excluded)); None is open.
COST_RANGES: dict[str, tuple[str, Decimal | None, Decimal | None]] = {
    "free": ("$0 (free)", None, Decimal("0.000000001")),  # the column keeps 9 decimals
    "under-0.001": ("under $0.001", None, Decimal("0.001")),
    "0.001-up": ("$0.001 and up", Decimal("0.001"), None),
    "0.01-up": ("$0.01 and up", Decimal("0.01"), None),
    "0.10-up": ("$0.10 and up", Decimal("0.10"), None),
    "1-up": ("$1 and up", Decimal("1"), None),
}
LATENCY_RANGES: dict[str, tuple[str, timedelta | None, timedelta | None]] = {
    "under-100ms": ("under 100 ms", None, timedelta(milliseconds=100)),
    "under-1s": ("under 1 s", None, timedelta(seconds=1)),
    "1s-up": ("1 s and up", timedelta(seconds=1), None),
    "5s-up": ("5 s and up", timedelta(seconds=5), None),
    "30s-up": ("30 s and up", timedelta(seconds=30), None),
}
SEARCH_MAX_LENGTH = 200
# The days the audit can be asked about: its range ends the day after `until`, which must exist.
FIRST_DAY = date(1970, 1, 1)
LAST_DAY = date.max - timedelta(days=1)


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


def _with_current(data: QueryDict, name: str, names: list[str]) -> list[tuple[str, str]]:
    """The choices, plus the value asked for when it is not one of them (a model since
    removed from the catalog, an end user past the list's length, a link from a run's row):
    a filter by any value is valid, the select shows what is in force."""
    current = (data.get(name) or "").strip()
    # Only text a name could be: a NUL or another control character is no choice (the form
    # says so), and never reaches a query (Postgres refuses NUL in text outright).
    if current and current not in names and current.isprintable():
        names = [*names, current]
    return _blank([(n, n) for n in names])


class RunFilterForm(OrganizationChoiceMixin):
    q = forms.CharField(
        required=False,
        max_length=SEARCH_MAX_LENGTH,
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "words in prompt or reply"}),
    )
    organization = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    key = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    model = forms.ChoiceField(required=False)
    deployment = forms.ChoiceField(required=False)
    status = forms.ChoiceField(choices=_blank(Run.Status.choices), required=False)
    finish_reason = forms.ChoiceField(required=False)
    error_code = forms.ChoiceField(required=False)
    cost = forms.ChoiceField(
        choices=_blank([(name, r[0]) for name, r in COST_RANGES.items()]), required=False
    )
    latency = forms.ChoiceField(
        choices=_blank([(name, r[0]) for name, r in LATENCY_RANGES.items()]), required=False
    )
    session = forms.CharField(required=False, max_length=128)
    end_user = forms.ChoiceField(required=False)
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
        models: list[str],
        deployments: list[str],
        end_users: list[str],
        error_codes: list[str],
    ) -> None:
        super().__init__(data)
        self.set_organization_choices(organizations)
        set_choices(self, "key", _blank([(str(pk), label) for pk, label in keys], "all"))
        for name, names in (
            ("model", models),
            ("deployment", deployments),
            ("finish_reason", FINISH_REASONS),
            ("error_code", error_codes),
            ("end_user", end_users),
        ):
            set_choices(self, name, _with_current(data, name, names))

    def clean_q(self) -> str:
        search: str = self.cleaned_data.get("q") or ""
        if search.strip() and not any(c.isalnum() for c in search):
            raise forms.ValidationError("Search for words: at least one letter or digit.")
        return search.strip()

    def filters(self) -> RunFilters:
        """The filters asked for; the valid ones when some are not (each named in the form's
        errors, which the page shows), so one bad field does not drop the others."""
        self.is_valid()
        data = self.cleaned_data
        cost = COST_RANGES.get(data.get("cost") or "", ("", None, None))
        latency = LATENCY_RANGES.get(data.get("latency") or "", ("", None, None))
        return RunFilters(
            organization_id=data.get("organization"),
            api_key_id=data.get("key"),
            model=(data.get("model") or "").strip(),
            deployment=(data.get("deployment") or "").strip(),
            status=data.get("status") or "",
            finish_reason=(data.get("finish_reason") or "").strip(),
            error_code=(data.get("error_code") or "").strip(),
            session=(data.get("session") or "").strip(),
            end_user=(data.get("end_user") or "").strip(),
            since=_as_utc(data.get("since")),
            until=_as_utc(data.get("until")),
            search=data.get("q") or "",
            cost_min=cost[1],
            cost_max=cost[2],
            latency_min=latency[1],
            latency_max=latency[2],
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

    def _day(self, name: str) -> date | None:
        day: date | None = self.cleaned_data.get(name)
        if day is not None and not FIRST_DAY <= day <= LAST_DAY:
            raise forms.ValidationError(f"Pick a day from {FIRST_DAY} to {LAST_DAY}.")
        return day

    def clean_since(self) -> date | None:
        return self._day("since")

    def clean_until(self) -> date | None:
        return self._day("until")

    def page_number(self) -> int:
        self.is_valid()
        page = self.cleaned_data.get("page") or ""
        return int(page) if page.isascii() and page.isdigit() else 1

    def query(self, *, today: date) -> AuditQuery:
        """The query asked for, with the valid filters when some are not (each named in the
        form's errors, which the page shows)."""
        self.is_valid()
        data = self.cleaned_data
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
