"""Forgetting in the inspector (issue 36): a session's header names the legal holds that
cover it; the lifecycle page lists holds (active and released), retention policies and the
log of deletes, erasures and holds, confined to the inspector's tenant, with no content."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from inspect_seed import ANA, ORG, OTHER, Seeded
from sqlalchemy import update

from chatkeep import Chatkeep
from chatkeep.store.schema import memories
from conftest import ClientFactory

CANARY = "canary-held-session-text"


@pytest.fixture
def forgotten(seeded: tuple[str, Seeded]) -> Seeded:
    """The seeded store with a hold on Ana, a released hold, a policy, and a deleted
    session whose text was a canary."""
    url, ids = seeded
    with Chatkeep(url, dispatcher="inline") as keep:
        keep.holds.place(ORG, actor=ANA, reason="litigation 2026-114", by="legal@org")
        released = keep.holds.place(OTHER, reason="audit closed", by="ops")
        keep.holds.release(OTHER, released.id, by="ops")
        keep.retention.set_policy(ORG, session_idle_days=30, memory_idle_days=90)
        doomed = keep.sessions.create(ORG)
        doomed.add_user(CANARY)
        keep.sessions.delete(doomed.id, ORG)
        expired = keep.memory.add(ORG, "an expired fact")
        keep.memory.set_expiry(ORG, expired.id, timedelta(seconds=1))
        keep.memory.set_expiry(ORG, keep.memory.add(ORG, "a later one").id, timedelta(days=9))
        keep.memory.set_expiry(OTHER, keep.memory.add(OTHER, "theirs").id, timedelta(days=9))
    with Chatkeep(url) as keep, keep.engine.begin() as conn:  # expired a minute ago
        conn.execute(update(memories).where(memories.c.id == expired.id).values(
            expires_at=datetime.now(UTC) - timedelta(minutes=1)))
    return ids


def test_a_held_sessions_header_names_the_hold(make_client: ClientFactory,
                                               forgotten: Seeded) -> None:
    client = make_client()
    held = client.get(f"/sessions/{forgotten.support}").text
    assert "legal hold" in held and "litigation 2026-114" in held
    free = client.get(f"/sessions/{forgotten.closed}").text  # no actor: not covered
    assert "litigation 2026-114" not in free


def test_the_lifecycle_page_lists_holds_policies_and_the_log(make_client: ClientFactory,
                                                             forgotten: Seeded) -> None:
    page = make_client().get("/lifecycle")
    assert page.status_code == 200
    html = page.text
    for shown in ("litigation 2026-114", "audit closed", f"actor {ANA}", "legal@org",
                  "30", "90", "delete"):
        assert shown in html, shown
    assert CANARY not in html  # the log keeps counts and ids, never content
    assert "Memory expiry" in html
    row = html[html.index("<table class=\"list expiry\">"):]
    row = row[row.index(f"<td>{ORG}</td>"):].split("</tr>")[0]
    assert [c.split(">")[-1] for c in row.split("</td>")[1:3]] == ["1", "1"]


def test_a_confined_inspector_shows_its_tenant_only(make_client: ClientFactory,
                                                    forgotten: Seeded) -> None:
    client = make_client(tenant=OTHER)
    html = client.get("/lifecycle").text
    assert "audit closed" in html and "litigation 2026-114" not in html
    assert f"<td>{OTHER}</td>" in html and f"<td>{ORG}</td>" not in html
    assert client.get(f"/lifecycle?tenant={ORG}").status_code == 400
