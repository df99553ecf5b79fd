"""``chatkeep import``: load a JSON Lines file of OpenAI-format messages into a new session."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from chatkeep.cli.common import DEFAULT_DB, DbOption, console, open_keep, parse_ref
from chatkeep.importing import append_all, read_jsonl


def import_file(file: Annotated[Path, typer.Argument(help="OpenAI-format messages, .jsonl")],
                tenant: Annotated[str, typer.Option(help="Owner of the new session, TYPE:ID.")],
                actor: Annotated[str | None, typer.Option(help="Speaker, TYPE:ID.")] = None,
                subject: Annotated[str | None, typer.Option(help="Subject, TYPE:ID.")] = None,
                title: str | None = None, db: DbOption = DEFAULT_DB) -> None:
    """Create a session and append every message of FILE (checked in full first)."""
    tenant_ref = parse_ref(tenant, "tenant")
    assert tenant_ref is not None
    with open_keep(db) as keep:
        messages = read_jsonl(file)
        session = keep.sessions.create(tenant_ref, parse_ref(actor, "actor"),
                                       parse_ref(subject, "subject"), title=title or file.name)
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"importing {file.name}", total=len(messages))
            written = append_all(session, messages, lambda _m: progress.advance(task))
        console.print(f"imported {written} messages into session [bold]{session.id}[/bold]")
