"""The demo's two suites, files of its project directory (agenttest_demo/project/suites/), applied as `agenttest
apply` applies them.

"Order support demo": cases that use mocks (one of them stateful, over a table of orders), meet a blocked tool and
exercise every assertion type. On the simulated models most pass on `sim-careful`; `sim-hasty` loses the order a
follow-up refers to and answers in one line, so the comparison shows a real difference. Its recordings on both
models are in agenttest_demo/recordings/order-support-demo/.

"Simulated users demo" (issue 24): cases whose user is played by a model (the suite's judge, sim-careful, plays it
on either model under test). sim-careful asks for the order number it needs and keeps the order a changed mind
refers to; sim-hasty guesses an empty one, so it cancels nothing the user asked for, and the user gives up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agenttest_demo.project import demo_project_ensure

if TYPE_CHECKING:
    from agenttest.plugin import Suite

DEMO_SUITE = "Order support demo"
SIMULATED_USERS_SUITE = "Simulated users demo"


def demo_suite_ensure() -> tuple[Suite, bool]:
    """The demo suite, created with its cases (and the demo agents that are missing) if it does not exist yet. An
    existing suite is left alone."""
    return _suite_ensure(DEMO_SUITE)


def simulated_users_suite_ensure() -> tuple[Suite, bool]:
    """The simulated users demo suite, created with its cases (and the demo agents that are missing) if it does not
    exist yet. An existing suite is left alone."""
    return _suite_ensure(SIMULATED_USERS_SUITE)


def _suite_ensure(name: str) -> tuple[Suite, bool]:
    from agenttest.plugin import Suite

    (item,) = [item for item in demo_project_ensure(suites=[name]) if item.kind == "suite"]
    return Suite.objects.get(name=name), item.created
