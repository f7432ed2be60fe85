"""The shop's agent as a program of its own, spoken to over JSON lines (agenttest's `runtime: process`,
`protocol: jsonl`): one JSON object per user turn on stdin, one reply per line on stdout. It could be written in any
language; this one is Python over the openai SDK, which reads OPENAI_BASE_URL and OPENAI_API_KEY from the
environment — under agenttest, its model gateway and the key it made for the turn."""

from __future__ import annotations

import json
import sys

from openai import OpenAI

INSTRUCTIONS = (
    "You are the shop's customer-service agent. Answer in one or two sentences; orders ship within two working days."
)


def main() -> None:
    client = OpenAI()
    for line in sys.stdin:
        turn = json.loads(line)
        completion = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": INSTRUCTIONS}, *turn["messages"]],
            temperature=0.2,
        )
        print(json.dumps({"reply": completion.choices[0].message.content or ""}), flush=True)


if __name__ == "__main__":
    main()
