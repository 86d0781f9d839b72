-- Reverses 0002_run_triggers.sql.
DROP TRIGGER IF EXISTS mortar_run_budget_inserted ON telemetry_run;
DROP TRIGGER IF EXISTS mortar_run_budget_updated ON telemetry_run;
DROP FUNCTION IF EXISTS mortar_run_budget_inserted();
DROP FUNCTION IF EXISTS mortar_run_budget_updated();
