from django.apps import AppConfig


class DemoConfig(AppConfig):
    # An app only so that `demo_setup` is a command; what the demo registers loads as a plugin
    # (agenttest_demo.registration), after the host's built-ins, like any other plugin.
    name = "agenttest_demo"
    verbose_name = "agenttest demo"
