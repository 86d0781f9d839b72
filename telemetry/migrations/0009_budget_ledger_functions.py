"""The budget ledger's hold and settlement as Postgres functions: one round trip each.

`telemetry.services.budgets` explains the ledger. On Postgres a hold is the function
`mortar_budget_hold` — lock the budgets' period rows (created by the period's first hold), find
what the tightest can pay, lower the cap to it or refuse, add the hold — and settling a batch of
runs is `mortar_budget_settle`, called by the run writer in the transaction that stores their
outcomes. Done from Python, they took seven and eight round trips and most of a millisecond of
the gateway's CPU per request (issue 14 allows 0.15 ms for the budget and rate-limit checks).

Rows are locked in one order everywhere — holds, then period rows by ascending id — so two
transactions never wait on each other in a circle. The embedded mode (SQLite) runs the same
ledger in Python. Amounts: micro-dollars, rounded up (`ceil(x * 1e6) / 1e6`).
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

HOLD = """
CREATE OR REPLACE FUNCTION mortar_budget_hold(
    p_run_id text,
    -- The organization's budget and the key's; a NULL owner id: that one has none.
    p_organization_id bigint,
    p_organization_period text,
    p_organization_start date,
    p_organization_usd numeric,
    p_key_id bigint,
    p_key_period text,
    p_key_start date,
    p_key_usd numeric,
    p_prompt_cost numeric,
    p_per_token numeric,
    p_max_tokens bigint,
    p_expires_at timestamptz
) RETURNS TABLE (max_tokens bigint, amount_usd numeric, remaining_usd numeric)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- Scalars, not arrays, from the client: its array adaptation cost more than the call.
    owners text[] := ARRAY['organization', 'key'];
    owner_ids bigint[] := ARRAY[p_organization_id, p_key_id];
    periods text[] := ARRAY[p_organization_period, p_key_period];
    period_starts date[] := ARRAY[p_organization_start, p_key_start];
    budgets numeric[] := ARRAY[p_organization_usd, p_key_usd];
    wanted integer := (p_organization_id IS NOT NULL)::integer + (p_key_id IS NOT NULL)::integer;
    found integer;
    remaining numeric;
    organization_spend bigint;
    key_spend bigint;
    cap bigint := p_max_tokens;
    amount numeric;
BEGIN
    FOR attempt IN 1..2 LOOP
        WITH locked AS (
            SELECT s.id, s.owner, b.usd - s.spent_usd - s.held_usd AS left_usd
            FROM telemetry_budgetspend s
            JOIN unnest(owners, owner_ids, periods, period_starts, budgets)
                AS b(owner, owner_id, period, period_start, usd)
                ON b.owner_id IS NOT NULL AND s.owner = b.owner AND s.owner_id = b.owner_id
                AND s.period = b.period AND s.period_start = b.period_start
            ORDER BY s.id
            FOR UPDATE OF s
        )
        SELECT count(*), min(left_usd),
               max(id) FILTER (WHERE owner = 'organization'), max(id) FILTER (WHERE owner = 'key')
        INTO found, remaining, organization_spend, key_spend
        FROM locked;
        EXIT WHEN found = wanted;
        -- The period's first hold creates its rows (two at once: one insert is ignored).
        INSERT INTO telemetry_budgetspend (owner, owner_id, period, period_start, spent_usd,
                                           held_usd)
        SELECT b.owner, b.owner_id, b.period, b.period_start, 0, 0
        FROM unnest(owners, owner_ids, periods, period_starts)
            AS b(owner, owner_id, period, period_start)
        WHERE b.owner_id IS NOT NULL
        ON CONFLICT DO NOTHING;
    END LOOP;
    IF p_prompt_cost + p_per_token > remaining THEN
        RETURN QUERY SELECT -1::bigint, 0::numeric, remaining;  -- refused: nothing held
        RETURN;
    END IF;
    IF p_per_token > 0 THEN
        cap := LEAST(cap, floor((remaining - p_prompt_cost) / p_per_token)::bigint);
        IF p_prompt_cost + cap * p_per_token > remaining THEN  -- the division rounded up
            cap := cap - 1;
        END IF;
    END IF;
    amount := ceil((p_prompt_cost + cap * p_per_token) * 1000000) / 1000000;
    UPDATE telemetry_budgetspend SET held_usd = held_usd + amount
    WHERE id IN (organization_spend, key_spend);
    INSERT INTO telemetry_budgethold (run_id, organization_spend_id, key_spend_id, amount_usd,
                                      prompt_usd, expires_at)
    VALUES (p_run_id, organization_spend, key_spend, amount,
            ceil(p_prompt_cost * 1000000) / 1000000, p_expires_at);
    RETURN QUERY SELECT cap, amount::numeric(14, 6), remaining;
END
$$;
"""

SETTLE = """
CREATE OR REPLACE FUNCTION mortar_budget_settle(p_costs jsonb)
RETURNS TABLE (run_id text, charged_usd numeric)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- `[{"run_id": …, "cost": "…"}, …]`: one parameter the client encodes in C (orjson).
    p_run_ids text[] := ARRAY(SELECT c.run_id FROM jsonb_to_recordset(p_costs) AS c(run_id text));
BEGIN
    -- Lock in the ledger's order: the holds (by run id), then their period rows (by id). A
    -- run with no hold left (never held, or settled already) is skipped.
    PERFORM 1 FROM telemetry_budgethold h
    WHERE h.run_id = ANY(p_run_ids)
    ORDER BY h.run_id
    FOR UPDATE;
    PERFORM 1 FROM telemetry_budgetspend s
    WHERE s.id IN (
        SELECT h.organization_spend_id FROM telemetry_budgethold h WHERE h.run_id = ANY(p_run_ids)
        UNION
        SELECT h.key_spend_id FROM telemetry_budgethold h WHERE h.run_id = ANY(p_run_ids)
    )
    ORDER BY s.id
    FOR UPDATE;
    -- Each charge is its cost rounded up, never more than its hold; the rest is released.
    RETURN QUERY
    WITH settled AS (
        DELETE FROM telemetry_budgethold h
        USING jsonb_to_recordset(p_costs) AS c(run_id text, cost numeric)
        WHERE h.run_id = c.run_id
        RETURNING h.run_id, h.organization_spend_id, h.key_spend_id, h.amount_usd,
                  LEAST(ceil(c.cost * 1000000) / 1000000, h.amount_usd) AS charged
    ), moved AS (
        SELECT spend.id, sum(settled.amount_usd) AS held, sum(settled.charged) AS charged
        FROM settled,
             LATERAL (VALUES (settled.organization_spend_id), (settled.key_spend_id)) AS spend(id)
        WHERE spend.id IS NOT NULL
        GROUP BY spend.id
    ), applied AS (
        UPDATE telemetry_budgetspend s
        SET held_usd = s.held_usd - moved.held, spent_usd = s.spent_usd + moved.charged
        FROM moved
        WHERE s.id = moved.id
    )
    SELECT settled.run_id::text, settled.charged::numeric(14, 6) FROM settled;
END
$$;
"""

DROP = """
DROP FUNCTION IF EXISTS mortar_budget_hold(text, bigint, text, date, numeric, bigint, text, date,
                                           numeric, numeric, numeric, bigint, timestamptz);
DROP FUNCTION IF EXISTS mortar_budget_settle(jsonb);
"""


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(HOLD)
        schema_editor.execute(SETTLE)


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0008_budget_ledger"),
    ]

    operations = [migrations.RunPython(create, drop)]
