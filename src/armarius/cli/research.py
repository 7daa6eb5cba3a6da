"""`armarius research query`: one structured query, no server and no model needed."""

from __future__ import annotations

import json
from pathlib import Path

import click

from armarius.cli.context import CliContext, pass_cli
from armarius.errors import InvalidInput
from armarius.research.captures import write_capture
from armarius.research.config import load_research_config
from armarius.research.service import ResearchService


@click.group()
def research() -> None:
    """Project research from the command line."""


@research.command("query")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              required=True, help="The research configuration (TOML).")
@click.option("--query", "query_path", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True,
              help="A JSON file with one project-query-v1 query.")
@click.option("--evidence", type=click.Path(path_type=Path, file_okay=False),
              help="Where to write the capture (default: evidence/ beside the configuration).")
@pass_cli
def research_query(cli: CliContext, config_path: Path, query_path: Path, evidence: Path | None) -> None:
    """Run one query; print the result JSON with its capture id (written as <id>.json)."""
    try:
        arguments = json.loads(query_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidInput(f"The query file is not UTF-8 JSON: {error}", field="query") from None
    config = load_research_config(config_path.resolve(), cli.settings.environ)
    service = ResearchService(config)
    try:
        answer = service.answer(arguments)
    except InvalidInput as error:
        raise in_query_file_terms(error, query_path) from None
    finally:
        service.close()
    write_capture(evidence or config_path.resolve().parent / "evidence", answer.capture)
    click.echo(json.dumps(answer.view(), ensure_ascii=False, indent=None if cli.as_json else 2, sort_keys=True))


#: How a refusal of a query words it for an agent, which sent it as the project_query tool's ``arguments``,
#: and how the same words read for a person who wrote it in the --query file.
_AGENT_TERMS = (
    ("'arguments' of the project query", "The query in {file}"),
    ("of the project query", "of the query in {file}"),
    ("Check the schema", "Check the query file against the project-query-v1 schema (docs/research.md)"),
    ("call again", "run the command again"),
)


def in_query_file_terms(error: InvalidInput, query_path: Path) -> InvalidInput:
    """The refusal of a query in the CLI's terms: the query file, not the MCP tool's ``arguments``."""
    message = error.message
    for agent, person in _AGENT_TERMS:
        message = message.replace(agent, person.format(file=query_path))
    details = {**error.details, **({"field": "query"} if error.details.get("field") == "arguments" else {})}
    return InvalidInput(message, **details)
