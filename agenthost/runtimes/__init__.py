"""Agent runtimes: whose loop runs an agent. `native` is agenttest's own (agenthost/loop.py); the others run the team's
own code named by the agent's `entry`, with every model call through agenttest's model layer and every tool call
through the function-executor factory (base.py). See docs/decisions/0015-agent-runtimes.md."""
