"""The ``chatkeep`` Typer application: mounts every command group."""

from __future__ import annotations

import logging

import typer

from chatkeep.cli.db import db_app
from chatkeep.cli.demo import demo
from chatkeep.cli.memories import memories_app, sweep
from chatkeep.cli.sessions import history, sessions_app, usage
from chatkeep.cli.transfer import import_file

app = typer.Typer(help="chatkeep: durable multi-tenant chat sessions within a token budget.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.command()(demo)
app.add_typer(sessions_app, name="sessions")
app.command()(history)
app.command("import")(import_file)
app.command()(usage)
app.add_typer(db_app, name="db")
app.command()(sweep)
app.add_typer(memories_app, name="memories")


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what happens.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


def main() -> None:
    """Console-script entry point."""
    app()
