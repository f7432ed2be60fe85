"""The normaliser of what a process agent's program says (agenthost/runtimes/protocol_transcript.py): it keeps what
the program decided — words, tools, statuses, order — and drops only what changes from run to run by itself."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agenthost.runtimes.protocol_transcript import joined_chunks, normalised

CHUNK_KINDS = ("agent_message_chunk", "agent_thought_chunk")
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
chunks = st.builds(lambda kind, text: {"sessionUpdate": kind, "content": {"type": "text", "text": text}},
                   st.sampled_from(CHUNK_KINDS), texts)
calls = st.builds(lambda call_id, status: {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                                           "status": status},
                  st.sampled_from(["call_a", "call_b", "call_c"]), st.sampled_from(["in_progress", "completed"]))


def _runs(updates: list[dict]) -> list[tuple[str, str]]:
    """Each run of one kind of chunk as (kind, its text), and every other update as itself."""
    runs: list[tuple[str, str]] = []
    for update in updates:
        kind = update["sessionUpdate"]
        if kind in CHUNK_KINDS and runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + update["content"]["text"])
        else:
            runs.append((kind, update["content"]["text"] if kind in CHUNK_KINDS else repr(update)))
    return runs


@given(st.lists(st.one_of(chunks, calls), max_size=30))
def test_it_joins_each_run_of_streamed_text_and_keeps_everything_else_in_order(updates):
    joined = joined_chunks(updates)

    assert _runs(joined) == _runs(updates)
    # No two neighbours of one chunk kind are left: where the stream split its text is gone.
    neighbours = zip(joined, joined[1:], strict=False)
    assert all(not (a["sessionUpdate"] == b["sessionUpdate"] in CHUNK_KINDS) for a, b in neighbours)


@given(st.lists(calls, max_size=20))
def test_it_numbers_ids_in_order_of_first_appearance_keeping_which_updates_share_a_call(updates):
    said = normalised([{"turn": 0, "update": update} for update in updates], {})
    ids = [entry["update"]["toolCallId"] for entry in said]
    originals = [update["toolCallId"] for update in updates]

    assert [ids[originals.index(value)] for value in originals] == ids
    assert len(set(ids)) == len(set(originals))
    assert list(dict.fromkeys(ids)) == [f"<toolCallId {number}>" for number in range(1, len(set(ids)) + 1)]
    assert [entry["update"]["status"] for entry in said] == [update["status"] for update in updates]


def test_it_names_places_keys_and_times_and_leaves_the_programs_words_alone():
    places = {"/var/agenttest/conversations/17": "<cwd>", "/srv/team/agent": "<program>",
              "/var/agenttest/conversations/17/sub": "<sub>", "agenttest-secretkey": "<key>"}
    said = normalised([{"turn": 1, "update": {
        "sessionUpdate": "tool_call", "toolCallId": "x1", "title": "write /var/agenttest/conversations/17/note.txt",
        "rawInput": {"path": "/var/agenttest/conversations/17/sub/a", "cwd": "/srv/team/agent",
                     "auth": "Bearer agenttest-secretkey", "at": "2026-12-06T10:20:30.123Z"},
        "status": "pending",
    }}], places)

    assert said == [{"turn": 1, "update": {
        "sessionUpdate": "tool_call", "toolCallId": "<toolCallId 1>", "title": "write <cwd>/note.txt",
        "rawInput": {"path": "<sub>/a", "cwd": "<program>", "auth": "Bearer <key>", "at": "<time>"},
        "status": "pending",
    }}]
