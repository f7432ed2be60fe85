"""A process agent's snapshots in the team's files (cases/snapshot_files.py): applying reads
`suites/<suite>/snapshots/<case file>.jsonl` into the case's snapshotMatches assertion; a snapshot with no case
asserting it, one that is not JSON lines, or an `expected` written into the case file is refused naming the file and
the place, and nothing is applied; export writes the snapshot back beside the case, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cases.files import FilesRejected, files_apply, files_export
from cases.models import Assertion, Case
from tests.cases.test_files import write

pytestmark = pytest.mark.django_db

AGENT = """\
name: shop
runtime: process
command: "true"
protocol: jsonl
model: scripted:scripted
"""
NATIVE = """\
name: helper
model: scripted:scripted
instruction: Help.
"""
SUITE = "name: Shop\nagent: shop\n"
CASE = """\
name: Shipping
turns:
- user_message: How long does shipping take?
assertions:
- type: snapshotMatches
"""
SAID = [{"turn": 0, "reply": {"reply": "Two working days."}}, {"turn": 1, "reply": {"reply": "Yes — by invoice."}}]
SNAPSHOT = "".join(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n" for entry in SAID)


@pytest.fixture
def repo(tmp_path, scripted_model) -> Path:
    return write(tmp_path / "repo", {
        "agents/shop.yaml": AGENT,
        "agents/helper.yaml": NATIVE,
        "suites/shop/suite.yaml": SUITE,
        "suites/shop/cases/shipping.yaml": CASE,
        "suites/shop/snapshots/shipping.jsonl": SNAPSHOT,
    })


def _expected() -> object:
    return Assertion.objects.get(case__name="Shipping", type="snapshotMatches").params.get("expected")


def _refused(repo: Path) -> list[str]:
    with pytest.raises(FilesRejected) as refused:
        files_apply(directory=repo)
    assert not Case.objects.exists()
    return [str(problem) for problem in refused.value.problems]


def test_it_reads_the_cases_snapshot_into_its_assertion(repo):
    files_apply(directory=repo)

    assert _expected() == SAID


def test_it_applies_a_case_with_no_snapshot_yet_as_one_that_has_none(repo):
    (repo / "suites/shop/snapshots/shipping.jsonl").unlink()

    files_apply(directory=repo)

    assert _expected() is None


def test_it_refuses_a_snapshot_no_case_asserts(repo):
    write(repo, {"suites/shop/snapshots/renamed.jsonl": SNAPSHOT, "suites/shop/snapshots/notes.txt": "x",
                 "suites/shop/snapshots/.gitkeep": ""})

    assert _refused(repo) == [
        "suites/shop/snapshots/notes.txt: is no snapshot: snapshots/ holds only <case file>.jsonl files",
        "suites/shop/snapshots/renamed.jsonl: is no case's snapshot: suites/shop/cases/renamed.yaml does not assert "
        "snapshotMatches (delete the file, or add the assertion to the case)",
    ]


def test_it_refuses_a_snapshot_whose_case_no_longer_asserts_it(repo):
    write(repo, {"suites/shop/cases/shipping.yaml": CASE.replace("snapshotMatches", "noBlockedTools")})

    assert _refused(repo) == [
        "suites/shop/snapshots/shipping.jsonl: is no case's snapshot: suites/shop/cases/shipping.yaml does not "
        "assert snapshotMatches (delete the file, or add the assertion to the case)",
    ]


@pytest.mark.parametrize(("text", "problem"), [
    ('{"turn": 0}\nnot json\n', "suites/shop/snapshots/shipping.jsonl: line 2: is not JSON"),
    ('{"turn": 0}\n[1, 2]\n', "suites/shop/snapshots/shipping.jsonl: line 2: holds list JSON: each line of a "
                              "snapshot is an object"),
    ('{"turn": NaN}\n', "suites/shop/snapshots/shipping.jsonl: line 1"),
    ('{"turn": "\\u0000"}\n', "suites/shop/snapshots/shipping.jsonl: line 1"),
])
def test_it_refuses_a_snapshot_that_is_not_json_objects_naming_the_line(repo, text, problem):
    write(repo, {"suites/shop/snapshots/shipping.jsonl": text})

    [said] = _refused(repo)

    assert said.startswith(problem)


def test_it_refuses_a_snapshot_written_into_the_case_file(repo):
    write(repo, {"suites/shop/cases/shipping.yaml": CASE + "  params:\n    expected: []\n"})

    assert _refused(repo) == [
        "suites/shop/cases/shipping.yaml: assertions[0].params.expected: is kept in "
        "suites/shop/snapshots/shipping.jsonl (written by `agenttest run DIR --update-snapshots`), not in the case "
        "file",
    ]


def test_it_refuses_a_snapshot_for_an_agent_that_is_no_program_and_at_a_turn(repo):
    write(repo, {
        "suites/shop/cases/shipping.yaml": CASE + "entry_agent: helper\n",
        "suites/shop/cases/turn.yaml": "name: Turn\nturns:\n- user_message: hi\n  assertions:\n"
                                       "  - type: snapshotMatches\n",
    })

    assert _refused(repo) == [
        "suites/shop/cases/shipping.yaml: assertions[0].type: snapshotMatches compares what a process agent's "
        "program says over its protocol (runtime 'process'); agent 'helper' runs on runtime 'native'",
        "suites/shop/cases/turn.yaml: turns[0].assertions[0].type: snapshotMatches compares everything the agent's "
        "program said in the case: put it in the case's assertions, not a turn's",
    ]


def test_it_exports_the_snapshot_beside_its_case_byte_for_byte(repo, tmp_path):
    files_apply(directory=repo)
    out = tmp_path / "out"
    write(out, {"suites/shop/snapshots/gone.jsonl": SNAPSHOT})

    report = files_export(directory=out)

    assert (out / "suites/shop/snapshots/shipping.jsonl").read_bytes() == SNAPSHOT.encode()
    assert (out / "suites/shop/cases/shipping.yaml").read_text() == CASE
    assert "suites/shop/snapshots/gone.jsonl" in report.removed
    assert not (out / "suites/shop/snapshots/gone.jsonl").exists()
    assert files_apply(directory=out).changes and _expected() == SAID
