"""``chatkeep tenants``: the tenants a database holds, with their counts.

What to pass to ``sessions list --tenant`` when all you have is the database (after the
demo, say). Never creates a database.
"""

from __future__ import annotations

from typing import Annotated

import typer

from chatkeep.cli.common import (
    DEFAULT_DB,
    DbOption,
    JsonOption,
    console,
    open_keep,
    print_json,
    ref_json,
    safe,
)
from chatkeep.cli.tables import number, table, when
from chatkeep.store.tenants import tenant_counts
from chatkeep.validation import INT32_MAX


def tenants(limit: Annotated[int | None, typer.Option(
                min=1, max=INT32_MAX, help="At most this many tenants.")] = None,
            as_json: JsonOption = False, db: DbOption = DEFAULT_DB) -> None:
    """The tenants in the database, most recently active first: their sessions, messages
    and tokens. Each tenant is shown as TYPE:ID, as --tenant takes it."""
    with open_keep(db, existing=True) as keep:
        counts = tenant_counts(keep.engine, limit=limit)
    if as_json:
        print_json([{"tenant": ref_json(c.tenant), "sessions": c.sessions,
                     "messages": c.messages, "tokens": c.tokens,
                     "last_message_at": c.last_message_at.isoformat()} for c in counts])
        return
    if not counts:
        console.print("no tenants: the database holds no sessions")
        return
    grid = table(("tenant", "text"), ("sessions", "number"), ("messages", "number"),
                 ("tokens", "number"), ("last message", "time"))
    for c in counts:
        grid.add_row(safe(c.tenant), number(c.sessions), number(c.messages),
                     number(c.tokens), when(c.last_message_at))
    console.print(grid)
