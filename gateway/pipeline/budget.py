"""Hold the request's cost on its budgets before generation.

After counting and planning the output cap, before dedupe and generation, the prompt and the
whole output cap are held at the model's prices (`billing.services.holds`); a budget that cannot
pay the whole cap lowers it — so output stops when its cost reaches the hold — and one that
cannot pay the prompt and one token refuses with 402. The hold is the run's: its close settles
it (`gateway.pipeline.record`).
"""

from __future__ import annotations

from accounts.models import ApiKey
from billing.services.holds import hold_for
from gateway.pipeline.plan import Plan


async def hold_budget(key: ApiKey, decided: Plan) -> None:
    """Hold on the organization's and the key's budgets into `decided.budget`, lowering
    `decided.max_tokens` to what they can pay; raise InsufficientQuota to refuse."""
    assert decided.model is not None and decided.deployment is not None
    held = await hold_for(
        run_id=decided.run_id,
        key=key,
        prompt_tokens=decided.prompt_tokens,
        max_tokens=decided.max_tokens,
        prices=decided.model.prices,
        total_timeout_s=decided.deployment.total_timeout_s,
    )
    if held is not None:
        decided.budget = held
        decided.max_tokens = held.max_tokens
