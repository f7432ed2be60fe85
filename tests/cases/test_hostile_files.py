"""Hostile agent, suite and case files (issue 27, items 12, 15 and 18): every faulty file is named with its key path,
all at once, with exit 2 — never a hang, a traceback or a value stored that the API would refuse. Run as a team runs
them: the `agenttest` command in its own process, on its own database."""

from __future__ import annotations

import io
import math
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agenthost.admin import AgentAdminForm
from agenthost.models import Agent
from cases.models import Case, Suite
from tests.package_env import CHECKOUT_VARIABLES
from tests.properties import SUPPRESSED_WITH_FIXTURES

# The commands below run in their own process on a database of their own (AGENTTEST_VAR_DIR under tmp_path, no
# DATABASE_URL): the same on either pass, so they run once (own_database); only the in-process doors further down
# use the database under test.
in_the_database = pytest.mark.django_db

BASE_DIR = Path(__file__).resolve().parent.parent.parent
AGENT = "name: support\nmodel: scripted:scripted\ninstruction: Help with orders.\nfunctions: [track_order]\n"
SUITE = "name: Support\nagent: support\n"
CASE = "name: {name}\nturns:\n- user_message: Where is order 1042?\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def repo(root: Path, extra: dict[str, str] | None = None) -> Path:
    """A good agent, suite and case, plus the `extra` files."""
    return write(root, {
        "agents/support.yaml": AGENT, "suites/support/suite.yaml": SUITE,
        "suites/support/cases/status.yaml": CASE.format(name="Status"), **(extra or {}),
    })


def alias_bomb(levels: int) -> str:
    """A few hundred bytes that expand to 10**levels items: each anchor's list holds the previous one ten times."""
    lines = ["  a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"  a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def agenttest(cwd: Path, *args: str, timeout: float | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """The `agenttest` command of this checkout, in its own process, with nothing of the test's environment. No time
    limit of its own unless a test asks for one: the test's (pytest-timeout) guards against a hang, and a loaded
    machine took over 90 s for a `migrate`."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith(CHECKOUT_VARIABLES)}
    clean.update(PYTHONPATH=str(BASE_DIR), AGENTTEST_DEBUG="1", AGENTTEST_VAR_DIR=str(cwd / "var"), **env)
    return subprocess.run(
        [sys.executable, "-m", "agenttest", *args], cwd=cwd, env=clean, capture_output=True, text=True,
        timeout=timeout, check=False,
    )


def apply_command(tmp_path: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    migrated = agenttest(tmp_path, "migrate", "-v0")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return agenttest(tmp_path, "apply", str(directory))


@pytest.mark.parametrize("command", ["apply", "run"])
def test_it_refuses_an_alias_bomb_in_seconds_naming_the_file_and_key(tmp_path, command):
    bomb = f"name: Bomb\nturns:\n- user_message: hi\ninitial_state:\n{alias_bomb(6)}"
    assert len(bomb.encode()) < 700
    directory = repo(tmp_path / "repo", {"suites/support/cases/bomb.yaml": bomb})

    if command == "apply":
        migrated = agenttest(tmp_path, "migrate", "-v0")
        assert migrated.returncode == 0, migrated.stderr[-3000:]

    def timed(where: Path) -> tuple[subprocess.CompletedProcess[str], float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        if command == "apply":
            done = agenttest(tmp_path, "apply", str(where), timeout=600)
        else:
            done = agenttest(where, "run", ".", "--mode", "replay", timeout=600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return done, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

    _, usual = timed(repo(tmp_path / "harmless"))
    done, took = timed(directory)

    # "In seconds" as the CPU the same command spends on a harmless repository, not by a wall clock: a loaded machine
    # stretches the wall time of either (51.9 s against 12.9 s beside a CPU hog and other work), not its CPU, and
    # only an expanded bomb (ten million items) spends more.
    assert took < 3 * usual + 10, f"the bomb took {took:.1f} CPU s, a harmless repository {usual:.1f} CPU s"
    assert done.returncode == 2, done.stdout + done.stderr
    assert "suites/support/cases/bomb.yaml: initial_state.a0: uses a YAML anchor or alias (&a0)" in (
        done.stdout + done.stderr
    )


def test_it_names_each_of_six_faulty_files_at_once_and_exits_2(tmp_path):
    deep = "[" * 3000 + "]" * 3000
    directory = repo(tmp_path / "repo")
    write(directory, {
        "agents/malformed.yaml": "name: [unclosed\n",
        "agents/bomb.yaml": AGENT.replace("support", "bomb") + "rules:\n" + alias_bomb(5),
        "suites/support/cases/deep.yaml": CASE.format(name="Deep") + f"initial_state: {{x: {deep}}}\n",
        "suites/support/cases/twice.yaml": CASE.format(name="Twice") + "description: one\ndescription: two\n",
        "suites/support/cases/list.yaml": "- name: A list\n- turns: []\n",
        "suites/support/cases/nul.yaml": CASE.format(name="Nul") + 'initial_state: {note: "a\\0b"}\n',
    })

    done = apply_command(tmp_path, directory)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "Nothing was changed: 6 problem(s)." in done.stderr
    for expected in (
        "agents/malformed.yaml: is not valid YAML: line 2",
        "agents/bomb.yaml: rules.a0: uses a YAML anchor or alias (&a0)",
        "suites/support/cases/deep.yaml: initial_state.x[0][0][0][0]…: nested more than 64 levels deep",
        "suites/support/cases/twice.yaml: description: the key is written twice (lines 4 and 5)",
        "suites/support/cases/list.yaml: holds a list where a case file holds a mapping of keys",
        "suites/support/cases/nul.yaml: initial_state.note: must not contain NUL (\\u0000)",
    ):
        assert expected in done.stderr, done.stderr


def test_it_names_a_deeply_nested_value_and_a_huge_integer_in_case_files_through_run(tmp_path):
    directory = repo(tmp_path / "repo", {
        "suites/support/cases/deep.yaml": CASE.format(name="Deep") + "initial_state: {x: " + "[" * 3000
        + "]" * 3000 + "}\n",
        "suites/support/cases/huge.yaml": CASE.format(name="Huge") + "initial_state: {x: " + "9" * 4400 + "}\n",
    })

    done = agenttest(directory, "run", ".", "--mode", "replay")

    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "suites/support/cases/deep.yaml: initial_state.x[0][0][0][0]…: nested more than 64 levels deep" in (
        done.stderr
    )
    assert "suites/support/cases/huge.yaml: initial_state.x: integers must be between" in done.stderr


def test_it_says_which_shapes_a_function_may_take_when_an_mcp_entry_is_forged(tmp_path):
    directory = repo(tmp_path / "repo", {
        "agents/forged.yaml": "name: forged\nmodel: scripted:scripted\ninstruction: hi\nfunctions:\n"
        "- mcp: {command: rm, args: [-rf, /]}\n"
        "- {mcp: tickets, tools: [close_ticket], annotations: {readOnlyHint: true}}\n"
        "- {mcp: tickets, name: close_ticket}\n",
    })

    done = apply_command(tmp_path, directory)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "not an object" not in done.stderr
    assert "agents/forged.yaml: functions[0].mcp: must name an MCP server configured in the MCP file" in done.stderr
    assert "agents/forged.yaml: functions[1].annotations: unknown field 'annotations'; known fields: mcp, tools" in (
        done.stderr
    )
    assert (
        "agents/forged.yaml: functions[2]: must be a string or an object of one of these shapes: "
        "{name, description?, parameters?, output?} or {mcp, tools?}"
    ) in done.stderr


def test_it_refuses_a_non_finite_model_option_and_nul_in_an_mcp_servers_env_on_check(tmp_path):
    write(tmp_path, {
        "providers.toml": '[providers.local]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n\n'
        '[[providers.local.models]]\nname = "m"\nextra_body = { temperature = nan }\n',
        "mcp.toml": '[servers.tickets]\ncommand = "python"\nenv = { TZ = "U\\u0000TC" }\n',
        "good-mcp.toml": '[servers.tickets]\ncommand = "python"\nenv = { TZ = "UTC" }\n',
    })

    nan = agenttest(tmp_path, "check", AGENTTEST_PROVIDERS_FILE="providers.toml")
    nul = agenttest(tmp_path, "check", AGENTTEST_MCP_FILE="mcp.toml")
    good = agenttest(tmp_path, "check", AGENTTEST_MCP_FILE="good-mcp.toml")

    assert nan.returncode != 0
    assert "models[0] (model 'm'): field 'extra_body.temperature': numbers must be finite" in nan.stderr, nan.stderr
    assert nul.returncode != 0
    assert "server 'tickets': env.TZ must not contain NUL" in nul.stderr, nul.stderr
    assert good.returncode == 0, good.stderr


def empty() -> None:
    """Each hypothesis example starts from an empty database (the test's transaction spans them all)."""
    Case.objects.all().delete()
    Suite.objects.all().delete()
    Agent.objects.all().delete()


def _apply(directory: Path) -> tuple[int, str]:
    err = io.StringIO()
    try:
        call_command("apply", str(directory), stdout=io.StringIO(), stderr=err)
    except SystemExit as exited:
        return int(exited.code or 0), err.getvalue()
    return 0, err.getvalue()


@in_the_database
@pytest.mark.parametrize("temperature", [".nan", ".inf", "99", "-0.5"])
def test_it_refuses_an_agent_temperature_the_api_refuses_and_the_agent_list_still_answers(
    tmp_path, admin_client_api, scripted_model, temperature
):
    directory = repo(tmp_path / "repo")
    write(directory, {"agents/support.yaml": AGENT + f"temperature: {temperature}\n"})

    code, err = _apply(directory)
    listed = admin_client_api.get("/api/agents/")  # on PostgreSQL a stored NaN made this a 500

    assert listed.status_code == 200
    assert code == 2
    assert "agents/support.yaml: temperature: must be a number from 0 to 2, or empty (null) for the model's " \
           "default" in err
    assert not Agent.objects.filter(name="support").exists()


DOOR_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)


@in_the_database
@DOOR_SETTINGS
@example(temperature=1e-05)  # YAML 1.1 reads `1e-05` as text
@given(temperature=st.floats(min_value=-3, max_value=5) | st.sampled_from([0.0, 2.0, 2.0000001, -1e-9, 1e308]))
def test_it_takes_the_same_temperatures_through_files_the_api_and_the_admin(
    tmp_path_factory, admin_client_api, scripted_model, temperature
):
    allowed = 0 <= temperature <= 2
    empty()
    directory = repo(tmp_path_factory.mktemp("repo"))
    write(directory, {"agents/support.yaml": AGENT + f"temperature: {temperature!r}\n"})

    code, err = _apply(directory)
    api = admin_client_api.post("/api/agents/", {
        "name": "api", "instruction": "hi", "provider": "scripted", "model": "scripted",
        "temperature": temperature,
    }, format="json")
    form = AgentAdminForm(data={
        "name": "admin", "instruction": "hi", "provider": "scripted", "model": "scripted",
        "temperature": repr(temperature), "functions": "[]", "rules": "[]",
    })

    assert (code == 0) is allowed, err
    assert (api.status_code == 201) is allowed, api.content
    assert ("temperature" not in form.errors) is allowed, form.errors
    if allowed:
        assert math.isclose(Agent.objects.get(name="support").temperature, temperature, abs_tol=1e-12)
        assert Agent.objects.get(name="api").temperature == temperature
    else:
        assert "must be a number from 0 to 2" in str(api.json()["temperature"])
        assert "must be a number from 0 to 2" in " ".join(form.errors["temperature"])


@in_the_database
@pytest.mark.parametrize(("max_steps", "allowed"), [(0, False), (1, True), (1000, True), (1001, False)])
def test_it_takes_the_same_max_steps_through_files_the_api_and_the_admin(
    tmp_path, admin_client_api, scripted_model, max_steps, allowed
):
    directory = repo(tmp_path / "repo")
    write(directory, {"agents/support.yaml": AGENT + f"max_steps: {max_steps}\n"})

    code, _ = _apply(directory)
    api = admin_client_api.post("/api/agents/", {
        "name": "api", "instruction": "hi", "provider": "scripted", "model": "scripted", "max_steps": max_steps,
    }, format="json")
    form = AgentAdminForm(data={
        "name": "admin", "instruction": "hi", "provider": "scripted", "model": "scripted",
        "max_steps": str(max_steps), "functions": "[]", "rules": "[]",
    })

    assert (code == 0) is allowed
    assert (api.status_code == 201) is allowed, api.content
    assert ("max_steps" not in form.errors) is allowed, form.errors


@in_the_database
@DOOR_SETTINGS
@given(depth=st.integers(min_value=1, max_value=3000), mapping=st.booleans())
def test_it_refuses_any_nesting_past_the_limit_and_keeps_any_within(tmp_path_factory, scripted_model, depth, mapping):
    value = "{a: " * depth + "1" + "}" * depth if mapping else "[" * depth + "1" + "]" * depth
    empty()
    status = CASE.format(name="Status") + f"initial_state: {{x: {value}}}\n"
    directory = repo(tmp_path_factory.mktemp("repo"), {"suites/support/cases/status.yaml": status})

    code, err = _apply(directory)

    # The file's own mapping, initial_state and the value: 64 levels in all at most, as a JSON body to the API.
    if depth + 2 <= 64:
        assert code == 0, err
        assert Case.objects.get(name="Status").initial_state["x"] is not None
    else:
        assert code == 2
        assert "suites/support/cases/status.yaml: initial_state.x" in err
        assert "nested more than 64 levels deep" in err


@in_the_database
@DOOR_SETTINGS
@given(digits=st.integers(min_value=1, max_value=6000), negative=st.booleans())
def test_it_stores_any_integer_in_range_exactly_and_names_any_other(tmp_path_factory, scripted_model, digits, negative):
    text = ("-" if negative else "") + "7" * digits
    empty()
    status = CASE.format(name="Status") + f"initial_state: {{n: {text}}}\n"
    directory = repo(tmp_path_factory.mktemp("repo"), {"suites/support/cases/status.yaml": status})

    code, err = _apply(directory)

    if digits <= 19:  # 7777777777777777777 < 2**63 - 1 < 77777777777777777777
        assert code == 0, err
        assert Case.objects.get(name="Status").initial_state == {"n": int(text)}
    else:
        assert code == 2
        assert "suites/support/cases/status.yaml: initial_state.n: integers must be between" in err
        assert "Traceback" not in err


@in_the_database
@DOOR_SETTINGS
@given(
    path=st.lists(st.sampled_from(["a", "b", 0]), min_size=0, max_size=6),
    alias=st.booleans(),
)
def test_it_refuses_an_anchor_or_alias_wherever_it_stands_naming_its_key(tmp_path_factory, path, alias):
    # The value at initial_state.<path> carries an anchor (or is an alias of one defined beside initial_state).
    marked = "*spot" if alias else "&spot 1"
    value = marked
    for step in reversed(path):
        value = f"[{value}]" if step == 0 else f"{{{step}: {value}}}"
    where = "initial_state.x" + "".join(f"[{step}]" if step == 0 else f".{step}" for step in path)
    extra = "description: &spot here\n" if alias else ""
    directory = repo(tmp_path_factory.mktemp("repo"))
    write(directory, {
        "suites/support/cases/status.yaml": CASE.format(name="Status") + extra + f"initial_state: {{x: {value}}}\n",
    })

    code, err = _apply(directory)

    assert code == 2
    if alias:
        assert "suites/support/cases/status.yaml: description: uses a YAML anchor or alias (&spot)" in err
    else:
        assert f"suites/support/cases/status.yaml: {where}: uses a YAML anchor or alias (&spot)" in err


@in_the_database
@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("!!binary aGVsbG8=", "the tag !!binary"),
        ("!!set {a: null}", "the tag !!set"),
        ("!!timestamp 2024-05-01", "the tag !!timestamp"),
        ("!!omap [{a: 1}]", "the tag !!omap"),
        ("{<<: {a: 1}, b: 2}", "a merge key (<<)"),
    ],
)
def test_it_refuses_a_yaml_tag_of_anything_but_plain_data_naming_its_key(tmp_path, value, what):
    status = CASE.format(name="Status") + f"initial_state: {{x: {value}}}\n"
    directory = repo(tmp_path / "repo", {"suites/support/cases/status.yaml": status})

    code, err = _apply(directory)

    assert code == 2
    assert "suites/support/cases/status.yaml: initial_state.x" in err
    assert f"uses {what}: agenttest files hold plain data only" in err
    assert not Case.objects.exists()
