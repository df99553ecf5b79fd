"""The ``chatkeep`` Typer application: mounts every command group."""

from __future__ import annotations

from typing import Annotated

import typer

from chatkeep import __version__
from chatkeep.cli.common import ChatkeepGroup, log_to_stderr
from chatkeep.cli.db import db_app
from chatkeep.cli.demo import demo
from chatkeep.cli.inspect import inspect
from chatkeep.cli.lifecycle import delete_session, erase, holds_app, retention_app, vacuum_db
from chatkeep.cli.memories import memories_app, sweep
from chatkeep.cli.privacy import privacy_app
from chatkeep.cli.quotas import quotas_app
from chatkeep.cli.replay import replay
from chatkeep.cli.sessions import history, sessions_app, usage
from chatkeep.cli.tenants import tenants
from chatkeep.cli.transfer import export, import_file

app = typer.Typer(help="chatkeep: durable multi-tenant chat sessions within a token budget.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=ChatkeepGroup,
                  context_settings={"help_option_names": ["-h", "--help"]})
app.command()(demo)
app.add_typer(sessions_app, name="sessions")
app.command()(history)
app.command("import")(import_file)
app.command("export")(export)
app.command()(usage)
app.command()(tenants)
app.add_typer(db_app, name="db")
app.command()(sweep)
app.add_typer(memories_app, name="memories")
app.add_typer(privacy_app, name="privacy")
app.command()(inspect)
sessions_app.command("delete")(delete_session)
app.command()(erase)
app.add_typer(holds_app, name="holds")
app.add_typer(retention_app, name="retention")
app.add_typer(quotas_app, name="quotas")
app.command()(replay)
db_app.command("vacuum")(vacuum_db)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"chatkeep {__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          verbose: Annotated[bool, typer.Option(
              "--verbose", "-v", help="Log what happens (also accepted after the command).")]
          = False,
          version: Annotated[bool, typer.Option(
              "--version", callback=_version, is_eager=True,
              help="Print the version and exit.")] = False) -> None:
    if verbose:
        ctx.call_on_close(log_to_stderr())


def main() -> None:
    """Console-script entry point."""
    app()
