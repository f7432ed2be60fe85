"""Set up the order-support demo: an admin, optionally a member, the demo agents, a few sample conversations and —
when the harness is installed — the demo suites with a run queued over the two simulated models.

The agents and suites are the files of the demo's project directory (agenttest_demo/project/), applied through the
public plugin module's `files_apply` as `agenttest apply` applies a team's (agenttest_demo/project.py); without the
harness only its agent files are read. It lives in the demo package, above host and harness alike: the host must
import neither the harness nor the demo, and a deployment without the demo has no such command.
Idempotent: a second run creates nothing, changes nothing and never resets a password; an agent or suite that exists
is left as it is, so an admin's edits survive.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core import mail
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test.utils import override_settings

from agenttest_demo import project
from agenttest_demo.agents import (
    DEMO_TAG,
    demo_agents_ensure,
    demo_conversations_create,
    demo_conversations_exist,
    demo_user_ensure,
)
from agenttest_demo.project import demo_project_ensure, harness_installed
from agenttest_demo.suite import DEMO_SUITE

DEMO_MODELS = ["simulated:sim-careful", "simulated:sim-hasty"]
ADMIN_USERNAME = "admin"
MEMBER_USERNAME = "member"


class Command(BaseCommand):
    help = (
        "Create the demo: superuser 'admin' (password from AGENTTEST_ADMIN_PASSWORD, else generated and printed "
        "once), user 'member' when AGENTTEST_MEMBER_PASSWORD is set, the order-support agents and sample "
        "conversations tagged 'demo', the demo test suites and a first run of the order-support suite on both "
        "simulated models. The agents and suites are the files of agenttest_demo/project/, applied as `agenttest "
        "apply` applies them; one that exists is left as it is. "
        "Safe to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-run", action="store_true", help="Do not queue the demo suite's first run.")

    def handle(self, *args: Any, **options: Any) -> None:
        admin = self._users()
        with self._files_refused():
            agents = demo_agents_ensure()
        for agent, created in agents:
            if created:
                self._done(f"Created agent {agent.name!r} ({agent.model_key}).")
            else:
                self.stdout.write(f"Agent {agent.name!r} exists; left unchanged.")
        self._conversations(admin)
        if harness_installed():
            self._suites(admin, queue_run=not options["no_run"])

    def _suites(self, admin: Any, *, queue_run: bool) -> None:
        from agenttest.plugin import RunError, Suite, run_trigger

        with self._files_refused():
            items = [item for item in demo_project_ensure() if item.kind == "suite"]
        for item in items:
            suite = Suite.objects.get(name=item.name)
            if not item.created:
                self.stdout.write(f"Suite {suite.name!r} exists; left unchanged.")
                continue
            cases = suite.cases.count()
            played = suite.cases.filter(simulated_user__isnull=False).count()
            by_user = " played by a simulated user" if played == cases else (
                f", {played} of them played by a simulated user" if played else ""
            )
            self._done(f"Created suite {suite.name!r} with {cases} cases{by_user}.")
        suite = Suite.objects.get(name=DEMO_SUITE)
        if not queue_run or suite.runs.exists():
            return
        try:
            run = run_trigger(suite=suite, model_keys=DEMO_MODELS, triggered_by=admin)
        except RunError as exc:
            self.stdout.write(self.style.WARNING(f"Could not queue the demo run: {exc}"))
            return
        self._done(f"Queued run #{run.pk} of {suite.name!r} on {', '.join(DEMO_MODELS)}; a worker will execute it.")

    def _users(self) -> Any:
        env_password = os.environ.get("AGENTTEST_ADMIN_PASSWORD", "")
        password = env_password or secrets.token_urlsafe(12)
        admin, created = demo_user_ensure(username=ADMIN_USERNAME, password=password, superuser=True)
        if not created:
            self.stdout.write(f"Superuser {ADMIN_USERNAME!r} exists; its password was not changed.")
        elif env_password:
            self._done(f"Created superuser {ADMIN_USERNAME!r} with the password from AGENTTEST_ADMIN_PASSWORD.")
        else:
            self._done(f"Created superuser {ADMIN_USERNAME!r}.")
            self.stdout.write(self.style.WARNING(f"Generated password (shown only now): {password}"))

        member_password = os.environ.get("AGENTTEST_MEMBER_PASSWORD", "")
        if member_password:
            _, created = demo_user_ensure(username=MEMBER_USERNAME, password=member_password, superuser=False)
            if created:
                self._done(f"Created user {MEMBER_USERNAME!r} with the password from AGENTTEST_MEMBER_PASSWORD.")
            else:
                self.stdout.write(f"User {MEMBER_USERNAME!r} exists; its password was not changed.")
        return admin

    def _conversations(self, owner: Any) -> None:
        if demo_conversations_exist():
            self.stdout.write(f"Conversations tagged {DEMO_TAG!r} exist; none added.")
            return
        # The sample conversations email made-up customers: the mails are kept in memory and summarised here — never
        # sent over a configured SMTP server, nor dumped raw into this output by the console backend.
        held_before = len(getattr(mail, "outbox", []))
        with override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"):
            results = demo_conversations_create(owner=owner)
        held = getattr(mail, "outbox", [])[held_before:]
        for result in results:
            conversation = result.conversation
            tools = [call.name for turn in result.turns for call in turn.tool_calls]
            chain = " → ".join(dict.fromkeys(name for turn in result.turns for name in turn.agent_chain))
            line = f"Created conversation #{conversation.pk} {conversation.title!r}: agents {chain or 'none'}"
            self._done(f"{line}; tools {', '.join(tools) or 'none'}.")
            if result.error:
                self.stdout.write(self.style.WARNING(f"  It stopped early: {result.error}"))
        for message in held:
            self.stdout.write(
                f"  The demo's email to {', '.join(message.to)} ({message.subject!r}) was held in memory, not sent."
            )

    @contextmanager
    def _files_refused(self) -> Iterator[None]:
        """The demo's files could not be applied (nothing was changed): say why, as `agenttest apply` would."""
        if not harness_installed():
            yield
            return
        from agenttest.plugin import FilesRejected

        try:
            yield
        except FilesRejected as exc:
            raise CommandError(
                f"the demo's files in {project.PROJECT} cannot be applied; nothing was changed:\n"
                + "\n".join(str(problem) for problem in exc.problems)
            ) from None

    def _done(self, message: str) -> None:
        self.stdout.write(self.style.SUCCESS(message))
