"""The declared answer of `GET /v1/budget`: where a key's budgets stand."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BUDGET_EXAMPLE: dict[str, Any] = {
    "organization": {
        "budget_usd": "25.000000",
        "period": "month",
        "spent_usd": "3.141500",
        "held_usd": "0.004096",
        "remaining_usd": "21.854404",
        "resets_at": "2027-01-01T00:00:00Z",
    },
    "key": None,
}


class BudgetStanding(BaseModel):
    """One budget in its current period; amounts in USD as decimal strings (micro-dollars)."""

    budget_usd: str = Field(description="The budget for the period.")
    period: Literal["day", "month", "total"] = Field(
        description="`day` and `month` are calendar periods in UTC; `total` never resets."
    )
    spent_usd: str = Field(description="What the period's finished requests were charged.")
    held_usd: str = Field(description="What requests in flight hold until they finish.")
    remaining_usd: str = Field(description="What is left for new requests.")
    resets_at: str | None = Field(
        description="When the period's spend starts again from zero; null for `total`."
    )


class BudgetReport(BaseModel):
    """The budgets a request with this key must fit; null where none is set."""

    model_config = ConfigDict(json_schema_extra={"examples": [BUDGET_EXAMPLE]})
    organization: BudgetStanding | None
    key: BudgetStanding | None
