"""``chatkeep sessions list|show``, ``history`` and ``usage``: reading what is stored.

None of them creates a database: a missing SQLite file is an error naming it.
"""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from enum import StrEnum
from typing import Annotated, Any

import typer

from chatkeep import switches
from chatkeep.app import Chatkeep
from chatkeep.cli.common import (
    DEFAULT_DB,
    ConfigOption,
    DbOption,
    JsonOption,
    TenantOption,
    console,
    err_console,
    open_keep,
    parse_range,
    parse_ref,
    print_json,
    ref_json,
    ref_option,
    safe,
    session_json,
)
from chatkeep.cli.tables import number, short_ids, table, when
from chatkeep.errors import InvalidArgument, SessionNotFound
from chatkeep.messages import Message, Role
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.validation import INT32_MAX

sessions_app = typer.Typer(help="List and inspect sessions.", no_args_is_help=True)

SessionIdArg = Annotated[str, typer.Argument(
    help="The session id, a unique start of it (as 'sessions list' shows ids), or with "
         "--tenant the application's key for the session.",
    show_default=False)]
TAIL_DEFAULT = 50


class WireFormatName(StrEnum):
    """The wire formats ``history --format`` offers (``chatkeep.formats.FORMATS``)."""

    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC_MESSAGES = "anthropic_messages"


WideOption = Annotated[bool, typer.Option(
    "--wide", help="Whole ids and every column, for a wide terminal.")]


@sessions_app.command("list")
def list_sessions(tenant: Annotated[str, typer.Option(help="Tenant as TYPE:ID.",
                                                      show_default=False)],
                  actor: Annotated[str | None, typer.Option(
                      help="Only this actor's sessions, TYPE:ID.")] = None,
                  subject: Annotated[str | None, typer.Option(
                      help="Only sessions about this subject, TYPE:ID.")] = None,
                  limit: Annotated[int, typer.Option(
                      min=1, max=INT32_MAX, help="At most this many sessions.")] = 50,
                  wide: WideOption = False,
                  as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """A tenant's sessions, most recently active first. Ids are shown by their shortest
    unique prefix, which every command accepts."""
    tenant_ref = ref_option(tenant, "tenant")
    actor_ref, subject_ref = parse_ref(actor, "actor"), parse_ref(subject, "subject")
    with open_keep(db, existing=True) as keep:
        rows = keep.sessions.list(tenant_ref, actor=actor_ref, subject=subject_ref,
                                  limit=limit)
        if as_json:
            print_json([session_json(s) for s in rows])
            return
        if not rows:
            console.print(f"no sessions for {safe(tenant_ref)}")
            return
        ids = short_ids((s.id for s in rows), wide=wide)
        # The title is a conversation's human label. At 80 columns one wrapped column
        # holds it, with the key and the actor (dim) under it: three text columns side by
        # side left each a word or two a line.
        columns = [("id", "id"), ("title", "text"), ("key", "text"), ("actor", "text"),
                   ("subject", "text"), ("watermark", "number")] if wide else \
            [("id", "id"), ("session", "text")]
        grid = table(*columns, ("messages", "number"), ("tokens", "number"),
                     ("last message", "time"))
        for s in rows:
            title, key, actor = (safe(s.title or "-"), safe(s.key or "-"),
                                 safe(s.actor or "-"))
            if wide:
                cells = [ids[s.id], title, key, actor, safe(s.subject or "-"),
                         number(s.summary_watermark)]
            else:
                under = [f"key {key}"] * bool(s.key) + [f"actor {actor}"] * bool(s.actor)
                cells = [ids[s.id], "\n".join([title, *(f"[dim]{u}[/dim]" for u in under)])]
            grid.add_row(*cells, number(s.message_count), number(s.total_tokens),
                         when(s.row.last_message_at))
        console.print(grid)


def find_session(keep: Chatkeep, name: str, tenant: Ref | None) -> ChatSession:
    """The session ``name`` names: its id, a unique prefix of its id (as ``sessions list``
    shows them), or, for a tenant, the application's key for it. Commands take whichever
    the user has at hand."""
    try:
        return _load(keep, name, tenant)
    except SessionNotFound:
        pass
    if tenant is not None:
        try:
            return keep.sessions.by_key(name, tenant)
        except (SessionNotFound, InvalidArgument):
            pass
    if ID_PREFIX.fullmatch(name):
        matches = keep.repository.session_ids_starting(name.lower(), tenant)
        if len(matches) == 1:
            return _load(keep, matches[0], tenant)
        if matches:
            raise InvalidArgument(f"{name!r} starts more than one session id "
                                  f"({', '.join(matches)}, ...): give more of it")
    raise SessionNotFound(f"no session with id, id prefix or key {name!r}"
                          + (f" for tenant {tenant}" if tenant else ""))


def _load(keep: Chatkeep, session_id: str, tenant: Ref | None) -> ChatSession:
    """The operator's tool reads any tenant's session unless told which tenant to stay in."""
    if tenant is None:
        return keep.sessions.get_unscoped(session_id)
    return keep.sessions.get(session_id, tenant=tenant)


#: What may be the start of a session id: four or more of its characters.
ID_PREFIX = re.compile(r"[0-9a-fA-F][0-9a-fA-F-]{3,35}")


def _redacts(keep: Chatkeep, session: ChatSession) -> bool:
    """``keep.privacy.redacts(session)``, read from the switches' rule itself: showing a
    session does not build the privacy guard (nor import its recognizers)."""
    return switches.redacts(session.anonymize_pii, keep.config.privacy.anonymize_pii,
                            session.row.pii_protected)


def redaction(keep: Chatkeep, session: ChatSession) -> str:
    """Whether the session's text leaves redacted, and which switch decides it: both the
    application's and the session's must be on (the session's alone shows nothing)."""
    if _redacts(keep, session):
        return "redacted"
    if not session.anonymize_pii:
        return "not redacted (the session's switch is off)"
    return "not redacted (the application's switch, privacy.anonymize_pii, is off)"


def _print_messages(messages: list[Message], watermark: int) -> None:
    """Each message as a heading line (seq, role, tokens, what became of it) and its text
    indented under it: reads at 80 columns, where a four-column table wrapped every
    message into a narrow strip. The lines are wrapped here and printed as one text, a
    fraction of a table's rendering (``bench/cli_startup.py``)."""
    from rich.text import Text

    out = Text()
    for m in messages:
        out.append(f"#{m.seq}", style="bold")
        out.append(f" {m.role.value}" if m.role is not Role.TOOL
                   else f" tool ← {m.tool_call_id}")
        if m.seq <= watermark:
            out.append(" (summarized)", style="dim")
        if m.retracted_at is not None:
            out.append(" (retracted)", style="yellow")
        out.append(f" · {m.tokens or 0} tokens\n")
        if m.content:
            out.append(_indented(m.content) + "\n")
        for call in m.tool_calls:
            out.append(_indented(f"→ tool call {call.id}: {call.name}({call.arguments})")
                       + "\n", style="cyan")
    out.rstrip()
    console.print(out, highlight=False, soft_wrap=True)


def _indented(text: str, indent: str = "    ") -> str:
    """``text`` wrapped to the console's width under ``indent`` (its own line breaks and
    blank lines kept)."""
    width = max(20, console.width - len(indent))
    return "\n".join(textwrap.fill(line, width, initial_indent=indent,
                                   subsequent_indent=indent, replace_whitespace=False,
                                   drop_whitespace=True) if line.strip() else ""
                     for line in text.splitlines())


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
        # The store's read itself (the session's id and tenant are the stored ones):
        # keep.holds would load the erasure modules with it.
        holds = keep.lifecycle.list_holds(s.tenant, session_id=s.id)
        if as_json:
            print_json({**session_json(s), "summary": s.summary,
                        "holds": [{"id": h.id, "on": h.describe(), "reason": h.reason}
                                  for h in holds],
                        "redacted": _redacts(keep, s),
                        "conversation_tokens": size,
                        "messages": [_message_json(m) for m in shown]})
            return
        console.print(f"[bold]session[/bold] {s.id}"
                      + (f" · key {safe(s.key)}" if s.key else ""), soft_wrap=True)
        console.print(f"tenant {safe(s.tenant)} · actor {safe(s.actor or '-')} · "
                      f"subject {safe(s.subject or '-')}")
        console.print(f"messages {s.message_count} · conversation {size} tokens (stored "
                      f"messages) · billed {s.total_tokens} tokens (usage ledger) · "
                      f"{redaction(keep, s)} · closed {s.closed}")
        for hold in holds:
            console.print(f"[bold red]legal {safe(hold.describe())}[/bold red]: "
                          f"{safe(hold.reason)} (delete and erase refused)", soft_wrap=True)
        console.print(f"summary watermark {s.summary_watermark} "
                      f"(version {s.row.summary_version}) · distilled through "
                      f"{s.row.distilled_through}")
        if s.summary:
            console.print(f"[bold]summary[/bold]\n{safe(s.summary)}")
        _print_messages(shown, s.summary_watermark)
        if len(shown) < len(messages):
            console.print(f"showing the last {len(shown)} of {len(messages)} messages "
                          "(--tail N or --all for more)")


def history(session_id: SessionIdArg,
            system: Annotated[str, typer.Option(help="System prompt to build with.")] = "",
            wire_format: Annotated[WireFormatName, typer.Option(
                "--format", help="Wire format of the messages.")]
            = WireFormatName.OPENAI_CHAT,
            fold: Annotated[bool, typer.Option(
                "--fold", help="Do what the next real call does: fold an over-budget "
                "history into the summary first (calls the summarizer, stores the summary "
                "and bills the tenant).")] = False,
            tenant: TenantOption = None, db: DbOption = DEFAULT_DB,
            config: ConfigOption = None) -> None:
    """Print the messages the model would receive next, as JSON. A preview by default:
    nothing is folded, stored or billed (stderr says how many messages the next call
    would fold); --fold builds them as the real call does."""
    tenant_ref = parse_ref(tenant, "tenant")
    with open_keep(db, config, existing=True) as keep:
        s = find_session(keep, session_id, tenant_ref)
        # One of FORMATS, by the enum.
        build: Any = keep.compressor.build_history if fold else \
            keep.compressor.preview_history
        built = build(s, system, format=wire_format.value)
        data: Any = list(built)
        system_part = getattr(built, "system", None)
        if system_part is not None:
            data = {"system": system_part, "messages": data}
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
        info = built.info
        if info.would_fold:
            err_console.print(f"preview: the next call folds {info.would_fold} messages "
                              "into the summary (--fold to do it now)")
        elif info.compressed:
            err_console.print("folded into the summary first, as the real call does")


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
        # The tenant is a heading over its lines (it wrapped on every row of a column at
        # 80 columns), and the table below it holds the numbers.
        for tenant_ref, group in itertools.groupby(lines, key=lambda line: line.tenant):
            grid = table(("purpose", "text"), ("model", "text"), ("calls", "number"),
                         ("prompt", "number"), ("completion", "number"), ("total", "number"))
            for line in group:
                grid.add_row(line.purpose, safe(line.model or "-"), number(line.calls),
                             number(line.prompt_tokens), number(line.completion_tokens),
                             number(line.total_tokens))
            console.print(f"[bold]tenant {safe(tenant_ref)}[/bold]", soft_wrap=True)
            console.print(grid)
        console.print(f"total tokens: {total}")
