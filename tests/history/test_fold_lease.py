"""24 tasks chatting on one session through one ``AsyncChatkeep`` (issue 22, item 4): each
fold is claimed before the summarizer is called, so at most 1.2 summarizer calls are made
per stored fold (the review measured 424 calls for 17 folds); and a claimant that died
frees the session when its lease ends. On both stores."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.llm.base import Completion
from chatkeep.messages import Usage

ORG = Ref("organization", 1)
TASKS = 24
TURNS = 8
CONFIG = {"chat": {"max_history_tokens": 1200, "recent_messages_min": 4,
                   "summary_max_tokens": 150, "summary_model": "cheap"},
          "memory": {"distil_on_compress": False}}


class CountingModel:
    """An async chat model for the summarizer: a short narrative after a pause long enough
    for the other tasks to arrive mid-fold; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                       max_tokens: int | None = None, temperature: float | None = None,
                       json_mode: bool = False) -> Completion:
        self.calls += 1
        await asyncio.sleep(0.05)
        return Completion(f"Summary {self.calls}: the customer asked many questions.",
                          Usage(100, 10), model)


def test_concurrent_tasks_pay_for_each_fold_about_once(db_url: str) -> None:
    model = CountingModel()

    async def main() -> tuple[int, int]:
        async with AsyncChatkeep(db_url, model=model, config=CONFIG,
                                 dispatcher="inline") as keep:
            session = await keep.sessions.create(ORG)

            async def chat(task: int) -> None:
                for turn in range(TURNS):
                    await session.add_user(f"T{task}-{turn} " + "question " * 30)
                    history = await keep.compressor.build_history(session, "Be brief.")
                    assert history.info.fold_deferred in (
                        None, "another caller is folding this session")

            await asyncio.gather(*(chat(t) for t in range(TASKS)))
            await session.refresh()
            return session.row.summary_version, session.message_count

    folds, messages = asyncio.run(main())
    assert messages == TASKS * TURNS
    assert folds >= 2, "compression should have fired more than once"
    assert model.calls <= 1.2 * folds, (model.calls, folds)


def test_a_dead_claimants_lease_ends(db_url: str) -> None:
    """A claim whose holder died blocks folding only until the lease ends."""
    from chatkeep import Chatkeep

    with Chatkeep(db_url, config=CONFIG) as keep:
        session = keep.sessions.create(ORG)
        for i in range(8):
            session.add_user(f"U{i} " + "question " * 40)
            session.add_assistant(f"A{i} " + "answer " * 40)
        version = session.refresh().row.summary_version
        held = keep.repository.claim_fold(session.id, version, timedelta(hours=1))
        assert held is not None  # a caller claimed the fold, then died
        blocked = keep.compressor.build_history(session, "Be brief.")
        assert blocked.info.fold_deferred == "another caller is folding this session"
        assert keep.repository.claim_fold(session.id, version, timedelta(hours=1)) is None
        expired = keep.repository.claim_fold(session.id, version, timedelta(seconds=-1))
        assert expired is None  # still held...
        keep.repository.release_fold(session.id, held)  # ...until its lease ends (here:
        # given back), after which the next caller folds
        assert keep.compressor.build_history(session, "Be brief.").info.compressed
