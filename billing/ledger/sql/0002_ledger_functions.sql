-- The budget ledger's functions on Postgres: each step one round trip (`billing.ledger`).
--
-- mortar_budget_hold: lock the budgets' period rows (created by the period's first hold), find
--   what the tightest can pay, lower the output cap to it or refuse (max_tokens -1), add the
--   hold. Done from Python, a hold took seven round trips.
-- mortar_budget_holds: a batch of holds (a jsonb array of mortar_budget_hold's arguments, by
--   name): lock the period rows the batch needs that exist — in the ledger's order, by
--   ascending id, before any hold's work — then take each hold in the batch's order, so the
--   batch holds the row lock across one commit for all of its holds.
-- mortar_budget_settle: charge a batch of runs their costs (rounded up, never more than the
--   hold) and release the rest of their holds; a run with no hold left is skipped.
-- mortar_budget_draws: move the draws runs took from their worker's slices (holds of their own,
--   `slice-…`) to holds of the runs' own; called by the run table's insert trigger.
-- mortar_budget_release: give back what a worker did not draw from a slice.
--
-- Rows are locked in one order everywhere — holds by run id, then period rows by ascending
-- id — so two transactions never wait on each other in a circle. The embedded mode (SQLite)
-- runs the same ledger in Python (`../sqlite.py`). Amounts: micro-dollars, rounded up
-- (`ceil(x * 1e6) / 1e6`).

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
