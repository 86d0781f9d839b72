-- A run's budget draw and charge, taken by the statements that store the run.
--
-- The run writer's statements carry them: a run's draw from its worker's slice travels in its
-- opened row (`budget_slice`, `held_usd`, `held_prompt_usd`) and its charge in `charged_usd`.
-- Statement-level triggers hand them to the ledger's functions, in the writer's transaction,
-- so the writer sends no statement of its own for them:
--
-- - after an INSERT (the writer's COPY, or on replay its `INSERT … ON CONFLICT DO NOTHING`,
--   whose transition table holds only the rows inserted now): the new runs' draws
--   (mortar_budget_draws), then the charges of runs stored closed (opened and closed within
--   one batch);
-- - after an UPDATE: the charges of the runs the statement gave one (`charged_usd` from NULL).
--
-- Same lock order as the ledger's functions (the slices' holds, then the runs' holds, then the
-- budgets' rows). The embedded mode (SQLite) has no slices, and its run writer hands the
-- charges it stores to the ledger's Python twin (`billing.receivers`).

CREATE OR REPLACE FUNCTION mortar_run_budget_inserted()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    draws jsonb;
    costs jsonb;
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
    SELECT jsonb_agg(jsonb_build_object('run_id', r.id, 'cost', r.charged_usd))
    INTO costs
    FROM inserted_runs r
    WHERE r.charged_usd IS NOT NULL;
    IF costs IS NOT NULL THEN
        PERFORM 1 FROM mortar_budget_settle(costs);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION mortar_run_budget_updated()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    costs jsonb;
BEGIN
    SELECT jsonb_agg(jsonb_build_object('run_id', r.id, 'cost', r.charged_usd))
    INTO costs
    FROM updated_runs r
    JOIN previous_runs p ON p.id = r.id
    WHERE r.charged_usd IS NOT NULL AND p.charged_usd IS NULL;
    IF costs IS NOT NULL THEN
        PERFORM 1 FROM mortar_budget_settle(costs);
    END IF;
    RETURN NULL;
END
$$;

-- Dropped first: a database migrated before the billing app existed has them already.
DROP TRIGGER IF EXISTS mortar_run_budget_inserted ON telemetry_run;
CREATE TRIGGER mortar_run_budget_inserted
AFTER INSERT ON telemetry_run
REFERENCING NEW TABLE AS inserted_runs
FOR EACH STATEMENT EXECUTE FUNCTION mortar_run_budget_inserted();

DROP TRIGGER IF EXISTS mortar_run_budget_updated ON telemetry_run;
CREATE TRIGGER mortar_run_budget_updated
AFTER UPDATE ON telemetry_run
REFERENCING OLD TABLE AS previous_runs NEW TABLE AS updated_runs
FOR EACH STATEMENT EXECUTE FUNCTION mortar_run_budget_updated();
