"""What the run store tells the apps above it, inside the transaction that stores runs.

`run_charges_stored`: the run writer, on SQLite, sends it in the transaction that stores a
batch, with the charges (`charged_usd`) of the runs whose outcome the batch stores, as
`charges=[(run_id, charged_usd), …]`. A run's charge must reach its budgets in the commit that
stores it, and the budget ledger lives above the run store (the billing app connects to it);
a receiver's error rolls the batch back, as the writer's own would. On Postgres the writer
never sends it: triggers on the run table settle the charges in the same statements.
"""

from __future__ import annotations

from django.dispatch import Signal

run_charges_stored = Signal()
