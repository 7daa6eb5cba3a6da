"""Racers: callers that line up on a barrier and make one call each at the same moment, round after round.

A race is a list of tasks, one per racer: ``(round number, *arguments)``. Each racer passes its
arguments to ``attempt(app, agent, *arguments)``, a module-level function that returns an
``Outcome`` (see ``as_outcome``), and ``race`` returns the outcomes in racer order.

``ThreadRacers`` are threads of this process sharing one application (SQLite: one connection per
thread; PostgreSQL: the pool). ``ProcessRacers`` are processes started once with 'spawn', each
opening its own application from the same settings and taking its rounds from a queue of its own,
so spawning costs are paid once, not per round. The attempt function goes to them by reference:
it must be importable by name (defined at the top level of a module).
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.config import Settings
from armarius.errors import ArmariusError

TIMEOUT = 60
#: How far apart racer threads start after the barrier, at most.
JITTER_SECONDS = 0.0005

Outcome = dict[str, Any]
#: One racer's part in a round: the round number, then the arguments of its attempt.
Task = tuple[Any, ...]
#: ``attempt(app, agent, *arguments) -> Outcome``.
Attempt = Callable[..., Outcome]


def as_outcome(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Outcome:
    """The answer, the refusal (its class and code) or any other exception, as picklable data."""
    try:
        return {"ok": call(*args, **kwargs)}
    except ArmariusError as error:
        return {"type": type(error).__name__, "code": error.code, "details": error.details}
    except Exception as error:
        return {"exception": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}


class Racers(Protocol):
    count: int

    def race(self, tasks: list[Task]) -> list[Outcome]: ...

    def close(self) -> None: ...


class ThreadRacers:
    """``count`` threads of this process sharing the application."""

    def __init__(self, app: Armarius, agent: Actor, count: int, attempt: Attempt, name: str) -> None:
        self.app, self.agent, self.count, self.attempt = app, agent, count, attempt
        self.barrier = threading.Barrier(count, timeout=TIMEOUT)
        self.pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix=name)

    def _run(self, task: Task) -> Outcome:
        _, *arguments = task
        self.barrier.wait()
        # The thread that passes the barrier last runs first; SQLite writers of one process then queue on
        # the store's writer lock in that order. A jitter shorter than one write lets a different racer
        # arrive first from round to round, while they still overlap.
        time.sleep(random.uniform(0, JITTER_SECONDS))
        return self.attempt(self.app, self.agent, *arguments)

    def race(self, tasks: list[Task]) -> list[Outcome]:
        futures = [self.pool.submit(self._run, task) for task in tasks]
        return [future.result(timeout=2 * TIMEOUT) for future in futures]

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _process_racer(settings: Settings, agent: Actor, attempt: Attempt, index: int, tasks: Any, results: Any,
                   barrier: Any) -> None:
    """One racing process: its own application; a round per task until it is sent None."""
    app = open_app(settings)
    try:
        while (task := tasks.get(timeout=4 * TIMEOUT)) is not None:
            number, *arguments = task
            barrier.wait()
            results.put((number, index, attempt(app, agent, *arguments)))
    except BaseException:
        results.put((-1, index, {"exception": "the racer stopped", "traceback": traceback.format_exc()}))
        barrier.abort()
    finally:
        app.close()


class ProcessRacers:
    """``count`` spawned processes, started once and fed their rounds through one queue each."""

    def __init__(self, settings: Settings, agent: Actor, count: int, attempt: Attempt, name: str) -> None:
        self.count = count
        context = multiprocessing.get_context("spawn")
        self.barrier = context.Barrier(count, timeout=TIMEOUT)
        self.results = context.Queue()
        self.tasks = [context.Queue() for _ in range(count)]
        self.processes = [
            context.Process(target=_process_racer, name=f"{name}-{index}", daemon=True,
                            args=(settings, agent, attempt, index, self.tasks[index], self.results, self.barrier))
            for index in range(count)
        ]
        for process in self.processes:
            process.start()

    def race(self, tasks: list[Task]) -> list[Outcome]:
        for queue, task in zip(self.tasks, tasks, strict=True):
            queue.put(task)
        outcomes: dict[int, Outcome] = {}
        for _ in tasks:
            number, index, answer = self.results.get(timeout=4 * TIMEOUT)
            assert number == tasks[0][0], answer.get("traceback", answer)
            outcomes[index] = answer
        return [outcomes[index] for index in range(self.count)]

    def close(self) -> None:
        for queue in self.tasks:
            queue.put(None)
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join()
            process.close()
        for queue in [*self.tasks, self.results]:
            queue.close()
            queue.join_thread()
