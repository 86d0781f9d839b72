"""A worker's slices of a budget (`billing.services.slices`): holds taken in memory, each
run's draw turned into its own hold by the writer, what is not drawn given back, and a dead
worker's slice released by the reconciliation — the ledger's bound kept throughout.

Prices as in `test_budgets`: the example request costs $0.043 (17 prompt tokens at $0.001, 13
output tokens at $0.002).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Max, Sum

from billing.budgets import Budget
from billing.costs import Prices
from billing.ledger.entries import HoldRequest, Settlement
from billing.models import BudgetHold, BudgetSpend
from billing.services.ledger import budget_holds, budget_holds_reconcile, budget_holds_settle
from billing.services.slices import SLICE_IDLE_SECONDS, SWEEP_SECONDS
from telemetry.models import Run
from telemetry.store.batches import write_batch
from telemetry.store.draws import BudgetDraw
from telemetry.store.items import RunClosed, RunOpened
from tests.conftest import _server_env, wait_for_run
from tests.support.budgets import (
    EXAMPLE_USD,
    PROMPT_USD,
    BudgetTenant,
    budget_tenant,
    committed,
    complete,
    cost_of,
    kill_mid_stream,
    read_budget,
    send_together,
    settled,
    settled_charges,
    spend_of,
)
from tests.support.servers import ServerProcess, start_mortar
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

# Long enough for the sweep to notice an idle slice and the ledger to take it back.
GIVEN_BACK_WITHIN = SLICE_IDLE_SECONDS + 2 * SWEEP_SECONDS + 5


def slices_of(key_id: int) -> list[BudgetHold]:
    return list(BudgetHold.objects.filter(run_id__startswith="slice-", key_spend__owner_id=key_id))


def test_a_large_budget_holds_from_a_slice_and_gives_back_what_was_not_drawn(
    mortar_server: ServerProcess, budget_model: str
) -> None:
    tenant = budget_tenant(key_usd="100")  # room for ~2,300 example requests
    responses = [
        complete(mortar_server, tenant.secret, budget_model, max_tokens=13) for _ in range(12)
    ]
    assert [r.status_code for r in responses] == [200] * 12
    ids = [r.headers["X-Mortar-Run-Id"] for r in responses]

    # The first hold came from the ledger; it said how much room there is, so the next ones
    # came from one slice, reserved once: $0.043 * 128 (less than a 16th of the room).
    [reserved] = slices_of(tenant.key_id)
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert spend.held_usd >= 128 * EXAMPLE_USD - 11 * EXAMPLE_USD

    wait_until(lambda: settled(ids), message="the runs' holds were not settled")
    runs = [wait_for_run(run_id) for run_id in ids]
    for response, run in zip(responses, runs, strict=True):
        assert run.held_usd == EXAMPLE_USD
        assert run.charged_usd == cost_of(response)
    charged = sum((run.charged_usd or Decimal(0) for run in runs), Decimal(0))

    # Unused for a while, the slice goes back: nothing is held, the spend is the charges.
    wait_until(
        lambda: not BudgetHold.objects.filter(run_id=reserved.run_id).exists(),
        timeout=GIVEN_BACK_WITHIN,
        message="the idle slice was not given back",
    )
    spend.refresh_from_db()
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(0))
    budget = read_budget(mortar_server, tenant.secret)["key"]
    assert (budget["spent_usd"], budget["held_usd"]) == (f"{charged:.6f}", "0.000000")
    assert Decimal(budget["remaining_usd"]) == Decimal(100) - charged


def test_requests_over_two_processes_drawing_from_slices_never_charge_more_than_the_budget(
    mortar_server: ServerProcess, second_server: ServerProcess, budget_model: str
) -> None:
    # Room for 200 example holds: each worker slices it until fewer than 100 would fit, then
    # holds from the ledger; 400 requests want twice what it can pay.
    budget = 200 * EXAMPLE_USD
    tenant = budget_tenant(key_usd=str(budget))
    responses = send_together(
        [mortar_server, second_server], tenant.secret, budget_model, count=400, at_once=50
    )
    charged = settled_charges(responses)
    assert charged <= budget
    statuses = [r.status_code for r in responses]
    # What slices may leave unused at the end is at most a 16th of the room each worker saw
    # when it last reserved (below 100 holds' room no slice is reserved): a few requests.
    assert statuses.count(200) >= 190
    wait_until(
        lambda: not slices_of(tenant.key_id),
        timeout=GIVEN_BACK_WITHIN,
        message="the slices were not given back",
    )
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(0))


def test_a_killed_worker_s_slice_and_its_runs_holds_expire_and_are_reconciled(
    mortar_server: ServerProcess, budget_model: str, slow_budget_model: str, tmp_path_factory: Any
) -> None:
    tenant = budget_tenant(key_usd="100")
    doomed = start_mortar(_server_env(), log_dir=tmp_path_factory.mktemp("doomed-slices"))
    try:
        finished = [complete(doomed, tenant.secret, budget_model, max_tokens=13) for _ in range(3)]
        assert [r.status_code for r in finished] == [200] * 3
        # Their draws are settled by their worker, in the background, before it is killed.
        charged = sum((cost_of(r) for r in finished), Decimal(0))
        wait_until(
            lambda: spend_of(BudgetSpend.Owner.KEY, tenant.key_id).spent_usd == charged,
            message="the finished runs were not settled",
        )
    except BaseException:
        doomed.stop()
        raise
    # Killed once the stream's draw became its own hold (the writer stored its run): the
    # slice's rest is never given back, the run never settled.
    run_id = kill_mid_stream(
        doomed,
        tenant.secret,
        slow_budget_model,
        stored=lambda run_id: BudgetHold.objects.filter(run_id=run_id).exists(),
    )

    finished_ids = [r.headers["X-Mortar-Run-Id"] for r in finished]
    wait_until(lambda: settled(finished_ids), message="the finished runs were not stored")
    [left] = slices_of(tenant.key_id)
    run_hold = BudgetHold.objects.get(run_id=run_id)
    assert run_hold.amount_usd == EXAMPLE_USD
    assert run_hold.expires_at == left.expires_at
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert spend.spent_usd == charged
    assert spend.held_usd == left.amount_usd + run_hold.amount_usd

    # Nothing happens before they expire; after, the slice's rest is released and the run
    # (no usage: it never finished) is charged its prompt.
    latest = BudgetHold.objects.filter(key_spend__owner_id=tenant.key_id).aggregate(
        latest=Max("expires_at")
    )["latest"]
    assert committed(lambda: budget_holds_reconcile(now=latest - timedelta(seconds=1))) == 0
    assert committed(lambda: budget_holds_reconcile(now=latest)) == 2
    assert not BudgetHold.objects.filter(key_spend__owner_id=tenant.key_id).exists()
    spend.refresh_from_db()
    assert (spend.spent_usd, spend.held_usd) == (charged + PROMPT_USD, Decimal(0))
    run = Run.objects.get(id=run_id)
    assert (run.held_usd, run.charged_usd) == (EXAMPLE_USD, PROMPT_USD)
    stored = Run.objects.filter(api_key_id=tenant.key_id).aggregate(total=Sum("charged_usd"))
    assert stored["total"] == spend.spent_usd
    budget = read_budget(mortar_server, tenant.secret)["key"]
    assert Decimal(budget["spent_usd"]) == spend.spent_usd


def test_a_worker_stopped_right_after_its_responses_leaves_nothing_to_the_reconciliation(
    budget_model: str, tmp_path_factory: Any
) -> None:
    # A draw from a slice is settled in the background just after its response: a worker told
    # to stop at once settles what waits, then gives its slice back, before it exits.
    tenant = budget_tenant(key_usd="100")
    worker = start_mortar(_server_env(), log_dir=tmp_path_factory.mktemp("stopped-slices"))
    try:
        responses = [complete(worker, tenant.secret, budget_model, max_tokens=13) for _ in range(6)]
    finally:
        worker.stop()  # SIGTERM right after the last response
    assert [r.status_code for r in responses] == [200] * 6
    assert "Application shutdown complete" in worker.log()
    ids = [r.headers["X-Mortar-Run-Id"] for r in responses]
    assert settled(ids)
    assert not slices_of(tenant.key_id)
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    charged = sum((cost_of(r) for r in responses), Decimal(0))
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(0))


def reserved_slice(key_id: int, name: str, now: datetime) -> str:
    """A $1 slice of the key's $10 budget, reserved in the ledger as a worker reserves one."""
    budget = Budget(BudgetSpend.Owner.KEY, key_id, Decimal(10), "total")
    slice_id = f"slice-{name}-{key_id}"

    def reserve() -> None:
        [held] = budget_holds(
            [
                HoldRequest(
                    slice_id,
                    [budget],
                    0,
                    1_000_000,  # $1 in micro-dollar "tokens"
                    Prices(output=Decimal(1)),
                    now + timedelta(minutes=5),
                )
            ],
            now=now,
        )
        assert not isinstance(held, Exception) and held.amount_usd == Decimal(1)

    committed(reserve)
    return slice_id


def drawn_run(tenant: BudgetTenant, run_id: str, slice_id: str, now: datetime) -> RunOpened:
    """A run's opened row as its worker hands it over, with its draw from the slice."""
    return RunOpened(
        {
            "id": run_id,
            "accepted_at": now,
            "organization_id": tenant.organization_id,
            "api_key_id": tenant.key_id,
            "status": Run.Status.IN_PROGRESS,
            "held_usd": EXAMPLE_USD,
            "budget_slice": slice_id,
            "held_prompt_usd": PROMPT_USD,
        },
    )


def test_a_run_takes_its_draw_with_its_first_insert_and_its_worker_settles_it_once(
    mortar_server: ServerProcess,  # (the test database with the ledger's functions)
) -> None:
    """A run's insert takes its draw; the same opened row replayed (a spool, a dead writer's
    log) finds the run there and takes nothing. Its worker settles it; its stored outcome
    charges nothing more."""
    tenant = budget_tenant(key_usd="10")
    now = datetime.now(UTC)
    slice_id = reserved_slice(tenant.key_id, "replay", now)
    run_id = f"chatcmpl-replay-{tenant.key_id}"
    opened = drawn_run(tenant, run_id, slice_id, now)

    committed(lambda: write_batch([opened]))
    committed(lambda: write_batch([opened], replay=True))

    hold = BudgetHold.objects.get(run_id=run_id)
    assert (hold.amount_usd, hold.prompt_usd) == (EXAMPLE_USD, PROMPT_USD)
    assert BudgetHold.objects.get(run_id=slice_id).amount_usd == Decimal(1) - EXAMPLE_USD
    # The budget's rows never moved: a draw only moves an amount from one hold to another.
    assert spend_of(BudgetSpend.Owner.KEY, tenant.key_id).held_usd == Decimal(1)

    # Its worker settles it when its response ends; settling again changes nothing.
    charged = Decimal("0.000250")
    draw = BudgetDraw(run_id, slice_id, EXAMPLE_USD, PROMPT_USD)
    settle = [Settlement(run_id, charged, draw)]
    assert committed(lambda: budget_holds_settle(settle)) == {run_id: charged}
    assert committed(lambda: budget_holds_settle(settle)) == {}
    assert not BudgetHold.objects.filter(run_id=run_id).exists()
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(1) - EXAMPLE_USD)
    assert BudgetHold.objects.get(run_id=slice_id).amount_usd == Decimal(1) - EXAMPLE_USD

    # The writer only records the outcome: stored (and replayed), it moves no money.
    closed = RunClosed(run_id, {"status": Run.Status.COMPLETED, "charged_usd": charged})
    committed(lambda: write_batch([closed]))
    committed(lambda: write_batch([closed], replay=True))
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(1) - EXAMPLE_USD)
    assert Run.objects.get(id=run_id).charged_usd == charged
    # Not left for other tests' reconciliations to find.
    committed(lambda: BudgetHold.objects.filter(run_id__in=[run_id, slice_id]).delete())


def test_a_run_settled_before_its_row_is_stored_takes_its_draw_then_and_never_again(
    mortar_server: ServerProcess,
) -> None:
    """The writer stores a run a moment after its response ended: a settlement that comes
    first takes the run's draw from the slice itself, and the run's insert (and its replay)
    takes none, leaving no hold behind."""
    tenant = budget_tenant(key_usd="10")
    now = datetime.now(UTC)
    slice_id = reserved_slice(tenant.key_id, "early", now)
    run_id = f"chatcmpl-early-{tenant.key_id}"
    charged = Decimal("0.000250")
    draw = BudgetDraw(run_id, slice_id, EXAMPLE_USD, PROMPT_USD)

    assert committed(lambda: budget_holds_settle([Settlement(run_id, charged, draw)])) == {
        run_id: charged
    }
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(1) - EXAMPLE_USD)
    assert BudgetHold.objects.get(run_id=slice_id).amount_usd == Decimal(1) - EXAMPLE_USD
    # What tells the insert its draw is taken: a hold of nothing.
    assert BudgetHold.objects.get(run_id=run_id).amount_usd == 0
    # Settled again: nothing more, and the marker stays for the insert.
    assert committed(lambda: budget_holds_settle([Settlement(run_id, charged, draw)])) == {}
    assert BudgetHold.objects.get(run_id=run_id).amount_usd == 0

    opened = drawn_run(tenant, run_id, slice_id, now)
    closed = RunClosed(run_id, {"status": Run.Status.COMPLETED, "charged_usd": charged})
    committed(lambda: write_batch([opened, closed]))
    committed(lambda: write_batch([opened, closed], replay=True))

    assert not BudgetHold.objects.filter(run_id=run_id).exists()
    spend = spend_of(BudgetSpend.Owner.KEY, tenant.key_id)
    assert (spend.spent_usd, spend.held_usd) == (charged, Decimal(1) - EXAMPLE_USD)
    assert BudgetHold.objects.get(run_id=slice_id).amount_usd == Decimal(1) - EXAMPLE_USD
    committed(lambda: BudgetHold.objects.filter(run_id=slice_id).delete())
