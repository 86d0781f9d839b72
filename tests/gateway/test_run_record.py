"""A request's run is recorded from its plan, and its close settles its budget hold.

`RunRecord` without HTTP: a plan, a recorder whose rows are captured and then written by the
run store's own batch write, and a hold. Every way a request ends — refused, its client gone,
a failure, a completion — closes the run once, and that close charges the hold: the cost, or
nothing. (End to end, with a server and a budget: tests/billing/test_holds_settled.py.)
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from decimal import Decimal
from typing import cast

import pytest

from accounts.models import Organization
from accounts.services import key_create
from billing.services.holds import HeldBudget
from core.errors import InvalidParameter, UpstreamUnavailable
from gateway.pipeline.accept import Accepted, Received
from gateway.pipeline.plan import Plan
from gateway.pipeline.record import RunRecord, run_fields
from gateway.pipeline.surface import CHAT_COMPLETIONS
from telemetry.models import Run
from telemetry.recording import RunRecorder
from telemetry.store.batches import write_batch
from telemetry.store.draws import BudgetDraw
from telemetry.store.items import WriterItem
from telemetry.store.writer import RunWriter

pytestmark = pytest.mark.django_db

ACCEPTED_AT = datetime(2031, 6, 1, 9, 30, tzinfo=UTC)
HELD = Decimal("0.050000")
_ids = itertools.count(1)


class CapturingWriter:
    def __init__(self) -> None:
        self.items: list[WriterItem] = []

    def submit(self, item: WriterItem) -> None:
        self.items.append(item)


@pytest.fixture
def organization() -> Organization:
    return Organization.objects.create(name=f"record-{next(_ids)}")


@pytest.fixture
def key_id(organization: Organization) -> int:
    return key_create(organization=organization, name="record").key.pk


def planned(*, key_id: int, held: Decimal | None = HELD, body: bytes = b'{"model": "m"}') -> Plan:
    run_id = f"chatcmpl-{next(_ids):024x}"
    plan = Plan(
        run_id=run_id,
        surface=CHAT_COMPLETIONS,
        received=Received(key_id=key_id, request_id="req_test", body=body, size=len(body)),
    )
    if held is not None:
        plan.budget = HeldBudget(run_id=run_id, amount_usd=held, max_tokens=100)
    return plan


def record_of(plan: Plan, organization: Organization, writer: CapturingWriter) -> RunRecord:
    recorder = RunRecorder(
        run_id=plan.run_id,
        accepted_at=ACCEPTED_AT,
        organization_id=organization.pk,
        writer=cast(RunWriter, writer),
        events=None,
    )
    accepted = Accepted(completion_id=plan.run_id, accepted_at=ACCEPTED_AT, created=0)
    return RunRecord(plan, recorder, accepted)


def stored(writer: CapturingWriter, run_id: str) -> Run:
    write_batch(writer.items)
    return Run.objects.get(pk=run_id)


def test_a_refusal_after_the_hold_is_stored_whole_and_charged_nothing(
    organization: Organization, key_id: int
) -> None:
    plan, writer = planned(key_id=key_id), CapturingWriter()
    record = record_of(plan, organization, writer)

    response = record.refuse(InvalidParameter("`top_p` must be at most 1.", param="top_p"))

    assert response.status_code == 400
    assert plan.budget is not None and plan.budget.charged_usd == Decimal(0)
    run = stored(writer, plan.run_id)
    assert (run.status, run.http_status, run.error_code) == (
        Run.Status.REFUSED,
        400,
        "invalid_parameter",
    )
    assert (run.held_usd, run.charged_usd) == (HELD, Decimal(0))
    assert (run.api_key_id, run.request_id, bytes(run.request_body)) == (
        key_id,
        "req_test",
        b'{"model": "m"}',
    )


def test_a_client_gone_before_a_reply_releases_the_hold(
    organization: Organization, key_id: int
) -> None:
    plan, writer = planned(key_id=key_id), CapturingWriter()
    record = record_of(plan, organization, writer)

    record.cancel()

    run = stored(writer, plan.run_id)
    assert (run.status, run.http_status, run.error_code) == (
        Run.Status.CANCELLED,
        499,
        "client_disconnected",
    )
    assert run.charged_usd == Decimal(0)


def test_a_completed_run_is_charged_its_cost_rounded_up_and_never_more_than_its_hold(
    organization: Organization, key_id: int
) -> None:
    cheap, dear = planned(key_id=key_id), planned(key_id=key_id)
    writer = CapturingWriter()
    for plan, cost in ((cheap, Decimal("0.0123451")), (dear, Decimal("0.09"))):
        record = record_of(plan, organization, writer)
        record.open(upstream_request=None)
        record.close(Run.Status.COMPLETED, http_status=200, cost=cost)

    write_batch(writer.items)
    charged = dict(
        Run.objects.filter(pk__in=[cheap.run_id, dear.run_id]).values_list("pk", "charged_usd")
    )
    assert charged == {cheap.run_id: Decimal("0.012346"), dear.run_id: HELD}


def test_only_the_first_close_counts_for_the_run_and_its_hold(
    organization: Organization, key_id: int
) -> None:
    plan, writer = planned(key_id=key_id), CapturingWriter()
    record = record_of(plan, organization, writer)
    record.open(upstream_request=b"{}")
    record.close(Run.Status.COMPLETED, http_status=200, cost=Decimal("0.01"))

    # A late close — the client leaving after the last byte, say — changes nothing.
    record.cancel()
    record.refuse(UpstreamUnavailable("gone"))

    assert plan.budget is not None and plan.budget.charged_usd == Decimal("0.010000")
    run = stored(writer, plan.run_id)
    assert (run.status, run.http_status, run.charged_usd) == (
        Run.Status.COMPLETED,
        200,
        Decimal("0.010000"),
    )
    assert len([item for item in writer.items if type(item).__name__ == "RunClosed"]) == 1


def test_a_run_without_a_hold_is_closed_without_a_charge(
    organization: Organization, key_id: int
) -> None:
    plan, writer = planned(key_id=key_id, held=None), CapturingWriter()
    record = record_of(plan, organization, writer)

    record.refuse(UpstreamUnavailable("No replica answered."))

    run = stored(writer, plan.run_id)
    assert (run.status, run.held_usd, run.charged_usd) == (Run.Status.FAILED, None, None)


def test_the_run_s_columns_are_what_the_plan_decided_as_far_as_it_got() -> None:
    too_large = b"x" * 10
    plan = planned(key_id=3, body=too_large)
    plan.received = Received(key_id=3, request_id="req_big", body=too_large, size=5 * 2**20)
    plan.rerun_of = "chatcmpl-" + "a" * 24
    plan.session, plan.end_user = "sess_1", "user-9"
    assert plan.budget is not None
    plan.budget.draw = BudgetDraw(plan.run_id, "slice-1", HELD, Decimal("0.010000"))

    fields = run_fields(plan)

    assert fields == {
        "api_key_id": 3,
        "request_id": "req_big",
        "request_body": too_large,
        "request_bytes": 5 * 2**20,
        "request_truncated": True,
        "rerun_of": "chatcmpl-" + "a" * 24,
        "session": "sess_1",
        "end_user": "user-9",
        "held_usd": HELD,
        "budget_slice": "slice-1",
        "held_prompt_usd": Decimal("0.010000"),
    }
    # Not counted: no prompt_tokens column, rather than a count of 0.
    plan.prompt_tokens, plan.counted = 0, False
    assert "prompt_tokens" not in run_fields(plan)
    plan.counted = True
    assert run_fields(plan)["prompt_tokens"] == 0


def test_opening_writes_the_run_as_planned_with_what_is_sent(
    organization: Organization, key_id: int
) -> None:
    plan, writer = planned(key_id=key_id), CapturingWriter()
    plan.stream, plan.max_tokens = False, 321
    record = record_of(plan, organization, writer)

    record.open(upstream_request=b'{"model": "upstream"}')

    write_batch(writer.items)
    run = Run.objects.get(pk=plan.run_id)
    assert (run.status, run.stream, run.max_tokens, bytes(run.upstream_request)) == (
        Run.Status.IN_PROGRESS,
        False,
        321,
        b'{"model": "upstream"}',
    )
    assert (run.held_usd, run.charged_usd) == (HELD, None)
