"""A worker's slices of a budget: drawn from in memory, their draws turned into holds by the writer.

A slice is a hold like a run's (`telemetry_budgethold`, its id `slice-…` instead of a run's),
taken by `mortar_budget_holds` and counted in its budgets' `held_usd` from then on, so the
ledger's bound — `spent + held` never past the budget — covers it. A worker holds its requests
from it in memory, without a round trip (`gateway.budget_slices`); each run's draw travels in
its opened row, and the run writer, in the transaction that first inserts the run, moves the
draw from the slice to a hold of the run's own (`mortar_budget_draws`) — from there a run is
settled as any other. What a worker did not draw it gives back (`mortar_budget_release`); a
slice whose worker died expires and is released by the reconciliation like any hold.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

DRAWS = """
CREATE OR REPLACE FUNCTION mortar_budget_draws(p_draws jsonb)
RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- `[{"run_id", "slice_id", "amount", "prompt_usd"}, …]`
    taken text[];
BEGIN
    -- The ledger's lock order: holds by id (the slices here, then the runs' new holds, which
    -- no one else can lock yet); the budgets' rows are not touched: a draw moves an amount
    -- from one hold to another, held either way.
    PERFORM 1 FROM telemetry_budgethold s
    WHERE s.run_id IN (SELECT d.slice_id FROM jsonb_to_recordset(p_draws) AS d(slice_id text))
    ORDER BY s.run_id
    FOR UPDATE;
    -- A run's hold expires with its slice (which outlives any generation drawn from it). A
    -- slice already gone (expired, its worker long dead) takes no draw.
    WITH drawn AS (
        INSERT INTO telemetry_budgethold (run_id, organization_spend_id, key_spend_id,
                                          amount_usd, prompt_usd, expires_at)
        SELECT d.run_id, s.organization_spend_id, s.key_spend_id, d.amount, d.prompt_usd,
               s.expires_at
        FROM jsonb_to_recordset(p_draws)
            AS d(run_id text, slice_id text, amount numeric, prompt_usd numeric)
        JOIN telemetry_budgethold s ON s.run_id = d.slice_id
        ON CONFLICT (run_id) DO NOTHING
        RETURNING run_id
    )
    SELECT array_agg(drawn.run_id) INTO taken FROM drawn;
    UPDATE telemetry_budgethold s SET amount_usd = s.amount_usd - by_slice.amount
    FROM (
        SELECT d.slice_id, sum(d.amount) AS amount
        FROM jsonb_to_recordset(p_draws) AS d(run_id text, slice_id text, amount numeric)
        WHERE d.run_id = ANY(taken)
        GROUP BY d.slice_id
    ) AS by_slice
    WHERE s.run_id = by_slice.slice_id;
    -- A slice at zero is done: what its worker did not draw went back, the rest is drawn.
    DELETE FROM telemetry_budgethold s
    WHERE s.run_id IN (SELECT d.slice_id FROM jsonb_to_recordset(p_draws) AS d(slice_id text))
        AND s.amount_usd <= 0;
    RETURN coalesce(array_length(taken, 1), 0);
END
$$;
"""

RELEASE = """
CREATE OR REPLACE FUNCTION mortar_budget_release(p_slice_id text, p_amount numeric)
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s record;
    given numeric;
BEGIN
    SELECT * INTO s FROM telemetry_budgethold h WHERE h.run_id = p_slice_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- expired and released by the reconciliation already
    END IF;
    given := LEAST(p_amount, s.amount_usd);
    PERFORM 1 FROM telemetry_budgetspend b
    WHERE b.id IN (s.organization_spend_id, s.key_spend_id)
    ORDER BY b.id
    FOR UPDATE;
    UPDATE telemetry_budgetspend b SET held_usd = b.held_usd - given
    WHERE b.id IN (s.organization_spend_id, s.key_spend_id);
    -- What is left belongs to draws the writer has not taken yet; at zero the slice is done.
    IF s.amount_usd - given <= 0 THEN
        DELETE FROM telemetry_budgethold h WHERE h.run_id = p_slice_id;
    ELSE
        UPDATE telemetry_budgethold h SET amount_usd = h.amount_usd - given
        WHERE h.run_id = p_slice_id;
    END IF;
END
$$;
"""

DROP = """
DROP FUNCTION IF EXISTS mortar_budget_draws(jsonb);
DROP FUNCTION IF EXISTS mortar_budget_release(text, numeric);
"""


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DRAWS)
        schema_editor.execute(RELEASE)


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0016_usage_slices"),
    ]

    operations = [migrations.RunPython(create, drop)]
