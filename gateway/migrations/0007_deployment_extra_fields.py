from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0006_catalogmodel_surfaces"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="extra_fields",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text='Request fields forwarded as sent, e.g. ["top_k", "min_p", '
                '"guided_json"]: fields the model servers take that Mortar does not know. '
                "Empty: none.",
            ),
        ),
    ]
