"""Issue 25, items 8 and 9 (and the browser's word on items 4 and 5), in a real browser (Playwright driving Debian's
Chromium) on suites of the order desk, at 1366 and 800 px.

Item 8, navigation: a keyboard user reaches the first failed cell with one Tab (a skip link first) and Enter; after
Back, focus is on the cell they left from; a result links to the previous and next failure of its run (matrix order),
to its case's admin page and to its conversation; the matrix is filtered by model and sorted by duration or status on
the server, each link keeping the others' parameters, and its CSV follows; a value naming nothing is a 400 naming
the parameter; the expected and actual JSON wrap between tokens, never inside one. The chat's "Conversation #N"
opens the conversation's page.

Item 9, small truths: "Run again" on a 3-trial run pre-fills 3 trials; a trial cell shows its milliseconds; the
transcript names the model as the run does; tokens of runs with different trial counts come with a per-result figure;
a case's deliberate failure says what it is, where it is listed.

Item 4: the README's two-message conversation, typed in the chat, extracts into two drafts that pass on both models.
Item 5: the CSV of a 3-trial run has a row per result, with its trial, linked to it.

The models are the scripted ones, answering by rule as the order desk would (`desk_model`); the runs execute
in-process (they answer at once); only the pages need the browser.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from agenthost.llm.base import ModelRequest
from agenthost.llm.scripted import Answer, Call, Entry
from agenthost.models import Conversation
from cases.models import Case, Suite
from cases.services import case_create
from runs.models import Run
from runs.services import run_create, run_execute
from tests.browser.conftest import EMAIL, SCRIPTED, SCRIPTED_OTHER, routed_to
from tests.order_tools import TRACK_ORDER, VOID_ORDER

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ADMIN = ("root", "root-password-123")
UNMOCKED_CASE = "An unmocked email is blocked, never sent"
MISSING_MOCK = "The suite's example of a missing mock"
WIDTHS = (1366, 800)
README_STATUS = "Where is order #1042?"
README_CANCEL = "Please cancel order 1043, my email is ana@example.com"
FAILING = ("failed", "error")
FALLBACK = "util-routing-fallback_to_router"

# Every run of characters between whitespace in the expected / actual JSON that is shorter than a line of its column
# must sit on one line: the tokens (by their characters' line tops) that a line break cut.
CUT_TOKENS = """() => {
    const cut = [];
    for (const pre of document.querySelectorAll('pre[data-label]')) {
        const chars = [];
        const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (let i = 0; i < node.data.length; i++) {
                const range = document.createRange();
                range.setStart(node, i);
                range.setEnd(node, i + 1);
                const rect = range.getClientRects()[0];
                chars.push({ch: node.data[i], top: rect ? rect.top : null});
            }
        }
        const lineChars = Math.floor(pre.clientWidth / (chars.length ? 7 : 1));
        let token = [];
        const flush = () => {
            const tops = token.filter(c => c.top !== null).map(c => c.top);
            if (token.length < Math.min(40, lineChars) && tops.length && Math.max(...tops) - Math.min(...tops) > 4) {
                cut.push(token.map(c => c.ch).join(''));
            }
            token = [];
        };
        for (const c of chars) { if (/\\s/.test(c.ch)) flush(); else token.push(c); }
        flush();
        if (pre.scrollWidth > pre.clientWidth + 1) cut.push('(scrolls sideways) ' + pre.textContent.slice(0, 60));
    }
    return cut;
}"""


def assert_fits(page: Page, what: str) -> None:
    scroll, window = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= window, f"{what} overflows at {window} px: {scroll} px wide"


def focused_href(page: Page) -> str | None:
    return page.evaluate("() => document.activeElement && document.activeElement.getAttribute('href')")


def query_of(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def desk_model(*, hasty: str = "") -> Callable[[ModelRequest], Entry]:
    """The order desk's models, answering by rule: the router hands a request to the sub-agent for it; order-lookup
    hands a cancellation back to the router; the agent that handles a request looks the order up, cancels it and
    emails the address the customer gave, as the request needs, then says what it did. The model named `hasty`
    cancels without looking the order up first. Asked where a conversation changes goal, a model makes each turn a
    case of its own."""

    def answer(request: ModelRequest) -> Entry:
        if request.metadata.get("purpose") == "case extraction":
            turns = json.loads(request.messages[-1]["content"])["turns"]
            return json.dumps({"segments": [
                {"name": turn["user"].rstrip("?.!")[:60], "firstTurn": turn["turn"], "lastTurn": turn["turn"]}
                for turn in turns
            ]})
        offered = {tool["function"]["name"] for tool in request.tools}
        start = max(index for index, message in enumerate(request.messages) if message["role"] == "user")
        asked = request.messages[start]["content"]
        called = {call["function"]["name"] for message in request.messages[start:]
                  for call in message.get("tool_calls", [])}
        order = re.search(r"\d{4}", asked).group()
        cancelling = "cancel" in asked
        if "route_to_agent" in offered:
            return routed_to("order-cancellation" if cancelling else "order-lookup")
        if cancelling and VOID_ORDER not in offered:
            return Answer(tool_calls=[Call(FALLBACK, {"reason": "a cancellation is outside my scope"})])
        wanted = [TRACK_ORDER, VOID_ORDER] if cancelling else [TRACK_ORDER]
        if cancelling and request.model == hasty:
            wanted.remove(TRACK_ORDER)
        arguments = {name: {"order_id": order} for name in wanted}
        email = re.search(r"[\w.]+@[\w.]+\.\w+", asked)
        if cancelling and email:
            wanted.append(EMAIL)
            arguments[EMAIL] = {"to": email.group(), "subject": f"Order {order} is cancelled", "body": "Cancelled."}
        for name in wanted:
            if name not in called:
                return Answer(tool_calls=[Call(name, arguments[name])])
        return f"Order {order} is now cancelled." if cancelling else f"I looked order {order} up: it is processing."

    return answer


def tool_called(function: str, **arguments: str) -> dict[str, Any]:
    params = {"function": function, "arguments": arguments} if arguments else {"function": function}
    return {"type": "toolCalled", "params": params}


def order_case(name: str, user_message: str, checks: list[dict[str, Any]], *, cancels: bool = False,
               description: str = "") -> dict[str, Any]:
    """A one-turn case about the order its message names, whose look-up (and cancellation) are mocked; an email is
    not."""
    order = re.search(r"\d{4}", user_message).group()
    mocks = [{"function_name": TRACK_ORDER, "result": json.dumps({"order_id": order, "status": "processing"})}]
    if cancels:
        mocks.append({"function_name": VOID_ORDER, "result": json.dumps({"order_id": order, "cancelled": True})})
    return {"name": name, "description": description, "mocks": mocks,
            "turns": [{"user_message": user_message, "assertions": checks}]}


@pytest.fixture
def desk_runs(order_desk, two_scripted_models, admin_user) -> dict[str, Run]:
    """A suite of order-cancellation run once on both models, then with 3 trials (its baseline is the first run). Its
    status question passes on both; its unmocked email fails on both, on purpose; its cancellation, which asks for a
    look-up first, fails on the hasty model."""
    two_scripted_models.respond_with(desk_model(hasty="other"))
    suite = Suite.objects.create(name="Order cancellations", agent=order_desk["order-cancellation"])
    for document in (
        order_case("Order status is looked up", "Where is my order #1042?",
                   [tool_called(TRACK_ORDER, order_id="1042")],
                   description="The agent looks the order up before it answers."),
        order_case(UNMOCKED_CASE, "Please cancel order 1044, my email is kim@example.com", [tool_called(VOID_ORDER)],
                   cancels=True, description=f"{MISSING_MOCK}: it fails on every run, on purpose. The email tool has "
                   "no mock, so the harness blocks it and the case fails with the call named."),
        order_case("A cancellation looks the order up first", "Please cancel order 1043",
                   [tool_called(TRACK_ORDER, order_id="1043"), tool_called(VOID_ORDER, order_id="1043")],
                   cancels=True),
    ):
        case_create(suite=suite, document=document)
    one = run_execute(
        run_id=run_create(suite=suite, model_keys=[SCRIPTED, SCRIPTED_OTHER], triggered_by=admin_user).pk
    )
    three = run_execute(
        run_id=run_create(suite=suite, model_keys=[SCRIPTED, SCRIPTED_OTHER], triggered_by=admin_user, trials=3).pk
    )
    assert one.status == three.status == Run.Status.FAILED, (one.reason, three.reason)
    return {"one": one, "three": three}


def test_it_navigates_a_run_by_keyboard_filter_and_sort_and_tells_small_truths(sign_in, desk_runs, save_screenshot):
    one, three = desk_runs["one"], desk_runs["three"]
    failures = list(one.results.filter(status__in=FAILING).order_by("position", "id"))
    assert len(failures) >= 3
    unmocked = one.results.get(case_name=UNMOCKED_CASE, model=SCRIPTED)
    assert unmocked.status == "failed"
    context, page = sign_in(*ADMIN)

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})

        # One Tab reaches the skip link, Enter the first failed cell, in matrix order.
        page.goto(f"/runs/{one.pk}/")
        page.keyboard.press("Tab")
        expect(page.locator(":focus")).to_have_text("Skip to first failure")
        page.keyboard.press("Enter")
        first_href = f"/runs/{one.pk}/results/{failures[0].pk}/"
        assert focused_href(page) == first_href
        first_cell = page.locator("#matrix-table td.cell-failed a, #matrix-table td.cell-error a").first
        expect(first_cell).to_be_focused()
        expect(first_cell).to_be_in_viewport()

        # The deliberate failure says what it is, where it is listed.
        row = page.locator(f'#matrix-table tr[data-row="{unmocked.case_id}"]')
        expect(row.locator(".case-description")).to_contain_text(MISSING_MOCK)
        expect(page.locator("#matrix-table tr:not(.has-failure) .case-description")).to_have_count(0)
        assert_fits(page, "the run page")

        # Open it with the keyboard; after Back, focus is on the cell left from.
        page.keyboard.press("Enter")
        page.wait_for_url(f"**{first_href}")
        page.go_back()
        page.wait_for_url(f"**/runs/{one.pk}/")
        expect(page.locator(f'#matrix-table a[href="{first_href}"]')).to_be_focused()

        # The result page: previous / next failure in matrix order, the case's admin page, its conversation.
        page.goto(first_href)
        nav = page.get_by_role("navigation", name="Failures of this run")
        expect(nav.get_by_role("link", name="Previous failure")).to_have_count(0)
        expect(nav).to_contain_text(f"Failure 1 of {len(failures)}")
        nav.get_by_role("link", name="Next failure").click()
        page.wait_for_url(f"**/runs/{one.pk}/results/{failures[1].pk}/")
        expect(nav).to_contain_text(f"Failure 2 of {len(failures)}")
        expect(nav.get_by_role("link", name="Previous failure")).to_have_attribute("href", first_href)
        expect(nav.get_by_role("link", name="Next failure")).to_have_attribute(
            "href", f"/runs/{one.pk}/results/{failures[2].pk}/"
        )
        expect(nav.get_by_role("link", name="Edit the case")).to_have_attribute(
            "href", f"/admin/cases/case/{failures[1].case_id}/change/"
        )
        page.goto(f"/runs/{one.pk}/results/{failures[-1].pk}/")
        expect(nav.get_by_role("link", name="Next failure")).to_have_count(0)

        page.goto(f"/runs/{one.pk}/results/{unmocked.pk}/")
        expect(page.locator('[data-field="case-description"]')).to_contain_text(MISSING_MOCK)
        page.get_by_role("link", name=f"Conversation #{unmocked.conversation_id}").click()
        page.wait_for_url(f"**/conversations/{unmocked.conversation_id}/")
        expect(page.locator(".msg-user").first).to_contain_text("Please cancel order 1044")

        # JSON in the expected and actual columns wraps between tokens, never inside one, and never scrolls sideways.
        for failure in failures:
            page.goto(f"/runs/{one.pk}/results/{failure.pk}/")
            expect(page.locator('pre[data-label="actual"]').first).to_be_visible()
            assert page.evaluate(CUT_TOKENS) == [], (
                f"tokens cut at {width} px in {failure.case_name} on {failure.model}"
            )
            assert_fits(page, "the result page")

        # The matrix filtered by one model, then sorted: each link keeps the other's parameter; the CSV follows.
        page.goto(f"/runs/{one.pk}/")
        page.get_by_role("navigation", name="Model").get_by_role("link", name=SCRIPTED_OTHER).click()
        page.wait_for_url(re.compile(r"\?model="))
        expect(page.locator("#matrix-table thead th")).to_have_count(2)
        other_cells = one.results.filter(model=SCRIPTED_OTHER).count()
        expect(page.locator("#matrix-table td[data-cell]")).to_have_count(other_cells)
        page.get_by_role("navigation", name="Sort").get_by_role("link", name="Slowest first").click()
        page.wait_for_url(re.compile(r"sort=duration"))
        assert query_of(page.url) == {"model": [SCRIPTED_OTHER], "sort": ["duration"]}
        by_duration = sorted(one.results.filter(model=SCRIPTED_OTHER), key=lambda result: -result.duration_ms)
        shown = [
            key.split("|")[0]
            for key in page.locator("#matrix-table td[data-cell]").evaluate_all(
                "cells => cells.map(cell => cell.dataset.cell)"
            )
        ]
        assert shown == [str(result.case_id) for result in by_duration]
        failures_link = page.get_by_role("link", name=re.compile("^Failures only"))
        assert query_of(failures_link.get_attribute("href")) == {
            "model": [SCRIPTED_OTHER],
            "sort": ["duration"],
            "show": ["failures"],
        }
        page.get_by_role("navigation", name="Sort").get_by_role("link", name="Worst first").click()
        page.wait_for_url(re.compile(r"sort=status"))
        assert query_of(page.url) == {"model": [SCRIPTED_OTHER], "sort": ["status"]}
        verdicts = page.locator("#matrix-table td[data-cell]").evaluate_all(
            "cells => cells.map(cell => cell.classList.contains('cell-passed'))"
        )
        assert verdicts == sorted(verdicts) and False in verdicts, "failures first, then passes"
        csv_link = page.get_by_role("link", name=re.compile("^Matrix CSV"))
        assert query_of(csv_link.get_attribute("href")) == {"model": [SCRIPTED_OTHER], "sort": ["status"]}
        rows = list(csv.reader(io.StringIO(page.request.get(csv_link.get_attribute("href")).text())))
        assert not any(SCRIPTED in column for column in rows[0]) and f"{SCRIPTED_OTHER} status" in rows[0]
        statuses = [row[rows[0].index(f"{SCRIPTED_OTHER} status")] for row in rows[1:]]
        assert statuses == sorted(statuses, key=lambda status: status == "passed")
        assert_fits(page, "the filtered run page")
        if width == 1366:
            save_screenshot(page, "run-page-filtered.png")

        # A value that names nothing is refused, naming the parameter.
        for bad, parameter in (("model=scripted:nobody", "model"), ("sort=fastest", "sort")):
            response = page.goto(f"/runs/{one.pk}/?{bad}")
            assert response.status == 400
            expect(page.get_by_role("alert")).to_contain_text(f"{parameter}: ")

        # Item 9 on the 3-trial run: each trial cell shows its milliseconds, "Run again" keeps the 3 trials.
        page.goto(f"/runs/{three.pk}/")
        times = page.locator("#matrix-table td[data-cell] .cell-times")
        expect(times).to_have_count(three.results.values("case_id", "model").distinct().count())
        for text in times.all_inner_texts():
            assert re.search(r"· case [\d.,]+ (ms|s) · model [\d.,]+ (ms|s)$", text), text
        assert_fits(page, "the 3-trial run page")
        page.get_by_role("link", name="Run again").click()
        page.wait_for_url("**/runs/new/**")
        expect(page.get_by_label("Trials")).to_have_value("3")
        expect(page.get_by_label(SCRIPTED)).to_be_checked()
        expect(page.get_by_label(SCRIPTED_OTHER)).to_be_checked()

        # The transcript names the model as the run does.
        other = three.results.filter(model=SCRIPTED_OTHER).order_by("position").first()
        page.goto(f"/runs/{three.pk}/results/{other.pk}/")
        expect(page.locator(".result-transcript .msg-agent .msg-who").first).to_contain_text(SCRIPTED_OTHER)
        expect(page.locator(".result-transcript")).not_to_contain_text("agenttest-live")

        # Tokens of runs with 1 and 3 trials: beside the totals, what one result spent.
        page.goto(f"/runs/{three.pk}/compare/?baseline={one.pk}")
        for model in (SCRIPTED, SCRIPTED_OTHER):
            per_result = page.locator(f'.deltas-table tr[data-model="{model}"] .per-result')
            expect(per_result).to_have_text(re.compile(r"^[\d,]+ → [\d,]+ per result$"))
        assert_fits(page, "the compare page")

    # Item 5: the CSV of the 3-trial run has every result once, with its trial, linked to itself.
    rows = list(csv.reader(io.StringIO(page.request.get(f"/runs/{three.pk}/matrix.csv").text())))
    header, lines = rows[0], rows[1:]
    assert header[:3] == ["case_id", "case", "trial"]
    assert len(lines) == three.results.count() // 2
    linked = set()
    for line in lines:
        for model in (SCRIPTED, SCRIPTED_OTHER):
            result_id = int(line[header.index(f"{model} result_url")].rstrip("/").rsplit("/", 1)[1])
            result = three.results.get(pk=result_id)
            assert (str(result.case_id), result.trial + 1, result.model) == (line[0], int(line[2]), model)
            assert line[header.index(f"{model} status")] == result.status
            linked.add(result_id)
    assert linked == set(three.results.values_list("pk", flat=True))
    assert sorted({int(line[2]) for line in lines}) == [1, 2, 3]
    context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_it_extracts_the_readmes_conversation_typed_in_the_chat_into_two_drafts_that_pass(
    sign_in, order_desk, two_scripted_models, admin_user, width
):
    # One rule answers the chat, the extraction and the drafts' run, on both models alike: each replays the chat.
    two_scripted_models.respond_with(desk_model())
    context, page = sign_in(*ADMIN)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/chat/")
    page.locator("#agent-select").select_option(str(order_desk["order-router"].pk))
    page.get_by_role("button", name="Start new conversation").click()
    message = page.locator("#message-input")
    for text, answered in ((README_STATUS, 1), (README_CANCEL, 2)):
        expect(message).to_be_enabled()
        message.fill(text)
        page.get_by_role("button", name="Send").click()
        expect(page.locator("#transcript .msg-user")).to_have_count(answered)
        expect(message).to_be_enabled()
    expect(page.locator("#transcript")).to_contain_text(FALLBACK)
    expect(page.locator("#transcript")).to_contain_text(VOID_ORDER)
    conversation = Conversation.objects.get()

    # The chat's "Conversation #N" opens the conversation's page, where a reviewer extracts the cases.
    page.get_by_role("link", name=f"Conversation #{conversation.pk}").click()
    page.wait_for_url(f"**/conversations/{conversation.pk}/")
    page.get_by_label("Extraction model").select_option(SCRIPTED)
    page.get_by_role("button", name="Extract cases").click()
    page.wait_for_url("**/admin/cases/case/?id__in=*")
    expect(page.locator(".messagelist")).to_contain_text("Extracted 2 disabled drafts")
    drafts = list(Case.objects.filter(source_conversation=conversation).order_by("pk"))
    assert [list(case.turns.values_list("user_message", flat=True)) for case in drafts] == [
        [README_STATUS],
        [README_CANCEL],
    ]
    assert not any(case.enabled for case in drafts)
    page.locator("#action-toggle").check()
    page.locator("select[name=action]").select_option("enable_selected")
    page.get_by_role("button", name="Go").click()
    expect(page.locator(".messagelist")).to_contain_text("Enabled 2 case(s).")

    run = run_execute(run_id=run_create(suite=drafts[0].suite, model_keys=[SCRIPTED, SCRIPTED_OTHER]).pk)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#matrix-table td[data-cell]")).to_have_count(4)
    expect(page.locator("#matrix-table td.cell-passed")).to_have_count(4)
    expect(page.locator(".skip-link")).to_have_count(0)  # nothing failed: no skip link to a failure
    assert_fits(page, "the extracted suite's run page")
    assert sorted(run.results.values_list("case_name", "model", "status")) == sorted(
        (case.name, model, "passed") for case in drafts for model in (SCRIPTED, SCRIPTED_OTHER)
    )
    context.close()
