"""``chatkeep sessions list|show``, ``history`` and ``usage``: reading what is stored."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from chatkeep.cli.common import (
    DEFAULT_DB,
    ConfigOption,
    DbOption,
    console,
    open_keep,
    parse_ref,
    parse_time,
    safe,
)
from chatkeep.messages import Message, Role

sessions_app = typer.Typer(help="List and inspect sessions.", no_args_is_help=True)

TenantOption = Annotated[str | None, typer.Option(
    "--tenant", help="Scope to this tenant, as TYPE:ID.")]


@sessions_app.command("list")
def list_sessions(tenant: Annotated[str, typer.Option(help="Tenant as TYPE:ID.")],
                  actor: Annotated[str | None, typer.Option(help="Actor as TYPE:ID.")] = None,
                  subject: Annotated[str | None, typer.Option(help="Subject as TYPE:ID.")] = None,
                  limit: int = 50, db: DbOption = DEFAULT_DB) -> None:
    """A tenant's sessions, most recently active first."""
    tenant_ref = parse_ref(tenant, "tenant")
    assert tenant_ref is not None
    with open_keep(db) as keep:
        rows = keep.sessions.list(tenant_ref, actor=parse_ref(actor, "actor"),
                                  subject=parse_ref(subject, "subject"), limit=limit)
        table = Table("id", "actor", "subject", "messages", "tokens", "watermark", "last message")
        for s in rows:
            table.add_row(s.id, safe(s.actor or "-"), safe(s.subject or "-"),
                          str(s.message_count), str(s.total_tokens), str(s.summary_watermark),
                          s.row.last_message_at.strftime("%Y-%m-%d %H:%M"))
        console.print(table)


def _describe(message: Message) -> str:
    parts = []
    if message.content:
        parts.append(safe(message.content))
    for call in message.tool_calls:
        parts.append(f"[cyan]→ tool call {safe(call.id)}: {safe(call.name)}"
                     f"({safe(call.arguments)})[/cyan]")
    return "\n".join(parts)


@sessions_app.command("show")
def show(session_id: str, tenant: TenantOption = None, db: DbOption = DEFAULT_DB) -> None:
    """One session in full: references, tokens, summary, watermark and every message,
    tool plumbing included."""
    with open_keep(db) as keep:
        s = keep.sessions.get(session_id, tenant=parse_ref(tenant, "tenant"))
        console.print(f"[bold]session[/bold] {s.id}")
        console.print(f"tenant {safe(s.tenant)} · actor {safe(s.actor or '-')} · "
                      f"subject {safe(s.subject or '-')}")
        console.print(f"messages {s.message_count} · total tokens {s.total_tokens} · "
                      f"anonymize_pii {s.anonymize_pii} · closed {s.closed}")
        console.print(f"summary watermark {s.summary_watermark} "
                      f"(version {s.row.summary_version}) · distilled through "
                      f"{s.row.distilled_through}")
        if s.summary:
            console.print(f"[bold]summary[/bold]\n{safe(s.summary)}")
        table = Table("seq", "role", "content", "tokens", show_lines=True)
        for m in s.messages:
            role = m.role.value if m.role is not Role.TOOL else f"tool ← {safe(m.tool_call_id)}"
            folded = " [dim](summarised)[/dim]" if m.seq <= s.summary_watermark else ""
            table.add_row(str(m.seq), role + folded, _describe(m), str(m.tokens or 0))
        console.print(table)


def history(session_id: str,
            system: Annotated[str, typer.Option(help="System prompt to build with.")] = "",
            tenant: TenantOption = None, db: DbOption = DEFAULT_DB,
            config: ConfigOption = None) -> None:
    """Print the exact messages build_history sends next, as JSON (compresses first when
    the session is over budget, as the real call does)."""
    with open_keep(db, config) as keep:
        s = keep.sessions.get(session_id, tenant=parse_ref(tenant, "tenant"))
        print(json.dumps(keep.compressor.build_history(s, system), indent=2,
                         ensure_ascii=False))


def usage(tenant: TenantOption = None,
          since: Annotated[str | None, typer.Option(help="ISO date/time, inclusive.")] = None,
          until: Annotated[str | None, typer.Option(help="ISO date/time, exclusive.")] = None,
          db: DbOption = DEFAULT_DB) -> None:
    """Token usage by tenant, purpose and model."""
    with open_keep(db) as keep:
        lines = keep.usage(parse_ref(tenant, "tenant"), since=parse_time(since),
                           until=parse_time(until))
        table = Table("tenant", "purpose", "model", "calls", "prompt", "completion", "total")
        for line in lines:
            table.add_row(safe(line.tenant), line.purpose, safe(line.model or "-"), str(line.calls),
                          str(line.prompt_tokens), str(line.completion_tokens),
                          str(line.total_tokens))
        console.print(table)
        console.print(f"total tokens: {sum(line.total_tokens for line in lines)}")
