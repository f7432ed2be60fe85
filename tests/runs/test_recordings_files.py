"""Recordings as committed files: export writes a manifest and one JSONL file per case × model; import takes a
directory whole or not at all, naming every missing, mismatched or orphaned file."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from runs.models import CaseResult, Recording, Run
from runs.services import run_create, run_execute
from runs.tapes.files import MANIFEST, RecordingFilesRejected, recordings_export, recordings_import
from tests.runs.conftest import CAREFUL, HASTY

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def recorded(order_suite, order_desk):
    run = run_create(suite=order_suite, model_keys=[CAREFUL, HASTY], mode=Run.Mode.RECORD)
    run_execute(run_id=run.pk)
    return order_suite


@pytest.fixture
def exported(recorded, tmp_path):
    directory = tmp_path / "recordings"
    call_command("recordings", "export", recorded.name, "--dir", str(directory))
    return directory


def manifest(directory) -> dict:
    return json.loads((directory / MANIFEST).read_text())


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path, values) -> None:
    path.write_text("".join(json.dumps(value) + "\n" for value in values))


def rejected(directory) -> list[str]:
    with pytest.raises(RecordingFilesRejected) as raised:
        recordings_import(directory=directory)
    return raised.value.problems


def test_it_round_trips_recordings_through_files_and_replays_them(recorded, exported):
    listed = manifest(exported)["recordings"]
    assert manifest(exported)["suite"] == "orders"
    assert sorted((item["case"], item["model"]) for item in listed) == [
        ("cancels the order", CAREFUL), ("cancels the order", HASTY),
        ("looks the order up first", CAREFUL), ("looks the order up first", HASTY),
    ]
    before = {(r.case.name, r.model): (r.entries, r.recorded_at) for r in Recording.objects.select_related("case")}
    first = exported / listed[0]["file"]
    header, *entries = lines(first)
    assert (header["case"], header["model"], header["entries"]) == (listed[0]["case"], listed[0]["model"],
                                                                    len(entries))
    Recording.objects.all().delete()

    call_command("recordings", "import", str(exported))

    after = {(r.case.name, r.model): (r.entries, r.recorded_at) for r in Recording.objects.select_related("case")}
    assert after == before
    assert set(Recording.objects.values_list("source", flat=True)) == {Recording.Source.IMPORT}
    run = run_execute(run_id=run_create(suite=recorded, model_keys=[CAREFUL, HASTY], mode=Run.Mode.REPLAY).pk)
    assert not CaseResult.objects.filter(run=run, status="error").exists()


def test_it_rejects_an_orphaned_file_and_imports_nothing(exported):
    (exported / "someone-elses-case.scripted-careful.jsonl").write_text("{}\n")
    Recording.objects.all().delete()

    problems = rejected(exported)

    assert problems == [
        "someone-elses-case.scripted-careful.jsonl: orphaned — recordings.json does not list it; delete it or "
        "export the recordings again"
    ]
    assert not Recording.objects.exists()


def test_it_rejects_a_file_whose_header_disagrees_with_the_manifest(exported):
    item = manifest(exported)["recordings"][0]
    path = exported / item["file"]
    header, *entries = lines(path)
    write_lines(path, [{**header, "model": "scripted:other"}, *entries])

    problems = rejected(exported)

    assert problems == [
        f"{item['file']}: mismatched — recordings.json lists it for case {item['case']!r} on {item['model']} of "
        f"suite 'orders', but its header says case {item['case']!r} on scripted:other of suite 'orders'"
    ]


def test_it_rejects_a_missing_file_an_edited_request_and_a_case_the_suite_lacks_one_message_each(exported):
    data = manifest(exported)
    gone, edited, renamed = data["recordings"][:3]
    (exported / gone["file"]).unlink()
    header, first, *rest = lines(exported / edited["file"])
    first["request"]["messages"][0]["content"] = "edited by hand"
    write_lines(exported / edited["file"], [header, first, *rest])
    header, *entries = lines(exported / renamed["file"])
    write_lines(exported / renamed["file"], [{**header, "case": "no such case"}, *entries])
    renamed["case"] = "no such case"
    (exported / MANIFEST).write_text(json.dumps(data))

    problems = rejected(exported)

    assert problems == [
        f"{gone['file']}: missing — recordings.json lists it for case {gone['case']!r} on {gone['model']}",
        f"{edited['file']}: entry 1: mismatched — its request_hash is not the hash of its request (was the request "
        "edited?)",
        f"{renamed['file']}: mismatched — suite 'orders' has no case named 'no such case'",
    ]


def test_the_import_command_prints_each_problem_and_exits_2(exported, capsys):
    (exported / "stray.jsonl").write_text("")

    with pytest.raises(CommandError) as raised:
        call_command("recordings", "import", str(exported))

    assert raised.value.returncode == 2
    assert "nothing imported" in str(raised.value)
    assert "rejected: stray.jsonl: orphaned" in capsys.readouterr().err


def test_it_rejects_a_directory_without_a_manifest(tmp_path):
    assert rejected(tmp_path) == [
        "recordings.json: missing — the directory has no manifest; export the recordings to create one"
    ]


def test_export_removes_files_that_are_no_longer_recordings_of_the_suite(recorded, exported):
    (exported / "old-case.scripted-careful.jsonl").write_text("{}\n")
    hasty_files = [item["file"] for item in manifest(exported)["recordings"] if item["model"] == HASTY]

    report = recordings_export(suite=recorded, directory=exported, models=[CAREFUL])

    assert report.removed == sorted(["old-case.scripted-careful.jsonl", *hasty_files])
    assert sorted(path.name for path in exported.glob("*.jsonl")) == sorted(report.written)
    assert {item["model"] for item in manifest(exported)["recordings"]} == {CAREFUL}
    recordings_import(directory=exported)
