-- Reverses 0002_ledger_functions.sql.
DROP FUNCTION IF EXISTS mortar_budget_holds(jsonb);
DROP FUNCTION IF EXISTS mortar_budget_hold(text, bigint, text, date, numeric, bigint, text, date,
                                           numeric, numeric, numeric, bigint, timestamptz);
DROP FUNCTION IF EXISTS mortar_budget_settle(jsonb);
DROP FUNCTION IF EXISTS mortar_budget_draws(jsonb);
DROP FUNCTION IF EXISTS mortar_budget_release(text, numeric);
