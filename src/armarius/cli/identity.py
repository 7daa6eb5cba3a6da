"""`armarius workspace|principal|token`: the identity directory for operators."""

from __future__ import annotations

import click

from armarius.auth.permissions import Kind, Role
from armarius.auth.secrets import new_password
from armarius.cli.context import NUMBER, CliContext, pass_cli, read_secret_from_stdin

ROLE = click.Choice([role.value for role in Role])


@click.group()
def workspace() -> None:
    """Workspaces: the isolation boundary."""


@workspace.command("add")
@click.argument("name")
@pass_cli
def workspace_add(cli: CliContext, name: str) -> None:
    """Create a workspace."""
    with cli.app() as app:
        created = app.directory.create_workspace(name, by=cli.operator)
    cli.emit({"id": created.id, "name": created.name}, text=f"Workspace {created.name} created.")


@workspace.command("list")
@pass_cli
def workspace_list(cli: CliContext) -> None:
    """List workspaces."""
    with cli.app() as app:
        spaces = app.directory.workspaces()
    cli.emit([{"id": w.id, "name": w.name, "created_at": w.created_at} for w in spaces],
             table=[("ID", "NAME", "CREATED"), *[(w.id, w.name, w.created_at) for w in spaces]])


@click.group()
def principal() -> None:
    """Principals (humans and agents) and their roles."""


@principal.command("add")
@click.argument("name")
@click.option("--kind", type=click.Choice([k.value for k in Kind]), required=True)
@click.option("--workspace", required=True, help="Workspace the principal joins.")
@click.option("--role", type=ROLE, required=True)
@click.option("--password-stdin", is_flag=True, help="Humans: read the password from standard input "
              "instead of generating one.")
@pass_cli
def principal_add(cli: CliContext, name: str, kind: str, workspace: str, role: str, password_stdin: bool) -> None:
    """Create a principal with a role in one workspace. A human gets a password, shown once."""
    principal_kind = Kind(kind)
    password = None
    generated = False
    if principal_kind is Kind.HUMAN:
        generated = not password_stdin
        password = read_secret_from_stdin() if password_stdin else new_password()
    with cli.app() as app:
        created = app.directory.add_principal(
            name, principal_kind, workspace=workspace, role=Role(role), by=cli.operator, password=password
        )
    result = {"id": created.id, "name": created.name, "kind": created.kind.value, "workspace": workspace,
              "role": role}
    text = f"Principal {name} ({kind}) is {role} in {workspace}."
    if generated:
        result["password"] = password
        text += f"\nPassword (shown once): {password}"
    cli.emit(result, text=text)


@principal.command("list")
@click.option("--workspace", help="Only members of this workspace.")
@pass_cli
def principal_list(cli: CliContext, workspace: str | None) -> None:
    """List principals and their roles."""
    with cli.app() as app:
        listing = app.directory.principals(workspace)
    data = [{"name": p.name, "kind": p.kind.value, "roles": roles} for p, roles in listing]
    rows = [(p.name, p.kind.value, ", ".join(f"{w}={r}" for w, r in roles.items())) for p, roles in listing]
    cli.emit(data, table=[("NAME", "KIND", "ROLES"), *rows])


@principal.command("set-role")
@click.argument("name")
@click.option("--workspace", required=True)
@click.option("--role", type=ROLE, required=True)
@pass_cli
def principal_set_role(cli: CliContext, name: str, workspace: str, role: str) -> None:
    """Give a principal a role in a workspace (agents can never be admin)."""
    with cli.app() as app:
        app.directory.set_role(name, workspace=workspace, role=Role(role), by=cli.operator)
    cli.emit({"name": name, "workspace": workspace, "role": role}, text=f"{name} is now {role} in {workspace}.")


@principal.command("set-password")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@pass_cli
def principal_set_password(cli: CliContext, name: str, password_stdin: bool) -> None:
    """Set a human principal's password (generated and shown once unless read from stdin)."""
    password = read_secret_from_stdin() if password_stdin else new_password()
    with cli.app() as app:
        app.directory.set_password(name, password, by=cli.operator)
    result = {"name": name} if password_stdin else {"name": name, "password": password}
    cli.emit(result, text=f"Password of {name} changed." + ("" if password_stdin else
                                                            f"\nPassword (shown once): {password}"))


@click.group()
def token() -> None:
    """Agent API tokens."""


@token.command("issue")
@click.argument("principal_name", metavar="PRINCIPAL")
@click.option("--workspace", required=True)
@click.option("--label", default="", help="A note to recognise the token by.")
@pass_cli
def token_issue(cli: CliContext, principal_name: str, workspace: str, label: str) -> None:
    """Issue an agent token. It is shown once; only its SHA-256 digest is stored."""
    with cli.app() as app:
        issued = app.directory.issue_token(principal_name, workspace=workspace, label=label, by=cli.operator)
    cli.emit({"id": issued.id, "principal": issued.principal, "workspace": issued.workspace,
              "token": issued.token},
             text=f"Token {issued.id} for {issued.principal} in {issued.workspace} (shown once):\n{issued.token}")


@token.command("revoke")
@click.argument("token_id", type=NUMBER)
@pass_cli
def token_revoke(cli: CliContext, token_id: int) -> None:
    """Revoke a token by its id; it stops working at once."""
    with cli.app() as app:
        app.directory.revoke_token(token_id, by=cli.operator)
    cli.emit({"id": token_id, "revoked": True}, text=f"Token {token_id} revoked.")


@token.command("list")
@click.option("--workspace")
@pass_cli
def token_list(cli: CliContext, workspace: str | None) -> None:
    """List tokens (never their values)."""
    with cli.app() as app:
        tokens = app.directory.tokens(workspace)
    cli.emit(
        [vars(t) for t in tokens],
        table=[("ID", "PRINCIPAL", "WORKSPACE", "LABEL", "CREATED", "LAST USED", "REVOKED"),
               *[(t.id, t.principal, t.workspace, t.label, t.created_at, t.last_used_at, t.revoked_at)
                 for t in tokens]],
    )
