"""``ChatkeepSession.get_items``' answer on a sync keep, from the pieces it is made of
(the bounded read's ``_Tail.answer`` over ``read_newest_rows``, else the whole replay),
on the keep's own transport: what the property tests hold to the whole replay on both
stores. The async method itself (on the read lane) is tested in
``test_openai_agents_bounded_trips`` and by the SDK's own session tests."""

from __future__ import annotations

import functools
from typing import Any

from chatkeep import Chatkeep
from chatkeep.integrations.openai_agents import session as agents_session
from chatkeep.sessions import ChatSession
from chatkeep.store.newest import read_newest_rows


def newest(keep: Chatkeep, session: ChatSession, prompt: str, limit: int) -> Any:
    """The bounded read: the newest ``limit`` items, or ``None`` (the replay answers)."""
    tail = agents_session._Tail(keep, prompt, limit)
    return keep.repository.transport.run(read_newest_rows, session.id, limit,
                                         functools.partial(tail.answer, session.id))


def read(keep: Chatkeep, session: ChatSession, prompt: str, limit: int | None,
         in_run: bool) -> Any:
    """``get_items``' answer before it keeps the newest ``limit``: ``None`` where it
    refuses (a redacting session outside a run), ``[]`` for ``limit`` 0."""
    redacts = keep.privacy.redacts(session)
    if not in_run and redacts:
        return None
    if limit == 0:
        return []
    if limit is not None and limit > 0 and not redacts:
        found = newest(keep, session, prompt, limit)
        if found is not None:
            return found
    return agents_session._replayed(keep, session, prompt)
