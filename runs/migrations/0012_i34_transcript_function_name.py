"""Stored result transcripts name a call's function `function_name`, as `Message` and the messages API do (decision
0045); results stored before named it `function`. Rewritten in batches, so a large table is never held in memory."""

from typing import Any

from django.db import migrations

BATCH = 500


def _renamed(rows: Any, old: str, new: str) -> tuple[Any, bool]:
    if not isinstance(rows, list):
        return rows, False
    changed = False
    out = []
    for row in rows:
        if isinstance(row, dict) and old in row and new not in row:
            row = {(new if key == old else key): value for key, value in row.items()}
            changed = True
        out.append(row)
    return out, changed


def _rename(apps: Any, old: str, new: str) -> None:
    CaseResult = apps.get_model("runs", "CaseResult")
    last = 0
    while True:
        batch = list(CaseResult.objects.filter(pk__gt=last).order_by("pk").only("pk", "transcript")[:BATCH])
        if not batch:
            return
        for result in batch:
            rows, changed = _renamed(result.transcript, old, new)
            if changed:
                CaseResult.objects.filter(pk=result.pk).update(transcript=rows)
        last = batch[-1].pk


def forwards(apps: Any, schema_editor: Any) -> None:
    _rename(apps, "function", "function_name")


def backwards(apps: Any, schema_editor: Any) -> None:
    _rename(apps, "function_name", "function")


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0011_i24_simulated_user"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
