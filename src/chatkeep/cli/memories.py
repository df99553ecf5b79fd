"""``chatkeep sweep`` and ``chatkeep memories list|forget|embed``.

Mount on the root app::

    from chatkeep.cli.memories import memories_app, sweep
    app.command()(sweep)
    app.add_typer(memories_app, name="memories")

``sweep`` distils in this process (with a progress bar), so a crontab line is
all it needs: ``* * * * * chatkeep sweep --db postgresql+psycopg://...``.
Overlapping runs are safe: each session is claimed by compare-and-set.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer

from chatkeep.app import Chatkeep
from chatkeep.cli.common import (
    DEFAULT_DB,
    ConfigOption,
    DbOption,
    JsonOption,
    console,
    fail,
    open_keep,
    parse_ref,
    print_json,
    ref_json,
    ref_option,
    safe,
)
from chatkeep.cli.tables import number, short_ids, table, when
from chatkeep.config import parse_duration
from chatkeep.errors import ConfigError, DistillationError
from chatkeep.memory.scopes import Scope
from chatkeep.refs import Ref
from chatkeep.validation import INT32_MAX

memories_app = typer.Typer(help="Review and erase distilled memories.", no_args_is_help=True)

TenantArg = Annotated[str, typer.Option("--tenant", help="Tenant as TYPE:ID.",
                                        show_default=False)]


def _idle_after(value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value, "--idle-after")
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix("--idle-after: "),
                                 param_hint="'--idle-after'") from None


def sweep(idle_after: Annotated[str | None, typer.Option(
              show_default="memory.sweep_idle_after: 30m",
              help="Idle time before a session is swept: 90 (seconds), 30m, 2h, 1d.")] = None,
          batch_size: Annotated[int | None, typer.Option(
              min=1, max=INT32_MAX, show_default="memory.sweep_batch_size: 100",
              help="At most this many sessions per run.")] = None,
          db: DbOption = DEFAULT_DB, config: ConfigOption = None) -> None:
    """Distil idle sessions with undistilled messages (run it from cron)."""
    settings: dict[str, Any] = {}
    idle = _idle_after(idle_after)
    if idle is not None:
        settings["sweep_idle_after"] = idle
    if batch_size is not None:
        settings["sweep_batch_size"] = batch_size
    with open_keep(db, config, settings={"memory": settings} if settings else None,
                   existing=True) as keep:
        if keep.model is None:
            fail("no model configured: set llm.base_url / OPENAI_API_KEY to distil memories")
        claimed = keep.memory.claim_idle()
        if not claimed:
            console.print("nothing to distil")
            return
        sessions = [keep.sessions.get_unscoped(session_id) for session_id in claimed]
        ids = short_ids(s.id for s in sessions)
        grid = table(("session", "id"), ("tenant", "text"), ("seq", "number"),
                     ("new", "number"), ("superseded", "number"), ("dupes", "number"),
                     ("status", "text"))
        failures = 0
        from rich.progress import Progress  # (loaded by the commands that draw one)

        with Progress(console=console, transient=True) as progress:
            # Counted in messages, not sessions: one long session is most of the work.
            task = progress.add_task("distilling messages", total=sum(
                max(s.message_count - s.row.distilled_through, 0) for s in sessions))
            for session in sessions:
                try:
                    r = keep.memory.distil(session)
                    grid.add_row(ids[session.id], safe(session.tenant),
                                 number(r.distilled_through), number(r.added),
                                 number(r.superseded), number(r.duplicates), "ok")
                except DistillationError as exc:
                    failures += 1
                    grid.add_row(ids[session.id], safe(session.tenant), "-", "-", "-", "-",
                                 f"[red]failed[/red]: {safe(exc)}")
                progress.advance(task, max(session.message_count - session.row.distilled_through,
                                           0))
        console.print(grid)
        console.print(f"{len(claimed) - failures} distilled, {failures} failed")
        if failures:
            raise typer.Exit(1)


@memories_app.command("list")
def list_memories(tenant: TenantArg,
                  actor: Annotated[str | None, typer.Option(
                      help="Only this actor's personal memories, TYPE:ID.")] = None,
                  subject: Annotated[str | None, typer.Option(
                      help="Only memories about this subject, TYPE:ID.")] = None,
                  scope: Annotated[Scope | None, typer.Option(
                      help="Only this scope.", show_default="every scope")] = None,
                  include_superseded: Annotated[bool, typer.Option(
                      "--all", help="Include superseded memories.")] = False,
                  limit: Annotated[int, typer.Option(
                      min=1, max=INT32_MAX, help="At most this many memories.")] = 100,
                  wide: Annotated[bool, typer.Option(
                      "--wide", help="Every column, for a wide terminal.")] = False,
                  as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """A tenant's memories, newest first."""
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref, subject_ref = parse_ref(actor, "actor"), parse_ref(subject, "subject")
    with open_keep(db, existing=True) as keep:
        rows = keep.memory.list(tenant_ref, scope=scope, actor=actor_ref, subject=subject_ref,
                                include_superseded=include_superseded, limit=limit)
        if as_json:
            print_json([{"id": m.id, "scope": str(m.scope), "tenant": ref_json(m.tenant),
                         "subject": ref_json(m.subject), "actor": ref_json(m.actor),
                         "content": m.content, "updated_at": m.updated_at.isoformat(),
                         "superseded_by": m.superseded_by} for m in rows])
            return
        superseded = include_superseded or wide
        columns = [("id", "number"), ("scope", "text"), ("about", "text"), ("memory", "text")]
        if wide:
            columns.append(("updated", "time"))
        if superseded:
            columns.append(("superseded by", "number"))
        grid = table(*columns)
        for m in rows:
            cells = [str(m.id), str(m.scope), safe(m.subject or m.actor or "-"),
                     safe(m.content)]
            if wide:
                cells.append(when(m.updated_at))
            if superseded:
                cells.append("-" if m.superseded_by is None else str(m.superseded_by))
            grid.add_row(*cells)
        console.print(grid)
        console.print(recall_note(keep, tenant_ref))


@memories_app.command("forget")
def forget(tenant: TenantArg,
           actor: Annotated[str | None, typer.Option(
               help="Erase this actor's personal memories (TYPE:ID).")] = None,
           whole_tenant: Annotated[bool, typer.Option(
               "--whole-tenant", help="Erase every memory of the tenant.")] = False,
           yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
           db: DbOption = DEFAULT_DB) -> None:
    """Erase one person's personal memories (right to erasure), or a whole tenant's."""
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref = parse_ref(actor, "actor")
    if whole_tenant == (actor_ref is not None):
        raise typer.BadParameter("pass either --actor or --whole-tenant",
                                 param_hint="'--actor' / '--whole-tenant'")
    what = f"every memory of {tenant_ref}" if whole_tenant else \
        f"the personal memories of {actor_ref} in {tenant_ref}"
    if not yes:
        typer.confirm(f"Erase {what}?", abort=True)
    with open_keep(db, existing=True) as keep:
        deleted = keep.memory.forget(tenant_ref, actor_ref, whole_tenant=whole_tenant)
    console.print(f"erased {deleted} memories ({safe(what)})")


def recall_note(keep: Chatkeep, tenant: Ref | None = None) -> str:
    """One line saying how recall ranks: full-text only (no embedding model configured) or
    hybrid, with how many live memories still wait for a vector."""
    status = keep.memory.vector_status(tenant)
    if status is None:
        return ("recall: full-text only (set memory.embedding_model for recall by meaning "
                "as well)")
    note = (f"recall: hybrid (full text + {safe(status.model)} vectors); "
            f"{status.embedded} of {status.embedded + status.missing} live memories embedded")
    if status.missing:
        note += f", {status.missing} waiting: run `chatkeep memories embed`"
    return note


@memories_app.command("embed")
def embed(batch_size: Annotated[int | None, typer.Option(
              min=1, max=2048, show_default="memory.embedding_batch_size, 64",
              help="Memories per embeddings request.")] = None,
          limit: Annotated[int | None, typer.Option(
              min=1, max=INT32_MAX, show_default="all",
              help="Stop after this many memories.")] = None,
          db: DbOption = DEFAULT_DB, config: ConfigOption = None) -> None:
    """Embed live memories that have no vector of memory.embedding_model: new ones, ones a
    failed embedding call left marked, and all of them after a model change. Resumable:
    each batch is committed, so a second run continues where an interrupted one stopped."""
    with open_keep(db, config, existing=True) as keep:
        status = keep.memory.vector_status()
        if status is None:
            fail("no embedding model configured: set memory.embedding_model "
                 "(recall is full-text only)")
        if not status.missing:
            console.print(f"nothing to embed: all {status.embedded} live memories have "
                          f"{safe(status.model)} vectors")
            return
        total = status.missing if limit is None else min(limit, status.missing)
        from rich.progress import Progress

        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"embedding with {safe(status.model)}", total=total)
            result = keep.memory.embed_missing(
                batch_size, lambda n: progress.advance(task, n), limit)
        console.print(f"{result.embedded} embedded, {result.failed} failed "
                      f"({result.batches} requests to {safe(result.model)})")
        if result.failed:
            fail(f"{result.failed} memories could not be embedded; they stay marked, "
                 "run the command again")
