"""What the state machines of tests/reliability/test_state_*.py share.

Each machine drives the real services (and an agent's real MCP tools) on the test's real store, and
checks the store against a small model after every step. One store per engine and test: every example
gets a workspace of its own in it (workspaces share nothing), which costs far less than a database
per example and keeps examples as independent as separate databases would.

* :func:`machine_settings`: hypothesis settings at this run's scale (``tests.scale.pick``), without
  deadlines and without an example database (no files in the repository).
* :func:`step`: ``@rule`` that also counts the steps really run; :class:`CountedMachine` records them
  (``scale.record("state machine steps", n)``) when an example ends.
* :func:`run_machine`: runs a machine class bound to the test's objects (the app, a repository, …).
* :class:`SyncAgent`: an agent's MCP client (``agent_of``) called from the machine's synchronous rules.
* :func:`research_lab`: the test's app again, with one real git source (sessions, and the repair tools
  that need them).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from anyio.from_thread import start_blocking_portal
from hypothesis import settings as hypothesis_settings
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test
from hypothesis.strategies import SearchStrategy

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from tests import scale
from tests.helpers import Team, agent_of, make_team
from tests.research.repos import Repo, git, source_entry, write_config

#: Workspace names are unique within a test run, so every example starts from an empty workspace.
_WORKSPACES = itertools.count(1)


def machine_settings(*, examples: tuple[int, int], steps: tuple[int, int]) -> hypothesis_settings:
    """``examples`` and ``steps``: (ci, local)."""
    return hypothesis_settings(max_examples=scale.pick(ci=examples[0], local=examples[1]),
                               stateful_step_count=scale.pick(ci=steps[0], local=steps[1]),
                               deadline=None, database=None)


def fresh_team(app: Armarius, prefix: str) -> Team:
    """A new workspace with an agent (editor) and a human (editor): the example's own."""
    return make_team(app, f"{prefix}-{next(_WORKSPACES)}")


#: hypothesis's ``rule`` as a step calls it (strategies only: no target bundles).
_rule = cast(Callable[..., Callable[[Callable[..., None]], Callable[..., None]]], rule)


def step(**strategies: SearchStrategy[Any]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``@rule(**strategies)`` for a :class:`CountedMachine`: each run of the rule is counted."""

    def decorate(function: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(function)
        def counted(machine: CountedMachine, **arguments: Any) -> None:
            machine.steps += 1
            function(machine, **arguments)

        return _rule(**strategies)(counted)

    return decorate


class CountedMachine(RuleBasedStateMachine):
    """A machine whose steps are counted; ``close`` releases what an example opened."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        self.resources = ExitStack()

    def teardown(self) -> None:
        self.resources.close()
        scale.record("state machine steps", self.steps)


M = TypeVar("M", bound=CountedMachine)


def run_machine(machine: type[M], settings: hypothesis_settings, **bound: Any) -> None:
    """Run ``machine`` with ``bound`` as class attributes (the test's app, repository, …)."""
    run_state_machine_as_test(type(machine.__name__, (machine,), bound), settings=settings)


class SyncAgent:
    """An agent's tools over the SDK's in-memory MCP client, callable from synchronous code.

    Each call answers the decoded JSON, with ``error`` set to the code of a refusal (as
    ``tests.helpers.Agent`` does).
    """

    def __init__(self, app: Armarius, actor: Actor, resources: ExitStack) -> None:
        self._portal = resources.enter_context(start_blocking_portal("asyncio"))
        self._agent = resources.enter_context(self._portal.wrap_async_context_manager(agent_of(app, actor)))

    def __call__(self, tool: str, **arguments: Any) -> dict[str, Any]:
        return self._portal.call(functools.partial(self._agent, tool, **arguments))


@dataclass
class Lab:
    app: Armarius
    #: The source's repository (moving it away makes the source fail).
    repo: Path


@contextmanager
def research_lab(app: Armarius, folder: Path, **settings: Any) -> Iterator[Lab]:
    """``app``'s store opened again with one git source (``settings`` changed too): a repository of one
    file in ``folder``, pinned at its only commit."""
    root = folder / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src/app.py").write_text("import os\n\n\ndef handle(order):\n    return order\n")
    git(root, "init", "-q", ".")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pinned")
    pin = git(root, "rev-parse", "HEAD").decode().strip()
    write_config(app.settings.data_dir / "research.toml", [source_entry(Repo(root, pin))])
    application = open_app(replace(app.settings, research_config=Path("research.toml"), **settings))
    try:
        yield Lab(application, root)
    finally:
        application.close()
