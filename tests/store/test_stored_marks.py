"""``Repository.stored_marks`` and ``marks_after``: which ids an integration recorded
messages by are stored (asked of the database in chunks), and the ids of the newest
messages, on both stores."""

from __future__ import annotations

from chatkeep import Chatkeep, Ref
from chatkeep.messages import MessageDraft, Role
from chatkeep.store.procedures import MARKS_PER_QUERY

ORG = Ref("organization", 1)


def test_only_the_stored_values_come_back_across_chunks(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        session = keep.sessions.open("marks", ORG)
        other = keep.sessions.open("other", ORG)
        count = MARKS_PER_QUERY * 2 + 7  # three queries
        session.add_drafts([MessageDraft(Role.USER, f"m{i}", metadata={"ext": f"id-{i}"})
                            for i in range(count)])
        other.add_drafts([MessageDraft(Role.USER, "elsewhere", metadata={"ext": "id-x"})])
        session.retract_last()  # retracted messages stay recorded
        asked = [f"id-{i}" for i in range(count + 50)] + ["id-x", "id-3"]
        found = keep.repository.stored_marks(session.id, "ext", asked)
        assert found == {f"id-{i}" for i in range(count)}
        assert keep.repository.stored_marks(session.id, "other-key", asked) == set()
        assert keep.repository.stored_marks(session.id, "ext", []) == set()


def test_marks_after_are_the_newest_messages_ids(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        session = keep.sessions.open("tail", ORG)
        session.add_drafts([MessageDraft(Role.USER, f"m{i}", metadata={"ext": f"id-{i}"})
                            for i in range(10)])
        session.add_user("no id")  # a message written outside the integration
        assert keep.repository.marks_after(session.id, "ext", 7) == {"id-7", "id-8", "id-9"}
        assert keep.repository.marks_after(session.id, "ext", 10) == set()
        assert keep.repository.marks_after(session.id, "ext", 0) == \
            {f"id-{i}" for i in range(10)}
