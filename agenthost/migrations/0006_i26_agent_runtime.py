from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agenthost", "0005_i14_agent_temperature_optional")]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="runtime",
            field=models.CharField(
                choices=[
                    ("native", "native (agenttest's loop)"),
                    ("openai-agents", "OpenAI Agents SDK"),
                    ("pydantic-ai", "pydantic-ai"),
                    ("python", "plain Python function"),
                ],
                default="native",
                help_text="Whose loop runs the agent: agenttest's own (native), or the team's code named by `entry`.",
                max_length=50,
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="entry",
            field=models.CharField(
                blank=True,
                help_text='The team\'s code a non-native runtime runs, "module:attribute" (e.g. "shop.bot:respond"); '
                "imported like a plugin, from the current directory.",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="outside_effects",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="For an agent of the team's code: which of its tools have effects outside agenttest, e.g. "
                '{"find_order": false}. A tool not named counts as having them (tests must mock it).',
            ),
        ),
        migrations.AlterField(
            model_name="agent",
            name="instruction",
            field=models.TextField(
                blank=True,
                help_text="System instruction. A Django template rendered with the conversation state, e.g. "
                "{{ customer }}. Empty for an agent whose runtime is the team's own code: its instruction is in "
                "that code.",
            ),
        ),
    ]
