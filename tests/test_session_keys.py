"""Conversations named by the application's own key (``keep.sessions.open``), on every
API and store: get-or-create, one per tenant and key, checked like any input."""

from __future__ import annotations

import pytest

from chatkeep import Chatkeep, InvalidArgument, Ref, SessionKeyConflict, SessionNotFound

ORG = Ref("organization", 42)
OTHER = Ref("organization", 43)
USER = Ref("user", 7)
MATTER = Ref("matter", 1001)


def test_open_creates_once_then_finds_the_same_session(keep: Chatkeep) -> None:
    first = keep.sessions.open("support-4711", tenant=ORG, actor=USER, subject=MATTER,
                               title="Refund", metadata={"channel": "web"})
    first.add_user("hello")
    again = keep.sessions.open("support-4711", tenant=ORG, actor=USER, subject=MATTER,
                               title="ignored on reopen")
    assert again.id == first.id and again.key == "support-4711"
    assert again.title == "Refund" and again.metadata == {"channel": "web"}
    assert [m.content for m in again.messages] == ["hello"]
    assert keep.sessions.by_key("support-4711", ORG).id == first.id
    assert keep.sessions.get(first.id, tenant=ORG).key == "support-4711"


def test_two_tenants_use_one_key_independently(keep: Chatkeep) -> None:
    ours = keep.sessions.open("thread-1", tenant=ORG)
    theirs = keep.sessions.open("thread-1", tenant=OTHER)
    assert ours.id != theirs.id
    ours.add_user("ours")
    assert theirs.refresh().message_count == 0
    assert keep.sessions.by_key("thread-1", OTHER).id == theirs.id
    with pytest.raises(SessionNotFound):
        keep.sessions.by_key("thread-9", ORG)


def test_a_tenant_id_matches_by_its_text(keep: Chatkeep) -> None:
    """``Ref`` equality is by the id's text, so an int and its digits name one tenant."""
    assert keep.sessions.open("k", tenant=Ref("org", 5)).id == \
        keep.sessions.open("k", tenant=Ref("org", "5")).id


def test_reopening_with_other_parties_is_refused(keep: Chatkeep) -> None:
    keep.sessions.open("k", tenant=ORG, actor=USER)
    with pytest.raises(SessionKeyConflict, match="actor"):
        keep.sessions.open("k", tenant=ORG, actor=Ref("user", 8))
    with pytest.raises(SessionKeyConflict, match="actor"):
        keep.sessions.open("k", tenant=ORG)  # an autonomous run is another party
    with pytest.raises(SessionKeyConflict, match="subject"):
        keep.sessions.open("k", tenant=ORG, actor=USER, subject=MATTER)
    assert isinstance(SessionKeyConflict("x"), ValueError)


def test_keys_are_listed_and_unkeyed_sessions_keep_none(keep: Chatkeep) -> None:
    keep.sessions.create(tenant=ORG)
    keep.sessions.open("a", tenant=ORG)
    keep.sessions.open("b", tenant=ORG)
    assert sorted(str(s.key) for s in keep.sessions.list(ORG)) == ["None", "a", "b"]


@pytest.mark.parametrize("bad", ["", "   ", " padded", "tab\tkey", "nul\x00", "x" * 256,
                                 "\ud800", 12, None])
def test_a_bad_key_is_a_typed_error(keep: Chatkeep, bad: object) -> None:
    with pytest.raises(InvalidArgument):
        keep.sessions.open(bad, tenant=ORG)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        keep.sessions.by_key(bad, ORG)  # type: ignore[arg-type]


def test_open_checks_its_references(keep: Chatkeep) -> None:
    with pytest.raises(ValueError):
        keep.sessions.open("k", tenant=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        keep.sessions.by_key("k", "organization:42")  # type: ignore[arg-type]


def test_the_longest_key_and_unicode_round_trip(keep: Chatkeep) -> None:
    for key in ("k" * 255, "Gespräch-ß-会话"):
        opened = keep.sessions.open(key, tenant=ORG)
        assert opened.key == key
        assert keep.sessions.by_key(key, ORG).id == opened.id
