"""``chatkeep sessions list|show``, ``history`` and ``usage``: reading what is stored.

None of them creates a database: a missing SQLite file is an error naming it.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from chatkeep.app import Chatkeep
from chatkeep.cli.common import (
    DEFAULT_DB,
    ConfigOption,
    DbOption,
    JsonOption,
    TenantOption,
    console,
    open_keep,
    parse_range,
    parse_ref,
    print_json,
    readable_summary,
    ref_json,
    require_ref,
    safe,
    session_json,
)
from chatkeep.errors import InvalidArgument, SessionNotFound
from chatkeep.messages import Message, Role
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.validation import INT32_MAX

sessions_app = typer.Typer(help="List and inspect sessions.", no_args_is_help=True)

SessionIdArg = Annotated[str, typer.Argument(
    help="The session id (a UUID), or with --tenant the application's key for it.",
    show_default=False)]
TAIL_DEFAULT = 50


class WireFormatName(StrEnum):
    """The wire formats ``history --format`` offers (``chatkeep.formats.FORMATS``)."""

    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC_MESSAGES = "anthropic_messages"


@sessions_app.command("list")
def list_sessions(tenant: Annotated[str, typer.Option(help="Tenant as TYPE:ID.",
                                                      show_default=False)],
                  actor: Annotated[str | None, typer.Option(
                      help="Only this actor's sessions, TYPE:ID.")] = None,
                  subject: Annotated[str | None, typer.Option(
                      help="Only sessions about this subject, TYPE:ID.")] = None,
                  limit: Annotated[int, typer.Option(
                      min=1, max=INT32_MAX, help="At most this many sessions.")] = 50,
                  as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """A tenant's sessions, most recently active first."""
    tenant_ref = require_ref(tenant, "tenant")
    actor_ref, subject_ref = parse_ref(actor, "actor"), parse_ref(subject, "subject")
    with open_keep(db, existing=True) as keep:
        rows = keep.sessions.list(tenant_ref, actor=actor_ref, subject=subject_ref,
                                  limit=limit)
        if as_json:
            print_json([session_json(s) for s in rows])
            return
        table = Table()
        # Ids are what the next command needs: never wrapped, never cut.
        table.add_column("id", no_wrap=True, min_width=36, overflow="ignore")
        for header in ("key", "actor", "subject", "messages", "billed tokens", "watermark",
                       "last message"):
            table.add_column(header)
        for s in rows:
            table.add_row(s.id, safe(s.key or "-"), safe(s.actor or "-"), safe(s.subject or "-"),
                          str(s.message_count), str(s.total_tokens), str(s.summary_watermark),
                          s.row.last_message_at.strftime("%Y-%m-%d %H:%M"))
        console.print(table)
        if not rows:
            console.print(f"no sessions for {safe(tenant_ref)}")


def find_session(keep: Chatkeep, name: str, tenant: Ref | None) -> ChatSession:
    """The session with id ``name``, or, for a tenant, the one its application calls
    ``name`` (a key): commands take whichever the user has at hand."""
    try:
        return keep.sessions.get(name, tenant=tenant)
    except SessionNotFound:
        if tenant is None:
            raise
        try:
            return keep.sessions.by_key(name, tenant)
        except (SessionNotFound, InvalidArgument):
            raise SessionNotFound(f"no session with id or key {name!r} for tenant "
                                  f"{tenant}") from None


def _describe(message: Message) -> str:
    parts = []
    if message.content:
        parts.append(safe(message.content))
    for call in message.tool_calls:
        parts.append(f"[cyan]→ tool call {safe(call.id)}: {safe(call.name)}"
                     f"({safe(call.arguments)})[/cyan]")
    return "\n".join(parts)


def _message_json(message: Message) -> dict[str, Any]:
    return {"seq": message.seq, **message.to_openai(), "tokens": message.tokens,
            "created_at": message.created_at.isoformat() if message.created_at else None,
            "retracted_at": message.retracted_at.isoformat() if message.retracted_at else None,
            "metadata": dict(message.metadata)}


@sessions_app.command("show")
def show(session_id: SessionIdArg, tenant: TenantOption = None,
         tail: Annotated[int | None, typer.Option(
             min=0, max=INT32_MAX, show_default=f"{TAIL_DEFAULT}; all with --json",
             help="Show only the last N messages.")] = None,
         show_all: Annotated[bool, typer.Option(
             "--all", help="Show every message (overrides --tail).")] = False,
         as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """One session: references, billed tokens and conversation size, summary, watermark
    and its messages (the last 50 by default), tool plumbing included."""
    tenant_ref = parse_ref(tenant, "tenant")
    with open_keep(db, existing=True) as keep:
        s = find_session(keep, session_id, tenant_ref)
        messages = s.messages
        size = sum(m.tokens or 0 for m in messages)
        count = None if show_all else tail if tail is not None else \
            None if as_json else TAIL_DEFAULT
        shown = messages if count is None else messages[len(messages) - count:] \
            if count else []
        if as_json:
            print_json({**session_json(s), "summary": readable_summary(s.summary),
                        "conversation_tokens": size,
                        "messages": [_message_json(m) for m in shown]})
            return
        console.print(f"[bold]session[/bold] {s.id}"
                      + (f" · key {safe(s.key)}" if s.key else ""), soft_wrap=True)
        console.print(f"tenant {safe(s.tenant)} · actor {safe(s.actor or '-')} · "
                      f"subject {safe(s.subject or '-')}")
        console.print(f"messages {s.message_count} · conversation {size} tokens (stored "
                      f"messages) · billed {s.total_tokens} tokens (usage ledger) · "
                      f"anonymize_pii {s.anonymize_pii} · closed {s.closed}")
        console.print(f"summary watermark {s.summary_watermark} "
                      f"(version {s.row.summary_version}) · distilled through "
                      f"{s.row.distilled_through}")
        if s.summary:
            console.print(f"[bold]summary[/bold]\n{safe(readable_summary(s.summary))}")
        table = Table("seq", "role", "content", "tokens", show_lines=True)
        for m in shown:
            role = m.role.value if m.role is not Role.TOOL else f"tool ← {safe(m.tool_call_id)}"
            folded = " [dim](summarised)[/dim]" if m.seq <= s.summary_watermark else ""
            if m.retracted_at is not None:
                folded += " [yellow](retracted)[/yellow]"
            table.add_row(str(m.seq), role + folded, _describe(m), str(m.tokens or 0))
        console.print(table)
        if len(shown) < len(messages):
            console.print(f"showing the last {len(shown)} of {len(messages)} messages "
                          "(--tail N or --all for more)")


def history(session_id: SessionIdArg,
            system: Annotated[str, typer.Option(help="System prompt to build with.")] = "",
            wire_format: Annotated[WireFormatName, typer.Option(
                "--format", help="Wire format of the messages.")]
            = WireFormatName.OPENAI_CHAT,
            tenant: TenantOption = None, db: DbOption = DEFAULT_DB,
            config: ConfigOption = None) -> None:
    """Print the exact messages build_history sends next, as JSON (compresses first when
    the session is over budget, as the real call does)."""
    tenant_ref = parse_ref(tenant, "tenant")
    with open_keep(db, config, existing=True) as keep:
        s = find_session(keep, session_id, tenant_ref)
        build: Any = keep.compressor.build_history  # one of FORMATS, by the enum
        built = build(s, system, format=wire_format.value)
        data: Any = list(built)
        system_part = getattr(built, "system", None)
        if system_part is not None:
            data = {"system": system_part, "messages": data}
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def usage(tenant: TenantOption = None,
          since: Annotated[str | None, typer.Option(
              help="From this date, inclusive: 2026, 2026-11, 2026-11-01 or ISO date-time "
                   "(UTC unless it says).")] = None,
          until: Annotated[str | None, typer.Option(
              help="Up to this date, exclusive (same forms as --since).")] = None,
          as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """Token usage by tenant, purpose and model (what to bill)."""
    tenant_ref = parse_ref(tenant, "tenant")
    start, end = parse_range(since, until)
    with open_keep(db, existing=True) as keep:
        lines = keep.usage(tenant_ref, since=start, until=end)
        total = sum(line.total_tokens for line in lines)
        if as_json:
            print_json({"since": start.isoformat() if start else None,
                        "until": end.isoformat() if end else None, "total_tokens": total,
                        "lines": [{"tenant": ref_json(line.tenant), "purpose": line.purpose,
                                   "model": line.model, "calls": line.calls,
                                   "prompt_tokens": line.prompt_tokens,
                                   "completion_tokens": line.completion_tokens,
                                   "total_tokens": line.total_tokens} for line in lines]})
            return
        table = Table("tenant", "purpose", "model", "calls", "prompt", "completion", "total")
        for line in lines:
            table.add_row(safe(line.tenant), line.purpose, safe(line.model or "-"),
                          str(line.calls), str(line.prompt_tokens),
                          str(line.completion_tokens), str(line.total_tokens))
        console.print(table)
        console.print(f"total tokens: {total}")
