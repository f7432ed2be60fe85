from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agenthost", "0003_conversation_seal_and_turn_claim")]

    operations = [
        migrations.CreateModel(
            name="McpToolList",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("server", models.CharField(max_length=100, unique=True)),
                (
                    "tools",
                    models.JSONField(
                        default=list, help_text="The tools as the server listed them (name, inputSchema, …)."
                    ),
                ),
                ("listed_at", models.DateTimeField()),
            ],
            options={"ordering": ["server"]},
        ),
    ]
