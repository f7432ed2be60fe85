"""The demo's plugin module (AGENTTEST_DEMO=1 names it in AGENTTEST_PLUGINS): importing it registers the `simulated`
provider kind and the order tools, through the public plugin module only."""

from agenttest.plugin import register_provider_kind
from agenttest_demo import tools  # noqa: F401  (its decorators register lookup_order and cancel_order)
from agenttest_demo.simulated import SimulatedProvider

register_provider_kind(SimulatedProvider.kind, SimulatedProvider)
