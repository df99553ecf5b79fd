"""Streamed output restored chunk by chunk: a placeholder split anywhere comes back whole."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.streaming import StreamRestorer
from chatkeep.privacy.vault import PlaceholderVault

REDACTOR = Redactor(PiiDetector())
VAULT = PlaceholderVault()
REDACTOR.redact("ana@x.com and +34 612 345 678", VAULT)


def restore(text: str) -> str:
    return REDACTOR.restore(text, VAULT)


def streamed(text: str, cuts: list[int]) -> str:
    restorer = StreamRestorer(restore)
    points = sorted({0, len(text), *(cut % (len(text) + 1) for cut in cuts)})
    out = [restorer.feed(text[a:b]) for a, b in itertools.pairwise(points)]
    return "".join(out) + restorer.flush()


def test_a_placeholder_split_across_chunks_comes_back_whole() -> None:
    restorer = StreamRestorer(restore)
    assert restorer.feed("Mail <EMA") == "Mail "
    assert restorer.feed("IL_1> now") == "ana@x.com now"
    assert restorer.flush() == ""


def test_a_tail_that_cannot_be_a_placeholder_is_released_at_once() -> None:
    restorer = StreamRestorer(restore)
    assert restorer.feed("a < b") == "a < b"
    assert restorer.feed("<html") == "<html"
    assert restorer.feed(" <PHONE_") == " "
    assert restorer.flush() == "<PHONE_"


FRAGMENTS = st.sampled_from(["<EMAIL_1>", "<PHONE_1>", "<\\EMAIL_1>", "<EMAIL_9>", "<", ">",
                             "\\", "EMAIL_1", "_", "1", "a", " ", "<E", "é"])


@given(st.lists(FRAGMENTS, max_size=30), st.lists(st.integers(0, 400), max_size=12))
def test_any_split_restores_as_the_whole_text_does(parts: list[str], cuts: list[int]) -> None:
    text = "".join(parts)
    assert streamed(text, cuts) == restore(text)


def test_the_async_keeps_restorer_feeds_without_io(tmp_path: object) -> None:
    """A restorer built through the async keep must not touch the database while it is
    fed on the event loop (a lazy reload did: ``MissingGreenlet``)."""
    import asyncio

    from chatkeep import Ref
    from chatkeep.aio import AsyncChatkeep

    async def scenario() -> str:
        url = f"sqlite:///{tmp_path}/chat.db"
        async with AsyncChatkeep(url, config={"privacy": {"anonymize_pii": True}}) as keep:
            session = await keep.sessions.create(Ref("org", 1))
            await session.add_user("write to ana@x.com")
            await keep.compressor.build_history(session, "")
            restorer = await keep.privacy.restorer(session)
            return restorer.feed("Sent to <EMAIL_1> and <EMA") + restorer.feed(
                "IL_7> too") + restorer.flush()

    assert asyncio.run(scenario()) == "Sent to ana@x.com and <EMAIL_7> too"
