"""The order-support demo, a plugin like any other: two simulated models, the order tools, the demo agents and
conversations, the demo suite with its recordings, and `demo_setup`.

Enabled by AGENTTEST_DEMO=1 (scripts/demo and the test settings set it): settings then installs this package as an
app (for `demo_setup`), loads `agenttest_demo.registration` as a plugin (the `simulated` provider kind and the order
tools, through `agenttest.plugin`) and, when no providers file is given, configures the simulated models from
`providers.toml`. Without it a deployment has no demo tools, no `simulated` kind and no `demo_setup`.

The host never imports this package; it imports only `agenttest.plugin` (its registrations, and the services that
create the demo agents, conversations, suites and first run), as a team's own plugin would.
"""
