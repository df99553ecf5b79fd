"""``chatkeep import``: load a JSON Lines file of OpenAI-format messages into a new session.

The file is read and checked in full, then the session and every message are written in
one transaction: a bad line (reported with its number) leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chatkeep.cli.common import DEFAULT_DB, DbOption, console, open_keep, parse_ref, require_ref
from chatkeep.importing import import_messages, read_jsonl


def import_file(file: Annotated[Path, typer.Argument(
                    help="OpenAI chat messages, one JSON object per line (.jsonl, UTF-8).",
                    exists=True, dir_okay=False, readable=True, show_default=False)],
                tenant: Annotated[str, typer.Option(
                    help="Owner of the new session, TYPE:ID.", show_default=False)],
                actor: Annotated[str | None, typer.Option(help="Speaker, TYPE:ID.")] = None,
                subject: Annotated[str | None, typer.Option(
                    help="What the session is about, TYPE:ID.")] = None,
                title: Annotated[str | None, typer.Option(
                    help="Session title.", show_default="the file's name")] = None,
                db: DbOption = DEFAULT_DB) -> None:
    """Create a session holding every message of FILE: all of them or, if any line is
    refused, nothing (the error names the line)."""
    tenant_ref = require_ref(tenant, "tenant")
    actor_ref, subject_ref = parse_ref(actor, "actor"), parse_ref(subject, "subject")
    messages = read_jsonl(file)  # checked in full before the database is even opened
    with open_keep(db) as keep:
        session = import_messages(keep, messages, tenant_ref, actor_ref, subject_ref,
                                  title=file.name if title is None else title)
        console.print(f"imported {session.message_count} messages into session "
                      f"[bold]{session.id}[/bold]", soft_wrap=True)
