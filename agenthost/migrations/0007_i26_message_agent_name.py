from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("agenthost", "0006_i26_agent_runtime")]

    operations = [
        migrations.AddField(
            model_name="message",
            name="agent_name",
            field=models.CharField(
                blank=True,
                help_text="The agent of the team's framework that wrote the message, when it is not `agent` itself (a "
                "runtime agent's sub-agent, handed off to, has only a name); empty otherwise.",
                max_length=200,
            ),
        ),
    ]
