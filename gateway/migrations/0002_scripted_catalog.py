"""The catalog out of the box: Qwen/Qwen2.5-7B-Instruct (4,096 tokens) on the scripted model."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def create_catalog(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Deployment = apps.get_model("gateway", "Deployment")
    CatalogModel = apps.get_model("gateway", "CatalogModel")
    deployment, _ = Deployment.objects.get_or_create(
        name="scripted", defaults={"kind": "scripted", "stream_default": True}
    )
    CatalogModel.objects.get_or_create(
        id="Qwen/Qwen2.5-7B-Instruct",
        defaults={"context_window": 4096, "deployment": deployment, "owned_by": "mortar"},
    )


class Migration(migrations.Migration):
    dependencies = [("gateway", "0001_initial")]
    operations = [migrations.RunPython(create_catalog, migrations.RunPython.noop)]
