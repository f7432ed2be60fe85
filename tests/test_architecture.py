"""The seam contract: the harness reaches the host only through agenthost/seams.py, and the host never imports the
harness — deleting the harness apps leaves a host whose behaviour is identical."""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers import WAIT_SECONDS

BASE_DIR = Path(__file__).resolve().parent.parent
HARNESS = ("cases", "runs", "recording", "traces")
HOST_PUBLIC = {"agenthost.seams"}


@functools.cache
def _parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, once per text for the whole process: the rules below read the same few hundred files again and
    again (over 4,700 parses, a third of this file's CPU). The trees are only read, never changed."""
    return ast.parse(source, filename=filename)


def _imports(package: str) -> list[tuple[str, str]]:
    found = []
    for path in sorted((BASE_DIR / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = _parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((str(path.relative_to(BASE_DIR)), node.module))
            elif isinstance(node, ast.Import):
                found.extend((str(path.relative_to(BASE_DIR)), alias.name) for alias in node.names)
    return found


PROJECT = ("agenttest", "agenthost", *HARNESS)


def _module_name(path: Path) -> str:
    parts = path.relative_to(BASE_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Project module → the project modules it imports, wherever in the module the import statement stands: an
    import moved into a function still runs, so a cycle it closes is hidden, not broken."""
    paths = {
        _module_name(path): path
        for package in PROJECT
        for path in (BASE_DIR / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(_parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from runs import tasks` imports the module runs.tasks; `from runs.tasks import x` imports runs.tasks.
                imported.add(base)
                imported.update(f"{base}.{alias.name}" for alias in node.names)
        graph[module] = {name for name in imported if name in paths and name != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_it_finds_no_import_cycle_among_project_modules():
    assert _cycles(_import_graph()) == []


def test_it_finds_an_import_cycle_when_two_modules_import_each_other():
    # The finder itself, on the shapes the project once had: a pair, and a longer loop beside a clean chain.
    assert _cycles({"runs.engine.mocking": {"runs.tapes.replay"}, "runs.tapes.replay": {"runs.engine.mocking"}}) == [
        ["runs.engine.mocking", "runs.tapes.replay"]
    ]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_it_keeps_agent_validation_out_of_the_api_module():
    """The admin and the API check an agent the same way, from a module of its own: only the URL conf mounts the API."""
    importers = sorted(
        module for module, imported in _import_graph().items() if "agenthost.api" in imported
    )
    assert importers == ["agenthost.urls_api"]


def test_it_keeps_the_services_modules_to_services():
    """runs/services.py and agenthost/services.py hold the public services; the machinery behind them (leases, the
    loop, planning, results, sessions, rules, routing, history) lives in modules of its own."""
    for path, entities in (
        (BASE_DIR / "runs" / "services.py", ("run_",)),
        (BASE_DIR / "agenthost" / "services.py", ("conversation_", "agent_")),
    ):
        tree = _parse(path.read_text())
        classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
        functions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
        public = [name for name in functions if not name.startswith("_")]
        assert classes == [], path
        assert [name for name in public if not name.startswith(entities)] == [], path
        assert len(functions) - len(public) <= 2, (path, functions)


def test_it_keeps_the_host_free_of_harness_imports():
    offending = [(f, m) for f, m in _imports("agenthost") if m.split(".")[0] in HARNESS]
    assert offending == []


def test_it_lets_the_harness_reach_the_host_only_through_the_seams_module():
    offending = [
        (f, m)
        for package in HARNESS
        for f, m in _imports(package)
        if m.split(".")[0] == "agenthost" and m not in HOST_PUBLIC
    ]
    assert offending == []


@pytest.mark.own_database
def test_it_runs_the_host_alone_when_the_harness_apps_are_removed(tmp_path):
    script = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "from django.apps import apps\n"
        "assert not any(apps.is_installed(a) for a in ('cases', 'runs', 'recording'))\n"
        "from agenthost.seams import executor_providers\n"
        "assert executor_providers() == [], executor_providers()\n"
        "from agenthost.llm.scripted import Answer, Call, ScriptedProvider\n"
        "ScriptedProvider.install('scripted', [Answer(tool_calls=[Call('util-email-handle_email_sender', {\n"
        "    'to': 'ana@example.com', 'subject': 'Order 1043', 'body': 'Cancelled.'})]), Answer('Emailed.')])\n"
        "from agenthost.models import Agent\n"
        "from agenthost.services import conversation_start, conversation_send\n"
        "agent = Agent.objects.create(name='mailer', instruction='Email the customer.', provider='scripted',\n"
        "                             model='m', functions=[{'name': 'util-email-handle_email_sender'}])\n"
        "turn = conversation_send(conversation=conversation_start(agent=agent),\n"
        "                         text='Please cancel order 1043, my email is ana@example.com')\n"
        "print([(c.name, c.outcome) for c in turn.tool_calls])\n"
        "from django.test import Client\n"
        "assert Client(HTTP_HOST='localhost').get('/chat/').status_code == 302\n"
    )
    result = _host_alone(tmp_path, script)
    assert "('util-email-handle_email_sender', 'executed')" in result.stdout


# --- One conversation browser: the host's, which the harness extends through the seam (issue 22, point 3) -------


def _url_patterns_serving(path: str) -> list[str]:
    """Every view in the URL conf that would answer `path`, not only the first: a later one is shadowed, not gone."""
    from django.urls import URLPattern, URLResolver, get_resolver

    found: list[str] = []

    def walk(patterns: list, remainder: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if (match := pattern.pattern.match(remainder)) is not None:
                    walk(pattern.url_patterns, match[0])
            elif isinstance(pattern, URLPattern) and pattern.pattern.match(remainder) is not None:
                found.append(f"{pattern.callback.__module__}.{pattern.callback.__qualname__}")

    walk(get_resolver().url_patterns, path.lstrip("/"))
    return found


def test_it_serves_the_conversation_list_and_page_from_the_hosts_own_views():
    from django.urls import resolve

    from agenthost import views

    assert resolve("/conversations/").func is views.conversations
    assert _url_patterns_serving("/conversations/") == ["agenthost.views.conversations"]
    assert resolve("/conversations/7/").func is views.conversation_page
    assert _url_patterns_serving("/conversations/7/") == ["agenthost.views.conversation_page"]


def test_it_keeps_recording_out_of_the_hosts_code_and_pages():
    imports = sorted((module, imported) for module, targets in _import_graph().items() if module.startswith(
        "agenthost") for imported in targets if imported.split(".")[0] == "recording")
    assert imports == []
    # The host's pages render without the harness: none names a URL only the harness mounts.
    host_templates = sorted((BASE_DIR / "agenthost" / "templates").rglob("*.html"))
    assert host_templates
    assert [path.name for path in host_templates if "recording:" in path.read_text()] == []


def test_it_lets_the_harness_fill_the_hosts_conversation_page_only_through_registered_panels():
    from agenthost.browser import _panels

    # In the order they are shown: what the conversation is (a test conversation's result, an imported one's
    # source), then what staff can make of it.
    assert [panel.template_name for panel in sorted(_panels.values(), key=lambda panel: panel.order)] == [
        "runs/_conversation_result.html", "traces/_conversation_source.html", "recording/_make_cases.html"]
    page = (BASE_DIR / "agenthost" / "templates" / "agenthost" / "conversation.html").read_text()
    assert re.findall(r"{% (?:include|extends) \"?([^\" %]+)", page) == [
        "base.html", "shown.template_name", "agenthost/transcript/_turns.html"]


@pytest.mark.own_database
def test_it_keeps_the_hosts_conversation_browser_whole_when_the_harness_apps_are_removed(tmp_path):
    script = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from agenthost.models import Agent\n"
        "from agenthost.services import conversation_start\n"
        "agent = Agent.objects.create(name='greeter')\n"
        "conversation = conversation_start(agent=agent, title='a customer chat', tags=['demo'])\n"
        "client = Client(HTTP_HOST='localhost')\n"
        "client.force_login(User.objects.create_user('staff', is_staff=True))\n"
        "page = client.get('/conversations/', {'tag': 'demo', 'from': '2000-01-01', 'sealed': 'all'})\n"
        "assert page.status_code == 200, page.status_code\n"
        "print(page.content.decode())\n"
        "print('RESOLVED', client.get('/conversations/').resolver_match.func.__module__)\n"
        "detail = client.get(f'/conversations/{conversation.pk}/')\n"
        "print('DETAIL', detail.status_code, detail.resolver_match.func.__module__)\n"
        "print(detail.content.decode())\n"
    )
    result = _host_alone(tmp_path, script)
    assert "RESOLVED agenthost.views" in result.stdout
    assert 'class="conversation-title"><a href="/conversations/1/">a customer chat</a>' in result.stdout
    assert "DETAIL 200 agenthost.views" in result.stdout, "the host shows a conversation without the harness"
    assert "a customer chat" in result.stdout.split("DETAIL", 1)[1]
    assert "Make test cases" not in result.stdout, "no harness panel without the harness"


@pytest.mark.own_database
def test_it_shows_no_link_to_a_harness_page_when_only_the_host_is_installed(tmp_path):
    # The navigation comes from the installed apps' configs (decision 0040): the layout, the 404 page and the API docs
    # of a host-only deployment link only to pages it serves.
    script = (
        "import re, django; django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from django.urls import Resolver404, resolve\n"
        "client = Client(HTTP_HOST='localhost')\n"
        "client.force_login(User.objects.create_user('staff', is_staff=True))\n"
        "from agenthost.models import Agent\n"
        "from agenthost.services import conversation_start\n"
        "conversation = conversation_start(agent=Agent.objects.create(name='greeter'), title='a chat')\n"
        "for page in ('/chat/', '/conversations/', f'/conversations/{conversation.pk}/', '/no-such-page/',\n"
        "             '/api/docs/'):\n"
        "    html = client.get(page).content.decode()\n"
        "    print('NAV', page, re.findall(r'<a href=\"[^\"]*\"[^>]*>([^<]+)</a>', html.split('</nav>')[0]))\n"
        "    for link in re.findall(r'(?:href|src|action)=\"(/[^\"]*)\"', html):\n"
        "        try:\n"
        "            link.startswith('/static/') or resolve(link.split('?')[0])\n"
        "        except Resolver404:\n"
        "            print('DEAD', page, link)\n"
    )
    result = _host_alone(tmp_path, script)
    assert "NAV /chat/ ['Chat', 'Conversations', 'Admin', 'API docs']" in result.stdout
    assert "NAV /no-such-page/ ['Chat', 'Conversations', 'Admin', 'API docs']" in result.stdout
    assert "DEAD" not in result.stdout, result.stdout


def _host_alone(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    """Runs `script` in a fresh process whose settings install the host without the harness apps and without the
    demo, with one model of the host's own scripted kind (`scripted:m`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTEST_", "CELERY_", "DATABASE_URL"))}
    providers = tmp_path / "providers.toml"
    providers.write_text('[providers.scripted]\nkind = "scripted"\n\n[[providers.scripted.models]]\nname = "m"\n')
    env.update(AGENTTEST_DEBUG="1", AGENTTEST_DEMO="", AGENTTEST_VAR_DIR=str(tmp_path), AGENTTEST_HARNESS_APPS="",
               AGENTTEST_PROVIDERS_FILE=str(providers))
    result = subprocess.run([sys.executable, "-c", script], cwd=BASE_DIR, env={**env,
                            "DJANGO_SETTINGS_MODULE": "agenttest.settings"}, capture_output=True, text=True,
                            timeout=WAIT_SECONDS)
    assert result.returncode == 0, result.stderr
    return result


# --- The demo as a plugin (issue 22, point 5) ---------------------------------------------------------------------

DEMO = "agenttest_demo"


def test_it_keeps_the_demo_out_of_the_host_the_harness_and_the_project_package():
    # Settings finds the demo's package by path, as any plugin's: an import from agenttest would close a cycle through
    # agenttest.plugin, and one from the host would put the demo back into every deployment.
    offending = [(f, m) for package in PROJECT for f, m in _imports(package) if m.split(".")[0] == DEMO]
    assert offending == []


def _demo_named_outside_the_plugin_list(source: str) -> list[str]:
    """Where settings names the demo, other than in the list of plugins (`AGENTTEST_PLUGINS = [...]`)."""
    found = []
    for node in _parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(getattr(target, "id", "") == "AGENTTEST_PLUGINS" for target in targets):
            continue
        found.extend(
            ast.unparse(node).splitlines()[0] for constant in ast.walk(node)
            if isinstance(constant, ast.Constant) and isinstance(constant.value, str) and DEMO in constant.value
        )
    return found


def test_it_names_the_demo_in_settings_only_among_the_plugins():
    # Its app and its models come from its package as any plugin package's do (common/plugin_packages.py).
    source = (BASE_DIR / "agenttest" / "settings.py").read_text()
    assert f'"{DEMO}.registration"' in source
    assert _demo_named_outside_the_plugin_list(source) == []


def test_it_finds_the_demo_named_in_settings_beside_the_plugin_list():
    planted = (
        'AGENTTEST_PLUGINS = [*(["agenttest_demo.registration"] if AGENTTEST_DEMO else [])]\n'
        'INSTALLED_APPS = ["agenthost", *(["agenttest_demo"] if AGENTTEST_DEMO else [])]\n'
        '_DEMO_PROVIDERS_FILE = BASE_DIR / "agenttest_demo" / "providers.toml"\n'
    )
    assert _demo_named_outside_the_plugin_list(planted) == [
        'INSTALLED_APPS = [\'agenthost\', *([\'agenttest_demo\'] if AGENTTEST_DEMO else [])]',
        "_DEMO_PROVIDERS_FILE = BASE_DIR / 'agenttest_demo' / 'providers.toml'",
    ]


def test_it_keeps_every_part_of_the_demo_in_the_demo_package():
    demo_parts = {"SimulatedProvider", "lookup_order", "cancel_order", "demo_agents_ensure", "demo_suite_ensure"}
    defined_elsewhere = [
        (str(path.relative_to(BASE_DIR)), node.name)
        for package in PROJECT
        for path in sorted((BASE_DIR / package).rglob("*.py"))
        for node in ast.walk(_parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name in demo_parts
    ]
    commands = [path.name for package in PROJECT for path in (BASE_DIR / package).glob("management/commands/*.py")]

    assert defined_elsewhere == []
    assert "demo_setup.py" not in commands
    assert not (BASE_DIR / "recordings").exists(), "the demo's recordings live in agenttest_demo/recordings/"


# The demo's agents, suites and cases are files, a project directory applied as a team's is (agenttest_demo/project/,
# which tests/demo/test_project.py holds to what `agenttest export` writes): its Python holds none of their texts and
# names none of the services that create a suite or a case in code.
DEMO_PROJECT = BASE_DIR / DEMO / "project"
_CREATES_IN_CODE = {"suite_create", "case_create"}


def _demo_file_texts(project: Path) -> set[str]:
    """What only the files may say, each of 20 characters or more: an instruction's lines, the agents', suites' and
    cases' descriptions, the cases' names and their simulated users' personas and goals."""
    import yaml

    texts = {line for path in (project / "agents").glob("*.md") for line in path.read_text().splitlines()}
    for path in [*project.glob("agents/*.yaml"), *project.glob("suites/*/suite.yaml")]:
        texts.add(yaml.safe_load(path.read_text()).get("description", ""))
    for path in project.glob("suites/*/cases/*.yaml"):
        case = yaml.safe_load(path.read_text())
        user = case.get("simulated_user") or {}
        texts.update([case["name"], case.get("description", ""), user.get("persona", ""), user.get("goal", "")])
    return {text.strip() for text in texts if len(text.strip()) >= 20}


def _demo_defined_in_python(package: Path, project: Path) -> list[str]:
    texts = sorted(_demo_file_texts(project))
    assert len(texts) > 20, "the files' texts were read"
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = _parse(path.read_text(), str(path))
        # A docstring defines nothing: it may quote a case's goal as an example.
        docstrings = {
            id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            where = f"{path.relative_to(package).as_posix()}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{where}: {text[:40]!r}" for text in texts if text in node.value]
            name = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", None)
            if isinstance(node, ast.Name | ast.Attribute | ast.alias) and name in _CREATES_IN_CODE:
                found.append(f"{where}: {name}")
    return found


def test_it_keeps_the_demos_agents_suites_and_cases_in_its_project_directory_not_in_python():
    assert (DEMO_PROJECT / "agents" / "order-router.yaml").is_file()
    assert _demo_defined_in_python(BASE_DIR / DEMO, DEMO_PROJECT) == []


def test_it_finds_a_demo_agent_or_case_defined_in_python(tmp_path):
    (tmp_path / "agents.py").write_text(
        "from agenttest.plugin import Agent, case_create\n"
        "LOOKUP = Agent(name='order-lookup', description=\"Looks up orders: status, items and the customer's email "
        "for an order number.\",\n"
        "    instruction='You answer questions about existing orders of an online shop. Look the order up with '\n"
        "    'lookup_order before you say anything about it, and never change an order.\\n')\n"
        "def ensure(suite):\n"
        "    plugin.case_create(suite=suite, document={'name': 'Order status is looked up'})\n"
    )
    # What the demo's Python may say: an agent's name, a sample conversation's message, a suite's name, and anything
    # in a docstring.
    (tmp_path / "conversations.py").write_text(
        "\"\"\"Plays a goal such as 'Get order 1043 cancelled.' for the user.\"\"\"\n"
        "ROUTER = 'order-router'\nMESSAGES = ('Where is my order #1042?',)\nSUITE = 'Order support demo'\n"
    )

    assert _demo_defined_in_python(tmp_path, DEMO_PROJECT) == [
        "agents.py:1: case_create",
        "agents.py:2: 'Looks up orders: status, items and the c'",
        "agents.py:3: 'You answer questions about existing orde'",
        "agents.py:6: case_create",
        "agents.py:6: 'Order status is looked up'",
    ]


# What names the demo in a test: its package, its fixtures and set-up functions, its provider kind and models.
_NAMES_THE_DEMO = re.compile(
    r"agenttest_demo|\bdemo_(agents|suite|conversations)|sim-(careful|hasty)|\bsimulated:|(provider|kind)\W{1,6}simulated\b"
)
# Test files outside tests/demo/ that may name the demo: the wheel's test checks that the wheel ships it and that an
# installed deployment turns it on (in the installed program's environment, never the tests' own). The list only
# shrinks: a file taken off the demo must leave it, and no other file may join it.
STILL_ON_THE_DEMO = {
    "tests/test_package.py",
}


def _tests_naming_the_demo(root: Path) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for path in (root / "tests").rglob("*.py")
        if not path.relative_to(root).as_posix().startswith("tests/demo/")
        and path.name != "test_architecture.py"
        and _NAMES_THE_DEMO.search(path.read_text())
    }


def test_it_keeps_the_products_tests_off_the_demo_but_the_files_listed():
    # A demo regression must not be able to fail a product test: the product's tests play the scripted model.
    found = _tests_naming_the_demo(BASE_DIR)
    assert found - STILL_ON_THE_DEMO == set(), "lean on the product's scripted model, not the demo's"
    assert STILL_ON_THE_DEMO - found == set(), "off the demo now: take it off STILL_ON_THE_DEMO"


def test_it_finds_a_test_naming_the_demo(tmp_path):
    planted = {
        "tests/runs/test_a.py": 'agent = Agent(provider="simulated", model="sim-careful")\n',
        "tests/runs/test_b.py": "def test_it_x(demo_agents):\n    pass\n",
        "tests/runs/test_c.py": 'run_trigger(suite=suite, model_keys=["simulated:sim-hasty"])\n',
        "tests/runs/test_d.py": "from agenttest_demo.suite import demo_suite_ensure\n",
        "tests/runs/test_e.py": 'case = {"simulated_user": {"persona": "a simulated user"}}\nm.get("simulated")\n',
        "tests/runs/test_g.py": '[providers.slow]\nkind = "simulated"\n',
        "tests/demo/test_f.py": "from agenttest_demo.agents import demo_agents_ensure\n",
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    assert _tests_naming_the_demo(tmp_path) == {
        "tests/runs/test_a.py", "tests/runs/test_b.py", "tests/runs/test_c.py", "tests/runs/test_d.py",
        "tests/runs/test_g.py",
    }


def test_it_registers_the_hosts_own_provider_kinds_through_the_plugin_call():
    tree = _parse((BASE_DIR / "agenthost" / "llm" / "registry.py").read_text())
    kinds_literal = [
        ast.unparse(node.value) for node in tree.body
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "PROVIDER_KINDS"
    ]
    calls = [node.value for node in tree.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    registered = [ast.unparse(call.args[0]) for call in calls if ast.unparse(call.func) == "register_provider_kind"]
    assert kinds_literal == ["{}"]
    assert registered == ["OpenAIProvider.kind", "ScriptedProvider.kind"]


# --- Issue 22, point 2: a suite's shape is written once -----------------------------------------------------------
# cases/schema.py holds the shapes and limits of agents, suites and cases; the API, the admin, the files and the
# OpenAPI description read them from there, and cases/validation/ adds only what needs the database.

LIMIT_KEYWORDS = {"ge", "le", "gt", "lt", "min_length", "max_length", "min_value", "max_value"}


def _suite_limits() -> dict[str, tuple[int, int]]:
    from cases.schema import schema_for

    return {
        name: (field["minimum"], field["maximum"])
        for name, field in schema_for("suite-document")["properties"].items()
        if "minimum" in field
    }


def test_it_writes_the_limits_of_suites_and_cases_only_in_the_schema_module():
    # The suite's upper limits as numbers, and any field limit as a keyword, appear in no other module of cases/
    # (models.py aside: its column sizes are the database's).
    numbers = {high for _, high in _suite_limits().values()}
    assert numbers >= {3600, 64}
    found = []
    for path in sorted((BASE_DIR / "cases").rglob("*.py")):
        if "migrations" in path.parts or path.name in ("schema.py", "models.py"):
            continue
        for node in ast.walk(_parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and type(node.value) is int and node.value in numbers:
                found.append(f"{path.name}:{node.lineno}: {node.value}")
            if isinstance(node, ast.keyword) and node.arg in LIMIT_KEYWORDS:
                found.append(f"{path.name}:{node.lineno}: {node.arg}=")
    assert found == [], "limits belong in cases/schema.py"
    assert not (BASE_DIR / "cases" / "serializers.py").exists()


def _column_sizes_written(path: str, source: str) -> list[str]:
    return [f"{path}:{node.lineno}: max_length={node.value.value}" for node in ast.walk(_parse(source))
            if isinstance(node, ast.keyword) and node.arg == "max_length" and isinstance(node.value, ast.Constant)]


def test_it_writes_the_sizes_of_agents_and_conversations_only_in_the_hosts_models():
    # The host's models module names each size once (AGENT_NAME_MAX_LENGTH, …); the agent API, the admin and the
    # agent files' schema read them, so a longer column cannot leave one of them refusing what the others take.
    found = []
    for package in ("agenthost", "cases"):
        for path in sorted((BASE_DIR / package).rglob("*.py")):
            if "migrations" in path.parts or path.name == "models.py" or path == BASE_DIR / "cases" / "schema.py":
                continue
            found.extend(_column_sizes_written(str(path.relative_to(BASE_DIR)), path.read_text()))
    assert found == []
    from agenthost.models import AGENT_NAME_MAX_LENGTH, AGENT_PATH_MAX_LENGTH, Agent
    from cases.schema import schema_for

    agent_file = schema_for("agent")["properties"]
    assert agent_file["name"]["maxLength"] == AGENT_NAME_MAX_LENGTH == Agent._meta.get_field("name").max_length
    assert agent_file["entry"]["maxLength"] == AGENT_PATH_MAX_LENGTH == Agent._meta.get_field("entry").max_length


def test_it_finds_a_column_size_written_outside_the_models():
    planted = "name = serializers.CharField(max_length=100)\ntitle = forms.CharField(max_length=TITLE_MAX_LENGTH)\n"
    assert _column_sizes_written("planted.py", planted) == ["planted.py:1: max_length=100"]


def test_it_publishes_in_the_openapi_schema_the_suite_limits_the_api_enforces(admin_client_api):
    schema = admin_client_api.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/suites/"]["post"]
    reference = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    described = schema["components"]["schemas"][reference.rsplit("/", 1)[1]]["properties"]
    for name, (low, high) in _suite_limits().items():
        assert (described[name]["minimum"], described[name]["maximum"]) == (low, high), name
        for value in (low - 1, high + 1):
            body = {"name": f"Limits {name} {value}", "agent": "nobody", name: value}
            response = admin_client_api.post("/api/suites/", body, format="json")
            assert response.status_code == 400
            assert any(error["field"] == name and str(high) in error["message"]
                       for error in response.json()["errors"]), response.json()


# --- issue 22, point 4: runs/ in three rooms, and names no two rooms share ------------------------------------------

RUNS = BASE_DIR / "runs"
# The door: what the rest of the project and Django reach runs/ by. Django's own module names (models, admin, apps…)
# are every app's vocabulary, so they are the only names runs/ may share with the host.
RUNS_DOOR_MODULES = {"__init__", "models", "services", "selectors", "api", "tasks", "signals", "admin", "urls",
                     "urls_api", "apps"}
RUNS_DOOR_PACKAGES = {"migrations", "management", "templatetags"}
RUNS_ROOMS = {"engine": "the run loop and the case", "tapes": "recorded answers", "web": "pages and exports"}


def _stems(package: Path) -> dict[str, str]:
    """Module path relative to the project → module name, for every module of `package` but its migrations."""
    return {
        str(path.relative_to(BASE_DIR)): path.stem
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.parts and path.stem != "__init__"
    }


def _same_name(one: str, other: str) -> bool:
    """Two module names that say the same thing: equal but for a plural (`sessions`/`session`), or one word each
    with the same stem (`execution`/`executor`). A qualified name (`case_session`) says which one it is."""
    words = [[word.removesuffix("s") for word in name.split("_")] for name in (one, other)]
    if words[0] == words[1]:
        return True
    return len(words[0]) == len(words[1]) == 1 and words[0][0][:6] == words[1][0][:6]


def test_it_keeps_the_top_of_runs_to_its_door_and_its_rooms():
    modules = {path.stem for path in RUNS.glob("*.py")}
    packages = {path.name for path in RUNS.iterdir() if (path / "__init__.py").is_file()}
    assert sorted(modules - RUNS_DOOR_MODULES) == []
    assert packages == RUNS_DOOR_PACKAGES | set(RUNS_ROOMS)


def test_it_names_no_runs_module_after_a_host_module():
    host = set(_stems(BASE_DIR / "agenthost").values()) | {
        path.name for path in (BASE_DIR / "agenthost").rglob("*") if (path / "__init__.py").is_file()
    }
    clashes = sorted(
        (path, theirs)
        for path, ours in _stems(RUNS).items()
        if ours not in RUNS_DOOR_MODULES
        for theirs in host
        if _same_name(ours, theirs)
    )
    assert clashes == []


def test_it_leaves_the_recording_apps_word_to_the_recording_app():
    """runs/ calls its recorded model answers tapes; only the command users type keeps its name (`agenttest
    recordings export|import`)."""
    users_type = "runs/management/commands/recordings.py"
    assert sorted(path for path, name in _stems(RUNS).items() if "recording" in name and path != users_type) == []


def test_it_keeps_the_engine_and_the_tapes_from_importing_the_web_room():
    graph = _import_graph()
    lower = ("runs.engine.", "runs.tapes.")
    assert {module.split(".")[1] for module in graph if module.startswith(lower)} == {"engine", "tapes"}
    offending = sorted(
        (module, imported)
        for module, imports in graph.items()
        if module.startswith(lower)
        for imported in imports
        if imported == "runs.web" or imported.startswith("runs.web.")
    )
    assert offending == []
    # The engine plays tapes; the tapes know nothing of the engine that plays them.
    assert sorted(
        (module, imported)
        for module, imports in graph.items()
        if module.startswith("runs.tapes.")
        for imported in imports
        if imported.startswith("runs.engine")
    ) == []


# What the engine and the tapes may import from the top of runs/: the models they read and write. Everything else
# up there (services, selectors, api, tasks, signals…) calls down into them; a name both sides need lives below
# (runs/engine/tags.py). The engine names the Celery task as a string (runs/engine/dispatch.py), not an import.
RUNS_BELOW = ("runs.engine", "runs.tapes")
RUNS_TOP_ALLOWED_BELOW = {"runs.models"}


def _reaching_up_from_below(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, imported) for every import by runs.engine or runs.tapes of a top-level runs module but the models."""
    below = tuple(f"{package}." for package in RUNS_BELOW)
    return sorted(
        (module, imported)
        for module, imports in graph.items()
        if module.startswith(below) or module in RUNS_BELOW
        for imported in imports
        if imported.startswith("runs.")
        and not imported.startswith(below)
        and imported not in RUNS_BELOW
        and ".".join(imported.split(".")[:2]) not in RUNS_TOP_ALLOWED_BELOW
    )


def test_it_lets_the_engine_and_the_tapes_import_only_the_models_from_the_top_of_runs():
    assert _reaching_up_from_below(_import_graph()) == []


def test_it_finds_the_engine_reaching_up_to_the_selectors():
    # The finder itself, on the shape the project had (planning read the run tag from the selectors), and on a
    # service imported by the tapes; the models stay allowed.
    graph = _import_graph()
    graph["runs.engine.planning"] = graph["runs.engine.planning"] | {"runs.selectors"}
    graph["runs.tapes.files"] = graph["runs.tapes.files"] | {"runs.services", "runs.models"}
    assert _reaching_up_from_below(graph) == [
        ("runs.engine.planning", "runs.selectors"),
        ("runs.tapes.files", "runs.services"),
    ]


# --- Issue 34, point 5: the run loop reads top to bottom --------------------------------------------------------------
# RunLoop.run() tells a run's whole story on one screen, and every step of the engine and the tapes reads in one
# sitting (decision 0041): execute_case (119 lines), _play (94) and result_store (94) were split into named steps.
# The plan types and the run tag each live in one module below the engine's door, which three modules import.
RUN_STORY = ("runs/engine/run_loop.py", "RunLoop", "run")
RUN_STORY_LINES = 30
ENGINE_STEP_LINES = 70
ENGINE_HOMES = {
    "SuitePlan": "runs/engine/plans.py",
    "CasePlan": "runs/engine/plans.py",
    "TurnPlan": "runs/engine/plans.py",
    "AssertionPlan": "runs/engine/plans.py",
    "TEST_TAG": "runs/engine/tags.py",
    "run_tag": "runs/engine/tags.py",
}


def _function_lengths(path: str, source: str) -> dict[str, int]:
    """`Class.function` or `function` → its lines, docstring included, for every function of the module."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lengths[f"{prefix}{child.name}"] = child.end_lineno - child.lineno + 1
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(_parse(source, path), "")
    return lengths


def _long_engine_steps(sources: dict[str, str]) -> list[str]:
    found = []
    for path, source in sorted(sources.items()):
        lengths = _function_lengths(path, source)
        found.extend(
            f"{path}: {name} has {lines} lines (at most {ENGINE_STEP_LINES})"
            for name, lines in lengths.items()
            if lines > ENGINE_STEP_LINES
        )
        if path == RUN_STORY[0]:
            story = lengths.get(f"{RUN_STORY[1]}.{RUN_STORY[2]}", 0)
            if not 0 < story <= RUN_STORY_LINES:
                found.append(f"{path}: {RUN_STORY[1]}.{RUN_STORY[2]} has {story} lines (1 to {RUN_STORY_LINES})")
    return found


def _defined_away_from_home(sources: dict[str, str]) -> list[str]:
    found = []
    for path, source in sorted(sources.items()):
        for node in ast.walk(_parse(source, path)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]
            else:
                continue
            found.extend(
                f"{path}:{node.lineno}: {name} (its home is {ENGINE_HOMES[name]})"
                for name in names
                if ENGINE_HOMES.get(name, path) != path
            )
    return found


def _defined_names(body: list[ast.stmt]) -> set[str]:
    """The names a module's or a class's own statements define."""
    names = set()
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name))
    return names


def _runs_sources() -> dict[str, str]:
    return {
        str(path.relative_to(BASE_DIR)): path.read_text()
        for path in sorted(RUNS.rglob("*.py"))
        if "migrations" not in path.parts
    }


def test_it_keeps_the_run_loops_story_on_one_screen_and_every_engine_step_short():
    rooms = ("runs/engine/", "runs/tapes/")
    below = {path: source for path, source in _runs_sources().items() if path.startswith(rooms)}
    assert RUN_STORY[0] in below
    assert _long_engine_steps(below) == []


def test_it_finds_a_long_engine_step_and_a_run_story_grown_past_a_screen():
    step = "def execute_case(plan):\n" + "    plan.step()\n" * ENGINE_STEP_LINES
    short_step = "def _play(plan):\n" + "    plan.step()\n" * (ENGINE_STEP_LINES - 1)
    story = "class RunLoop:\n    def run(self):\n" + "        self.step()\n" * RUN_STORY_LINES
    assert _long_engine_steps({"runs/engine/case_runner.py": step + short_step, RUN_STORY[0]: story}) == [
        f"runs/engine/case_runner.py: execute_case has {ENGINE_STEP_LINES + 1} lines (at most {ENGINE_STEP_LINES})",
        f"{RUN_STORY[0]}: RunLoop.run has {RUN_STORY_LINES + 1} lines (1 to {RUN_STORY_LINES})",
    ]
    # A loop whose story moved elsewhere (no RunLoop.run) is found too.
    assert _long_engine_steps({RUN_STORY[0]: "def run_execute_held(lease):\n    pass\n"}) == [
        f"{RUN_STORY[0]}: RunLoop.run has 0 lines (1 to {RUN_STORY_LINES})"
    ]


def test_it_defines_the_plan_types_and_the_run_tag_each_in_its_one_module():
    sources = _runs_sources()
    assert _defined_away_from_home(sources) == []
    for name, home in ENGINE_HOMES.items():
        assert name in _defined_names(_parse(sources[home]).body), f"{name} is not defined in {home}"


def test_it_finds_a_plan_type_or_the_run_tag_defined_away_from_its_module():
    planted = {
        "runs/engine/case_runner.py": "@dataclass\nclass CasePlan:\n    name: str\n",
        "runs/selectors.py": "TEST_TAG = 'agenttest'\n",
        "runs/engine/plans.py": "class SuitePlan:\n    pass\n",
    }
    assert _defined_away_from_home(planted) == [
        "runs/engine/case_runner.py:2: CasePlan (its home is runs/engine/plans.py)",
        "runs/selectors.py:1: TEST_TAG (its home is runs/engine/tags.py)",
    ]


def test_it_gives_the_plugin_loader_a_name_apart_from_the_public_plugin_module():
    names = list(_stems(BASE_DIR / "agenttest").values())
    assert sorted((one, other) for one in names for other in names if one < other and _same_name(one, other)) == []
    assert (BASE_DIR / "agenttest" / "plugin.py").is_file(), "plugins import agenttest.plugin: it stays"


def test_it_tells_names_that_say_the_same_thing_from_qualified_ones():
    assert _same_name("sessions", "session")
    assert _same_name("execution", "executor")
    assert _same_name("plugins", "plugin")
    assert not _same_name("case_session", "session")
    assert not _same_name("run_loop", "loop")
    assert not _same_name("replay", "registry")


# --- The rooms: common/ is the shared floor, agenttest/ the roof (issue 22, point 1) ----------------------------------
COMMON = "common"
APPS = ("agenthost", *HARNESS)
PACKAGES = ("agenttest", COMMON, *APPS, DEMO)


def _top(module: str) -> str:
    return module.split(".")[0]


def _package_graph() -> dict[str, set[str]]:
    """Top-level package → the project packages its modules import, an import inside a function included."""
    graph: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for package in PACKAGES:
        for _, module in _imports(package):
            top = module.split(".")[0]
            if top in PACKAGES and top != package:
                graph[package].add(top)
    return graph


def test_it_keeps_the_shared_room_free_of_every_project_package():
    assert any(m == "common.inputs" for _, m in _imports(COMMON)), "the shared helpers live in common/"
    offending = [(f, m) for f, m in _imports(COMMON) if m.split(".")[0] in PACKAGES and m.split(".")[0] != COMMON]
    assert offending == []


def test_it_keeps_every_app_off_the_project_package():
    # agenttest/ is the composition root (settings, urls, Celery, CLI, plugin loading): an app that imported it would
    # load the Celery app and the settings' wiring with it. Apps reach shared helpers through common/ and send tasks
    # by name. Only a plugin (the demo) imports agenttest, and only its public module agenttest.plugin.
    offending = [(f, m) for package in APPS for f, m in _imports(package) if m.split(".")[0] == "agenttest"]
    assert offending == []
    plugin_imports = {m for f, m in _imports(DEMO) if m.split(".")[0] == "agenttest"}
    assert plugin_imports <= {"agenttest.plugin"}


def _beyond_the_plugin_module(imports: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The imports of agenttest's own packages other than the public plugin module: a plugin's are none."""
    return [(f, m) for f, m in imports if _top(m) in PACKAGES and _top(m) != DEMO and m != "agenttest.plugin"]


def test_it_lets_the_demo_import_of_agenttest_only_the_plugin_module():
    # The demo is a plugin like any other (issue 34): what it needs of the host and the harness, it gets where a
    # team's plugin gets it. Django, the standard library and its own modules are its own business.
    assert any(m == "agenttest.plugin" for _, m in _imports(DEMO))
    assert _beyond_the_plugin_module(_imports(DEMO)) == []


def test_it_finds_a_demo_import_that_goes_around_the_plugin_module():
    planted = [
        ("agenttest_demo/agents.py", "agenthost.models"), ("agenttest_demo/suite.py", "cases.services"),
        ("agenttest_demo/simulated.py", "common.provider_config"), ("agenttest_demo/setup.py", "agenttest.settings"),
        ("agenttest_demo/tools.py", "agenttest.plugin"), ("agenttest_demo/tools.py", "agenttest_demo.simulated"),
        ("agenttest_demo/agents.py", "django.db"), ("agenttest_demo/tools.py", "json"),
    ]
    assert _beyond_the_plugin_module(planted) == planted[:4]


def test_it_keeps_cases_and_recording_off_runs():
    offending = [(f, m) for package in ("cases", "recording") for f, m in _imports(package) if _top(m) == "runs"]
    assert offending == []


def test_it_finds_no_import_cycle_among_the_packages():
    assert _cycles(_package_graph()) == []


def test_it_loads_the_shared_helpers_without_celery_or_settings():
    # Importing a helper must not build the project's Celery app nor configure Django: the room stands on its own.
    script = (
        "import sys\n"
        "import common.inputs, common.queues, common.patterns\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'agenttest', 'agenthost')))\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", script], cwd=BASE_DIR, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_it_builds_the_settings_from_the_shared_room_not_from_host_code():
    # Settings load before any app: the provider and MCP files are read by common/, so the composition root's first
    # module pulls in no app (and no app's import-time side effects).
    tree = _parse((BASE_DIR / "agenttest" / "settings.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {_top(m) for m in imported} & {*APPS, DEMO} == set()
    assert {"common.provider_config", "common.mcp_config"} <= imported


# --- The seam holds what the harness uses (issue 22) ----------------------------------------------------------------


def _seams_exports() -> list[str]:
    tree = _parse((BASE_DIR / "agenthost" / "seams.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", "") == "__all__" for target in node.targets):
            return [element.value for element in node.value.elts]
    raise AssertionError("agenthost/seams.py has no __all__")


def test_it_exports_from_the_seam_only_what_the_harness_uses():
    # A name the harness does not import is host surface nobody is held to: tests import it from its own module.
    used: set[str] = set()
    for package in HARNESS:
        for path in (BASE_DIR / package).rglob("*.py"):
            for node in ast.walk(_parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "agenthost.seams":
                    used.update(alias.name for alias in node.names)
    exports = _seams_exports()
    assert sorted(set(exports) - used) == []
    assert len(exports) == len(set(exports))


# --- Issue 34, point 2: each app owns its pages, and names written as strings hold to the import directions ---------

LAYOUT = "agenttest.templates"
# The host's transcript partials: how every page draws a conversation, which the harness's pages include (decision
# 0045), as they extend the layout. The rest of the host's templates are its own pages.
TRANSCRIPT_PARTIALS = "agenthost.templates.agenthost.transcript"

# What code of each top-level package may import or name: a module is reached when it is an entry or under one, and a
# package always reaches its own modules. The harness stands in layers over the host's seam (cases, recording, runs,
# traces: each may reach those before it); agenttest/ composes everything; the demo reaches the project package only
# through agenttest.plugin. LAYOUT, the composition root's templates (base.html, the pager, the filter select), is
# never imported: it is the site's layout, which every app's page extends — the one part of the root an app may name.
ALLOWED_DIRECTIONS: dict[str, tuple[str, ...]] = {
    COMMON: (),
    "agenthost": (COMMON, LAYOUT),
    "cases": (COMMON, LAYOUT, "agenthost.seams"),
    "recording": (COMMON, LAYOUT, "agenthost.seams", TRANSCRIPT_PARTIALS, "cases"),
    "runs": (COMMON, LAYOUT, "agenthost.seams", TRANSCRIPT_PARTIALS, "cases", "recording"),
    "traces": (COMMON, LAYOUT, "agenthost.seams", TRANSCRIPT_PARTIALS, "cases", "recording", "runs"),
    "agenttest": (COMMON, *APPS),
    DEMO: (COMMON, "agenttest.plugin", *APPS),
}


def _allowed(package: str, module: str) -> bool:
    """May code of `package` reach `module`? Anything outside the project may be reached by anyone."""
    if _top(module) not in ALLOWED_DIRECTIONS or _top(module) == package:
        return True
    return any(module == entry or module.startswith(f"{entry}.") for entry in ALLOWED_DIRECTIONS[package])


def _import_offences(imports: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """(file, module) for every import, of the package it stands in, that the table does not allow."""
    return [(f, m) for package, found in imports.items() for f, m in found if not _allowed(package, m)]


def test_it_holds_every_import_to_the_allowed_directions():
    assert _import_offences({package: _imports(package) for package in ALLOWED_DIRECTIONS}) == []


def test_it_finds_imports_against_the_directions():
    # The test of the test: an import up the layers or around the seam is found, one the table allows is not.
    planted = {
        "agenthost": [("agenthost/loop.py", "runs.models"), ("agenthost/loop.py", "common.inputs")],
        "common": [("common/inputs.py", "agenthost.models")],
        "cases": [("cases/services.py", "agenthost.models"), ("cases/services.py", "agenthost.seams")],
        "recording": [("recording/drafts.py", "runs.services"), ("recording/drafts.py", "cases.models")],
        "traces": [("traces/services.py", "runs.models"), ("traces/services.py", "agenttest.settings")],
        "agenttest": [("agenttest/urls.py", "runs.urls")],
    }
    assert _import_offences(planted) == [
        ("agenthost/loop.py", "runs.models"), ("common/inputs.py", "agenthost.models"),
        ("cases/services.py", "agenthost.models"), ("recording/drafts.py", "runs.services"),
        ("traces/services.py", "agenttest.settings"),
    ]


@functools.cache
def _url_owners() -> dict[str, str]:
    """Every URL name the site mounts → the module of the code behind it. An admin page belongs to the app of its
    model (`admin:cases_case_change` is the cases app's), not to django.contrib.admin, which only serves it."""
    from django.apps import apps
    from django.urls import URLPattern, URLResolver, get_resolver

    owners: dict[str, str] = {}

    def walk(patterns: list, namespace: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace)
            elif isinstance(pattern, URLPattern) and pattern.name:
                owners.setdefault(f"{namespace}{pattern.name}", pattern.callback.__module__)

    walk(get_resolver().url_patterns, "")
    for name in [name for name in owners if name.startswith("admin:")]:
        for config in apps.get_app_configs():
            if name.startswith(f"admin:{config.label}_"):
                owners[name] = f"{config.name}.admin"
    return owners


def _path_owner(path: str) -> str:
    """The module of the view a literal path (`/runs/`) opens; a path of no view is its own offence."""
    from django.urls import Resolver404, resolve

    try:
        match = resolve(path.split("?")[0].split("#")[0])
    except Resolver404:
        return f"<no view at {path}>"
    for owner_name, owner in _url_owners().items():
        if owner_name == match.view_name:
            return owner
    return match.func.__module__


def _file_owner(kind: str, name: str) -> str:
    """The module whose folder holds template or static file `name`: `<app>.templates.<its folders>`,
    `<app>.static.<its folders>` (`agenthost/transcript/_entry.html` is `agenthost.templates.agenthost.transcript`'s);
    a name no project folder holds is Django's or a library's."""
    for package in PACKAGES:
        folders = [BASE_DIR / package / kind]
        if package == "agenttest" and kind == "templates":
            folders.append(BASE_DIR / package / kind / "overrides")
        if any((folder / name).is_file() for folder in folders):
            return ".".join([package, kind, *Path(name).parent.parts])
    return f"<outside>.{name}"


def _library_owner(name: str) -> str:
    from django.template import engines

    return engines["django"].engine.libraries.get(name, f"<no tag library {name}>")  # type: ignore[attr-defined]


_TEMPLATE_NAMES = [
    (re.compile(r"""\{%\s*url\s+(['"])([^'"]+)\1"""), "url"),
    (re.compile(r"""\{%\s*(?:extends|include)\s+(['"])([^'"]+)\1"""), "templates"),
    (re.compile(r"""\{%\s*static\s+(['"])([^'"]+)\1"""), "static"),
    (re.compile(r"""(?:href|src|action)=(")(/[^"{]*)\1"""), "path"),
]


def _template_references(text: str) -> list[tuple[str, str]]:
    """(what, the module it names) for every name a template writes: `{% url %}`, `{% extends %}`, `{% include %}`,
    `{% static %}`, `{% load %}` and a literal path in a link, a script or a form."""
    owners = _url_owners()
    found = []
    for pattern, kind in _TEMPLATE_NAMES:
        for match in pattern.finditer(text):
            name = match[2]
            if kind == "url":
                found.append((f"{{% url '{name}' %}}", owners.get(name, f"<no URL named {name}>")))
            elif kind == "path":
                if not name.startswith("/static/"):
                    found.append((f'"{name}"', _path_owner(name)))
            else:
                found.append((f"{kind} {name}", _file_owner(kind, name)))
    for match in re.finditer(r"\{%\s*load\s+([^%]+?)\s*%\}", text):
        names = match[1].split()
        libraries = names[names.index("from") + 1:] if "from" in names else names
        found.extend((f"{{% load {library} %}}", _library_owner(library)) for library in libraries)
    return found


_TEMPLATE = re.compile(r"[\w./-]+\.html")


def _python_references(source: str) -> list[tuple[str, str]]:
    """(what, the module it names) for every name a module writes as a string: the URL names given to reverse(),
    reverse_lazy() and redirect() (or a literal path given to redirect()), the modules given to import_module() and
    include(), the models given to apps.get_model(), and the templates it renders (a string ending in .html)."""
    from django.apps import apps

    owners = _url_owners()
    found = []
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(_TEMPLATE, node.value):
            found.append((node.value, _file_owner("templates", node.value)))
        if not isinstance(node, ast.Call) or not node.args:
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        literals = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        first = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
        if not isinstance(first, str):
            continue
        if called in ("reverse", "reverse_lazy", "redirect"):
            if first.startswith("/"):
                found.append((f'{called}("{first}")', _path_owner(first)))
            elif called != "redirect" or ":" in first or first in owners:
                found.append((f'{called}("{first}")', owners.get(first, f"<no URL named {first}>")))
        elif called in ("import_module", "include"):
            found.append((f'{called}("{first}")', first))
        elif called == "get_model" and isinstance(node.func, ast.Attribute):
            label = first.split(".")[0] if len(literals) == 1 and "." in first else first if len(literals) == 2 else ""
            if label:
                config = next((c for c in apps.get_app_configs() if c.label == label), None)
                found.append((f'get_model("{first}")', f"{config.name}.models" if config else f"<no app {label}>"))
    return found


def _reference_offences(package: str, references: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(what, module) for what, module in references if module.startswith("<no ") or not _allowed(package, module)]


def test_it_holds_every_name_written_as_a_string_to_the_allowed_directions():
    # A link, an include, a reverse() or an import_module() reaches another app as surely as an import does: a page of
    # the host that named a harness URL would break in a host-only deployment, a harness page naming a host URL
    # would tie it to the host's insides rather than to its seam.
    offending = []
    checked = 0
    for package in ALLOWED_DIRECTIONS:
        for path in sorted((BASE_DIR / package).rglob("*")):
            if "migrations" in path.parts or not path.is_file():
                continue
            if path.suffix == ".html" and "templates" in path.relative_to(BASE_DIR / package).parts:
                references = _template_references(path.read_text())
            elif path.suffix == ".py":
                references = _python_references(path.read_text())
            else:
                continue
            checked += len(references)
            offending.extend((str(path.relative_to(BASE_DIR)), *offence) for offence in _reference_offences(
                package, references))
    assert offending == []
    assert checked > 150, "the parsers find the names the project writes"


def test_it_finds_names_written_against_the_directions():
    # The test of the test: names planted where they may not stand are found, names where they may are not.
    host_page = (
        "{% extends 'base.html' %}{% load static runs_text %}<a href=\"/runs/\">Runs</a>"
        "<a href=\"{% url 'runs:list' %}\">Runs</a>{% include \"recording/_make_cases.html\" %}"
        "<script src=\"{% static 'runs/runs.js' %}\"></script><a href=\"{% url 'agents:chat' %}\">Chat</a>"
    )
    assert [what for what, _ in _reference_offences("agenthost", _template_references(host_page))] == [
        "{% url 'runs:list' %}", "templates recording/_make_cases.html", "static runs/runs.js", '"/runs/"',
        "{% load runs_text %}",
    ]
    recording_page = "<a href=\"{% url 'agents:chat' %}\"></a><form action=\"{% url 'traces:bind' %}\"></form>"
    assert [what for what, _ in _reference_offences("recording", _template_references(recording_page))] == [
        "{% url 'agents:chat' %}", "{% url 'traces:bind' %}",
    ]
    cases_module = (
        "from django.apps import apps\nfrom importlib import import_module\n"
        "reverse('recording:conversation', kwargs={'conversation_id': 1})\nredirect('agents:chat')\n"
        "import_module('runs.tasks')\napps.get_model('runs.Run')\napps.get_model('runs', 'CaseResult')\n"
        "render(request, 'runs/run_list.html')\nreverse('admin:agenthost_conversation_change', args=[1])\n"
        "reverse('admin:cases_case_change', args=[1])\nreverse('no-such-page')\n"
    )
    assert sorted(what for what, _ in _reference_offences("cases", _python_references(cases_module))) == sorted([
        "runs/run_list.html", 'reverse("recording:conversation")', 'redirect("agents:chat")',
        'import_module("runs.tasks")', 'get_model("runs.Run")', 'get_model("runs")',
        'reverse("admin:agenthost_conversation_change")', 'reverse("no-such-page")',
    ])
    traces_page = "<form action=\"{% url 'recording:record' 1 %}\"></form>{% include '_pager.html' %}"
    assert _reference_offences("traces", _template_references(traces_page)) == []
    # The host's transcript partials are the harness's to include; the host's own pages are not.
    runs_page = '{% include "agenthost/transcript/_entry.html" %}{% include "agenthost/chat.html" %}'
    assert [what for what, _ in _reference_offences("runs", _template_references(runs_page))] == [
        "templates agenthost/chat.html",
    ]


# --- Issue 34, point 3: one transcript, drawn by the host's partials -------------------------------------------------

TRANSCRIPT_FOLDER = "agenthost/templates/agenthost/transcript"
# The markup of a transcript entry: a message's bubble and a tool call's box. Written anywhere but the partials, a
# page (or a script) would draw a conversation its own way again.
ENTRY_MARKUP = re.compile(r"""\b(?:msg-(?:user|agent|who|text)|tool-call|tool-head)\b""")


def _entry_markup_outside_the_partials(files: dict[str, str]) -> list[str]:
    """The templates and scripts (path from the checkout → text) outside the host's transcript partials that write
    a transcript entry's markup."""
    return sorted(
        name for name, text in files.items()
        if not name.startswith(f"{TRANSCRIPT_FOLDER}/") and ENTRY_MARKUP.search(text)
    )


def test_it_draws_every_transcript_entry_with_the_hosts_partials_only():
    files = {
        str(path.relative_to(BASE_DIR)): path.read_text()
        for package in PACKAGES
        for kind in ("templates", "static")
        for path in (BASE_DIR / package / kind).rglob("*")
        if path.suffix in (".html", ".js")
    }
    assert any(name.startswith(f"{TRANSCRIPT_FOLDER}/") for name in files), "the partials are where the test looks"
    assert _entry_markup_outside_the_partials(files) == []


def test_it_finds_a_transcript_entry_drawn_outside_the_partials():
    # The test of the test: the three old renderers, planted back, are found; the partials and the pages that include
    # them are not.
    planted = {
        "runs/templates/runs/_transcript_entry.html": '<div class="tool-call outcome-box-none"><div class="tool-head">',
        "recording/templates/recording/_entries.html": '<div class="msg msg-agent"><div class="msg-who">',
        "agenthost/static/agenthost/chat.js": 'const box = el("details", "tool-call");',
        f"{TRANSCRIPT_FOLDER}/_entry.html": '<details class="tool-call"><summary class="tool-head">',
        "runs/templates/runs/result_detail.html": '{% include "agenthost/transcript/_turns.html" %}',
    }
    assert _entry_markup_outside_the_partials(planted) == [
        "agenthost/static/agenthost/chat.js", "recording/templates/recording/_entries.html",
        "runs/templates/runs/_transcript_entry.html",
    ]


# The composition root's own pages: the layout and the error page at the top, the login page, the overrides of other
# packages' templates; its static files are the layout's styles and images. Every other page is an app's.
ROOT_FOLDERS = {"templates": ("registration", "overrides"), "static": ("css", "img")}


def _within(folder: str, entries: tuple[str, ...]) -> bool:
    return any(folder == entry or folder.startswith(f"{entry}/") for entry in entries)


def _misplaced_page_files(files: list[str]) -> list[str]:
    """The template and static files (paths from the checkout) not where decision 0040 puts them: an app's under
    `<app>/templates/<app>/` (the admin's pages of its models under `<app>/templates/admin/<app>/`) and
    `<app>/static/<app>/`; the root's at the top of its templates (the layout, the 404 page) or in its own folders."""
    misplaced = []
    for name in files:
        package, kind, *inside = Path(name).parts
        folder = "/".join(inside[:-1])
        if package == "agenttest":
            placed = (kind == "templates" and folder == "") or _within(folder, ROOT_FOLDERS[kind])
        else:
            placed = _within(folder, (package, f"admin/{package}") if kind == "templates" else (package,))
        if not placed:
            misplaced.append(name)
    return misplaced


def _page_files() -> list[str]:
    return sorted(
        str(path.relative_to(BASE_DIR))
        for package in PACKAGES
        for kind in ("templates", "static")
        for path in (BASE_DIR / package / kind).rglob("*")
        if path.is_file()
    )


def test_it_keeps_each_apps_templates_and_static_files_in_the_apps_own_folders():
    files = _page_files()
    assert any(name.startswith("runs/templates/runs/") for name in files), "the pages are found where they live"
    assert _misplaced_page_files(files) == []


def test_it_finds_a_page_file_outside_its_apps_folder():
    # The test of the test: the layout the project had before decision 0040, beside files where they belong.
    planted = [
        "agenttest/templates/runs/run_list.html", "agenttest/templates/admin/cases/case/change_form.html",
        "agenttest/static/js/runs.js", "runs/templates/run_list.html", "traces/static/traces.js",
        "recording/templates/runs/_panel.html",
        "agenttest/templates/base.html", "agenttest/templates/registration/login.html",
        "agenttest/templates/overrides/admin/base_site.html", "agenttest/static/css/app.css",
        "cases/templates/admin/cases/case/change_form.html", "runs/static/runs/runs.js",
        "agenthost/templates/agenthost/chat.html",
    ]
    assert _misplaced_page_files(planted) == planted[:6]


# --- Issue 34, point 1: one provider:model parser --------------------------------------------------------------------
# common/model_keys.py holds the rule of a model key; a module that splits a model key at its ':' or writes the rule's
# pattern again has a rule of its own, and the rules drift (they did: four, with different answers).
MODEL_KEY_HOME = "common/model_keys.py"
_SEPARATOR_SPLITS = {"partition", "rpartition", "split", "rsplit"}


def _model_key_parsers(path: str, source: str) -> list[str]:
    found = []
    for node in ast.walk(_parse(source, path)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SEPARATOR_SPLITS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == ":"
            and "model" in ast.unparse(node.func.value).lower()
        ):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and r"[^:\s]" in node.value:
            found.append(f"{path}:{node.lineno}: {node.value!r}")
    return found


def test_it_reads_every_model_key_with_the_one_parser():
    found = []
    for package in (*PROJECT, "common", "agenttest_demo"):
        for path in sorted((BASE_DIR / package).rglob("*.py")):
            relative = str(path.relative_to(BASE_DIR))
            if "migrations" not in path.parts and relative != MODEL_KEY_HOME:
                found.extend(_model_key_parsers(relative, path.read_text()))
    assert found == [], f"read model keys with {MODEL_KEY_HOME}'s split_model_key"


@pytest.mark.parametrize(
    "planted",
    [
        'provider, _, model = data["model"].partition(":")',
        "name = model_key.split(':', 1)[1]",
        'KEY = r"^[^:\\s]+:\\S+$"',
    ],
)
def test_it_finds_a_model_key_read_by_a_rule_of_its_own(planted):
    assert _model_key_parsers("planted.py", planted) != []
    assert _model_key_parsers(MODEL_KEY_HOME, (BASE_DIR / MODEL_KEY_HOME).read_text()) != []



# --- Issue 34, point 1: an agent's shape is written once -------------------------------------------------------------
# agenthost/document.py holds an agent's shape and limits (its column sizes are agenthost/models.py's); the files, the
# API and the admin check them through the one schema engine (common/schemas.py), and the OpenAPI description
# publishes the same model. No other module writes an agent's limit: no constant of one (TEMPERATURE_…, MAX_STEPS_…,
# a size), no limit keyword naming one, and no limit keyword at all in the host's agent doors (its classes named
# Agent…: the API's serializers, the admin's form).
AGENT_SHAPE_HOMES = ("agenthost/document.py", "agenthost/models.py")
_AGENT_LIMIT = re.compile(r"^(TEMPERATURE|MAX_STEPS)_\w+$|^(AGENT_\w+|PROVIDER|MODEL|MODEL_NAME)_MAX_LENGTH$")


def _names_an_agent_limit(node: ast.AST) -> bool:
    return any(isinstance(name, ast.Name) and _AGENT_LIMIT.match(name.id) for name in ast.walk(node))


def _agent_limits_written(path: str, source: str) -> list[str]:
    tree = _parse(source, path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_an_agent_limit(target) for target in targets):
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.keyword) and node.arg in LIMIT_KEYWORDS and _names_an_agent_limit(node.value):
            found.append(f"{path}:{node.lineno}: {node.arg}={ast.unparse(node.value)}")
        if isinstance(node, ast.ClassDef) and node.name.startswith("Agent") and path.startswith("agenthost/"):
            found.extend(
                f"{path}:{keyword.lineno}: {keyword.arg}= in {node.name}"
                for keyword in ast.walk(node) if isinstance(keyword, ast.keyword) and keyword.arg in LIMIT_KEYWORDS
            )
    return found


def test_it_writes_the_limits_of_an_agent_only_in_its_document_and_its_models():
    found = []
    for package in (*PROJECT, "common"):
        for path in sorted((BASE_DIR / package).rglob("*.py")):
            relative = str(path.relative_to(BASE_DIR))
            if "migrations" not in path.parts and relative not in AGENT_SHAPE_HOMES:
                found.extend(_agent_limits_written(relative, path.read_text()))
    assert found == [], "an agent's limits belong in agenthost/document.py (its column sizes in agenthost/models.py)"
    for home in AGENT_SHAPE_HOMES:
        assert _agent_limits_written(home, (BASE_DIR / home).read_text()) != [], f"the finder finds {home}'s"


@pytest.mark.parametrize(
    "planted",
    [
        ("agenthost/validation.py", "TEMPERATURE_MIN, TEMPERATURE_MAX = 0.0, 2.0\n"),
        ("cases/files.py", "PROVIDER_MAX_LENGTH, MODEL_MAX_LENGTH = 100, 200  # Agent.provider, Agent.model\n"),
        ("agenthost/api.py", "class AgentCreateApi:\n    class InputSerializer:\n"
                             "        name = serializers.CharField(max_length=100)\n"),
        ("agenthost/admin.py", "class AgentAdminForm:\n"
                               "    max_steps = forms.IntegerField(min_value=1, max_value=1000)\n"),
        ("cases/schema.py", "class AgentFile:\n    temperature: float = Field(0.0, ge=TEMPERATURE_MIN)\n"),
        ("runs/engine/plans.py", "name = serializers.CharField(max_length=AGENT_NAME_MAX_LENGTH)\n"),
    ],
)
def test_it_finds_an_agent_limit_written_outside_the_agents_document(planted):
    path, source = planted
    assert _agent_limits_written(path, source) != []


def test_it_publishes_in_the_openapi_schema_the_agent_limits_every_door_enforces(admin_client_api):
    from cases.schema import schema_for

    schema = admin_client_api.get("/api/schema/", {"format": "json"}).json()
    agent_file = schema_for("agent")["properties"]
    for method, path in (("post", "/api/agents/"), ("patch", "/api/agents/{agent_id}/")):
        reference = schema["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        described = schema["components"]["schemas"][reference.rsplit("/", 1)[1]]["properties"]
        for name in ("name", "entry", "deps", "command", "cwd", "temperature", "max_steps", "args", "env"):
            assert described[name] == agent_file[name], name
    bounds = {"name": ("x" * 101, "100"), "entry": ("x" * 301, "300"), "temperature": (2.5, "2"),
              "max_steps": (1001, "1000"), "provider": ("p" * 101, "100"), "model": ("m" * 201, "200")}
    for name, (value, limit) in bounds.items():
        body = {"name": "limits", "instruction": "Help.", "provider": "scripted", "model": "scripted", name: value}
        response = admin_client_api.post("/api/agents/", body, format="json")
        assert response.status_code == 400, (name, response.data)
        assert limit in " ".join(response.data[name]), (name, response.data)

# --- Issue 34, point 1: the project, MCP and providers files on the one schema engine --------------------------------
# Each module that reads one of these files defines the file's shape as a model of the engine's strict base and checks
# documents with the engine's checker of that model; what needs the disk or the registered kinds comes after, by hand.
FILE_SHAPES = {
    "common/project_file.py": "ProjectFile",
    "common/mcp_config.py": "McpFile",
    "common/provider_config.py": "ProvidersFile",
}


def _file_shape_offences(path: str, source: str, model: str) -> list[str]:
    tree = _parse(source, path)
    from_engine = {alias.asname or alias.name for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.module == "common.schemas" for alias in node.names}
    classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}

    def strict(name: str) -> bool:
        return any((base == "Strict" and base in from_engine) or (base in classes and base != name and strict(base))
                   for base in map(ast.unparse, classes[name].bases))

    offences = []
    if model not in classes:
        offences.append(f"{path}: the file's shape is not a model ({model})")
    elif not strict(model):
        offences.append(f"{path}: {model} is not a model of common.schemas.Strict")
    if not any(isinstance(node, ast.Call) and ast.unparse(node.func) == "checker" and "checker" in from_engine
               and [ast.unparse(argument) for argument in node.args] == [model] for node in ast.walk(tree)):
        offences.append(f"{path}: documents are not checked with common.schemas.checker({model})")
    return offences


def test_it_checks_the_project_mcp_and_providers_files_with_the_one_schema_engine():
    found = []
    for path, model in FILE_SHAPES.items():
        found.extend(_file_shape_offences(path, (BASE_DIR / path).read_text(), model))
    assert found == []


@pytest.mark.parametrize(
    ("planted", "offences"),
    [
        # The MCP file as it was checked before: by hand, no model.
        ('def _server_problems(name, spec):\n    if not isinstance(spec.get("command"), str):\n'
         '        return [f"server {name!r}: field \'command\' must name the program that starts the server"]\n',
         ["the file's shape is not a model (McpFile)",
          "documents are not checked with common.schemas.checker(McpFile)"]),
        # A model the engine's strict base does not lead to, checked by pydantic's own validation.
        ("from pydantic import BaseModel\nclass McpFile(BaseModel):\n    servers: dict = {}\n"
         "McpFile.model_validate(data)\n",
         ["McpFile is not a model of common.schemas.Strict",
          "documents are not checked with common.schemas.checker(McpFile)"]),
        # A strict base of its own, and an engine's checker of another model.
        ("from pydantic import BaseModel\nfrom common.schemas import checker\nclass Strict(BaseModel):\n    pass\n"
         "class McpFile(Strict):\n    pass\nchecker(Strict).findings(data)\n",
         ["McpFile is not a model of common.schemas.Strict",
          "documents are not checked with common.schemas.checker(McpFile)"]),
        # Through a base of the module's own, the engine's strict base and checker: as it should be.
        ("from common.schemas import Strict, checker\nclass _Servers(Strict):\n    pass\n"
         "class McpFile(_Servers):\n    pass\nchecker(McpFile).findings(data)\n", []),
    ],
)
def test_it_finds_a_file_shape_checked_outside_the_schema_engine(planted, offences):
    assert _file_shape_offences("planted.py", planted, "McpFile") == [f"planted.py: {offence}" for offence in offences]


# An agent's MCP server entry (`{"mcp", "tools"?}`) is McpServerTools of the agent's document: the API and the admin
# check it with the engine, as the files do; agenthost/mcp/tools.py checks only what needs the MCP file and the
# servers' listings (a configured server, declared once, tools it lists).
SERVER_ENTRY_DOORS = "agenthost/validation.py"
SERVER_ENTRY_MEANING = "agenthost/mcp/tools.py"
_SHAPE_WORDS = re.compile(r"unknown field|must be a non-empty list|distinct")


def _server_entry_offences(doors: str, meaning: str) -> list[str]:
    offences = []
    if not any(
        isinstance(node, ast.Call) and ast.unparse(node.func) in {"shape_problems", "problems"}
        and node.args and "McpServerTools" in ast.unparse(node.args[0])
        for node in ast.walk(_parse(doors))
    ):
        offences.append(f"{SERVER_ENTRY_DOORS}: an MCP server entry is not checked with the engine (McpServerTools)")
    offences.extend(
        f"{SERVER_ENTRY_MEANING}:{node.lineno}: a shape checked by hand ({node.value.strip()!r})"
        for node in ast.walk(_parse(meaning))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SHAPE_WORDS.search(node.value)
    )
    return offences


def test_it_checks_an_agents_mcp_server_entries_with_the_one_schema_engine():
    doors, meaning = ((BASE_DIR / path).read_text() for path in (SERVER_ENTRY_DOORS, SERVER_ENTRY_MEANING))
    assert _server_entry_offences(doors, meaning) == []


def test_it_finds_an_mcp_server_entry_checked_by_hand():
    # The shape as it was checked before: by hand, beside the listings, and not by the engine at the API's door.
    meaning = (
        "def server_entry_problems(functions):\n"
        "    for index, item in enumerate(functions):\n"
        "        if unknown := sorted(key for key in item if key not in ENTRY_KEYS):\n"
        "            problems.append(f'functions[{index}]: unknown field {unknown[0]!r}')\n"
        "        if not isinstance(item.get('tools'), list):\n"
        "            problems.append(f'functions[{index}].tools: must be a non-empty list of distinct tool names')\n"
    )
    doors = "found += [shape_problems(FunctionDeclaration, item) for item in functions if not is_server_entry(item)]\n"
    assert _server_entry_offences(doors, meaning) == [
        f"{SERVER_ENTRY_DOORS}: an MCP server entry is not checked with the engine (McpServerTools)",
        f"{SERVER_ENTRY_MEANING}:4: a shape checked by hand (']: unknown field')",
        f"{SERVER_ENTRY_MEANING}:6: a shape checked by hand "
        "('].tools: must be a non-empty list of distinct tool names')",
    ]


# --- Issue 34, point 6: the type checker's configuration holds ------------------------------------------------------
# Decision 0038: mypy checks every shipped package, strict flag by flag on the floors everything stands on. A flag
# turned off in an override, a package left out or errors ignored would let annotations drift unseen.
TYPE_CHECKED = ("agenttest", "common", "agenthost", "cases", "runs", "recording", "traces", "agenttest_demo")
STRICT_MODULES = ("common.*", "agenthost.*", "runs.engine.*")
STRICT_FLAGS = (
    "disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
    "disallow_incomplete_defs", "disallow_untyped_decorators", "warn_return_any", "no_implicit_reexport",
    "strict_equality", "extra_checks",
)
# Each with its reason in pyproject.toml.
LOOSENED = {("agenthost.admin", "disallow_any_generics")}


def _type_check_offences(pyproject: dict) -> list[str]:
    mypy = pyproject["tool"]["mypy"]
    offences = [f"{package} is not type-checked" for package in TYPE_CHECKED if package not in mypy.get("packages", [])]
    if mypy.get("check_untyped_defs") is not True:
        offences.append("check_untyped_defs is not on")
    overrides = mypy.get("overrides", [])
    for pattern in STRICT_MODULES:
        flags = {flag for override in overrides if pattern in override.get("module", [])
                 for flag in STRICT_FLAGS if override.get(flag) is True}
        offences.extend(f"{pattern}: {flag} is not on" for flag in STRICT_FLAGS if flag not in flags)
    for override in overrides:
        for module in override.get("module", []):
            if override.get("ignore_errors"):
                offences.append(f"{module}: errors ignored")
            offences.extend(f"{module}: {flag} turned off" for flag in STRICT_FLAGS
                            if override.get(flag) is False and (module, flag) not in LOOSENED)
    return offences


def test_it_type_checks_every_shipped_package_and_the_floors_strictly():
    import tomllib

    assert _type_check_offences(tomllib.loads((BASE_DIR / "pyproject.toml").read_text())) == []
    assert "mypy" in (BASE_DIR / "scripts" / "test").read_text(), "the test command runs the type checker"


def test_it_finds_a_type_check_loosened():
    import copy
    import tomllib

    pyproject = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())
    planted = copy.deepcopy(pyproject)
    planted["tool"]["mypy"]["packages"].remove("traces")
    planted["tool"]["mypy"]["overrides"].append({"module": ["runs.engine.leases"], "disallow_untyped_defs": False})
    planted["tool"]["mypy"]["overrides"].append({"module": ["cases.files"], "ignore_errors": True})
    strict = next(o for o in planted["tool"]["mypy"]["overrides"] if "common.*" in o["module"])
    del strict["warn_return_any"]
    assert sorted(_type_check_offences(planted)) == sorted([
        "traces is not type-checked", "runs.engine.leases: disallow_untyped_defs turned off",
        "cases.files: errors ignored", "common.*: warn_return_any is not on", "agenthost.*: warn_return_any is not on",
        "runs.engine.*: warn_return_any is not on",
    ])


# --- Issue 34, point 7: the architecture page is true to the code -----------------------------------------------------
# docs/architecture.md names the rooms, modules, names and tests a newcomer opens next. Each name it writes in code
# quotes must be there: a path that exists, a module, a name some module or test defines (a class's member as
# `Class.member`). A rule whose test was renamed or removed, or a module that moved, shows up here. Left unread:
# patterns (`<app>/…`, `*.yaml`), elided names (`run_…`), URLs and anything with a space (commands, code samples).
ARCHITECTURE_PAGE = "docs/architecture.md"
PAGE_PACKAGES = ("agenttest", "agenthost", "cases", "runs", "recording", "traces", "common", "agenttest_demo")
# Names the page quotes that are Python's, Django's or mypy's, or a file of the steering repository.
NAMED_OUTSIDE = {
    "reverse", "reverse_lazy", "redirect", "include", "import_module", "apps.get_model", "check_untyped_defs",
    "__all__", "ARCHITECTURE.md",
}


@functools.cache
def _defined_in_the_project() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(names, `Class.member`s, file names) defined or held anywhere in the project's packages, tests and bench."""
    names: set[str] = set()
    members: set[str] = set()
    files: set[str] = set()
    for package in (*PAGE_PACKAGES, "tests", "bench"):
        for path in (BASE_DIR / package).rglob("*"):
            files.add(path.name)
            if path.suffix != ".py" or "migrations" in path.parts:
                continue
            if path.parent.name == "commands":
                names.add(path.stem)
            for node in ast.walk(_parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    members.update(f"{node.name}.{name}" for name in _defined_names(node.body))
                if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(node.name)
                elif isinstance(node, ast.Assign | ast.AnnAssign):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
    return frozenset(names), frozenset(members), frozenset(files)


def _page_names_missing(text: str) -> list[str]:
    names, members, files = _defined_in_the_project()
    missing = []
    for quoted in sorted(set(re.findall(r"`([^`\n]+)`", text))):
        if any(mark in quoted for mark in ("…", "*", "<", " ")) or quoted.startswith(("/", ".venv/")):
            continue
        name = quoted.removesuffix("()")
        if name in NAMED_OUTSIDE:
            continue
        if "/" in name:
            if not (BASE_DIR / name).exists():
                missing.append(f"{quoted}: no such path")
        elif re.fullmatch(r"[\w-]+\.(py|html|js|css|md|toml|yaml|json)", name):
            if name not in files:
                missing.append(f"{quoted}: no such file")
        elif not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            continue
        elif name.split(".")[0] in PAGE_PACKAGES:
            module = BASE_DIR / name.replace(".", "/")
            if not (module.with_suffix(".py").is_file() or module.is_dir()):
                missing.append(f"{quoted}: no such module")
        elif "." in name:
            if name not in members:
                missing.append(f"{quoted}: no such member")
        elif ("_" in name.strip("_") or name[0].isupper()) and name not in names:
            missing.append(f"{quoted}: defined nowhere")
    return missing


def test_it_names_on_the_architecture_page_only_what_the_code_holds():
    assert _page_names_missing((BASE_DIR / ARCHITECTURE_PAGE).read_text()) == []


def test_it_finds_a_path_module_name_or_test_the_architecture_page_names_in_vain():
    planted = (
        "The loop is `runs/engine/run.py`, called by `runs.engine.runner` through `RunLoop.execute()`; the plans are\n"
        "`CasePlans` in `plans.py`; `test_it_keeps_the_web_room_apart` holds it. Unread: `run_…`, `agenttest run`.\n"
        "True: `runs/engine/run_loop.py`, `runs.engine.run_loop`, `RunLoop.run()`, `CasePlan`, `base.html`,\n"
        "`demo_setup`, `reverse()`, `test_it_finds_a_path_module_name_or_test_the_architecture_page_names_in_vain`.\n"
    )
    assert _page_names_missing(planted) == [
        "CasePlans: defined nowhere",
        "RunLoop.execute(): no such member",
        "runs.engine.runner: no such module",
        "runs/engine/run.py: no such path",
        "test_it_keeps_the_web_room_apart: defined nowhere",
    ]
