"""A worker's slices of its budgets: holds taken in memory, without waiting for Postgres.

Every hold used to be a round trip and a commit before generation could start (`HoldBatches`):
most of what spend control cost a request, in CPU and in latency (docs/performance.md). A
worker now reserves a *slice* of a budget — a hold of its own in the ledger, counted in the
budget's `held_usd` like any — and holds its requests from it in memory. Each
run's draw travels in its opened row; the insert that first stores the run turns it into the
run's own hold (a trigger on the run table, `billing/ledger/sql/`), and from there the run is
settled like any other. The ledger's bound is unchanged: a slice is held before anything is
drawn from it, so `spent + held` never passes the budget, across any number of workers.

What a slice costs in exactness is bounded, and only near the end of a budget:
- a slice is reserved only while the budget has room for `SLICE_MIN_HOLDS` holds like the
  request's, and is at most a `SLICE_SHARE`th of that room; below, every hold is taken from the
  ledger itself (`HoldBatches`), exactly as before — so a small budget behaves to the request as
  the ledger decides, and a large one can refuse a request on one worker while another still
  has part of a slice, at most a `SLICE_SHARE`th of what was left when it was reserved;
- a slice is drawn from for `SLICE_SECONDS` at most, never past the end of its budgets'
  period (a draw is charged to the period its slice was reserved in), and what was not drawn
  goes back to the budget when the slice is used up, too old, or unused for
  `SLICE_IDLE_SECONDS`;
- a worker that dies leaves its slices to expire like any hold: after the longest generation
  that could draw from them plus `HOLD_MARGIN`; the reconciliation then releases what was not
  drawn (a draw is in its run's opened row, in the writer's crash log before the model server
  has the prompt, so the worker that replays the log takes it in time).

Only on Postgres (`Ledger.slices`): the embedded mode (SQLite, one process) holds from the ledger
directly.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import DatabaseError

from billing.budgets import Budget, resets_at
from billing.costs import MICRO, Prices, to_micro
from billing.errors import InsufficientQuota
from billing.ledger.entries import Held, HoldRequest
from telemetry.store.draws import BudgetDraw

logger = logging.getLogger(__name__)

SLICE_MIN_HOLDS = 100  # reserve a slice only while the budget has room for this many holds
SLICE_HOLDS = 128  # a slice pays for this many holds like the one that reserved it…
SLICE_SHARE = 16  # …and is never more than this share of the budget's room
SLICE_SECONDS = 30.0  # drawn from for this long at most
SLICE_IDLE_SECONDS = 2.0  # not drawn from for this long: what is left goes back
SWEEP_SECONDS = 1.0
# A slice is reserved as a hold whose "tokens" are micro-dollars: the ledger's own function
# then holds up to the slice's amount, lowered to what the budgets have left.
_MICRO_DOLLAR_TOKENS = Prices(output=Decimal(1))  # $1 per million: a micro-dollar a token
_RESERVE_ATTEMPTS = 3

_worker_tag = secrets.token_hex(6)
_serials = itertools.count(1)


def full_hold(request: HoldRequest) -> Decimal:
    """What the request's hold is with its whole output cap (the ledger rounds the same way)."""
    return to_micro(request.prompt_cost + request.max_tokens * request.per_token)


@dataclass
class Slice:
    id: str
    amount_usd: Decimal  # reserved in the ledger
    expires_at: datetime  # of the slice's hold: no generation drawn from it outlives it
    reserved_at: float  # monotonic
    used_at: float
    # When the first of its budgets' periods ends (epoch seconds): a draw after it would be
    # charged to the period before.
    period_ends_at: float
    drawn_usd: Decimal = Decimal(0)
    retired: bool = False

    @property
    def free_usd(self) -> Decimal:
        return self.amount_usd - self.drawn_usd

    def pays(self, amount: Decimal, expires_at: datetime, now: float) -> bool:
        return (
            not self.retired
            and self.free_usd >= amount
            and expires_at <= self.expires_at
            and now - self.reserved_at < SLICE_SECONDS
            and time.time() < self.period_ends_at
        )


Budgets = tuple[Budget, ...]


def _first_period_end(budgets: Budgets) -> float:
    now = datetime.now(UTC)
    ends = [end for budget in budgets if (end := resets_at(budget.period, now)) is not None]
    return min(ends).timestamp() if ends else float("inf")


LedgerHold = Callable[[HoldRequest], Awaitable[Held | InsufficientQuota]]
LedgerRelease = Callable[[str, Decimal], Awaitable[None]]  # a slice's id, what goes back


class BudgetSlices:
    """The event loop's slices, one per set of budgets (a key's, with its organization's)."""

    def __init__(self, *, hold: LedgerHold, release: LedgerRelease) -> None:
        self._ledger_hold = hold
        self._ledger_release = release
        self._slices: dict[Budgets, Slice] = {}
        # What the tightest budget had left, as the ledger last said: whether to slice at all.
        self._room: dict[Budgets, Decimal] = {}
        self._reserving: dict[Budgets, asyncio.Future[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Task[None]] = set()

    async def hold(self, request: HoldRequest) -> tuple[Held, BudgetDraw | None] | None:
        """Hold the request's whole cap from a slice — reserving one when needed — and return
        it with the run's draw; None when the budget is too near its end for slices (the
        caller holds from the ledger)."""
        budgets = tuple(request.budgets)  # the same tuple: `budgets_for` makes one a key
        amount = full_hold(request)
        for _ in range(_RESERVE_ATTEMPTS):
            now = time.monotonic()
            current = self._slices.get(budgets)
            if current is not None and current.pays(amount, request.expires_at, now):
                current.drawn_usd += amount
                current.used_at = now
                held = Held(
                    max_tokens=request.max_tokens,
                    amount_usd=amount,
                    prompt_usd=to_micro(request.prompt_cost),
                    remaining_usd=current.free_usd,
                )
                return held, BudgetDraw(request.run_id, current.id, amount, held.prompt_usd)
            if current is not None:
                self._retire(budgets, current)
            room = self._room.get(budgets)
            if room is None or room < SLICE_MIN_HOLDS * amount:
                return None
            pending = self._reserving.get(budgets)
            if pending is not None:
                await asyncio.shield(pending)
            else:
                await self._reserve(request, amount, room)
        return None

    def noted(self, budgets: Sequence[Budget], held: Held | InsufficientQuota) -> None:
        """What a hold taken from the ledger said the budgets have left."""
        budgets = tuple(budgets)
        if isinstance(held, Held):
            self._room[budgets] = held.remaining_usd - held.amount_usd
        else:
            self._room[budgets] = Decimal(0)

    async def _reserve(self, request: HoldRequest, amount: Decimal, room: Decimal) -> None:
        budgets = tuple(request.budgets)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reserving[budgets] = done
        try:
            size = to_micro(min(room / SLICE_SHARE, SLICE_HOLDS * amount))
            slice_id = f"slice-{_worker_tag}-{next(_serials)}"
            expires_at = request.expires_at + timedelta(seconds=SLICE_SECONDS)
            reservation = HoldRequest(
                run_id=slice_id,
                budgets=budgets,
                prompt_tokens=0,
                max_tokens=int(size / MICRO),
                prices=_MICRO_DOLLAR_TOKENS,
                expires_at=expires_at,
            )
            held = await self._ledger_hold(reservation)
            if isinstance(held, InsufficientQuota):
                self._room[budgets] = Decimal(0)
                return
            self._room[budgets] = held.remaining_usd - held.amount_usd
            now = time.monotonic()
            self._slices[budgets] = Slice(
                slice_id,
                held.amount_usd,
                expires_at,
                reserved_at=now,
                used_at=now,
                period_ends_at=_first_period_end(budgets),
            )
            self._sweep_soon()
        except (DatabaseError, OSError):
            # The ledger is away: the request's own hold (next) says so, or succeeds.
            logger.warning("budget: no slice reserved", exc_info=True)
            self._room.pop(budgets, None)
        finally:
            del self._reserving[budgets]
            done.set_result(None)

    def _retire(self, budgets: Budgets, retired: Slice) -> None:
        """Draw no more from the slice; give back what was not drawn."""
        retired.retired = True
        if self._slices.get(budgets) is retired:
            del self._slices[budgets]
        free = retired.free_usd
        if free > 0:
            task = asyncio.get_running_loop().create_task(self._release(retired.id, free))
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

    async def _release(self, slice_id: str, amount: Decimal) -> None:
        try:
            await self._ledger_release(slice_id, amount)
        except Exception:  # the slice expires and the reconciliation releases it instead
            logger.warning("budget: slice %s not released", slice_id, exc_info=True)

    def _sweep_soon(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        """Give back the slices no one draws from; stop when there are none."""
        while self._slices:
            await asyncio.sleep(SWEEP_SECONDS)
            now = time.monotonic()
            for budgets, current in list(self._slices.items()):
                idle = now - current.used_at >= SLICE_IDLE_SECONDS
                if idle or now - current.reserved_at >= SLICE_SECONDS:
                    self._retire(budgets, current)
            # Forget what the ledger said of budgets no one has asked about for a while.
            for budgets in [b for b in self._room if b not in self._slices]:
                if budgets not in self._reserving:
                    del self._room[budgets]

    async def release_all(self) -> None:
        """Give back every slice (the worker is stopping)."""
        for budgets, current in list(self._slices.items()):
            self._retire(budgets, current)
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)
