"""Hold the request's cost on its budgets before generation, or release the hold unused.

After counting and planning the output cap, before dedupe and generation, the prompt and the
whole output cap are held at the model's prices (`billing.services.holds`); a budget that cannot
pay the whole cap lowers it — so output stops when its cost reaches the hold — and one that
cannot pay the prompt and one token refuses with 402.
"""

from __future__ import annotations

from decimal import Decimal

from accounts.models import ApiKey
from billing.services.holds import hold_for
from gateway.pipeline.plan import Plan
from telemetry.recording import RunRecorder


async def hold_budget(key: ApiKey, recorder: RunRecorder, decided: Plan) -> None:
    """Hold on the organization's and the key's budgets, lowering `decided.max_tokens` to
    what they can pay; raise InsufficientQuota to refuse."""
    assert decided.model is not None and decided.deployment is not None
    held = await hold_for(
        run_id=decided.run_id,
        key=key,
        prompt_tokens=decided.prompt_tokens,
        max_tokens=decided.max_tokens,
        prices=decided.model.prices,
        total_timeout_s=decided.deployment.total_timeout_s,
    )
    if held is None:
        return
    decided.budget = held
    decided.max_tokens = held.max_tokens
    recorder.set(held_usd=held.amount_usd)
    if held.draw is not None:
        recorder.set_budget_draw(held.draw)


def release_budget(recorder: RunRecorder, decided: Plan) -> None:
    """Release a hold uncharged: the request was refused or answered from another run."""
    if decided.budget is not None:
        recorder.set(charged_usd=decided.budget.charge(Decimal(0)))
