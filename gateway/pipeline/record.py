"""The run of one request, recorded from its plan: opened when generation starts, closed once.

The `Plan` is the one source of what was decided about a request; `run_fields` is the one place
a decision becomes a column of the run. The recorder is opened from the plan (`RunRecord.open`)
or, for a request refused before it generated, written whole when it closes; what the run
learns afterwards is its routing, its chunks and its outcome.

A run's budget hold belongs to its record: the run's close settles it — charged the outcome's
cost, or nothing when there is none (refused before it reached a model server, answered from
another run, its client gone before a reply) — and only the first close counts. So every way a
request ends settles its hold, and no error branch releases one by hand. The settlement is on
the ledger when the response ends (`settled`, which whatever sends the response's last bytes
awaits), not when the run is stored.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Unpack

from django.http import HttpResponse

from accounts.models import ApiKey, Organization
from core.errors import MortarError
from core.http.responses import error_response
from gateway.pipeline.accept import Accepted
from gateway.pipeline.plan import Plan
from telemetry.events import event_publisher
from telemetry.leases import worker_of_new_runs
from telemetry.models import Run
from telemetry.recording import Decided, RunRecorder
from telemetry.store.fields import ImageRecord, RunFields, RunOutcome
from telemetry.store.running import run_writer


def run_fields(plan: Plan) -> RunFields:
    """The run's columns as the plan decided them, as far as it got."""
    fields: RunFields = {}
    received = plan.received
    if received is not None:
        fields["api_key_id"] = received.key_id
        fields["request_id"] = received.request_id
        fields["request_body"] = received.body
        fields["request_bytes"] = received.size
        if received.too_large:
            fields["request_truncated"] = True
    if plan.rerun_of is not None:
        fields["rerun_of"] = plan.rerun_of
    if plan.model is not None and plan.deployment is not None:
        fields["model"] = plan.model.id
        fields["deployment"] = plan.deployment.name
    if plan.session is not None:
        fields["session"] = plan.session
    if plan.end_user is not None:
        fields["end_user"] = plan.end_user
    if plan.tool_selection is not None:
        fields["tool_selector_report"] = plan.tool_selection.as_dict()
    if plan.optimizer_report is not None:
        fields["optimizer_report"] = plan.optimizer_report.as_dict()
    if plan.counted:
        fields["prompt_tokens"] = plan.prompt_tokens
    budget = plan.budget
    if budget is not None:
        fields["held_usd"] = budget.amount_usd
        if budget.draw is not None:
            # What it drew from the worker's slice: its opened row's insert makes it the run's
            # own hold (the billing app's triggers on the run table).
            fields["budget_slice"] = budget.draw.slice_id
            fields["held_prompt_usd"] = budget.draw.prompt_usd
    if plan.dedupe_role is not None:
        fields["dedupe_role"] = plan.dedupe_role
    if plan.answered_by is not None:
        fields["dedupe_leader"] = plan.answered_by
    return fields


def image_records(plan: Plan) -> list[ImageRecord]:
    """The checked images of a vision request, as the run stores them."""
    return [
        ImageRecord(image.media_type, image.data, image.width, image.height, image.param)
        for image in plan.images
    ]


class RunRecord:
    """A request's run: its plan, its recorder, and the hold its close settles."""

    def __init__(self, plan: Plan, recorder: RunRecorder, accepted: Accepted):
        self.plan = plan
        self.recorder = recorder
        self.accepted = accepted
        self._opened = False

    @property
    def run_id(self) -> str:
        return self.plan.run_id

    def open(self, *, upstream_request: bytes | None) -> None:
        """The request is about to generate: write its run as planned, with what is sent."""
        plan = self.plan
        fields = run_fields(plan)
        fields["stream"] = plan.stream
        fields["max_tokens"] = plan.max_tokens
        fields["upstream_request"] = upstream_request
        self.recorder.open(Decided(fields, image_records(plan)))
        self._opened = True

    def close(self, status: str, **outcome: Unpack[RunOutcome]) -> None:
        """Close the run with its outcome (the first close counts), and settle its hold:
        charged the outcome's cost, or nothing when it has none."""
        if self.recorder.closed:
            return
        budget = self.plan.budget
        if budget is not None:
            outcome["charged_usd"] = budget.charge(outcome.get("cost") or Decimal(0))
        decided = None
        if not self._opened:
            decided = Decided(run_fields(self.plan), image_records(self.plan))
        self.recorder.close(status=status, decided=decided, **outcome)

    async def settled(self) -> None:
        """Wait for the run's charge to be settled on its budgets (nothing to wait for without
        a hold): the response's last bytes go after it."""
        budget = self.plan.budget
        if budget is not None:
            await budget.settled()

    def refuse(self, error: MortarError, **outcome: Unpack[RunOutcome]) -> HttpResponse:
        """Answer with the surface's error envelope, and close the run with it (and with what
        it cost, when a model server consumed its prompt before failing)."""
        plan = self.plan
        response = error_response(error, plan.headers(), envelope=plan.surface.envelope)
        self.recorder.chunk(response.content)
        outcome["http_status"] = error.status
        outcome["error_code"] = error.code
        outcome["error_message"] = error.message
        self.close(Run.Status.REFUSED if error.status < 500 else Run.Status.FAILED, **outcome)
        return response

    async def refused(self, error: MortarError, **outcome: Unpack[RunOutcome]) -> HttpResponse:
        """`refuse`, answered once its hold is settled."""
        response = self.refuse(error, **outcome)
        await self.settled()
        return response

    def cancel(self) -> None:
        """The client went away before a reply was sent."""
        self.close(Run.Status.CANCELLED, http_status=499, error_code="client_disconnected")


def run_record(plan: Plan, accepted: Accepted, key: ApiKey, route: str) -> RunRecord:
    """The record of a request's run: a run of the key's organization from now on."""
    organization = key.organization
    recorder = RunRecorder(
        run_id=plan.run_id,
        accepted_at=accepted.accepted_at,
        organization_id=organization.id,
        writer=run_writer(),
        worker=worker_of_new_runs(),
        events=event_publisher(),
        keep_content=organization.retention == Organization.Retention.FULL,
        route=route,
        organization=organization.name,
    )
    return RunRecord(plan, recorder, accepted)
