"""What a chat turn of a runtime agent costs in a child process (decision 0033) beside the same turn in-process.

    .venv/bin/python bench/chat_turn_child.py                 # 10 turns each way, temporary SQLite file
    .venv/bin/python bench/chat_turn_child.py --turns 20

A plain-Python agent (runtime `python`) asks the local OpenAI stub once per turn. Each turn is sent through
`conversation_send` in a fresh conversation: in-process (what the worker does) and with `team_code_in_child=True`
(what the web process does: a child forked by the process's child server, decision 0048, the entry imported, the
turn written, the child gone). The difference is the price of keeping the team's code out of the web process; the
first turn also starts the server (Django set up once), and is counted like the others.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
TEAM_MODULE = '''
def respond(messages, client, tools):
    completion = client.chat.completions.create(model="bench-model", messages=messages)
    return completion.choices[0].message.content
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-turn cost of a runtime agent's chat turn in a child process.")
    parser.add_argument("--turns", type=int, default=10, help="Timed turns each way (default 10).")
    options = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="agenttest-bench-child-"))
    team = scratch / "team"
    (team / "bench_team").mkdir(parents=True)
    (team / "bench_team" / "__init__.py").write_text("")
    (team / "bench_team" / "bot.py").write_text(TEAM_MODULE)
    sys.path.insert(0, str(BASE_DIR))
    sys.path.append(str(team))

    from agenthost.testing.openai_stub import OpenAIStub

    with OpenAIStub(strict_content=False) as stub:
        stub.respond_with(lambda body: "Order 1042 has shipped.")
        providers = scratch / "providers.toml"
        providers.write_text(
            f'[providers.bench]\nkind = "openai"\nbase_url = "{stub.base_url}"\nmax_retries = 0\n\n'
            '[[providers.bench.models]]\nname = "bench-model"\n'
        )
        # Set before Django starts, so the child processes read the same database and providers.
        os.environ.update(
            DJANGO_SETTINGS_MODULE="agenttest.settings", AGENTTEST_DEBUG="1",
            DATABASE_URL=f"sqlite:///{scratch}/bench.sqlite3", AGENTTEST_VAR_DIR=str(scratch),
            AGENTTEST_PROVIDERS_FILE=str(providers), OPENAI_API_KEY="unused",
        )
        import django

        django.setup()
        from django.core.management import call_command

        from agenthost.models import Agent
        from agenthost.services import conversation_send, conversation_start

        call_command("migrate", verbosity=0, interactive=False)
        agent = Agent.objects.create(
            name="bench", runtime="python", entry="bench_team.bot:respond", provider="bench", model="bench-model"
        )

        def turn(in_child: bool) -> float:
            conversation = conversation_start(agent=agent)
            started = time.perf_counter()
            result = conversation_send(conversation=conversation, text="Where is order 1042?",
                                       team_code_in_child=in_child)
            elapsed = time.perf_counter() - started
            assert result.output == "Order 1042 has shipped.", result
            return elapsed * 1000

        # Warm-up: the entry imported in this process, the child's files in the page cache.
        turn(False)
        turn(True)
        in_process, in_child = [], []
        for _ in range(options.turns):
            in_process.append(turn(False))
            in_child.append(turn(True))

    print(f"{'turns each way':<34}{options.turns}")
    print(f"{'ms per turn (in-process)':<34}{statistics.median(in_process):.1f}")
    print(f"{'ms per turn (child process)':<34}{statistics.median(in_child):.1f}")
    print(f"{'child process cost ms per turn':<34}{statistics.median(in_child) - statistics.median(in_process):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
