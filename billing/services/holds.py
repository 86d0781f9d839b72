"""Budgets on the request path: hold before generation, settle when the response ends.

The ledger itself is `billing.ledger`; this module takes a request's hold on the budgets it
must fit (`billing.budgets.budgets_for`) off the event loop — from the worker's slice of them
in memory where it can (`billing.services.slices`), else from the ledger, batched. When the run
closes, its charge is settled on the ledger the same way — batched, off the event loop:

- a hold taken from the ledger itself (a budget near its end, or SQLite's) is settled before
  the response's last byte: the response waits for that commit, so the client's next request,
  on any worker, and `GET /v1/budget` find it settled;
- a hold drawn from the worker's slice (a budget with room for many more requests) is settled
  in the background, with the others of the next `DEFERRED_SECONDS`: the whole slice is held on
  the ledger until then, so no budget can be passed meanwhile, and no request waits for, or
  pays a round trip of its own for, a settlement that changes no answer.

A settlement that never happens (the worker died, the ledger was away) is not lost: the hold
expires and `budget_holds_reconcile` charges it from the run's stored usage.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import DatabaseError

from accounts.models import ApiKey
from billing.budgets import budgets_for
from billing.costs import Prices, charge_for
from billing.errors import InsufficientQuota
from billing.ledger import ledger
from billing.ledger.entries import Held, HoldRequest, Settlement
from billing.services.ledger import (
    budget_holds,
    budget_holds_settle,
    budget_holds_settle_batch,
    budget_slice_release,
)
from billing.services.slices import BudgetSlices
from core.db import database_call_on
from core.errors import BackendUnavailable
from core.loops import PerLoop
from telemetry.store.draws import BudgetDraw

logger = logging.getLogger(__name__)

# The ledger's thread, keeping its own connection: one batch of holds at a time (a loop's
# batches are taken one after another; a second loop, in the test suite, gets the same thread).
LEDGER_THREADS = ThreadPoolExecutor(1, thread_name_prefix="mortar-ledger")

# A hold outlives its generation by this much before the reconciliation may settle it: a
# generation never runs past its deployment's total timeout, and the run's row needs a moment
# to reach the database after it ends (docs/budgets-and-rate-limits.md).
HOLD_MARGIN = timedelta(seconds=60)


def costs_something(prices: Prices) -> bool:
    return prices.input > 0 or prices.cached_input > 0 or prices.output > 0


@dataclass
class HeldBudget:
    """A run's hold, charged once: the first charge counts, later ones are no-ops."""

    run_id: str
    amount_usd: Decimal
    max_tokens: int
    # Held from the worker's slice (`billing.services.slices`): the draw the run's row carries.
    draw: BudgetDraw | None = None
    charged_usd: Decimal | None = None
    # The settlement on the ledger, once the charge is known (`settle`).
    settling: asyncio.Future[None] | None = None

    def charge(self, cost: Decimal) -> Decimal:
        """What the run is charged for `cost` (capped at the hold): its `charged_usd`. The
        first charge counts, and starts its settlement on the ledger (`settled` waits for it)."""
        if self.charged_usd is None:
            self.charged_usd = charge_for(cost, self.amount_usd)
            if self.draw is not None:
                settle_later(self)
            else:
                self.settling = settle_soon(self.settlement())
        return self.charged_usd

    def settlement(self) -> Settlement:
        assert self.charged_usd is not None, "charged first"
        return Settlement(self.run_id, self.charged_usd, self.draw)

    async def settled(self) -> None:
        """Wait until the charge is settled on the ledger, when it must be before the response
        ends (a hold from the ledger; a slice's draw is settled in the background). A
        settlement that failed is left to the reconciliation (the hold expires)."""
        if self.settling is not None:
            await self.settling


class HoldBatches:
    """The event loop's holds, taken together: the holds asked for during one loop pass — and
    those asked for while the previous batch was committing — go to the ledger as one batch,
    one thread hop, one round trip and one commit (`budget_holds`).

    One batch is in flight at a time, so batches grow with the load: one request alone waits
    for its own commit, 32 at once share one. The answers come back in the batch's order, so
    a budget's holds are taken first come, first served.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[HoldRequest, asyncio.Future[Held | InsufficientQuota]]] = []
        self._taking = False
        self._task: asyncio.Task[None] | None = None  # held: a task nothing holds may vanish

    async def hold(self, request: HoldRequest) -> Held | InsufficientQuota:
        answer: asyncio.Future[Held | InsufficientQuota] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting.append((request, answer))
        if not self._taking:
            self._taking = True
            # A task, so it starts after this pass's other callbacks: their holds join.
            self._task = asyncio.get_running_loop().create_task(self._take_batches())
        return await answer

    async def _take_batches(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                requests = [request for request, _ in batch]
                now = datetime.now(UTC)
                try:
                    answers = await database_call_on(
                        LEDGER_THREADS, functools.partial(budget_holds, requests, now=now)
                    )
                except DatabaseError as away:
                    # Without the ledger no one can tell what a budget can pay: nothing is
                    # sent. (A batch whose commit was acknowledged to no one, tried again,
                    # fails on its run ids: its holds expire and the reconciliation releases
                    # them.)
                    logger.warning("budget: no holds for %d requests: %s", len(batch), away)
                    _fail(batch, lambda: BackendUnavailable(LEDGER_AWAY))
                except Exception:  # a bug: each request fails (a 500), none waits forever
                    logger.exception("budget: no holds for %d requests", len(batch))
                    _fail(batch, lambda: RuntimeError("no budget hold: see the server's log"))
                else:
                    for (_, answer), held in zip(batch, answers, strict=True):
                        if not answer.done():  # its request may have been cancelled
                            answer.set_result(held)
        finally:
            self._taking = False


LEDGER_AWAY = (
    "The budget ledger cannot be reached right now; the request was not sent to the model. "
    "Retry in a moment."
)


def _fail(
    batch: list[tuple[HoldRequest, asyncio.Future[Held | InsufficientQuota]]],
    error: Callable[[], BaseException],
) -> None:
    for _, answer in batch:
        if not answer.done():
            answer.set_exception(error())


hold_batches = PerLoop(HoldBatches)


# A settlement of a slice's draw waits at most this long, or until this many wait, to join a
# batch: what a worker settles on the ledger then costs one round trip per batch rather than
# per request, even for a client alone. A batch costs the process about 1 ms of CPU however
# few it settles (its thread's and the loop's wake-ups, the round trip), so the window sets a
# lone client's cost: 0.1 s left one client sending a request every 3.5 ms at 80 to 110 µs a
# request (bench/micro/settle.py). Nothing waits on it: the draw is held on the ledger, as
# part of its slice, until its batch commits — as long as the run writer used to take.
DEFERRED_SECONDS = 0.5
DEFERRED_BATCH = 256


class SettleBatches:
    """The event loop's settlements, taken together like its holds (`HoldBatches`): those of
    one loop pass, and those that ended while the previous batch was committing, are one
    call of the ledger's settle, one thread hop and one commit.

    `settle` answers with a future the response's end awaits, resolved (never failed) once
    its batch is committed or has failed: a settlement that failed is logged, and the hold
    expires and is reconciled like a dead worker's. `settle_later` (a slice's draw) answers
    nothing: it joins the next batch, which it starts itself after `DEFERRED_SECONDS` or once
    `DEFERRED_BATCH` are waiting.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[Settlement, asyncio.Future[None]]] = []
        # Charged draws no one awaits: their settlements are made with their batch, not as
        # each response ends (bench/micro/settle.py, a lone client's requests).
        self._later: list[HeldBudget] = []
        self._taking = False
        self._task: asyncio.Task[None] | None = None  # held: a task nothing holds may vanish
        self._timer: asyncio.TimerHandle | None = None
        self._drained: asyncio.Event | None = None

    def settle(self, settlement: Settlement) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[None] = loop.create_future()
        self._waiting.append((settlement, answer))
        self._take_soon(loop)
        return answer

    def settle_later(self, held: HeldBudget) -> None:
        # As each response ends, on every worker: the loop is looked up only when needed.
        later = self._later
        later.append(held)
        if len(later) >= DEFERRED_BATCH:
            self._take_soon(asyncio.get_running_loop())
        elif self._timer is None and not self._taking:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(DEFERRED_SECONDS, self._take_soon, loop)

    async def drained(self) -> None:
        """Wait until every settlement asked for so far is committed (or has failed): what a
        stopping worker, or a measurement, waits for."""
        while self._waiting or self._later or self._taking:
            if not self._taking:
                self._take_soon(asyncio.get_running_loop())
            if self._drained is None:
                self._drained = asyncio.Event()
            await self._drained.wait()

    def _take_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._taking:
            self._taking = True
            self._task = loop.create_task(self._take_batches())

    def _batch_due(self) -> bool:
        """Whether what waits goes now: someone awaits it, or a full batch of draws waits."""
        return bool(self._waiting) or len(self._later) >= DEFERRED_BATCH

    async def _take_batches(self) -> None:
        try:
            # Draws that arrived during a batch's round trip wait for their own deferral (the
            # `finally`), rather than make batches as small as a round trip is short.
            first = True
            while (self._waiting or self._later) and (first or self._batch_due()):
                first = False
                awaited, self._waiting = self._waiting, []
                later, self._later = self._later, []
                settlements = [settlement for settlement, _ in awaited]
                settlements += [held.settlement() for held in later]
                try:
                    await database_call_on(
                        LEDGER_THREADS, functools.partial(budget_holds_settle_batch, settlements)
                    )
                except DatabaseError as away:
                    logger.warning(
                        "budget: %d holds not settled (their expiry will): %s",
                        len(settlements),
                        away,
                    )
                except Exception:
                    logger.exception("budget: %d holds not settled", len(settlements))
                for _, answer in awaited:
                    if not answer.done():  # its request may have been cancelled
                        answer.set_result(None)
        finally:
            self._taking = False
            if self._later and self._timer is None:  # arrived during the last batch
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(DEFERRED_SECONDS, self._take_soon, loop)
            if self._drained is not None:
                self._drained.set()
                self._drained = None


settle_batches = PerLoop(SettleBatches)


def settle_soon(settlement: Settlement) -> asyncio.Future[None] | None:
    """Start settling a run's charge on the ledger in this event loop's next batch: the future
    the response's end awaits; on a thread without a running loop (a management command, a
    test), now."""
    try:
        batches = settle_batches()
    except RuntimeError:  # no running event loop
        budget_holds_settle([settlement])
        return None
    return batches.settle(settlement)


def settle_later(held: HeldBudget) -> None:
    """Settle a slice's draw, once charged, within `DEFERRED_SECONDS` (nothing to await); on a
    thread without a running loop, now."""
    try:
        batches = settle_batches()
    except RuntimeError:
        budget_holds_settle([held.settlement()])
        return
    batches.settle_later(held)


async def settlements_drained() -> None:
    """Wait until this event loop's settlements are on the ledger (the worker is stopping)."""
    batches = settle_batches.current()
    if batches is not None:
        await batches.drained()


async def _ledger_hold(request: HoldRequest) -> Held | InsufficientQuota:
    return await hold_batches().hold(request)


async def _ledger_release(slice_id: str, amount: Decimal) -> None:
    await database_call_on(
        LEDGER_THREADS, functools.partial(budget_slice_release, slice_id, amount)
    )


budget_slices = PerLoop(functools.partial(BudgetSlices, hold=_ledger_hold, release=_ledger_release))


async def release_budget_slices() -> None:
    """Give back what this worker reserved and did not draw (it is stopping); what cannot be
    given back now expires and is released by the reconciliation."""
    slices = budget_slices.current()
    if slices is not None:
        await slices.release_all()


async def hold_for(
    *,
    run_id: str,
    key: ApiKey,
    prompt_tokens: int,
    max_tokens: int,
    prices: Prices,
    total_timeout_s: float,
) -> HeldBudget | None:
    """Hold what the request may cost on its budgets; None when none applies or the model
    costs nothing (never refused for budget). Raises InsufficientQuota."""
    budgets = budgets_for(key)
    if not budgets or not costs_something(prices):
        return None
    expires_at = datetime.now(UTC) + timedelta(seconds=total_timeout_s) + HOLD_MARGIN
    request = HoldRequest(run_id, budgets, prompt_tokens, max_tokens, prices, expires_at)
    if ledger().slices:
        slices = budget_slices()
        from_slice = await slices.hold(request)
        if from_slice is not None:
            held, draw = from_slice
            return HeldBudget(run_id, held.amount_usd, held.max_tokens, draw=draw)
        answer = await hold_batches().hold(request)
        slices.noted(budgets, answer)
    else:
        answer = await hold_batches().hold(request)
    if isinstance(answer, InsufficientQuota):
        raise answer
    return HeldBudget(run_id=run_id, amount_usd=answer.amount_usd, max_tokens=answer.max_tokens)
