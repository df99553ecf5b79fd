"""Forgetting in the inspector (issue 36): a session's header names the legal holds that
cover it; the lifecycle page lists holds (active and released), retention policies and the
log of deletes, erasures and holds, confined to the inspector's tenant, with no content."""

from __future__ import annotations

import pytest
from inspect_seed import ANA, ORG, OTHER, Seeded

from chatkeep import Chatkeep
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


def test_a_confined_inspector_shows_its_tenant_only(make_client: ClientFactory,
                                                    forgotten: Seeded) -> None:
    client = make_client(tenant=OTHER)
    html = client.get("/lifecycle").text
    assert "audit closed" in html and "litigation 2026-114" not in html
    assert client.get(f"/lifecycle?tenant={ORG}").status_code == 400
