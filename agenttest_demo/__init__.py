"""The order-support demo, a plugin like any other: two simulated models, the order tools, the demo agents and
suites as a project directory (project/, the files `agenttest export` writes and `agenttest apply` reads), sample
conversations, the demo suite's recordings, and `demo_setup`.

Enabled by AGENTTEST_DEMO=1 (scripts/demo and the test settings set it), which only names
`agenttest_demo.registration` among the plugins (the `simulated` provider kind and the order tools, through
`agenttest.plugin`). The rest comes from this package as from any plugin package (common/plugin_packages.py): its
`apps.py` installs it as an app (for `demo_setup`), and its `providers.toml` configures the simulated models when no
providers file is given. Without it a deployment has no demo tools, no `simulated` kind and no `demo_setup`.

The host never imports this package; it imports only `agenttest.plugin` (its registrations, and the services that
apply the project directory, play the conversations and queue the first run), as a team's own plugin would.
"""
