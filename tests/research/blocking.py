"""Calls that a regression would leave waiting on a FIFO forever, run so that the test fails instead.

:func:`within` runs a call in a thread and fails the test if it is still running after :data:`PATIENCE`
seconds (generous: a loaded machine is slow, never that slow); it then opens the FIFO from both ends, as often
as needed, so that the call (waiting to open it) goes on and the test's teardown is not held too.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

PATIENCE = 60.0

T = TypeVar("T")


def let_go(fifo: Path) -> None:
    """Open ``fifo`` from either end and close it: a reader or a writer waiting in open() goes on."""
    for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
        try:
            os.close(os.open(fifo, flags))
        except OSError as error:
            if error.errno not in (errno.ENXIO, errno.ENOENT):  # no reader at the moment; gone
                raise


def within(call: Callable[[], T], fifo: Path | None = None) -> T:
    """``call()``'s result (or its exception), failing the test if it is still running after PATIENCE seconds;
    then ``fifo`` (if any) is opened from both ends until the call ends."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:  # handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PATIENCE)
    if thread.is_alive():
        deadline = time.monotonic() + PATIENCE
        while thread.is_alive() and fifo is not None and time.monotonic() < deadline:
            let_go(fifo)
            thread.join(0.05)
        pytest.fail(f"still running after {PATIENCE:.0f} s: it waits on a FIFO")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]  # type: ignore[no-any-return]
