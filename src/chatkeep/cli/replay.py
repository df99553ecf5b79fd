"""``chatkeep replay SESSION --turn N``: audit a past request (issue 34 part 2).

The request is rebuilt from the store alone (``keep.replay``) and checked against the
SHA-256 recorded when it was built. Without ``--turn`` the session's turns are listed,
those built before the database had replay shown as such. Exit codes: 0 the rebuilt
request matches; 3 it does not (what was erased or changed since is printed); 4 the turn
was built before replay existed; 1 any other error (no such session or turn).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from chatkeep.cli.common import (
    DEFAULT_DB,
    ConfigOption,
    DbOption,
    JsonOption,
    TenantOption,
    console,
    err_console,
    open_keep,
    parse_ref,
    print_json,
    safe,
)
from chatkeep.cli.sessions import SessionIdArg, find_session
from chatkeep.cli.tables import table, when
from chatkeep.errors import TurnNotRecorded
from chatkeep.store.replay import ManifestRow, turns

if TYPE_CHECKING:  # the history layer loads when a turn is replayed (chatkeep.cli starts light)
    from chatkeep.history.manifest import Manifest
    from chatkeep.history.replay import Replay

MISMATCH, NOT_RECORDED = 3, 4
"""Exit codes: the rebuilt request differs; the turn has no manifest."""


def replay(session_id: SessionIdArg,
           turn: Annotated[int | None, typer.Option(
               "--turn", help="The turn to rebuild (1 is the first request built for the "
               "session, -1 the newest). Without it: list the turns.")] = None,
           show: Annotated[bool, typer.Option(
               "--show", help="Print the rebuilt request too.")] = False,
           limit: Annotated[int, typer.Option(
               "--limit", min=1, help="Turns to list (the newest).")] = 50,
           tenant: TenantOption = None, as_json: JsonOption = False,
           db: DbOption = DEFAULT_DB, config: ConfigOption = None) -> None:
    """Rebuild a past request from the store and check it against its recorded SHA-256
    (exit 0: it matches, 3: it does not, 4: built before replay existed)."""
    tenant_ref = parse_ref(tenant, "tenant")
    with open_keep(db, config, existing=True) as keep:
        session = find_session(keep, session_id, tenant_ref)
        if turn is None:
            _list(turns(keep.engine, session.id, limit=limit, newest=True), as_json)
            return
        try:
            result = keep.replay(session, turn=turn)
        except TurnNotRecorded as exc:
            if as_json:
                print_json({"session": session.id, "turn": turn, "recorded": False,
                            "reason": str(exc)})
            else:
                err_console.print(safe(str(exc)), soft_wrap=True)
            raise typer.Exit(NOT_RECORDED) from None
        if as_json:
            print_json(_result_json(result, show))
        else:
            _print(result, show)
    if not result.match:
        raise typer.Exit(MISMATCH)


def _result_json(result: Replay, show: bool) -> dict[str, Any]:
    m = result.manifest
    out: dict[str, Any] = {
        "session": result.session_id, "turn": result.turn, "recorded": True,
        "recorded_at": result.recorded_at.isoformat(), "match": result.match,
        "recorded_sha256": result.recorded_sha256, "rebuilt_sha256": result.rebuilt_sha256,
        "erased": list(result.erased), "changed": list(result.changed),
        "manifest": {"format": m.format, "summary_version": m.summary_version,
                     "watermark": m.watermark, "last_seq": m.last_seq,
                     "messages": m.messages, "vault": m.vault,
                     "memories": list(m.memories), "version": m.version,
                     "keep_closed_tool_turns": m.keep_closed_tool_turns,
                     "redacted": m.redacted}}
    if show:
        out["request"] = _request(result)
    return out


def _request(result: Replay) -> Any:
    system = getattr(result.request, "system", None)
    messages = list(result.request)
    return messages if system is None else {"system": system, "messages": messages}


def _print(result: Replay, show: bool) -> None:
    m = result.manifest
    verdict = "[green]matches[/green]" if result.match else "[red]does not match[/red]"
    console.print(f"turn {result.turn} of session {result.session_id}, built "
                  f"{when(result.recorded_at)}: the rebuilt request {verdict} its recorded "
                  "SHA-256", soft_wrap=False, highlight=False)
    memories = ", ".join(f"#{i}" if isinstance(i, int) else "a given text"
                         for i in m.memories) or "none"
    lines = [("format", m.format),
             ("summary", f"v{m.summary_version}, through seq {m.watermark}"),
             ("messages", f"{m.messages} read, seq {m.watermark + 1}-{m.last_seq}"),
             ("memories", memories),
             ("vault", f"{m.vault} value(s)" + (" (redacted)" if m.redacted else "")),
             ("chatkeep", m.version),
             ("recorded", result.recorded_sha256[:32] + "..."),
             ("rebuilt", result.rebuilt_sha256[:32] + "...")]
    for name, value in lines:
        console.print(f"  {name:<10} {safe(value)}", soft_wrap=False, highlight=False)
    for mark in result.erased:
        console.print(f"[yellow]erased:[/yellow] {safe(mark)}", soft_wrap=False)
    for note in result.changed:
        console.print(f"changed: {safe(note)}", soft_wrap=False, highlight=False)
    if show:
        console.print_json(json.dumps(_request(result), ensure_ascii=False, default=str))


def _list(rows: list[ManifestRow], as_json: bool) -> None:
    from chatkeep.history.manifest import Manifest

    if as_json:
        print_json([{"turn": r.turn, "last_seq": r.last_seq,
                     "created_at": r.created_at.isoformat(),
                     **({"recorded": False} if r.manifest is None else
                        {"recorded": True, **_brief(Manifest.decode(r.manifest))})}
                    for r in rows])
        return
    grid = table(("turn", "number"), ("seq", "number"), ("built", "time"),
                 ("format", "text"), ("summary", "text"), ("memories", "number"))
    for r in rows:
        if r.manifest is None:
            grid.add_row(str(r.turn), str(r.last_seq), when(r.created_at),
                         "before replay: no manifest", "", "")
            continue
        m = Manifest.decode(r.manifest)
        grid.add_row(str(r.turn), str(r.last_seq), when(r.created_at), m.format,
                     f"v{m.summary_version}", str(len(m.memories)))
    console.print(grid)


def _brief(m: Manifest) -> dict[str, Any]:
    return {"format": m.format, "summary_version": m.summary_version,
            "watermark": m.watermark, "memories": list(m.memories)}
