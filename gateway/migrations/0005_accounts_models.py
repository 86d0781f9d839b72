"""Organizations and API keys now belong to the accounts app: state only, the tables stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0004_telemetry_cost_retention"),
        # Every reference to the models is moved before they leave the gateway's state.
        ("accounts", "0001_initial"),
        ("telemetry", "0006_accounts_models"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ApiKey"),
                migrations.DeleteModel(name="Organization"),
            ],
            database_operations=[],
        ),
    ]
