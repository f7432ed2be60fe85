import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agenthost", "0009_i33_agent_deps"),
        ("traces", "0002_traces35_ingest_tokens"),
    ]

    operations = [
        migrations.CreateModel(
            name="ConversationMapping",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("conversation_key", models.CharField(help_text="The spans' conversation key.", max_length=200)),
                ("service_name", models.CharField(blank=True, help_text="The spans' service.name.", max_length=200)),
                ("span_count", models.PositiveIntegerField(help_text="The spans of the key when it was mapped.")),
                ("last_span", models.BigIntegerField(help_text="The newest span's id then: spans after it are new.")),
                ("message_count", models.PositiveIntegerField(
                    help_text="The conversation's messages as it was written.")),
                ("resume", models.JSONField(
                    help_text="traces.spans.Resume: what the turns before the last one left behind.")),
                ("conversation", models.OneToOneField(
                    on_delete=django.db.models.deletion.CASCADE, related_name="trace_mapping",
                    to="agenthost.conversation")),
            ],
            options={
                "indexes": [models.Index(fields=["conversation_key"], name="traces_mapping_key")],
            },
        ),
    ]
