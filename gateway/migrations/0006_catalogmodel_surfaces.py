from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0005_accounts_models"),
    ]

    operations = [
        migrations.AddField(
            model_name="catalogmodel",
            name="surfaces",
            field=models.CharField(
                choices=[
                    ("both", "OpenAI and Anthropic"),
                    ("openai", "OpenAI chat completions only"),
                    ("anthropic", "Anthropic Messages only"),
                ],
                default="both",
                max_length=16,
            ),
        ),
    ]
