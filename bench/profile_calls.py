"""Where a server's CPU goes: `armarius serve` (or the no-op server of bench/noop_server.py) under the
32 HTTP clients of bench/compare.py's section 6, sampled with py-spy, printed per operation.

py-spy samples the server process from outside (``--gil``: only the thread holding the GIL, so what it
shows is Python work; SQLite, numpy and the network without the GIL do not appear). It is time holding
the GIL, not CPU: a thread that has just woken holds it while it waits for a core, so the code right
after a wake-up (parsing a request, anyio asking for the running loop) is overstated, by ten times and
more on a busy machine (docs/benchmarks.md, "Where the server's time goes"). The report gives,
per operation answered, the milliseconds sampled on the event loop and in the worker threads, and the
functions that took the most of it (their own time, and with what they call). The samples include the
clients' warm-up (the server's first calls load the embedding model), so short runs overstate a little.

    .venv/bin/pip install py-spy
    .venv/bin/python bench/profile_calls.py [--server armarius|noop] [--engine sqlite|postgresql]
        [--workload remember=50,recall=50] [--seconds 10] [--top 30]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from compare import FLOOR_WORKLOAD, FULL, Bench, Load, http_store, run_load
from databases import engine_settings, environment
from processes import armarius_serve, noop_serve

from armarius.config import one_blas_thread

SAMPLES_PER_SECOND = 200
#: Frames where the event loop or a worker thread starts a piece of work (see report).
_TASK_STARTS = ("Handle._run ", "WorkerThread.run ")


def parse_workload(text: str) -> dict[str, int]:
    weights = {}
    for part in text.split(","):
        tool, _, weight = part.partition("=")
        if tool not in ("remember", "recall", "read") or not weight.isdigit():
            raise SystemExit(f"--workload takes remember/recall/read=WEIGHT pairs, not {part!r}")
        weights[tool] = int(weight)
    return weights


def report(samples: Path, operations: int, top: int) -> None:
    """Per operation: milliseconds sampled per thread kind, then the functions with the most."""
    per_sample = 1000 / SAMPLES_PER_SECOND / max(1, operations)
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    for line in samples.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        frames, number = stack.split(";"), int(count)
        own[frames[-1]] += number
        # Inclusive time counts the frames below where the event loop or a worker thread runs a task:
        # above them every sample has the same spine (the CLI, uvicorn's and asyncio's loops).
        cut = next((at for at, frame in enumerate(frames) if frame.startswith(_TASK_STARTS)), -1)
        for frame in set(frames[cut + 1:]):
            total[frame] += number
        threads["worker threads" if any("WorkerThread.run" in frame for frame in frames) else "event loop"] += number
    print(f"sampled holding the GIL, ms per operation ({operations:,} operations): "
          + ", ".join(f"{kind} {count * per_sample:.2f}" for kind, count in threads.most_common()))
    for title, counts in (("own time", own), ("with what it calls", total)):
        print(f"\n{title}, ms per operation")
        for frame, count in counts.most_common(top):
            print(f"{count * per_sample:8.3f}  {frame[:140]}")


def main() -> None:
    one_blas_thread()  # numpy as the server runs it (before numpy loads)
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--server", choices=("armarius", "noop"), default="armarius")
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--workload", default="remember=50,recall=50")
    parser.add_argument("--seconds", type=float, default=10.0, help="the clients' measured window")
    parser.add_argument("--top", type=int, default=30)
    options = parser.parse_args()
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    with tempfile.TemporaryDirectory(prefix="armarius-profile-") as folder:
        bench = Bench(FULL, Path(folder), reinstall=False)
        with engine_settings(options.engine, bench.scratch("store") / "data") as settings:
            tokens, workload = http_store(bench, settings, parse_workload(options.workload))
            if options.server == "noop":
                workload = FLOOR_WORKLOAD
            log = bench.folder / "server.log"
            serving = noop_serve(log) if options.server == "noop" else armarius_serve(settings.data_dir,
                                                                                       environment(settings), log)
            samples = bench.folder / "samples.txt"
            with serving as server:
                sampler = subprocess.Popen(
                    [spy, "record", "--gil", "--pid", str(server.process.pid), "--rate", str(SAMPLES_PER_SECOND),
                     "--format", "raw", "--output", str(samples)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                run = Load(1)
                try:
                    asyncio.run(run_load(f"{server.base_url}/mcp", tokens, workload, options.seconds, server.pids(),
                                         run, postgres=options.engine == "postgresql" and options.server != "noop"))
                finally:
                    sampler.send_signal(signal.SIGINT)  # py-spy writes what it sampled and ends
                    sampler.wait(timeout=60)
            print(run.summary())
            report(samples, len(run.latencies), options.top)


if __name__ == "__main__":
    main()
