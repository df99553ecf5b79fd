"""``chatkeep sweep`` and ``chatkeep memories list|forget``.

Mount on the root app::

    from chatkeep.cli.memories import memories_app, sweep
    app.command()(sweep)
    app.add_typer(memories_app, name="memories")

``sweep`` distils in this process (with a progress bar), so a crontab line is
all it needs: ``* * * * * chatkeep sweep --db postgresql+psycopg://...``.
Overlapping runs are safe: each session is claimed by compare-and-set.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.progress import Progress
from rich.table import Table

from chatkeep.cli.common import (
    DEFAULT_DB,
    ConfigOption,
    DbOption,
    console,
    err_console,
    open_keep,
    parse_ref,
    safe,
)
from chatkeep.errors import DistillationError
from chatkeep.memory.scopes import Scope

memories_app = typer.Typer(help="Review and erase distilled memories.", no_args_is_help=True)

TenantArg = Annotated[str, typer.Option("--tenant", help="Tenant as TYPE:ID.")]


def sweep(idle_after: Annotated[str | None, typer.Option(
              help="Idle time before a session is swept: 90 (s), 30m, 2h "
                   "[default: memory.sweep_idle_after].")] = None,
          batch_size: Annotated[int | None, typer.Option(
              help="At most this many sessions [default: memory.sweep_batch_size].")] = None,
          db: DbOption = DEFAULT_DB, config: ConfigOption = None) -> None:
    """Distil idle sessions with undistilled messages (run it from cron)."""
    settings: dict[str, Any] = {}
    if idle_after is not None:
        settings["sweep_idle_after"] = idle_after
    if batch_size is not None:
        settings["sweep_batch_size"] = batch_size
    with open_keep(db, config, settings={"memory": settings} if settings else None) as keep:
        if keep.model is None:
            err_console.print("[red]error:[/red] no model configured: set llm.base_url / "
                              "OPENAI_API_KEY to distil memories")
            raise typer.Exit(1)
        claimed = keep.memory.claim_idle()
        if not claimed:
            console.print("nothing to distil")
            return
        table = Table("tenant", "seq", "new", "superseded", "dupes", "status")
        table.add_column("session", no_wrap=True)
        failures = 0
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("distilling", total=len(claimed))
            for session_id in claimed:
                session = keep.sessions.get(session_id)
                try:
                    r = keep.memory.distil(session)
                    table.add_row(safe(session.tenant), str(r.distilled_through), str(r.added),
                                  str(r.superseded), str(r.duplicates), "ok", session_id)
                except DistillationError as exc:
                    failures += 1
                    table.add_row(safe(session.tenant), "-", "-", "-", "-",
                                  f"[red]failed[/red]: {safe(exc)}", session_id)
                progress.advance(task)
        console.print(table)
        console.print(f"{len(claimed) - failures} distilled, {failures} failed")
        if failures:
            raise typer.Exit(1)


@memories_app.command("list")
def list_memories(tenant: TenantArg,
                  actor: Annotated[str | None, typer.Option(help="Actor as TYPE:ID.")] = None,
                  subject: Annotated[str | None, typer.Option(
                      help="Subject as TYPE:ID.")] = None,
                  scope: Annotated[Scope | None, typer.Option(help="Only this scope.")] = None,
                  include_superseded: Annotated[bool, typer.Option(
                      "--all", help="Include superseded memories.")] = False,
                  limit: int = 100, db: DbOption = DEFAULT_DB) -> None:
    """A tenant's memories, newest first."""
    tenant_ref = parse_ref(tenant, "tenant")
    assert tenant_ref is not None
    with open_keep(db) as keep:
        rows = keep.memory.list(tenant_ref, scope=scope, actor=parse_ref(actor, "actor"),
                                subject=parse_ref(subject, "subject"),
                                include_superseded=include_superseded, limit=limit)
        table = Table("id", "scope", "about", "memory", "updated", "superseded by")
        for m in rows:
            table.add_row(str(m.id), m.scope, safe(m.subject or m.actor or "-"), safe(m.content),
                          m.updated_at.strftime("%Y-%m-%d %H:%M"),
                          "-" if m.superseded_by is None else str(m.superseded_by))
        console.print(table)


@memories_app.command("forget")
def forget(tenant: TenantArg,
           actor: Annotated[str | None, typer.Option(
               help="Erase this actor's personal memories (TYPE:ID).")] = None,
           whole_tenant: Annotated[bool, typer.Option(
               "--whole-tenant", help="Erase every memory of the tenant.")] = False,
           yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
           db: DbOption = DEFAULT_DB) -> None:
    """Erase one person's personal memories (right to erasure), or a whole tenant's."""
    tenant_ref = parse_ref(tenant, "tenant")
    actor_ref = parse_ref(actor, "actor")
    assert tenant_ref is not None
    if whole_tenant == (actor_ref is not None):
        raise typer.BadParameter("pass either --actor or --whole-tenant")
    what = f"every memory of {tenant_ref}" if whole_tenant else \
        f"the personal memories of {actor_ref} in {tenant_ref}"
    if not yes:
        typer.confirm(f"Erase {what}?", abort=True)
    with open_keep(db) as keep:
        deleted = keep.memory.forget(tenant_ref, actor_ref, whole_tenant=whole_tenant)
    console.print(f"erased {deleted} memories ({what})")
