"""``chatkeep demo``: replay the bundled conversation and show compression at work.

Offline by default (the extractive summarizer); with an endpoint configured
(``OPENAI_API_KEY``/``OPENAI_BASE_URL`` or ``[llm]`` config) it uses the real model.
"""

from __future__ import annotations

import os
import shlex
from importlib import resources
from typing import TYPE_CHECKING, Annotated

import typer
from rich.panel import Panel
from sqlalchemy.engine import make_url

from chatkeep.cli.common import (
    ConfigOption,
    DbOption,
    console,
    open_keep,
    safe,
)
from chatkeep.importing import ImportedMessage, append_all, parse_lines
from chatkeep.messages import Role
from chatkeep.refs import Ref
from chatkeep.store.engine import describe_url
from chatkeep.validation import INT32_MAX

if TYPE_CHECKING:
    from chatkeep.history.summary import StructuredSummary

DEMO_DB = "sqlite:///chatkeep-demo.db"

DEMO_SYSTEM_PROMPT = (
    "You are a careful legal assistant working on commercial property disputes. "
    "Answer precisely and cite the documents you rely on.")


def demo_messages() -> list[ImportedMessage]:
    """The bundled multi-turn conversation (tool calls included)."""
    text = resources.files("chatkeep.demo").joinpath("conversation.jsonl").read_text("utf-8")
    return parse_lines(text.splitlines(), "chatkeep/demo/conversation.jsonl")


def demo(db: DbOption = DEMO_DB,
         budget: Annotated[int, typer.Option(
             min=100, max=INT32_MAX, help="History budget (chat.max_history_tokens).")] = 2000,
         recent: Annotated[int, typer.Option(
             min=0, max=1000,
             help="Messages always replayed verbatim (chat.recent_messages_min).")] = 4,
         config: ConfigOption = None) -> None:
    """Replay a bundled conversation turn by turn: budget, compressions, summary, watermark."""
    settings = {"chat": {"max_history_tokens": budget, "recent_messages_min": recent,
                       "summary_max_tokens": max(50, budget // 6)},
              "memory": {"distil_on_compress": False}}
    with open_keep(db, config, settings) as keep:
        summarizer = "model" if keep.model is not None else "offline extractive summarizer"
        messages = demo_messages()
        session = keep.sessions.create(Ref("organization", "demo-firm"), Ref("user", "alice"),
                                       Ref("matter", "M-100"), title="chatkeep demo")
        console.print(Panel.fit(
            f"session {session.id}\n{len(messages)} messages · budget {budget} tokens · "
            f"last {recent} always verbatim · summaries by the {summarizer}\n"
            f"database {safe(describe_url(db))}",
            title="chatkeep demo"))
        console.print("turn  stored  replayed  history tokens / budget  watermark")
        turns = 0

        def after_append(message: ImportedMessage) -> None:
            """Before each user turn is answered, build the history the model would get."""
            nonlocal turns
            if message.role is not Role.USER:
                return
            turns += 1
            before = session.summary_watermark
            kept = session.structured_summary
            history = keep.compressor.build_history(session, DEMO_SYSTEM_PROMPT)
            fired = session.summary_watermark != before
            flag = ("  [green]compressed[/green]" if fired else "") + (
                f"  [red]over budget: {safe(history.over_budget_reason or '')}[/red]"
                if history.over_budget else "")
            console.print(f"{turns:>4}  {session.message_count:>6}  {len(history):>8}  "
                          f"{history.tokens:>8} / {budget:<12}  {session.summary_watermark:>9}"
                          + flag)
            if fired:
                console.print(f"      [dim]summary v{session.row.summary_version} now covers "
                              f"seq 1-{session.summary_watermark} (this fold: seq "
                              f"{before + 1}-{session.summary_watermark}); "
                              f"{safe(_what_changed(kept, session.structured_summary))}[/dim]")

        append_all(session, messages, after_append)
        console.print(Panel(safe((session.summary or "")
                                 or "(no summary: the conversation fit)"),
                            title=f"summary (watermark seq {session.summary_watermark}, "
                                  f"version {session.row.summary_version})"))
        stored = session.message_count
        console.print(f"{stored} messages stored, none deleted; the next call replays "
                      f"{len(session.messages_after(session.summary_watermark))} after the "
                      "watermark.")
        # One line each, never wrapped, no markup: they are meant to be copied and pasted.
        console.print(f"Tenant: {session.tenant} (every command that lists takes --tenant "
                      f"{session.tenant})", soft_wrap=True, markup=False, highlight=False)
        console.print(f"Inspect: chatkeep sessions show {session.id}{_db_argument(db)}",
                      soft_wrap=True, markup=False, highlight=False)
        console.print(f"List: chatkeep sessions list --tenant {session.tenant}"
                      f"{_db_argument(db)}", soft_wrap=True, markup=False, highlight=False)


def _what_changed(before: StructuredSummary | None, after: StructuredSummary | None) -> str:
    """What a fold added to the summary, newest first, in one short line: its new items
    (or outline lines), so two folds never read the same."""
    if after is None:
        return "the summary is empty"
    old_ids = {i.id for i in before.items} if before else set()
    old_lines = set(before.narrative.splitlines()) if before else set()
    added = [i.text for i in after.items if i.id not in old_ids]
    added += [ln.strip() for ln in after.narrative.splitlines()
              if ln.strip() and ln not in old_lines]
    if not added:
        return "no new items (the fold only refreshed what the summary held)"
    newest = " ".join(added[-1].split())
    shown = newest if len(newest) <= 120 else newest[:119].rstrip() + "…"
    return f"added {len(added)}, newest: {shown}" if len(added) > 1 else f"added: {shown}"


def _db_argument(db: str) -> str:
    """`` --db URL`` for the hint, shell-quoted; nothing when the environment already
    names that database, and the password hidden if the URL has one."""
    if os.environ.get("CHATKEEP_DATABASE_URL") == db:
        return ""
    shown = describe_url(db) if make_url(db).password else db
    return f" --db {shlex.quote(shown)}"
