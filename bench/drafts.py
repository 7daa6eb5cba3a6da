"""Draft approval figures on SQLite and PostgreSQL.

1. Approvals issued and consumed per second through the service layer: a human approves a payload
   (`DraftService.approve`), an agent creates the draft with it (`DraftService.create_draft`).
2. `create_draft` latency over MCP stdio: the agent's calls go through `armarius mcp` with the
   SDK's client; the approvals are issued in this process.

    .venv/bin/python bench/drafts.py [--pairs 1000] [--stdio-calls 200] [--engines sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from databases import engine_settings, environment, percentile, postgres_available
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from armarius.app import Armarius, open_app
from armarius.auth.model import Actor
from armarius.auth.permissions import Kind, Role
from armarius.auth.secrets import new_password

BY = "operator:bench"


def payload(index: int) -> dict[str, str]:
    return {"slug": f"bench/draft-{index:06d}", "title": f"Draft number {index}",
            "text": f"Body of draft {index}.\n" + "Some words of a realistic paragraph. " * 20}


def team(app: Armarius) -> tuple[str, Actor, Actor]:
    directory = app.directory
    directory.create_workspace("bench", by=BY)
    password = new_password()
    directory.add_principal("bench-human", Kind.HUMAN, workspace="bench", role=Role.EDITOR, by=BY, password=password)
    directory.add_principal("bench-agent", Kind.AGENT, workspace="bench", role=Role.EDITOR, by=BY)
    token = directory.issue_token("bench-agent", workspace="bench", by=BY).token
    human = directory.authenticate_password("bench-human", password, workspace="bench")
    return token, human, directory.authenticate_token(token)


def service_pairs(app: Armarius, human: Actor, agent: Actor, pairs: int) -> float:
    drafts = app.drafts
    for index in range(900_000, 900_010):  # warm-up
        issued = drafts.approve(human, payload=payload(index))
        drafts.create_draft(agent, payload(index), issued.token, f"warm-{index}")
    started = time.perf_counter()
    for index in range(pairs):
        issued = drafts.approve(human, payload=payload(index))
        drafts.create_draft(agent, payload(index), issued.token, f"op-{index}")
    return pairs / (time.perf_counter() - started)


async def stdio_latencies(app: Armarius, human: Actor, agent_token: str, calls: int) -> list[float]:
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "armarius", "--data-dir", str(app.settings.data_dir), "mcp"],
        env={"ARMARIUS_TOKEN": agent_token, **environment(app.settings)},
    )
    latencies = []
    async with Client(parameters) as client:
        for index in range(-20, calls):
            content = payload(500_000 + index)
            token = app.drafts.approve(human, payload=content).token
            started = time.perf_counter()
            result = await client.call_tool("create_draft", {**content, "approval": token,
                                                             "operation": f"stdio-{index}"})
            elapsed = time.perf_counter() - started
            assert not result.is_error, result.content
            if index >= 0:
                latencies.append(elapsed)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--stdio-calls", type=int, default=200)
    parser.add_argument("--engines", default="sqlite,postgresql")
    options = parser.parse_args()
    engines = [e for e in options.engines.split(",") if e == "sqlite" or postgres_available()]
    print(f"{'engine':<12} {'approve+create/s':>17} {'stdio create_draft p50 ms':>26} {'p95 ms':>8}")
    for engine in engines:
        with tempfile.TemporaryDirectory() as folder, engine_settings(engine, Path(folder) / "data") as settings:
            app = open_app(settings)
            try:
                agent_token, human, agent = team(app)
                rate = service_pairs(app, human, agent, options.pairs)
                latencies = asyncio.run(stdio_latencies(app, human, agent_token, options.stdio_calls))
            finally:
                app.close()
        print(f"{engine:<12} {rate:>17.0f} {percentile(latencies, 0.5) * 1000:>26.2f} "
              f"{percentile(latencies, 0.95) * 1000:>8.2f}")


if __name__ == "__main__":
    main()
