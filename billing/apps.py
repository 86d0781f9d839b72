from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing.receivers import settle_stored_charges
        from telemetry.signals import run_charges_stored

        # The run writer's charges reach the ledger in its transaction (`billing.receivers`).
        run_charges_stored.connect(settle_stored_charges, dispatch_uid="billing-settle")
