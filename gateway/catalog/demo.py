"""The demo model's example prices, so that a first run's money views show real figures."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from gateway.models import CatalogModel, Deployment

DEMO_MODEL = "Qwen/Qwen2.5-7B-Instruct"
# USD per million tokens, about what hosted 7B-parameter models are sold at.
DEMO_PRICE_INPUT = Decimal("0.30")
DEMO_PRICE_CACHED_INPUT = Decimal("0.15")
DEMO_PRICE_OUTPUT = Decimal("0.60")


@transaction.atomic
def demo_prices_set() -> bool:
    """Give the demo model its example prices if it is still the built-in scripted model
    with no prices at all; True when they were set."""
    model = (
        CatalogModel.objects.select_for_update()
        .filter(
            id=DEMO_MODEL,
            deployment__kind=Deployment.Kind.SCRIPTED,
            price_input=0,
            price_cached_input=0,
            price_output=0,
        )
        .first()
    )
    if model is None:
        return False
    model.price_input = DEMO_PRICE_INPUT
    model.price_cached_input = DEMO_PRICE_CACHED_INPUT
    model.price_output = DEMO_PRICE_OUTPUT
    # save(), not update(): every worker drops its cached catalog on the save signal.
    model.save(update_fields=["price_input", "price_cached_input", "price_output"])
    return True
