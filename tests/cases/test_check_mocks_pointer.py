"""Issue 36: plain `agenttest check` does not read the database or apply files — the system checks run as every
command starts — so it says that mocks were not checked against their tools' schemas and names the two doors that
list them: `--database default` for the database's cases, `apply DIR --dry-run` for a repository's files, which
refuses a mock a tool's changed schema no longer accepts, naming file and path, and changes nothing."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from cases.models import Case, Suite
from tests.cases.parcel_tools import parcel_tools_install

pytestmark = pytest.mark.django_db

FILES = {
    "agents/parcels.yaml": "name: parcels\nmodel: scripted:scripted\ninstruction: Track parcels.\n"
                           "functions:\n- verify_track_parcel\n",
    "suites/parcels/suite.yaml": "name: Parcels\nagent: parcels\n",
    "suites/parcels/cases/status.yaml": "name: Parcel status\nturns:\n- user_message: Where is P1?\n  assertions:\n"
                                        "  - type: toolCalled\n    params:\n      function: verify_track_parcel\n"
                                        "mocks:\n- function_name: verify_track_parcel\n  arguments:\n"
                                        "    parcel_id: P1\n  result:\n    parcel_id: P1\n"
                                        "    status: in_transit\n    updated_at: x\n",
}


@pytest.fixture
def deployed(scripted_model):
    parcel_tools_install(1)
    yield parcel_tools_install
    parcel_tools_install(1)


def run(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + err.getvalue() + str(exc)
    except SystemExit as exc:  # apply refuses files with exit code 2
        return int(exc.code or 0), out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


def test_it_says_plain_check_did_not_check_mocks_and_where_they_are_checked():
    code, output = run("check")

    assert code == 0
    assert "System check identified" in output
    assert "Mocks were not checked against their tools' schemas" in output
    assert "`agenttest check --database default`" in output and "`agenttest apply DIR --dry-run`" in output
    assert "Mocks were not checked" in run("check", "--tag", "mocks")[1]
    assert "Mocks were not checked" not in run("check", "--database", "default")[1]


def test_it_lists_a_repositorys_mock_its_tool_now_refuses_with_apply_dry_run(deployed, tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert run("apply", str(tmp_path), "--dry-run")[0] == 0

    deployed(2)  # `status` renamed to `state`
    code, output = run("apply", str(tmp_path), "--dry-run")

    assert code == 2
    assert "suites/parcels/cases/status.yaml: mocks[0].result: 'state' is a required property" in output
    assert not Suite.objects.exists() and not Case.objects.exists()
