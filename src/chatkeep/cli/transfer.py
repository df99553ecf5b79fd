"""``chatkeep export`` and ``chatkeep import``: JSON Lines in and out.

``export`` writes a lossless dump (:mod:`chatkeep.store.dump`), taken in one snapshot and
renamed into place once complete; ``import`` restores one exactly, or loads a file of
OpenAI-format messages into a new session. Either way the file is read and checked in
full, then written in one transaction: a bad line (reported with its number) leaves
nothing behind.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from chatkeep.cli.common import (
    DEFAULT_DB,
    DbOption,
    console,
    err_console,
    fail,
    open_keep,
    parse_ref,
    ref_option,
)
from chatkeep.importing import import_messages, read_jsonl
from chatkeep.store.migrate import head_revision

# The dump (chatkeep.store.dump and its checks) is imported by the two commands that use
# it, not with the CLI: every other command starts without it (issue 32 item 11).


def _is_dump(path: Path) -> bool:
    """Whether ``path`` starts with a dump's header line."""
    from chatkeep.store.dump import FORMAT

    with path.open(encoding="utf-8", errors="replace") as file:
        return f'"format":"{FORMAT.partition("/")[0]}/' in file.readline(4096)


def export(out: Annotated[Path | None, typer.Option(
               "--out", "-o", help="Write the dump here (default: standard output).",
               dir_okay=False, writable=True)] = None,
           tenant: Annotated[str | None, typer.Option(
               help="Only this tenant's sessions, messages, usage and memories, TYPE:ID.")]
           = None,
           db: DbOption = DEFAULT_DB) -> None:
    """Write everything stored as JSON Lines: sessions with their seqs, times, metadata,
    retractions, summary and watermark, the usage ledger, memories, and each session's
    placeholder vault still sealed. `chatkeep import` restores it exactly."""
    from chatkeep.store.dump import dump_lines, write_dump, write_lines

    tenant_ref = parse_ref(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        lines = dump_lines(keep.engine, head_revision(), tenant_ref)
        if out is None:
            write_lines(lines, sys.stdout.buffer)
            return
        with err_console.status("exporting") as status:
            written = write_dump(lines, out, lambda n: status.update(
                f"exporting: {n:,} rows"))
        err_console.print(f"exported {written - 2:,} rows to {out}")


def import_file(file: Annotated[Path, typer.Argument(
                    help="A dump written by `chatkeep export` (restored exactly), or OpenAI "
                         "chat messages, one JSON object per line (.jsonl, UTF-8).",
                    exists=True, dir_okay=False, readable=True, show_default=False)],
                tenant: Annotated[str | None, typer.Option(
                    help="Owner of the new session, TYPE:ID (messages only).",
                    show_default=False)] = None,
                actor: Annotated[str | None, typer.Option(help="Speaker, TYPE:ID.")] = None,
                subject: Annotated[str | None, typer.Option(
                    help="What the session is about, TYPE:ID.")] = None,
                title: Annotated[str | None, typer.Option(
                    help="Session title.", show_default="the file's name")] = None,
                db: DbOption = DEFAULT_DB) -> None:
    """Restore a dump of `chatkeep export` into a database holding none of its sessions
    and tenants (checked in full first: a dump cut short, edited, or holding rows it does
    not own restores nothing), or create a session holding every message of FILE: all of
    it or, if any line is refused, nothing (the error names the line)."""
    if _is_dump(file):
        from chatkeep.store.dump import check_file, restore_file

        if tenant or actor or subject or title:
            fail("a dump carries its own tenants and sessions: --tenant, --actor, "
                 "--subject and --title do not apply")
        with err_console.status("checking") as status:
            def progress(stage: str, rows: int) -> None:
                status.update(f"{stage}: {rows:,} rows")

            # Checked in full before the database is even opened (or created).
            checked = check_file(file, head_revision(), progress)
            with open_keep(db) as keep:
                counts = restore_file(keep.engine, checked, head_revision(), progress)
        console.print("restored " + ", ".join(f"{n:,} {name}" for name, n in counts.items()))
        return
    if tenant is None:
        fail("--tenant is required to import messages into a new session")
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref, subject_ref = parse_ref(actor, "actor"), parse_ref(subject, "subject")
    messages = read_jsonl(file)  # checked in full before the database is even opened
    with open_keep(db) as keep:
        session = import_messages(keep, messages, tenant_ref, actor_ref, subject_ref,
                                  title=file.name if title is None else title)
        console.print(f"imported {session.message_count} messages into session "
                      f"[bold]{session.id}[/bold]", soft_wrap=True)
