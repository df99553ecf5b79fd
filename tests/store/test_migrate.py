"""Shipped migrations (``chatkeep.store.migrate``): up from empty matches the table
definitions; down removes them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref, StoreError
from chatkeep.cli import app
from chatkeep.store import make_engine, migrate
from chatkeep.store.schema import metadata


def _only_ours(obj, name, type_, reflected, compare_to) -> bool:  # type: ignore[no-untyped-def]
    # Full-text side tables (SQLite FTS5 shadow tables) are created by DDL hooks, not models.
    return not (type_ == "table" and reflected and compare_to is None
                and name not in metadata.tables)


@contextlib.contextmanager
def _indexes_of(dialect: str) -> Iterator[None]:
    """The models' indexes as ``dialect`` gets them: an index made for another dialect only
    (``ddl_if``) is set aside. Two such indexes share a name (the LangChain id's, one
    expression per dialect), and autogenerate keys the models' indexes by name before any
    filter runs, so which of the two it compared was chance."""
    aside = [(table, index) for table in metadata.tables.values() for index in table.indexes
             if getattr(getattr(index, "_ddl_if", None), "dialect", None) not in (None, dialect)]
    for table, index in aside:
        table.indexes.discard(index)
    try:
        yield
    finally:
        for table, index in aside:
            table.indexes.add(index)


# SQLite cannot reflect the PostgreSQL-only expression index; nothing to compare there.
@pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression")
def test_upgrade_from_empty_matches_the_models_and_downgrade_removes_all(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    assert migrate.current(engine) == migrate.head_revision()
    with engine.connect() as conn, _indexes_of(conn.dialect.name):
        context = MigrationContext.configure(conn, opts={
            "compare_type": True, "include_object": _only_ours})
        diff = compare_metadata(context, metadata)
    assert diff == []
    migrate.downgrade(engine, "base")
    leftover = set(inspect(engine).get_table_names()) & set(metadata.tables)
    assert leftover == set()
    assert migrate.current(engine) is None
    migrate.upgrade(engine)  # and up again on the same database
    assert set(metadata.tables) <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_chatkeep_bootstraps_then_leaves_a_current_schema_alone(db_url: str) -> None:
    keep = Chatkeep(db_url).start()
    assert migrate.current(keep.engine) == migrate.head_revision()
    session = keep.sessions.create(Ref("organization", 1))
    session.add_user("kept across restarts")
    keep.close()
    again = Chatkeep(db_url)
    assert [m.content for m in again.sessions.get_unscoped(session.id).messages] == [
        "kept across restarts"]
    again.close()


def test_cli_db_commands(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    runner = CliRunner()
    result = runner.invoke(app, ["db", "upgrade", "--db", url])
    assert result.exit_code == 0, result.output
    assert f"empty -> {migrate.head_revision()}" in result.output
    assert "shipped head" in runner.invoke(app, ["db", "current", "--db", url]).output
    result = runner.invoke(app, ["db", "downgrade", "base", "--db", url])
    assert result.exit_code == 0 and "-> empty" in result.output
    result = runner.invoke(app, ["db", "upgrade", "no_such_revision", "--db", url])
    assert result.exit_code == 1 and "no_such_revision" in result.output


def _boot(url: str) -> None:
    keep = Chatkeep(url)
    keep.sessions.create(Ref("organization", 1))
    keep.close()


def test_processes_starting_at_once_on_an_empty_database_all_succeed(db_url: str) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_boot, args=(db_url,)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    engine = make_engine(db_url)
    assert migrate.current(engine) == migrate.head_revision()
    engine.dispose()


def _index_names(engine, table: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {ix["name"] for ix in inspect(engine).get_indexes(table)}


def test_each_migration_steps_down_and_up_keeping_the_data(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0002_memories")
    assert "ix_chat_sessions_last_message_at" in _index_names(engine, "chat_sessions")
    migrate.upgrade(engine, "0003_sweep_index")
    indexes = _index_names(engine, "chat_sessions")
    assert "ix_chat_sessions_undistilled" in indexes
    assert "ix_chat_sessions_last_message_at" not in indexes
    migrate.downgrade(engine, "0001_core")
    migrate.upgrade(engine, "0001_core")
    assert "memories" not in inspect(engine).get_table_names()
    migrate.upgrade(engine)  # 0001 -> 0002 on a database that is not empty
    keep = Chatkeep(db_url, create_schema=False)
    session = keep.sessions.create(Ref("organization", 1))
    session.add_user("survives schema changes")
    keep.close()
    migrate.downgrade(engine, "0001_core")
    tables = set(inspect(engine).get_table_names())
    assert "memories" not in tables and "chat_messages" in tables
    migrate.upgrade(engine)
    keep = Chatkeep(db_url)
    assert [m.content for m in keep.sessions.get_unscoped(session.id).messages] == [
        "survives schema changes"]
    keep.close()
    engine.dispose()


def test_0008_marks_the_sessions_that_already_redacted_as_protected(db_url: str) -> None:
    """``pii_protected`` arrives false, except on sessions holding a vault: those redacted
    before, so a worker with default config must keep redacting them."""
    engine = make_engine(db_url)
    migrate.upgrade(engine, "0007_memory_generations")
    now = datetime.now(UTC)
    names = ("id", "tenant_type", "tenant_id", "tenant_id_int", "anonymize_pii",
             "total_tokens", "last_seq", "summary_watermark", "summary_version",
             "distilled_through", "distil_version", "pii_vault", "pii_vault_version")
    sessions = sa.table("chat_sessions", *(sa.column(n) for n in names),
                        sa.column("last_message_at", sa.DateTime(timezone=True)),
                        sa.column("created_at", sa.DateTime(timezone=True)),
                        sa.column("metadata", sa.JSON()))
    with engine.begin() as conn:
        for id_, vault in (("with-vault", "sealed"), ("without", None)):
            conn.execute(sa.insert(sessions).values(
                id=id_, tenant_type="organization", tenant_id="1", tenant_id_int=True,
                anonymize_pii=True, total_tokens=0, last_seq=0, summary_watermark=0,
                summary_version=0, distilled_through=0, distil_version=0, pii_vault=vault,
                pii_vault_version=1 if vault else 0, last_message_at=now, created_at=now,
                metadata={}))
    migrate.upgrade(engine)
    protected = sa.table("chat_sessions", sa.column("id"), sa.column("pii_protected"))
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.select(protected.c.id, protected.c.pii_protected)).all())
    assert {k: bool(v) for k, v in rows.items()} == {"with-vault": True, "without": False}
    migrate.downgrade(engine, "0007_memory_generations")
    assert "pii_protected" not in {c["name"] for c in inspect(engine).get_columns(
        "chat_sessions")}
    migrate.upgrade(engine)
    keep = Chatkeep(db_url, create_schema=False)
    assert keep.sessions.get_unscoped("with-vault").row.pii_protected
    assert not keep.sessions.get_unscoped("without").row.pii_protected
    keep.close()
    engine.dispose()


FUTURE = "0099_from_a_newer_chatkeep"


def stamp_as_newer(url: str) -> None:
    """A current database stamped by a migration this chatkeep does not ship (a newer
    version migrated it, then the deploy was rolled back)."""
    Chatkeep(url).start().close()
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": FUTURE})
    engine.dispose()


def test_a_database_from_a_newer_chatkeep_is_a_store_error_naming_both_revisions(
        db_url: str) -> None:
    stamp_as_newer(db_url)
    with pytest.raises(StoreError) as raised:
        Chatkeep(db_url).start()
    assert FUTURE in str(raised.value) and migrate.head_revision() in str(raised.value)
    assert str(raised.value).startswith("newer schema: upgrade this process")
    engine = make_engine(db_url)
    for step in (migrate.ensure_schema, migrate.upgrade, migrate.check_current):
        with pytest.raises(StoreError, match=f"{FUTURE}.*{migrate.head_revision()}"):
            step(engine)
    with pytest.raises(StoreError, match=FUTURE):
        migrate.downgrade(engine, "0007_memory_generations")
    assert migrate.current(engine) == FUTURE  # nothing was touched
    engine.dispose()


def test_the_shipped_chain_read_without_alembic_is_alembics_own() -> None:
    """``migrate.shipped`` reads the scripts' revision lines so a current database is
    checked without importing Alembic (CLI start-up): it must agree with Alembic."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    assert migrate.shipped() == {s.revision: s.down_revision for s in script.walk_revisions()}
    assert migrate.head_revision() == script.get_current_head()


def test_a_current_database_is_opened_without_importing_alembic(tmp_path: object) -> None:
    """What makes ``chatkeep sessions list`` start fast: neither Alembic nor the OpenAI SDK
    is imported when the schema is current and no model is called."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'chat.db'}"
    Chatkeep(url).start().close()
    code = ("import sys; from chatkeep import Chatkeep, Ref; "
            f"k = Chatkeep({url!r}); k.sessions.list(Ref('org', 1)); k.close(); "
            "print(sorted(m for m in ('alembic', 'openai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
