"""`agenttest traces import FILE...`: the collector's file exporter's output (JSON Lines) and a pretty-printed request,
with the receiver's validation and limits; a bad file is named with its line and nothing of it is stored."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.traces.conftest import CONTENT, stored
from traces.models import TraceSpan

pytestmark = pytest.mark.django_db


def json_request(*spans: dict, service: str = "shop") -> dict:
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"scope": {"name": "openinference.instrumentation.langchain"}, "spans": list(spans)}],
    }]}


def json_span(trace: int, span_id: int, name: str = "ChatOpenAI", **attributes: str) -> dict:
    return {"traceId": f"{trace:032x}", "spanId": f"{span_id:016x}", "name": name, "kind": 1,
            "startTimeUnixNano": str(1000 * span_id), "endTimeUnixNano": str(1000 * span_id + 500),
            "attributes": [{"key": key, "value": {"stringValue": value}} for key, value in attributes.items()]}


def import_files(*paths: Path) -> tuple[str, str, int]:
    out, err = StringIO(), StringIO()
    try:
        call_command("traces", "import", *map(str, paths), stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue() + str(exc), exc.returncode
    return out.getvalue(), err.getvalue(), 0


def test_it_imports_json_lines_and_a_pretty_printed_request_and_says_what_it_stored(tmp_path):
    lines = tmp_path / "traces.jsonl"
    lines.write_text("\n".join([
        json.dumps(json_request(json_span(1, 1, **{"session.id": "chat-7", CONTENT: "hello"}),
                                json_span(1, 2), json_span(0, 3, name="no trace id"))),
        "",
        json.dumps(json_request(json_span(1, 2), json_span(2, 1))),  # a span of line 1 again: a duplicate
    ]) + "\n")
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(json_request(json_span(3, 1)), indent=2))

    out, err, code = import_files(lines, pretty)

    assert code == 0, err
    assert [line for line in out.splitlines() if not line.startswith("  ")] == [
        f"{lines}: 3 new span(s), 1 duplicate(s), 1 rejected; 2 conversation(s): "
        f"{2:032x}, chat-7",
        f"{pretty}: 1 new span(s), 0 duplicate(s), 0 rejected; 1 conversation(s): {3:032x}",
    ]
    # No model call of a known dialect, no agent named by the trace: stored spans, but no conversation to record.
    assert f"  {2:032x}: not imported as a conversation: its spans hold no model call of a known dialect" in out
    assert err.strip().startswith(f"{lines}:1: 1 span(s) rejected: span 'no trace id'")
    assert TraceSpan.objects.get(trace_id=f"{1:032x}", span_id=f"{1:016x}").attributes[CONTENT] == "hello"
    assert TraceSpan.objects.count() == 4


def test_it_names_the_file_and_line_of_bad_input_and_stores_nothing_of_that_file(tmp_path, settings):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(json_request(json_span(1, 1))) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(json_request(json_span(2, 1))) + "\n" + '{"resourceSpans": [{"scopeSpans": 7}]}\n')
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "resourceSpans": [\n    {"scopeSpans": [}\n  ]\n}\n')
    settings.AGENTTEST_TRACES_MAX_BODY_BYTES = 2048
    huge = tmp_path / "huge.jsonl"
    huge.write_text(json.dumps(json_request(json_span(4, 1, **{CONTENT: "x" * 4096}))) + "\n")

    out, err, code = import_files(good, bad, broken, huge, tmp_path / "missing.jsonl")

    assert code == 2
    assert out.startswith(f"{good}: 1 new span(s)")
    assert f"rejected: {bad}:2: the request is not an ExportTraceServiceRequest in OTLP/JSON" in err
    assert f"rejected: {broken}:1: the request is not JSON: Expecting value: line 3 column 21" in err
    assert f"rejected: {huge}:1: a line of more than 2048 bytes (AGENTTEST_TRACES_MAX_BODY_BYTES)" in err
    assert "missing.jsonl" in err
    assert err.strip().endswith(f"nothing stored from 4 file(s) with bad input: {bad}, {broken}, {huge}, "
                                f"{tmp_path / 'missing.jsonl'}")
    assert stored() == [(f"{1:032x}", f"{1:016x}")]
