"""The holds a worker takes together, as one Postgres function: one round trip, one commit.

`mortar_budget_holds` takes a batch of holds (a jsonb array of `mortar_budget_hold`'s
arguments, by name), locks the period rows they need that exist — in the ledger's order, by
ascending id, before any hold's work — and then takes each hold in the batch's order with
`mortar_budget_hold` (which finds its rows locked already, or creates the period's first). A
request's hold no longer waits for the commit of every hold of its organization before it:
a batch holds the row lock across one commit for all of its holds (issue 14, README
"Spend control, measured").
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

HOLDS = """
CREATE OR REPLACE FUNCTION mortar_budget_holds(p_holds jsonb)
RETURNS TABLE (run_id text, max_tokens bigint, amount_usd numeric, remaining_usd numeric)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    h record;
BEGIN
    PERFORM 1 FROM telemetry_budgetspend s
    JOIN (
        SELECT 'organization' AS owner, x.organization_id AS owner_id,
               x.organization_period AS period, x.organization_start AS period_start
        FROM jsonb_to_recordset(p_holds)
            AS x(organization_id bigint, organization_period text, organization_start date)
        WHERE x.organization_id IS NOT NULL
        UNION
        SELECT 'key', x.key_id, x.key_period, x.key_start
        FROM jsonb_to_recordset(p_holds) AS x(key_id bigint, key_period text, key_start date)
        WHERE x.key_id IS NOT NULL
    ) AS b ON s.owner = b.owner AND s.owner_id = b.owner_id AND s.period = b.period
        AND s.period_start = b.period_start
    ORDER BY s.id
    FOR UPDATE OF s;
    FOR h IN
        SELECT * FROM jsonb_to_recordset(p_holds) AS x(
            run_id text,
            organization_id bigint, organization_period text, organization_start date,
            organization_usd numeric,
            key_id bigint, key_period text, key_start date, key_usd numeric,
            prompt_cost numeric, per_token numeric, max_tokens bigint, expires_at timestamptz)
    LOOP
        RETURN QUERY
        SELECT h.run_id, held.max_tokens, held.amount_usd, held.remaining_usd
        FROM mortar_budget_hold(
            h.run_id,
            h.organization_id, h.organization_period, h.organization_start, h.organization_usd,
            h.key_id, h.key_period, h.key_start, h.key_usd,
            h.prompt_cost, h.per_token, h.max_tokens, h.expires_at) AS held;
    END LOOP;
END
$$;
"""

DROP = "DROP FUNCTION IF EXISTS mortar_budget_holds(jsonb);"


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(HOLDS)


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0010_worker_leases"),
    ]

    operations = [migrations.RunPython(create, drop)]
