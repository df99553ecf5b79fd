"""What every command shares: the database option, opening ``Chatkeep``, error display."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from chatkeep.app import Chatkeep
from chatkeep.config import Config
from chatkeep.errors import ChatkeepError
from chatkeep.refs import Ref

console = Console()
err_console = Console(stderr=True)

DEFAULT_DB = "sqlite:///chatkeep.db"

DbOption = Annotated[str, typer.Option(
    "--db", envvar="CHATKEEP_DATABASE_URL",
    help="Database URL (sqlite:///file.db or postgresql+psycopg://...).")]
ConfigOption = Annotated[str | None, typer.Option(
    "--config", envvar="CHATKEEP_CONFIG", help="TOML config file.")]


def safe(value: object) -> str:
    """Stored or user text for rich output: brackets shown as typed, never read as markup."""
    return escape(str(value))


def parse_ref(value: str | None, what: str) -> Ref | None:
    """``TYPE:ID`` from the command line, as a ``Ref`` (digits become an int id)."""
    if value is None:
        return None
    try:
        return Ref.parse(value)
    except ChatkeepError as exc:
        raise typer.BadParameter(f"{what}: {exc}") from None


def parse_time(value: str | None) -> datetime | None:
    """An ISO date or date-time; naive values are UTC."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"not an ISO date/time: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@contextmanager
def open_keep(db: str, config_file: str | None = None,
              settings: Mapping[str, Any] | None = None, **kwargs: Any) -> Iterator[Chatkeep]:
    """Open ``Chatkeep`` with config from file/env plus ``settings``; a ``ChatkeepError``
    becomes a red message and exit code 1."""
    keep = None
    try:
        config = Config.load(settings, toml_path=config_file)
        kwargs.setdefault("dispatcher", "inline")  # a command finishes its own work
        keep = Chatkeep(db, config=config, **kwargs)
        yield keep
    except ChatkeepError as exc:
        err_console.print(f"[red]error:[/red] {type(exc).__name__}: {safe(exc)}")
        raise typer.Exit(1) from None
    finally:
        if keep is not None:
            keep.close()

