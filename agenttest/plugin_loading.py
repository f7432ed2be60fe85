"""Loading plugins: a team's own tools, model-provider kinds, executor providers and agent-load hooks.

Two ways to name a plugin, both loaded once at start-up (in AgenttestConfig.ready, so in the web process, the worker
and every command alike), after the host's built-in functions are registered:

- `plugins` in the project's agenttest.toml, or AGENTTEST_PLUGINS (comma-separated, overriding the file): importable
  module paths, e.g. `plugins = ["acme_agent.tools"]`; the project's directory is importable. Importing the module
  is the registration (its `@tool` decorators and register_* calls run at import).
- the entry-point group `agenttest.plugins` of an installed distribution:
      [project.entry-points."agenttest.plugins"]
      acme = "acme_agent.tools"            # a module: imported
      acme_extra = "acme_agent.extra:register"   # a callable: loaded, then called with no arguments
  Entry points load in name order, before the AGENTTEST_PLUGINS modules.

A plugin imports only `agenttest.plugin`. One that fails to import, or whose register() raises, stops start-up with
ImproperlyConfigured naming the plugin and the error. Loading again (ready() called twice, tests) is harmless.
"""

from __future__ import annotations

import sys
import threading
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

ENTRY_POINT_GROUP = "agenttest.plugins"

_loaded: set[str] = set()
# Re-entrant: a plugin whose import starts loading again (e.g. it calls django.setup()) must not deadlock.
_lock = threading.RLock()


def plugins_load() -> None:
    """Load every installed `agenttest.plugins` entry point, then every module in AGENTTEST_PLUGINS."""
    with _lock:
        project = getattr(settings, "AGENTTEST_PROJECT_DIR", "")
        # The project's own modules (plugins, runtime entry points) are importable in every process — the web server
        # and the worker too, whatever directory they started in — after the installed packages, so a team's
        # `cases/` folder cannot shadow agenttest's.
        if project and project not in sys.path:
            sys.path.append(project)
        named_in = "AGENTTEST_PLUGINS" + (f" or the plugins of {settings.AGENTTEST_PROJECT_FILE}" if project else "")
        for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: (point.name, point.value)):
            _load_entry_point(entry_point)
        for path in getattr(settings, "AGENTTEST_PLUGINS", []):
            try:
                import_module(path)
            except Exception as exc:
                raise ImproperlyConfigured(
                    f"agenttest plugin {path!r} (named in {named_in}) failed to load: {type(exc).__name__}: {exc}"
                ) from exc


def _load_entry_point(entry_point: EntryPoint) -> None:
    distribution = getattr(entry_point, "dist", None)
    origin = f"distribution {distribution.name} {distribution.version}" if distribution else "an unknown distribution"
    key = f"{origin}: {entry_point.name} = {entry_point.value}"
    if key in _loaded:
        # A register() callable is not idempotent by contract (it may register an executor provider by name).
        return
    try:
        loaded = entry_point.load()
        if not isinstance(loaded, ModuleType) and callable(loaded):
            loaded()
    except Exception as exc:
        raise ImproperlyConfigured(
            f"agenttest plugin {entry_point.name!r} (entry point {entry_point.value!r} of {origin}, group "
            f"{ENTRY_POINT_GROUP}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    _loaded.add(key)
