"""Test conversations do not pile up: deleting a run deletes the conversations it made, and
`prune_test_conversations` deletes old ones — never a user's, never one of a run still in progress."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost.models import Conversation
from runs.models import CaseResult, Run
from runs.services import run_create, run_execute
from tests.properties import SUPPRESSED_WITH_FIXTURES
from tests.runs.conftest import CAREFUL

pytestmark = pytest.mark.django_db(transaction=True)

# Only the harness seals a conversation (runs/engine/case_runner.py); a test conversation stood in for here carries
# a seal.
SEALED = "0" * 64


@pytest.fixture
def executed(order_suite, order_desk):
    """Two finished runs of the same suite, with their real test conversations."""
    return [run_execute(run_id=run_create(suite=order_suite, model_keys=[CAREFUL]).pk) for _ in range(2)]


def conversations_of(run: Run) -> set[int]:
    return set(CaseResult.objects.filter(run=run).values_list("conversation_id", flat=True))


def test_it_deletes_a_runs_test_conversations_with_the_run_through_the_api(executed, admin_client_api, order_agent):
    doomed, kept = executed
    doomed_conversations, kept_conversations = conversations_of(doomed), conversations_of(kept)
    assert len(doomed_conversations) == 2 and None not in doomed_conversations
    user_chat = Conversation.objects.create(agent=order_agent, title="a user's chat", tags=[f"run:{doomed.pk}"])

    assert admin_client_api.delete(f"/api/runs/{doomed.pk}/").status_code == 204

    remaining = set(Conversation.objects.values_list("pk", flat=True))
    assert not doomed_conversations & remaining
    assert kept_conversations | {user_chat.pk} <= remaining


def test_it_deletes_the_conversations_of_runs_deleted_in_bulk_and_of_a_case_that_stored_no_result(
    executed, admin_client_api, order_agent
):
    first, second = executed
    # A case that crashed before its result was stored leaves a (sealed) conversation tagged with its run only.
    orphan = Conversation.objects.create(agent=order_agent, tags=["agenttest", f"run:{first.pk}"], seal_hash=SEALED)
    lookalike = Conversation.objects.create(agent=order_agent, tags=["agenttest", f"run:{first.pk}0"], seal_hash=SEALED)
    response = admin_client_api.post("/api/runs/delete/", {"ids": [first.pk, second.pk]}, format="json")
    assert response.status_code == 200 and sorted(response.json()["deleted"]) == [first.pk, second.pk]
    assert list(Conversation.objects.values_list("pk", flat=True)) == [lookalike.pk]
    assert orphan.pk not in Conversation.objects.values_list("pk", flat=True)


def _aged(conversation: Conversation, days: float) -> Conversation:
    Conversation.objects.filter(pk=conversation.pk).update(created_at=timezone.now() - timedelta(days=days))
    return conversation


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prune_test_conversations", *args, stdout=out)
    return out.getvalue()


def test_it_prunes_old_test_conversations_only_and_never_one_of_a_running_run(order_suite, order_agent):
    running = Run.objects.create(suite=order_suite, model_keys=[CAREFUL], status=Run.Status.RUNNING, total=1)
    old_test = _aged(
        Conversation.objects.create(agent=order_agent, tags=["agenttest", "run:999"], seal_hash=SEALED), 40
    )
    old_running = _aged(
        Conversation.objects.create(agent=order_agent, tags=["agenttest", f"run:{running.pk}"], seal_hash=SEALED), 40
    )
    young_test = _aged(Conversation.objects.create(agent=order_agent, tags=["agenttest"], seal_hash=SEALED), 10)
    old_user = _aged(Conversation.objects.create(agent=order_agent, tags=["support"], title="agenttest"), 400)

    assert prune("--older-than", "30", "--dry-run") == "would delete 1 test conversation(s) older than 30 day(s)\n"
    assert Conversation.objects.count() == 4
    assert prune("--older-than", "30") == "deleted 1 test conversation(s) older than 30 day(s)\n"
    remaining = set(Conversation.objects.values_list("pk", flat=True))
    assert remaining == {old_running.pk, young_test.pk, old_user.pk}
    assert old_test.pk not in remaining
    assert prune("--older-than", "5") == "deleted 1 test conversation(s) older than 5 day(s)\n"
    assert set(Conversation.objects.values_list("pk", flat=True)) == {old_running.pk, old_user.pk}


@settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESSED_WITH_FIXTURES)
@given(
    days=st.one_of(
        st.sampled_from(["0", "-3", "1.5", "³", "٣", "1e3", "", " 7", "99999999999999999999999", "36501", "seven"]),
        st.text(max_size=8).filter(lambda text: not (text.isascii() and text.isdigit() and 1 <= int(text) <= 36500)),
    )
)
def test_it_refuses_an_age_that_is_not_a_positive_number_of_days_naming_the_option(days, order_agent):
    _aged(Conversation.objects.create(agent=order_agent, tags=["agenttest"]), 400)
    with pytest.raises(CommandError, match="--older-than"):
        prune("--older-than", days)
    assert Conversation.objects.filter(tags__icontains="agenttest").exists()
