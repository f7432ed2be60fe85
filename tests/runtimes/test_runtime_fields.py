"""An agent's `runtime` and `entry` in the API, the admin and the agent files: a clear 400 naming the field, an entry
that does not import answered with its error naming the entry point, and nothing stored on a refusal."""

from __future__ import annotations

import pytest
import yaml

from agenthost.models import Agent
from cases.files import agent_file, files_apply

# Any configured model will do: these tests are about the runtime's fields, and the agent never answers.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("scripted_model")]


def _payload(**overrides):
    return {"name": "shop", "provider": "scripted", "model": "scripted", **overrides}


def test_it_creates_an_agent_whose_runtime_is_the_teams_code(admin_client_api, team_repo):
    package = team_repo()

    response = admin_client_api.post(
        "/api/agents/", _payload(runtime="python", entry=f"{package}.bot:respond"), format="json"
    )

    assert response.status_code == 201, response.data
    assert (response.data["runtime"], response.data["entry"]) == ("python", f"{package}.bot:respond")
    assert Agent.objects.get(name="shop").runtime == "python"


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"runtime": "langchain", "entry": "x.y:z"}, "runtime", "'langchain' is not available"),
        ({"runtime": "python"}, "entry", "needs the team's code"),
        ({"runtime": "python", "entry": "shop bot"}, "entry", '"module:attribute"'),
        ({"runtime": "python", "entry": "no_such_shop_module.bot:respond"}, "entry",
         "entry point 'no_such_shop_module.bot:respond' failed to import: ModuleNotFoundError"),
        ({"runtime": "native", "entry": "x.y:z", "instruction": "Help."}, "entry", "must be empty"),
        ({"runtime": "native"}, "instruction", "must not be empty"),
        ({"runtime": "native", "instruction": "Help.", "outside_effects": {"find_order": False}}, "outside_effects",
         "a native agent's functions declare their effects themselves"),
    ],
)
def test_it_names_the_field_of_each_runtime_error(admin_client_api, overrides, field, fragment):
    response = admin_client_api.post("/api/agents/", _payload(**overrides), format="json")

    assert response.status_code == 400
    assert fragment in " ".join(str(message) for message in response.data[field]), response.data
    assert not Agent.objects.filter(name="shop").exists()


def test_it_names_the_entry_point_and_the_error_when_the_teams_module_fails_to_import(admin_client_api, team_repo):
    package = team_repo("raise RuntimeError('the shop database is not configured')\n")

    response = admin_client_api.post(
        "/api/agents/", _payload(runtime="python", entry=f"{package}.bot:respond"), format="json"
    )

    assert response.status_code == 400
    assert response.data["entry"] == [
        f"entry point '{package}.bot:respond' failed to import: RuntimeError: the shop database is not configured"
    ]


def test_it_says_a_placeholder_key_will_do_when_the_teams_module_builds_a_model_client_at_import(
    admin_client_api, team_repo, monkeypatch
):
    # As pydantic-ai's `Agent("openai:…")` does: the openai SDK refuses to build a client without a key, even empty.
    monkeypatch.setenv("OPENAI_API_KEY", "")
    package = team_repo("from openai import OpenAI\n\nclient = OpenAI()\n")

    response = admin_client_api.post(
        "/api/agents/", _payload(runtime="python", entry=f"{package}.bot:respond"), format="json"
    )

    assert response.status_code == 400
    (message,) = response.data["entry"]
    assert message.startswith(f"entry point '{package}.bot:respond' failed to import: OpenAIError: "), message
    assert message.endswith(
        "The module builds a model client when it is imported, which wants OPENAI_API_KEY; under agenttest the "
        "agent's model calls go through agenttest's model layer, never with that key, so set it to any placeholder "
        "(e.g. OPENAI_API_KEY=unused; the openai SDK refuses an empty one)"
    ), message


def test_it_refuses_a_redeclared_instruction_or_tools_for_an_agent_of_the_teams_code(admin_client_api, team_repo):
    package = team_repo()

    response = admin_client_api.post(
        "/api/agents/",
        _payload(runtime="python", entry=f"{package}.bot:respond", instruction="Be nice.",
                 functions=[{"name": "find_order"}]),
        format="json",
    )

    assert response.status_code == 400
    assert "the agent's code at its entry point defines it" in str(response.data["instruction"])
    assert "the agent's code at its entry point defines it" in str(response.data["functions"])


def test_it_applies_and_exports_an_agent_file_naming_a_runtime(team_repo, tmp_path):
    package = team_repo()
    (tmp_path / "files" / "agents").mkdir(parents=True)
    document = {
        "name": "shop", "runtime": "python", "entry": f"{package}.bot:respond", "model": "scripted:scripted",
        "outside_effects": {"find_order": False},
    }
    (tmp_path / "files" / "agents" / "shop.yaml").write_text(yaml.safe_dump(document))

    files_apply(directory=tmp_path / "files")

    agent = Agent.objects.get(name="shop")
    assert (agent.runtime, agent.entry, agent.instruction) == ("python", f"{package}.bot:respond", "")
    assert agent.outside_effects == {"find_order": False}
    # Exported as it was written: no instruction file, the entry point named.
    assert agent_file(agent, "") == document


def test_it_shows_the_fields_that_come_from_code_read_only_in_the_admin(admin_client, team_repo):
    package = team_repo()
    agent = Agent.objects.create(name="shop", runtime="python", entry=f"{package}.bot:respond",
                                 provider="scripted", model="scripted")

    page = admin_client.get(f"/admin/agenthost/agent/{agent.pk}/change/").content.decode()

    assert 'name="provider"' in page
    assert 'name="entry"' not in page and 'name="instruction"' not in page and 'name="functions"' not in page
    assert f"{package}.bot:respond" in page
