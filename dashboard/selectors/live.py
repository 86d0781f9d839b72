"""Generations in flight: runs still `in_progress`, with what they have sent so far."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from dashboard.selectors.replies import Reply, reply_of
from dashboard.selectors.scope import of_organizations
from gateway.tokens import TokenCounter, default_counter
from telemetry.models import Run, RunChunk

IN_FLIGHT_LIMIT = 100
# A run left `in_progress` by a crashed worker is not in flight: after six hours (longer than
# any generation runs) the list forgets it.
IN_FLIGHT_WINDOW = timedelta(hours=6)


@dataclass(frozen=True)
class InFlight:
    id: str
    organization_id: int
    organization: str
    model: str
    deployment: str
    session: str
    end_user: str
    accepted_at: datetime
    chunks: int
    tokens_so_far: int | None  # None under `metadata` retention: no chunks are stored

    def as_json(self, *, now: datetime) -> dict[str, object]:
        return {
            "id": self.id,
            "organizationId": self.organization_id,
            "organization": self.organization,
            "model": self.model,
            "deployment": self.deployment,
            "session": self.session,
            "endUser": self.end_user,
            "acceptedAt": self.accepted_at.isoformat(),
            "elapsedMs": round((now - self.accepted_at).total_seconds() * 1000),
            "chunks": self.chunks,
            "tokensSoFar": self.tokens_so_far,
        }


def generations_in_flight(
    *, now: datetime | None = None, organizations: frozenset[int] | None = None
) -> list[InFlight]:
    """The newest in-progress runs (of `organizations`; None: every one), with the tokens of the
    reply stored so far.

    Tokens are counted with the gateway's counter over the reply text put back together from
    the chunks the run writer has stored (they lag the stream by at most one writer batch).
    """
    now = now or timezone.now()
    in_progress = Run.objects.filter(
        status=Run.Status.IN_PROGRESS, accepted_at__gte=now - IN_FLIGHT_WINDOW
    )
    runs = list(
        of_organizations(in_progress, None, organizations)
        .select_related("organization")
        .only(
            "id",
            "organization__name",
            "organization__retention",
            "model",
            "deployment",
            "session",
            "end_user",
            "accepted_at",
        )
        .order_by("-accepted_at")[:IN_FLIGHT_LIMIT]
    )
    chunks: dict[str, list[bytes]] = {run.pk: [] for run in runs}
    for run_id, data in (
        RunChunk.objects.filter(
            run_id__in=list(chunks),
            # The partitions of the days these runs were accepted in, not every day's.
            run_accepted_at__gte=min((run.accepted_at for run in runs), default=now),
        )
        .order_by("run_id", "seq")
        .values_list("run_id", "data")
    ):
        chunks[run_id].append(bytes(data))
    counter = default_counter()
    found = []
    for run in runs:
        stored = chunks[run.pk]
        reply = reply_of(stored)
        keeps_content = run.organization.retention == run.organization.Retention.FULL
        found.append(
            InFlight(
                id=run.pk,
                organization_id=run.organization_id,
                organization=run.organization.name,
                model=run.model,
                deployment=run.deployment,
                session=run.session,
                end_user=run.end_user,
                accepted_at=run.accepted_at,
                chunks=len(stored),
                tokens_so_far=_reply_tokens(reply, counter) if keeps_content else None,
            )
        )
    return found


def _reply_tokens(reply: Reply, counter: TokenCounter) -> int:
    tokens = counter.count(reply.content) + counter.count(reply.reasoning)
    for call in reply.tool_calls or ():
        tokens += counter.tool_call_tokens(call["name"], call["arguments"])
    return tokens
