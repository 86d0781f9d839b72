-- mortar_budget_settle, as 0004_settle_probe_recent_days.sql defined it, taking each run's
-- charge as its run's close decided it rather than working it out again from its cost.
--
-- A run's close charges its hold once, in Python: its cost rounded up to the micro-dollar and
-- never more than it held (`billing.costs.charge_for`). This function enforces that instead of
-- computing it: a charge that is negative, finer than a micro-dollar or more than its hold
-- refuses the whole batch (its holds then expire, and the reconciliation charges each run from
-- its stored cost), so the budgets' rows only ever move by what the runs' closes decided. A
-- settlement without a charge (a worker from before this function) is refused the same way.
--
-- `p_costs`: `[{"run_id", "charged"}, …]`, with `slice_id`, `amount` and `prompt_usd` for a run
-- that drew from its worker's slice.

CREATE OR REPLACE FUNCTION mortar_budget_settle(p_costs jsonb)
RETURNS TABLE (run_id text, charged_usd numeric)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- One parameter the client encodes in C (orjson).
    p_run_ids text[] := ARRAY(SELECT c.run_id FROM jsonb_to_recordset(p_costs) AS c(run_id text));
    undrawn jsonb;
    drawn_now text[];
    drawn_expiry timestamptz[];
BEGIN
    PERFORM 1 FROM telemetry_budgethold s
    WHERE s.run_id IN (
        SELECT c.slice_id FROM jsonb_to_recordset(p_costs) AS c(slice_id text)
        WHERE c.slice_id IS NOT NULL
    )
    ORDER BY s.run_id
    FOR UPDATE;
    PERFORM 1 FROM telemetry_budgethold h
    WHERE h.run_id = ANY(p_run_ids)
    ORDER BY h.run_id
    FOR UPDATE;
    -- Drawn from a slice, and its row not stored yet (the row's insert takes the draw in the
    -- transaction that stores it, under the slice's lock): the draw is taken now.
    SELECT jsonb_agg(jsonb_build_object(
               'run_id', c.run_id, 'slice_id', c.slice_id,
               'amount', c.amount, 'prompt_usd', c.prompt_usd))
    INTO undrawn
    FROM jsonb_to_recordset(p_costs)
        AS c(run_id text, slice_id text, amount numeric, prompt_usd numeric)
    WHERE c.slice_id IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM telemetry_budgethold h WHERE h.run_id = c.run_id)
        -- Only the days around now: a run drawn from a slice is settled within its slice's
        -- life (its deployment's timeout and a minute), and a run older than that has no
        -- slice left to draw from again. Postgres then probes two or three day partitions
        -- instead of every day's (~60 µs a settlement instead of ~550 at 54 partitions).
        AND NOT EXISTS (
            SELECT 1 FROM telemetry_run r
            WHERE r.id = c.run_id
                AND r.accepted_at > now() - interval '1 day'
                AND r.accepted_at < now() + interval '1 day'
        );
    IF undrawn IS NOT NULL THEN
        PERFORM mortar_budget_draws(undrawn);
        SELECT array_agg(h.run_id), array_agg(h.expires_at)
        INTO drawn_now, drawn_expiry
        FROM telemetry_budgethold h
        WHERE h.run_id IN (SELECT d.run_id FROM jsonb_to_recordset(undrawn) AS d(run_id text));
    END IF;
    -- What the runs' closes decided, checked against the holds they charge (locked above).
    IF EXISTS (
        SELECT 1
        FROM jsonb_to_recordset(p_costs) AS c(run_id text, charged numeric)
        JOIN telemetry_budgethold h ON h.run_id = c.run_id
        WHERE (h.organization_spend_id IS NOT NULL OR h.key_spend_id IS NOT NULL)
            AND (c.charged IS NULL OR c.charged < 0 OR c.charged > h.amount_usd
                 OR c.charged <> round(c.charged, 6))
    ) THEN
        RAISE EXCEPTION 'mortar: a settlement charges a run outside its hold'
            USING ERRCODE = 'check_violation';
    END IF;
    PERFORM 1 FROM telemetry_budgetspend s
    WHERE s.id IN (
        SELECT h.organization_spend_id FROM telemetry_budgethold h WHERE h.run_id = ANY(p_run_ids)
        UNION
        SELECT h.key_spend_id FROM telemetry_budgethold h WHERE h.run_id = ANY(p_run_ids)
    )
    ORDER BY s.id
    FOR UPDATE;
    -- Each run is charged what its close decided; the rest of its hold is released. A run with
    -- no hold left (never held, or settled already: its marker is no hold) is skipped.
    RETURN QUERY
    WITH settled AS (
        DELETE FROM telemetry_budgethold h
        USING jsonb_to_recordset(p_costs) AS c(run_id text, charged numeric)
        WHERE h.run_id = c.run_id
            AND (h.organization_spend_id IS NOT NULL OR h.key_spend_id IS NOT NULL)
        RETURNING h.run_id, h.organization_spend_id, h.key_spend_id, h.amount_usd, c.charged
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
    IF drawn_now IS NOT NULL THEN
        INSERT INTO telemetry_budgethold (run_id, organization_spend_id, key_spend_id,
                                          amount_usd, prompt_usd, expires_at)
        SELECT d.run_id, NULL, NULL, 0, 0, d.expires_at
        FROM unnest(drawn_now, drawn_expiry) AS d(run_id, expires_at);
    END IF;
END
$$;
