"""What settings learns of a plugin before anything is imported: settings are read first, and a plugin imports
agenttest.plugin, whose names need them. So a plugin module that lives in a package (`acme_agents.registration`) is
looked at by path, never imported, and its package may bring, beside its `__init__.py`:

- `apps.py`: the package is a Django app, installed after agenttest's own apps, so its management commands (the
  demo's `demo_setup`) come with the plugin;
- `providers.toml`: providers-file tables configured when no providers file (nor the project file) names providers,
  as OpenAI's are with its key (the demo's offline models).

Nothing else marks a plugin: the order-support demo gets its app and its models this way, like any team's plugin."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path

APP_MODULE = "apps.py"
PROVIDERS_FILE = "providers.toml"


@dataclass(frozen=True)
class PluginPackage:
    name: str
    directory: Path

    @property
    def is_app(self) -> bool:
        return (self.directory / APP_MODULE).is_file()

    @property
    def providers_file(self) -> Path | None:
        path = self.directory / PROVIDERS_FILE
        return path if path.is_file() else None


def plugin_packages(modules: Iterable[str], *, search: Sequence[str] = ()) -> list[PluginPackage]:
    """The top-level packages of the plugin `modules` (module paths), in order, each once, found in `search` then on
    sys.path without importing anything. A plugin that is a module of its own (`shop_tools`) has no package; one
    not found is left to the plugin loader, which names it when its import fails."""
    found: list[PluginPackage] = []
    for top in dict.fromkeys(module.split(".")[0] for module in modules if module.strip()):
        spec = (PathFinder.find_spec(top, list(search)) if search else None) or PathFinder.find_spec(top)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations:
            found.append(PluginPackage(name=top, directory=Path(locations[0])))
    return found
