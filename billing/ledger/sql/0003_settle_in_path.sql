-- A run's hold is settled when its response ends, by its own worker, not when the run writer
-- stores it: a client that sends its requests one after another must find the previous one's
-- hold settled (its unused part given back to the budget) on the very next request.
--
-- mortar_budget_settle: as before, and a run that drew from its worker's slice may be settled
--   before its row's insert takes its draw (the writer stores runs a few hundred milliseconds
--   later). Such a draw is taken here, as the insert would take it, and settled with the rest;
--   a marker — a hold of nothing on no budget, with the draw's expiry — tells the insert the
--   draw is taken. A run whose row is stored had its draw taken by that row's insert.
-- mortar_budget_draws: as before, but a run whose marker is there was settled already: its
--   marker goes, and its draw is not taken again.
--
-- The lock order is the draws': the slices, then the runs' holds, then the budgets' rows.

CREATE OR REPLACE FUNCTION mortar_budget_settle(p_costs jsonb)
RETURNS TABLE (run_id text, charged_usd numeric)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- `[{"run_id", "cost"}, …]`, with `slice_id`, `amount` and `prompt_usd` for a run that
    -- drew from its worker's slice: one parameter the client encodes in C (orjson).
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
        AND NOT EXISTS (SELECT 1 FROM telemetry_run r WHERE r.id = c.run_id);
    IF undrawn IS NOT NULL THEN
        PERFORM mortar_budget_draws(undrawn);
        SELECT array_agg(h.run_id), array_agg(h.expires_at)
        INTO drawn_now, drawn_expiry
        FROM telemetry_budgethold h
        WHERE h.run_id IN (SELECT d.run_id FROM jsonb_to_recordset(undrawn) AS d(run_id text));
    END IF;
    PERFORM 1 FROM telemetry_budgetspend s
    WHERE s.id IN (
        SELECT h.organization_spend_id FROM telemetry_budgethold h WHERE h.run_id = ANY(p_run_ids)
        UNION
        SELECT h.key_spend_id FROM telemetry_budgethold h WHERE h.run_id = ANY(p_run_ids)
    )
    ORDER BY s.id
    FOR UPDATE;
    -- Each charge is its cost rounded up, never more than its hold; the rest is released. A
    -- run with no hold left (never held, or settled already: its marker is no hold) is skipped.
    RETURN QUERY
    WITH settled AS (
        DELETE FROM telemetry_budgethold h
        USING jsonb_to_recordset(p_costs) AS c(run_id text, cost numeric)
        WHERE h.run_id = c.run_id
            AND (h.organization_spend_id IS NOT NULL OR h.key_spend_id IS NOT NULL)
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
    IF drawn_now IS NOT NULL THEN
        INSERT INTO telemetry_budgethold (run_id, organization_spend_id, key_spend_id,
                                          amount_usd, prompt_usd, expires_at)
        SELECT d.run_id, NULL, NULL, 0, 0, d.expires_at
        FROM unnest(drawn_now, drawn_expiry) AS d(run_id, expires_at);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION mortar_budget_draws(p_draws jsonb)
RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    -- `[{"run_id", "slice_id", "amount", "prompt_usd"}, …]`
    taken text[];
    settled text[];
BEGIN
    -- The ledger's lock order: holds by id (the slices here, then the runs' holds and
    -- markers); the budgets' rows are not touched: a draw moves an amount from one hold to
    -- another, held either way.
    PERFORM 1 FROM telemetry_budgethold s
    WHERE s.run_id IN (SELECT d.slice_id FROM jsonb_to_recordset(p_draws) AS d(slice_id text))
    ORDER BY s.run_id
    FOR UPDATE;
    -- Settled by its worker before its row was stored: the draw was taken then.
    WITH cleared AS (
        DELETE FROM telemetry_budgethold h
        USING jsonb_to_recordset(p_draws) AS d(run_id text)
        WHERE h.run_id = d.run_id AND h.amount_usd = 0
            AND h.organization_spend_id IS NULL AND h.key_spend_id IS NULL
        RETURNING h.run_id
    )
    SELECT coalesce(array_agg(cleared.run_id), ARRAY[]::text[]) INTO settled FROM cleared;
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
        WHERE NOT d.run_id = ANY(settled)
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
    RETURN coalesce(array_length(taken, 1), 0) + coalesce(array_length(settled, 1), 0);
END
$$;

-- The run table's triggers take draws only: the charges are settled by the runs' workers.
CREATE OR REPLACE FUNCTION mortar_run_budget_inserted()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    draws jsonb;
    taken integer;
BEGIN
    SELECT jsonb_agg(jsonb_build_object(
               'run_id', r.id, 'slice_id', r.budget_slice,
               'amount', r.held_usd, 'prompt_usd', r.held_prompt_usd))
    INTO draws
    FROM inserted_runs r
    WHERE r.budget_slice IS NOT NULL;
    IF draws IS NOT NULL THEN
        taken := mortar_budget_draws(draws);
        IF taken < jsonb_array_length(draws) THEN
            -- Their slices expired first (a worker dead for longer than a slice lives): the
            -- reconciliation released those slices; these runs go uncharged.
            RAISE WARNING 'mortar: % budget draws found their slice gone',
                jsonb_array_length(draws) - taken;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS mortar_run_budget_updated ON telemetry_run;
DROP FUNCTION IF EXISTS mortar_run_budget_updated();
