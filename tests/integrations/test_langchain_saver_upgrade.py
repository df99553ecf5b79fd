"""``chat_checkpoints`` (issue 37 item 3) across schema versions and databases: migration
0016 moves the checkpoints ``ChatkeepSaver`` kept in a session's metadata into rows on
upgrade, and back on downgrade; a tenant's dump carries its threads' checkpoints. A
thread resumes from them either way, its history whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from test_langchain_saver import THREAD, build, run_config, turns

from chatkeep import Chatkeep, Ref
from chatkeep.integrations.langchain import ChatkeepSaver
from chatkeep.store import make_engine, migrate
from chatkeep.store.dump import dump_lines, restore_file
from chatkeep.store.migrate import head_revision
from chatkeep.store.schema import chat_checkpoints

ORG = Ref("organization", 7)


def snapshot(agent: Any) -> list[tuple[str | None, list[str | None]]]:
    """Each checkpoint of the thread (newest first): its id and its messages' ids."""
    cfg = run_config(tenant=str(ORG))
    return [(s.config["configurable"]["checkpoint_id"],
             [m.id for m in s.values.get("messages", [])])
            for s in agent.get_state_history(cfg)]


def test_checkpoints_move_from_the_session_metadata_into_rows_and_back(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        agent = build(keep, ChatkeepSaver(keep, tenant=ORG))
        turns(keep, agent, 2)
        before = snapshot(agent)
    engine = make_engine(db_url)
    try:
        migrate.downgrade(engine, "0015_replay_manifests")
        with engine.connect() as conn:
            assert "chat_checkpoints" not in sa.inspect(conn).get_table_names()
            meta = conn.execute(sa.text("SELECT metadata FROM chat_sessions")).scalar_one()
        assert "langgraph" in str(meta)  # the checkpoints went back into the metadata
        migrate.upgrade(engine)
        with engine.connect() as conn:
            meta = conn.execute(sa.text("SELECT metadata FROM chat_sessions")).scalar_one()
            rows = conn.execute(sa.select(sa.func.count()).select_from(chat_checkpoints)
                                .where(chat_checkpoints.c.checkpoint.is_not(None))
                                ).scalar_one()
        assert "langgraph" not in str(meta) and rows == len(before)
    finally:
        engine.dispose()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        agent = build(keep, ChatkeepSaver(keep, tenant=ORG))
        assert snapshot(agent) == before
        outs = turns(keep, agent, 1, start=2)  # the thread resumes from its checkpoint
        assert len(outs[0]["messages"]) > len(before[0][1])
        assert keep.repository.find_session(THREAD, ORG) is not None


def test_a_threads_checkpoints_move_with_its_tenant_in_a_dump(tmp_path: Path,
                                                              db_url: str) -> None:
    """A tenant's dump carries its threads' checkpoints (their messages' references into
    the log stay true: the log's seqs move as they are); another tenant's stay home."""
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    with Chatkeep(source_url, dispatcher="inline") as source:
        agent = build(source, ChatkeepSaver(source))
        turns(source, agent, 2)
        turns(source, agent, 1, tenant=Ref("organization", 8))
        before = snapshot(agent)
        dump = b"".join(dump_lines(source.engine, head_revision(), ORG))
    assert b"chat_checkpoints" in dump
    (tmp_path / "org.jsonl").write_bytes(dump)
    with Chatkeep(db_url, dispatcher="inline") as target:
        restore_file(target.engine, tmp_path / "org.jsonl", head_revision())
        agent = build(target, ChatkeepSaver(target))
        assert snapshot(agent) == before
        with target.engine.connect() as conn:
            tenants = set(conn.execute(sa.select(chat_checkpoints.c.tenant_id)).scalars())
        assert tenants == {ORG.id_text}
        outs = turns(target, agent, 1, start=2)
        assert len(outs[0]["messages"]) > len(before[0][1])
