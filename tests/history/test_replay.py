"""Exact replay (issue 34 part 2): every built request records a manifest from which the
store alone rebuilds it byte for byte; erasures are marked, never silent."""

from __future__ import annotations

from typing import Any

import pytest

from chatkeep import Chatkeep, InvalidArgument, Ref
from chatkeep.errors import TurnNotFound, TurnNotRecorded
from chatkeep.history.manifest import Manifest
from chatkeep.store.replay import turns

TENANT = Ref("organization", 34)
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")
PROMPT = "You are the travel desk's assistant."


def _keep(url: str, **chat: Any) -> Chatkeep:
    return Chatkeep(url, config={
        "chat": {"max_history_tokens": 420, "recent_messages_min": 4, **chat},
        "privacy": {"anonymize_pii": True}, "store": {"sqlite_synchronous": "NORMAL"},
        "memory": {"recall_in_history": True}})


def _turn(keep: Chatkeep, session: Any, n: int, recalled: list[Any] | None = None) -> None:
    """One turn: the question, its request (recalled by the keep's provider, or the
    memories it recalled lately, or a literal one), the answer."""
    email = f" mail me at guest{n % 7}@example.org" if n % 5 == 0 else ""
    session.add_user(f"Turn {n}: which trains leave Lyon for Paris on day {n % 28}?{email}")
    memories: Any = None if recalled is None else list(recalled)
    if n % 9 == 0:
        memories = ["The user likes window seats."]
    build: Any = keep.compressor.build_history  # (format: a value of FORMATS)
    build(session, PROMPT + (" Be brief." if n % 2 else ""), memories=memories,
          format=FORMATS[n % 3])
    session.add_assistant(f"On day {n % 28} trains leave Lyon at 7:{n % 60:02d} and "
                          f"arrive in Paris two hours later (answer {n}).")


def test_a_recorded_corpus_of_1000_turns_replays_byte_for_byte(db_url: str) -> None:
    """Three wire formats, folds, recalled and superseded memories, redacted values, a
    config change halfway: each turn's replay matches its recorded SHA-256, and every
    manifest stays within 300 bytes."""
    keep = _keep(db_url)
    session = keep.sessions.create(TENANT)
    trains = keep.memory.add(TENANT, "Trains from Lyon to Paris leave every hour.")
    recalled: list[Any] = []
    for n in range(1, 501):
        if n == 250:
            keep.memory.update(TENANT, trains.id, "Trains from Lyon to Paris leave "
                                                  "every half hour.")
        if n % 25 in (0, 1):  # the provider recalls (what the turns between reuse)
            _turn(keep, session, n)
            recalled = keep.memory.provider(session)
        else:
            _turn(keep, session, n, recalled)
    keep.close()
    changed = _keep(db_url, max_history_tokens=520, recent_messages_min=6)
    session = changed.sessions.get(session.id, TENANT)
    for n in range(501, 1001):
        _turn(changed, session, n, None if n % 25 == 0 else recalled)
    rows = turns(changed.engine, session.id, limit=2000)
    assert [r.turn for r in rows] == list(range(1, 1001))
    manifests = [Manifest.decode(r.manifest or "") for r in rows]
    assert {m.format for m in manifests} == set(FORMATS)
    assert len({m.summary_version for m in manifests}) > 20  # it folded, many times
    ids = [{i for i in m.memories if isinstance(i, int)} for m in manifests]
    assert trains.id in ids[100] and trains.id not in ids[300] and ids[300]  # superseded
    assert any(isinstance(i, str) for m in manifests for i in m.memories)
    assert any(m.redacted and m.vault for m in manifests)
    assert max(len(r.manifest or "") for r in rows) <= 300
    mismatched = [n for n in range(1, 1001)
                  if not changed.replay(session, turn=n).match]
    assert mismatched == []
    first = changed.replay(session, turn=1)
    assert first.changed  # the config differs now: replayed with the recorded one
    changed.close()


def test_a_replay_marks_what_an_erasure_removed(db_url: str) -> None:
    keep = _keep(db_url)
    session = keep.sessions.create(TENANT, actor=Ref("user", 1))
    fact = keep.memory.add(TENANT, "The user books trains to Paris.")
    for n in range(1, 6):
        _turn(keep, session, n)
    assert keep.replay(session, turn=-1).match
    assert fact.id in keep.replay(session, turn=-1).manifest.memories
    keep.memory.delete(TENANT, fact.id)
    keep.lifecycle.pop_last(session.id)  # the assistant's answer of turn 5 goes
    keep.lifecycle.pop_last(session.id)  # and the question turn 5 read
    result = keep.replay(session, turn=5)
    assert not result.match
    assert f"memory #{fact.id} erased" in result.erased
    assert any("message(s)" in mark for mark in result.erased)
    keep.close()


def test_typed_errors_for_a_bad_turn_and_a_turn_before_replay(db_url: str) -> None:
    keep = _keep(db_url)
    session = keep.sessions.create(TENANT)
    _turn(keep, session, 1)
    with pytest.raises(TurnNotFound):
        keep.replay(session, turn=2)
    for bad in (0, "1", True):
        with pytest.raises(InvalidArgument):
            keep.replay(session, turn=bad)  # type: ignore[arg-type]
    with keep.repository.transaction() as conn:  # as migration 0015 leaves a session
        conn.exec_driver_sql("UPDATE chat_replay_manifests SET manifest = NULL")
    with pytest.raises(TurnNotRecorded, match="before replay existed"):
        keep.replay(session, turn=1)
    keep.close()


def test_a_deleted_session_takes_its_manifests_and_summary_versions(db_url: str) -> None:
    keep = _keep(db_url, max_history_tokens=200)
    session = keep.sessions.create(TENANT)
    for n in range(1, 12):
        _turn(keep, session, n)
    with keep.repository.transaction() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM chat_summary_versions"
                                    ).scalar_one() > 0
    keep.sessions.delete(session.id, TENANT)
    with keep.repository.transaction() as conn:
        for table in ("chat_summary_versions", "chat_replay_manifests", "chat_replay_texts"):
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one() == 0
    keep.close()


def test_a_round_an_adapter_drives_records_a_manifest_that_replays(db_url: str) -> None:
    """A framework adapter renders its own body (not a built history): the round records
    the plan's history in its format, closed turns' plumbing as the adapter asked."""
    keep = _keep(db_url)
    session = keep.sessions.create(TENANT)
    session.add_user("Book me a train to Paris, mail ana@example.org.")
    session.add_assistant(tool_calls=[{"id": "c1", "function": {
        "name": "book", "arguments": '{"to": "Paris"}'}}])
    session.add_tool_result("c1", "booked: seat 12")
    session.add_assistant("Booked: seat 12.")
    session.add_user("Thanks, and a return?")
    history_round = keep.compressor.round(session, PROMPT, memories=[],
                                          format="openai_responses",
                                          keep_closed_tool_turns=True)
    body = history_round.run(lambda prepared: ("own body", len(prepared.plan.outgoing.messages)))
    assert body[0] == "own body" and history_round.turn == 1
    result = keep.replay(session, turn=1)
    assert result.match and result.manifest.keep_closed_tool_turns
    assert any(item.get("type") == "function_call" for item in result.request)
    keep.close()


def test_a_database_from_before_replay_shows_its_old_turns_without_a_manifest(
        db_url: str) -> None:
    """Migration 0015 keeps each session's summary as its version and gives a session
    with messages turn 1 without a manifest (the requests built before replay); the next
    request is turn 2 and replays, from the summary the migration kept."""
    import uuid
    from datetime import UTC, datetime

    import sqlalchemy as sa

    from chatkeep.store import make_engine, migrate

    engine = make_engine(db_url)
    migrate.upgrade(engine, "0014_memory_expiry")
    now, session_id = datetime.now(UTC), str(uuid.uuid4())
    names = ("id", "tenant_type", "tenant_id", "tenant_id_int", "anonymize_pii",
             "total_tokens", "last_seq", "summary", "summary_watermark", "summary_version",
             "distilled_through", "distil_version", "pii_vault_version", "pii_protected",
             "fold_failures")
    sessions = sa.table("chat_sessions", *(sa.column(n) for n in names),
                        sa.column("last_message_at", sa.DateTime(timezone=True)),
                        sa.column("created_at", sa.DateTime(timezone=True)),
                        sa.column("metadata", sa.JSON()))
    messages = sa.table("chat_messages", *(sa.column(n) for n in (
        "session_id", "seq", "role", "content")),
        sa.column("created_at", sa.DateTime(timezone=True)), sa.column("metadata", sa.JSON()))
    with engine.begin() as conn:
        conn.execute(sa.insert(sessions).values(
            id=session_id, tenant_type=TENANT.type, tenant_id=TENANT.id_text,
            tenant_id_int=TENANT.id_is_int, anonymize_pii=False, total_tokens=0, last_seq=4,
            summary="Earlier: the user asked about trains to Paris.", summary_watermark=2,
            summary_version=3, distilled_through=0, distil_version=0, pii_vault_version=0,
            pii_protected=False, fold_failures=0, last_message_at=now, created_at=now,
            metadata={}))
        conn.execute(sa.insert(messages), [
            {"session_id": session_id, "seq": seq, "role": "user" if seq % 2 else "assistant",
             "content": f"message {seq}", "created_at": now, "metadata": {}}
            for seq in range(1, 5)])
    migrate.upgrade(engine)
    engine.dispose()
    keep = Chatkeep(db_url, create_schema=False)
    session = keep.sessions.get(session_id, TENANT)
    with pytest.raises(TurnNotRecorded, match="through seq 4"):
        keep.replay(session, turn=1)
    session.add_user("And tomorrow?")
    history = keep.compressor.build_history(session, PROMPT)
    assert "Earlier: the user asked about trains to Paris." in str(history)
    result = keep.replay(session, turn=-1)
    assert result.turn == 2 and result.match and result.manifest.summary_version == 3
    keep.close()
