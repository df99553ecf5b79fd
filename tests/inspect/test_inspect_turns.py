"""The inspector's Turns page (issue 34 part 2): each built request of a session with what
changed from the turn before, and one turn's replay check; a manifest's changes as a
pure function."""

from __future__ import annotations

import re

from inspect_seed import Seeded
from starlette.testclient import TestClient

from chatkeep.history.manifest import Manifest, changes


def _page(client: TestClient, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.text
    return " ".join(re.sub(r"<[^>]+>", " ", response.text).split())


def test_the_turns_page_lists_turns_and_replays_one(client: TestClient,
                                                    seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    listed = _page(client, f"/sessions/{ids.support}/turns")
    assert "the first recorded turn" in listed and "replay" in listed
    checked = _page(client, f"/sessions/{ids.support}/turns?turn=1")
    assert "Turn 1: the rebuilt request matches" in checked, checked
    missing = _page(client, f"/sessions/{ids.support}/turns?turn=99")
    assert "TurnNotFound" in missing
    head = client.get(f"/sessions/{ids.support}").text
    assert f'href="/sessions/{ids.support}/turns"' in head
    empty = _page(client, f"/sessions/{ids.closed}/turns")
    assert "No turn recorded" in empty


def _manifest(**values: object) -> Manifest:
    base: dict[str, object] = {
        "format": "openai_chat", "summary_version": 6, "watermark": 13, "last_seq": 60,
        "messages": 47, "vault": 2, "memories": (9,), "system": "s", "config": "c",
        "version": "0.1.0", "request": "00" * 32}
    return Manifest(**{**base, **values})  # type: ignore[arg-type]


def test_what_changed_between_two_turns_reads_as_people_say_it() -> None:
    before = _manifest()
    after = _manifest(summary_version=7, watermark=48, memories=(12,), vault=3,
                      format="anthropic_messages")
    assert changes(before, after) == [
        "folded seq 14-48 into summary v7", "memory #12 recalled",
        "memory #9 no longer recalled", "1 new value(s) redacted",
        "format changed (openai_chat -> anthropic_messages)"]
    assert changes(before, before) == []
    assert changes(None, before) == ["the first recorded turn"]
