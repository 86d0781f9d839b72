"""The runs list (filtered, keyset-paginated) and one run's page: its record, chunks and reply.

Pagination is on the key (accepted_at, id), newest first, never OFFSET: a page is "the next 50
runs older (or newer) than this one", which Postgres answers from the `accepted_at` index (or
`run_org_accepted` when an organization is chosen) however deep the page, and no page counts
the table.
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
from django.db import connection
from django.db.models import BooleanField, DurationField, ExpressionWrapper, F, Q, QuerySet
from django.db.models.expressions import RawSQL

from dashboard.selectors.images import body_as_received
from dashboard.selectors.replies import Reply, reply_of
from gateway.contract.surface import surface_of_run
from telemetry.models import Run, RunChunk

PAGE_SIZE = 50
TIMELINE_LIMIT = 2000
LIST_FIELDS = (
    "id",
    "organization__name",
    "api_key__prefix",
    "api_key__name",
    "model",
    "deployment",
    "status",
    "http_status",
    "finish_reason",
    "session",
    "end_user",
    "accepted_at",
    "first_token_at",
    "finished_at",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost",
    "usage_source",
    "error_code",
)


# Postgres' search: the run's stored tsvector (NULL while in progress; telemetry migration
# 0012), through its GIN index.
SEARCH_SQL = '"telemetry_run"."search" @@ websearch_to_tsquery(\'simple\'::regconfig, %s)'
_TERMS = re.compile(r'"([^"]+)"|(\S+)')


@dataclass(frozen=True)
class RunFilters:
    organization_id: int | None = None
    organizations: frozenset[int] | None = None  # those the user sees; None: every one
    api_key_id: int | None = None
    model: str = ""
    deployment: str = ""
    status: str = ""
    finish_reason: str = ""
    error_code: str = ""
    session: str = ""
    end_user: str = ""
    since: datetime | None = None
    until: datetime | None = None
    # Words (and "quoted phrases") of the request's messages or the reply, all of them.
    search: str = ""
    # Ranges: from the lower bound (included) to the upper one (excluded); None is open.
    cost_min: Decimal | None = None
    cost_max: Decimal | None = None
    latency_min: timedelta | None = None
    latency_max: timedelta | None = None


@dataclass(frozen=True)
class Cursor:
    """A position in the list: a run's (accepted_at, id), written `<unix µs>.<id>`."""

    accepted_at: datetime
    run_id: str

    def __str__(self) -> str:
        micros = int(self.accepted_at.timestamp()) * 1_000_000 + self.accepted_at.microsecond
        return f"{micros}.{self.run_id}"

    @classmethod
    def parse(cls, raw: str) -> Cursor | None:
        micros, _, run_id = raw.partition(".")
        if not micros.isdigit() or not run_id:
            return None
        seconds, rest = divmod(int(micros), 1_000_000)
        try:
            moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest)
        except (OverflowError, OSError, ValueError):
            return None
        return cls(accepted_at=moment, run_id=run_id)

    @classmethod
    def of(cls, row: dict[str, Any]) -> Cursor:
        return cls(accepted_at=row["accepted_at"], run_id=row["id"])


@dataclass
class RunsPage:
    runs: list[dict[str, Any]]
    older: Cursor | None  # pass as `before` for the next (older) page
    newer: Cursor | None  # pass as `after` for the previous (newer) page


def filtered_runs(filters: RunFilters) -> QuerySet[Run]:
    runs = Run.objects.all()
    exact = {
        "organization_id": filters.organization_id,
        "api_key_id": filters.api_key_id,
        "model": filters.model,
        "deployment": filters.deployment,
        "status": filters.status,
        "finish_reason": filters.finish_reason,
        "error_code": filters.error_code,
        "session": filters.session,
        "end_user": filters.end_user,
    }
    runs = runs.filter(**{name: value for name, value in exact.items() if value not in (None, "")})
    if filters.organizations is not None:
        runs = runs.filter(organization_id__in=filters.organizations)
    bounds = {
        "accepted_at__gte": filters.since,
        "accepted_at__lt": filters.until,
        "cost__gte": filters.cost_min,
        "cost__lt": filters.cost_max,
    }
    runs = runs.filter(**{name: value for name, value in bounds.items() if value is not None})
    if filters.latency_min is not None or filters.latency_max is not None:
        runs = runs.alias(
            latency=ExpressionWrapper(F("finished_at") - F("accepted_at"), DurationField())
        )
        if filters.latency_min is not None:
            runs = runs.filter(latency__gte=filters.latency_min)
        if filters.latency_max is not None:
            runs = runs.filter(latency__lt=filters.latency_max)
    if filters.search.strip():
        runs = runs.filter(_matching(filters.search.strip()))
    return runs


def _matching(search: str) -> Q | RawSQL:
    """Finished runs whose prompt or reply has every word of `search`.

    Postgres: full-text search (websearch syntax: words, "a phrase", `or`, `-word`), through
    the GIN index. SQLite (the embedded mode): each word or "quoted phrase" must appear
    somewhere in either text, case-insensitively (ASCII letters), found by a scan.
    """
    if connection.vendor == "postgresql":
        return RawSQL(SEARCH_SQL, [search], output_field=BooleanField())
    matching = ~Q(status="in_progress")
    for phrase, word in _TERMS.findall(search):
        term = phrase or word
        matching &= Q(prompt_text__icontains=term) | Q(reply_text__icontains=term)
    return matching


def runs_page(
    filters: RunFilters,
    *,
    before: Cursor | None = None,
    after: Cursor | None = None,
    size: int = PAGE_SIZE,
) -> RunsPage:
    """One page of runs, newest first: the first page, the one older than `before`, or the one
    newer than `after`."""
    runs = filtered_runs(filters).values(*LIST_FIELDS)
    if after is not None:
        # The redundant `accepted_at >= …` gives the planner an index bound; the OR alone
        # would leave it scanning from the newest run.
        newer = runs.filter(accepted_at__gte=after.accepted_at).filter(
            Q(accepted_at__gt=after.accepted_at)
            | Q(accepted_at=after.accepted_at, id__gt=after.run_id)
        )
        rows = list(newer.order_by("accepted_at", "id")[: size + 1])
        more_newer = len(rows) > size
        rows = rows[:size][::-1]
        return RunsPage(
            runs=rows,
            older=Cursor.of(rows[-1]) if rows else None,
            newer=Cursor.of(rows[0]) if rows and more_newer else None,
        )
    if before is not None:
        runs = runs.filter(accepted_at__lte=before.accepted_at).filter(
            Q(accepted_at__lt=before.accepted_at)
            | Q(accepted_at=before.accepted_at, id__lt=before.run_id)
        )
    rows = list(runs.order_by("-accepted_at", "-id")[: size + 1])
    more_older = len(rows) > size
    rows = rows[:size]
    return RunsPage(
        runs=rows,
        older=Cursor.of(rows[-1]) if rows and more_older else None,
        newer=Cursor.of(rows[0]) if rows and before is not None else None,
    )


# -- one run --------------------------------------------------------------------------------


def run_detail(run_id: str) -> Run | None:
    return Run.objects.select_related("organization", "api_key").filter(pk=run_id).first()


@dataclass(frozen=True)
class TimelineChunk:
    seq: int
    offset_ms: float
    gap_ms: float
    size: int
    text: str


def _chunks(run_id: str, accepted_at: datetime | None) -> QuerySet[RunChunk]:
    """The run's chunks; with its acceptance time, from the one partition they are in."""
    chunks = RunChunk.objects.filter(run_id=run_id)
    return chunks if accepted_at is None else chunks.filter(run_accepted_at=accepted_at)


def run_timeline(
    run_id: str, *, limit: int = TIMELINE_LIMIT, accepted_at: datetime | None = None
) -> list[TimelineChunk]:
    """The run's chunks in order, with their offsets and the gap since the previous one."""
    timeline: list[TimelineChunk] = []
    previous = 0
    for chunk in _chunks(run_id, accepted_at).order_by("seq")[:limit]:
        data = bytes(chunk.data)
        timeline.append(
            TimelineChunk(
                seq=chunk.seq,
                offset_ms=chunk.offset_us / 1000,
                gap_ms=(chunk.offset_us - previous) / 1000,
                size=len(data),
                text=data.decode("utf-8", "replace"),
            )
        )
        previous = chunk.offset_us
    return timeline


def run_chunk_count(run_id: str, *, accepted_at: datetime | None = None) -> int:
    return _chunks(run_id, accepted_at).count()


def run_reply(run_id: str, *, accepted_at: datetime | None = None) -> Reply:
    return reply_of(
        [
            bytes(c)
            for c in _chunks(run_id, accepted_at).order_by("seq").values_list("data", flat=True)
        ]
    )


def body_text(raw: bytes | memoryview | None) -> str | None:
    """A stored body for display: pretty JSON when it parses, else its text."""
    if raw is None:
        return None
    data = bytes(raw)
    try:
        return orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")


def run_export(run: Run) -> dict[str, Any]:
    """The whole run as JSON: every field, the bodies, and every chunk with its offset."""

    def blob(raw: bytes | memoryview | None) -> dict[str, str] | None:
        if raw is None:
            return None
        data = bytes(raw)
        try:
            return {"encoding": "utf-8", "data": data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"encoding": "base64", "data": base64.b64encode(data).decode()}

    fields: dict[str, Any] = {}
    for model_field in Run._meta.concrete_fields:
        value = getattr(run, model_field.attname)
        if model_field.name in ("request_body", "upstream_request"):
            value = blob(body_as_received(run.pk, value))  # with its images, as received
        fields[model_field.attname] = value
    fields["organization_name"] = run.organization.name
    fields["chunks"] = [
        {"seq": seq, "offset_us": offset, **(blob(data) or {})}
        for seq, offset, data in _chunks(run.pk, run.accepted_at)
        .order_by("seq")
        .values_list("seq", "offset_us", "data")
    ]
    return fields


def run_curl(run: Run, *, base_url: str) -> str | None:
    """A curl command that sends the run's request again, the key left to the environment."""
    received = body_as_received(run.pk, run.request_body)  # with its images, as sent
    if received is None:
        return None
    body = received.decode("utf-8", "replace")
    surface = surface_of_run(run.pk)  # the route the run came in on
    if surface is None:
        return None
    route = surface.path
    lines = [
        f"curl -N {shlex.quote(base_url.rstrip('/') + route)}",
        '-H "Authorization: Bearer $MORTAR_API_KEY"',
        "-H 'Content-Type: application/json'",
    ]
    if run.session:
        lines.append(f"-H {shlex.quote('X-Mortar-Session: ' + run.session)}")
    if run.end_user:
        lines.append(f"-H {shlex.quote('X-Mortar-End-User-Id: ' + run.end_user)}")
    lines.append(f"--data-raw {shlex.quote(body)}")
    return " \\\n  ".join(lines)


def timeline_as_dicts(timeline: list[TimelineChunk]) -> list[dict[str, Any]]:
    return [asdict(chunk) for chunk in timeline]
