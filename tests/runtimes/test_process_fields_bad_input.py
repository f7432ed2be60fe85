"""Malformed fields of a process agent (`command`, `args`, `cwd`, `env`, `protocol`: agenthost/runtimes/process.py)
through the doors a team writes an agent by — the agents API, created or changed, and an agent file applied: each
bad value is refused naming its field, never with a 5xx or a traceback, and nothing is stored."""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.models import Agent
from cases.files import FilesRejected, files_apply
from common.inputs import ENV_NAME
from tests.properties import SUPPRESSED_WITH_FIXTURES

# The scripted model is any configured model: the agent never answers, and only the field under test is bad.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("scripted_model")]

# A process agent that can start, each field of it good; every example spoils one.
GOOD = {
    "name": "shop", "runtime": "process", "command": sys.executable, "args": ["agent.py"], "cwd": "",
    "env": ["SHOP_REGION"], "protocol": "jsonl",
}
MODEL = {"provider": "scripted", "model": "scripted"}
FIELDS = ("command", "args", "cwd", "env", "protocol")
EXAMPLES = 30

_word = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8)
# Text no database stores: a NUL, or a lone surrogate.
_unstorable = st.builds(lambda text, bad: text + bad, st.text(max_size=4), st.sampled_from(["\x00", "\ud800"]))
_not_text = st.one_of(
    st.integers(-1000, 1000), st.booleans(), st.none(), st.lists(st.integers(0, 9), min_size=1, max_size=2),
    st.dictionaries(_word, st.integers(0, 9), max_size=1),
)
_not_a_list = st.one_of(_word, st.integers(-1000, 1000), st.booleans(), st.none(),
                        st.dictionaries(_word, _word, max_size=1))
_not_a_string = st.one_of(st.integers(-1000, 1000), st.booleans(), st.none(), st.lists(_word, max_size=1),
                          st.dictionaries(_word, _word, max_size=1))
_bad_env_name = st.one_of(
    st.text(max_size=8).filter(lambda name: ENV_NAME.fullmatch(name) is None),
    # A name with a line end after it: a pattern anchored with `$` took it.
    st.builds(lambda name: f"SHOP_{name}\n", _word),
    st.sampled_from(["OPENAI_API_KEY", "OPENAI_BASE_URL"]),
)


def _spoilt(good: list[str], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """The good list with one bad item put in somewhere."""
    return st.builds(lambda index, item: [*good[:index], item, *good[index:]], st.integers(0, len(good)), bad)


BAD: dict[str, st.SearchStrategy[Any]] = {
    "command": st.one_of(
        _not_text, _unstorable, st.sampled_from(["", " ", "\t\n"]),
        st.builds(lambda name: f"no-such-program-{name}", _word),
        st.builds(lambda name: f"./no-such-dir/{name}", _word),
        # A program that is there, named past the column's length.
        st.just("/" * 300 + sys.executable.lstrip("/")),
    ),
    "args": st.one_of(_not_a_list, _spoilt(GOOD["args"], st.one_of(_not_a_string, _unstorable))),
    "cwd": st.one_of(
        _not_text, _unstorable, st.builds(lambda name: f"no-such-dir-{name}", _word),
        # A directory that is there (this one), named past the column's length.
        st.just("./" * 151),
    ),
    "env": st.one_of(_not_a_list, _spoilt(GOOD["env"], st.one_of(_not_a_string, _unstorable, _bad_env_name))),
    # The API trims a protocol's surrounding space, as it does any plain text field's: " jsonl" is "jsonl" there.
    "protocol": st.one_of(_not_text, _unstorable, st.text(max_size=25).filter(lambda text: text.strip() != "jsonl")),
}


def _bad_field() -> st.SearchStrategy[tuple[str, Any]]:
    return st.sampled_from(FIELDS).flatmap(lambda field: st.tuples(st.just(field), BAD[field]))


FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=SUPPRESSED_WITH_FIXTURES)


@pytest.fixture(autouse=True)
def _where_agenttest_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `cwd` and a relative `command` are read from where agenttest runs: a directory that holds none of them.
    monkeypatch.chdir(tmp_path)


def _apply_file(directory: Path, document: dict[str, Any]) -> list[str]:
    """The problems `agenttest apply` names for one agent file, as `field: message`; [] when it was applied. JSON is
    the file's text: YAML reads it, and it can write any bad value (a lone surrogate escaped)."""
    (directory / "agents").mkdir(parents=True)
    (directory / "agents" / "shop.yaml").write_text(json.dumps(document), encoding="utf-8")
    try:
        files_apply(directory=directory)
    except FilesRejected as rejected:
        return [f"{problem.field}: {problem.message}" for problem in rejected.problems]
    return []


def _json(body: dict[str, Any]) -> str:
    # Escaped as a client that writes JSON in ASCII sends it: a lone surrogate has no UTF-8 to be sent in.
    return json.dumps(body)


def _names(problems: list[str], field: str) -> bool:
    return any(problem.startswith((f"{field}: ", f"{field}[")) for problem in problems)


@FUZZ
@given(bad=_bad_field())
def test_it_refuses_a_bad_process_field_in_an_agent_file_naming_it(tmp_path_factory, bad):
    field, value = bad

    problems = _apply_file(tmp_path_factory.mktemp("repo"), {
        **GOOD, "model": "scripted:scripted", field: value,
    })

    assert _names(problems, field), problems
    assert not Agent.objects.exists()


@FUZZ
@given(bad=_bad_field())
def test_it_answers_a_bad_process_field_in_the_api_with_a_400_naming_it(admin_client_api, bad):
    field, value = bad

    response = admin_client_api.post("/api/agents/", _json({**GOOD, **MODEL, field: value}),
                                     content_type="application/json")

    assert response.status_code == 400, response.content
    assert field in response.json(), response.content
    assert not Agent.objects.exists()


@FUZZ
@given(bad=_bad_field())
def test_it_leaves_a_process_agent_as_it_was_when_a_change_to_it_is_bad(admin_client_api, bad):
    field, value = bad
    agent = Agent.objects.create(**GOOD, **MODEL)

    response = admin_client_api.patch(f"/api/agents/{agent.pk}/", _json({field: value}),
                                      content_type="application/json")

    assert response.status_code == 400, response.content
    assert field in response.json(), response.content
    agent.refresh_from_db()
    assert {name: getattr(agent, name) for name in FIELDS} == {name: GOOD[name] for name in FIELDS}
    agent.delete()


# Found by the fuzz above, kept as plain examples.


def test_it_refuses_an_environment_variable_name_with_a_line_end_after_it(admin_client_api, tmp_path):
    response = admin_client_api.post("/api/agents/", {**GOOD, **MODEL, "env": ["SHOP_REGION\n"]}, format="json")
    problems = _apply_file(tmp_path / "repo", {**GOOD, "model": "scripted:scripted", "env": ["SHOP_REGION\n"]})

    assert response.status_code == 400
    assert response.json() == {"env": ["'SHOP_REGION\\n' is not an environment variable name (letters, digits, _)"]}
    assert problems == ["env: 'SHOP_REGION\\n' is not an environment variable name (letters, digits, _)"]
    assert not Agent.objects.exists()


@pytest.mark.parametrize(("field", "value"), [
    ("command", "/" * 300 + sys.executable.lstrip("/")),
    ("cwd", "./" * 151),
    ("entry", "shop.bot:" + "x" * 300),
    ("deps", "shop.deps:" + "x" * 300),
])
def test_it_refuses_in_an_agent_file_a_path_longer_than_the_api_takes(tmp_path, field, value):
    # Written to the database before it was checked, PostgreSQL refused it there: a traceback, not a problem.
    problems = _apply_file(tmp_path / "repo", {**GOOD, "model": "scripted:scripted", field: value})

    assert f"{field}: must be at most 300 characters" in problems
    assert not Agent.objects.exists()
