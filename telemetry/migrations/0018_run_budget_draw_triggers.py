"""A run's budget draw and charge, taken by the statements that store the run (issue 14).

The run writer used to follow its COPY of new runs with `SELECT mortar_budget_draws(…)` and its
outcome UPDATE with `SELECT … FROM mortar_budget_settle(…)`: two statements a batch, most of
what spend control still cost the gateway's CPU (each one's parameters encoded, sent, waited
for and read on the writer's thread, which shares the event loop's core). The draw now travels
in the run's own row (`budget_slice`, `held_usd`, `held_prompt_usd`) and its charge in
`charged_usd`, and statement-level triggers hand them to the same ledger functions:

- after an INSERT (the writer's COPY, or on replay its `INSERT … ON CONFLICT DO NOTHING`, whose
  transition table holds only the rows inserted now): the new runs' draws, then the charges of
  runs stored closed (opened and closed within one batch);
- after an UPDATE: the charges of the runs the statement gave one (`charged_usd` from NULL).

Same functions, same transaction, same lock order (the slices' holds, then the runs' holds, then
the budgets' rows), so the ledger's bound and its exactness are unchanged. The embedded mode
(SQLite) has no slices and settles from Python.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TRIGGERS = """
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

CREATE TRIGGER mortar_run_budget_inserted
AFTER INSERT ON telemetry_run
REFERENCING NEW TABLE AS inserted_runs
FOR EACH STATEMENT EXECUTE FUNCTION mortar_run_budget_inserted();

CREATE TRIGGER mortar_run_budget_updated
AFTER UPDATE ON telemetry_run
REFERENCING OLD TABLE AS previous_runs NEW TABLE AS updated_runs
FOR EACH STATEMENT EXECUTE FUNCTION mortar_run_budget_updated();
"""

DROP = """
DROP TRIGGER IF EXISTS mortar_run_budget_inserted ON telemetry_run;
DROP TRIGGER IF EXISTS mortar_run_budget_updated ON telemetry_run;
DROP FUNCTION IF EXISTS mortar_run_budget_inserted();
DROP FUNCTION IF EXISTS mortar_run_budget_updated();
"""


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS, params=None)  # no placeholders: % is RAISE's


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0017_budget_slices"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="budget_slice",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="held_prompt_usd",
            field=models.DecimalField(decimal_places=6, max_digits=14, null=True),
        ),
        migrations.RunPython(create, drop),
    ]
