"""`python -m agenttest …` is the `agenttest` command."""

from agenttest.cli import main

main()
