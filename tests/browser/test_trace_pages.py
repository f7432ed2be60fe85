"""In a real browser (Playwright driving Debian's Chromium, see conftest.py): spans of an agent agenttest does not
know arrive at /v1/traces of the live server; a staff user sees on the traces page why they were not imported, binds
them to an agent from the select, reads the conversation's transcript, records a draft, and the draft says what it
was bound to and on which model it replays. A member gets a 403 on the traces page and no span content anywhere. No
page is wider than the window at 1366 or at 800 px."""

from __future__ import annotations

import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from playwright.sync_api import Page, expect
from rest_framework.authtoken.models import Token

from agenthost.models import Agent, Conversation
from cases.models import Case
from tests.browser.pages import assert_fits
from tests.traces.dialects.test_genai import VERSIONS, shop_agent
from tests.traces.test_conversations import FIND_ORDER
from traces.models import TraceSpan

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")
MEMBER = ("mia", "mia-password-123")
WIDTHS = (1366, 800)


@pytest.fixture(scope="module")
def exported() -> bytes:
    """One run of a pydantic-ai agent named "shop" of service "warehouse", as its instrumentation exports it (made on
    a thread of its own: Playwright's sync API runs an event loop in this thread for as long as the browser the tests
    share lives, and the agent's run_sync runs one of its own)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "warehouse"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(shop_agent(provider, VERSIONS[-1]).run_sync, "Where is order 1042?").result()
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    provider.shutdown()
    return body


def export_to(live_server, body: bytes, token: str) -> str:
    """The spans sent to the live server over OTLP/HTTP with an API token, as a production exporter sends them; the
    conversation's key."""
    request = urllib.request.Request(
        f"{live_server.url}/v1/traces", data=body, method="POST",
        headers={"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    return TraceSpan.objects.values_list("conversation_key", flat=True).first()


def fits_at_every_width(page: Page, what: str) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert_fits(page, f"{what} at {width} px")


def test_it_binds_an_unknown_agents_trace_reads_it_and_records_a_draft_that_says_what_it_replays_on(
    exported, sign_in, save_screenshot, live_server, admin_user, member
):
    support = Agent.objects.create(name="support", provider="scripted", model="scripted", functions=[FIND_ORDER])
    key = export_to(live_server, exported, Token.objects.create(user=admin_user).key)
    trace_id = TraceSpan.objects.values_list("trace_id", flat=True).first()
    assert not Conversation.objects.exists(), "no agent is named shop or warehouse"

    context, page = sign_in(*ADMIN)
    page.goto("/traces/conversations/")
    row = page.locator("tr", has_text=key)
    expect(row).to_contain_text("Not imported: ")
    expect(row).to_contain_text("bound to no agent: no agent is named 'shop' (gen_ai.agent.name) or 'warehouse'")
    fits_at_every_width(page, "the traces page")
    save_screenshot(page, "traces-unbound.png")

    row.get_by_label("Agent").select_option(label="support")
    row.get_by_role("button", name="Bind").click()

    conversation = Conversation.objects.get()
    page.wait_for_url(f"**/conversations/{conversation.pk}/")
    expect(page.get_by_text(f"Conversation #{conversation.pk} is bound to agent support")).to_be_visible()
    expect(page.locator(".msg-user")).to_contain_text(["Where is order 1042?"])
    call = page.locator("details.tool-call", has_text="find_order")
    expect(call.locator(".badge").first).to_have_text("executed")  # in production: its result is the trace's
    call.locator("summary").click()
    expect(call).to_contain_text('"status": "shipped"')
    expect(page.get_by_text("Order 1042 has shipped.")).to_be_visible()
    expect(page.get_by_text(trace_id).first).to_be_visible()
    fits_at_every_width(page, "the imported conversation's page")
    save_screenshot(page, "traces-conversation.png")
    page.set_viewport_size({"width": 1366, "height": 900})

    page.get_by_role("button", name="Record as draft").click()

    page.wait_for_url("**/admin/cases/case/*/change/")
    draft = Case.objects.get(source_conversation=conversation)
    assert not draft.enabled
    warnings = page.locator(".review-warnings li")
    expect(warnings.first).to_have_text(
        "the trace of service warehouse (agent shop) is bound to agent support by choice: its runs use that agent's "
        "code and tools"
    )
    expect(warnings.last).to_have_text(
        "the model's answers are the trace's, recorded on function:orders-model: run it in replay mode on "
        "function:orders-model and it needs no key"
    )
    fits_at_every_width(page, "the draft's page")
    save_screenshot(page, "traces-draft.png")
    page.goto("/traces/conversations/")
    expect(page.locator("tr", has_text=key)).to_contain_text(
        f"#{conversation.pk}, bound to agent {support.name} by staff choice"
    )
    context.close()

    context, page = sign_in(*MEMBER)
    assert page.goto("/traces/conversations/").status == 403
    assert key not in page.content() and trace_id not in page.content()
    expect(page.locator("h1")).to_have_text("Staff only")  # the app's page, styled, not Django's bare 403
    # Bound by staff, the conversation is nobody's: a member does not see it (one of their own shows its transcript
    # without the spans, tests/traces/test_conversations.py).
    assert page.goto(f"/conversations/{conversation.pk}/").status == 404
    assert trace_id not in page.content() and key not in page.content()
    assert not any(span_id in page.content() for span_id in TraceSpan.objects.values_list("span_id", flat=True))
    context.close()
