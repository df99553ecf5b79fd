"""``chatkeep db upgrade|downgrade|current|stamp``: the shipped Alembic migrations."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import Engine

from chatkeep.cli.common import DEFAULT_DB, DbOption, console, err_console, safe
from chatkeep.errors import ChatkeepError
from chatkeep.store import migrate
from chatkeep.store.engine import make_engine

db_app = typer.Typer(help="Schema migrations.", no_args_is_help=True)
Revision = Annotated[str, typer.Argument(help="Target revision ('head', 'base', or an id).")]


def _engine(db: str) -> Engine:
    try:
        return make_engine(db)
    except ChatkeepError as exc:
        err_console.print(f"[red]error:[/red] {safe(exc)}")
        raise typer.Exit(1) from None


@db_app.command()
def upgrade(revision: Revision = "head", db: DbOption = DEFAULT_DB) -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    engine = _engine(db)
    before = migrate.current(engine)
    migrate.upgrade(engine, revision)
    console.print(f"schema: {before or 'empty'} -> {migrate.current(engine)}")
    engine.dispose()


@db_app.command()
def downgrade(revision: Revision, db: DbOption = DEFAULT_DB) -> None:
    """Revert migrations down to REVISION ('base' drops every chatkeep table)."""
    engine = _engine(db)
    before = migrate.current(engine)
    migrate.downgrade(engine, revision)
    console.print(f"schema: {before} -> {migrate.current(engine) or 'empty'}")
    engine.dispose()


@db_app.command()
def current(db: DbOption = DEFAULT_DB) -> None:
    """Show the revision the database is at, and the newest this chatkeep ships."""
    engine = _engine(db)
    console.print(f"database: {migrate.current(engine) or 'not migrated'} · "
                  f"shipped head: {migrate.head_revision()}")
    engine.dispose()


@db_app.command()
def stamp(revision: Revision = "head", db: DbOption = DEFAULT_DB) -> None:
    """Record REVISION as applied without running it (for tables created another way)."""
    engine = _engine(db)
    migrate.stamp(engine, revision)
    console.print(f"stamped {migrate.current(engine)}")
    engine.dispose()
