"""Statements built on first use (issue 32 item 11): the same SQL as the eager
constructs they replace, built once, and nothing built before it is asked for; an
index's PostgreSQL options attached when PostgreSQL (or a listing of all options) asks."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Column, Index, Integer, MetaData, String, Table, create_engine, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex

from chatkeep.store import quotas, statements
from chatkeep.store.lazy import LazyStatements, dialect_insert, postgresql_options
from chatkeep.store.memory_index import PG_INDEX
from chatkeep.store.schema import (
    MARK_INDEX,
    MARK_PRESENT,
    chat_quotas,
    chat_replay_texts,
    chat_sessions,
    metadata,
)

DIALECTS = {"sqlite": sqlite.dialect(), "postgresql": postgresql.dialect()}


def sql(statement: Any, dialect: str) -> str:
    return str(statement.compile(dialect=DIALECTS[dialect]))


def test_a_value_is_built_once_on_first_lookup_and_shared() -> None:
    calls: list[str] = []

    def build(key: str) -> list[str]:
        calls.append(key)
        return [key]

    lazy = LazyStatements(("a", "b"), build)
    assert list(lazy) == ["a", "b"] and len(lazy) == 2 and "a" in lazy
    assert calls == []
    first = lazy["a"]
    assert lazy["a"] is first and lazy.get("a") is first
    assert calls == ["a"]
    with pytest.raises(KeyError):
        lazy["c"]
    assert calls == ["a"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_dialect_insert_is_that_dialects_construct(dialect: str) -> None:
    module = postgresql if dialect == "postgresql" else sqlite
    made = dialect_insert(dialect, chat_replay_texts).on_conflict_do_nothing()
    assert isinstance(made, module.Insert)
    assert sql(made, dialect) == sql(
        module.insert(chat_replay_texts).on_conflict_do_nothing(), dialect)


def test_no_dialect_insert_for_another_dialect() -> None:
    with pytest.raises(ValueError, match="mysql"):
        dialect_insert("mysql", chat_quotas)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_default_quota_insert_is_the_same_sql(dialect: str) -> None:
    module = postgresql if dialect == "postgresql" else sqlite
    eager = module.insert(chat_quotas).on_conflict_do_nothing()
    assert sql(quotas.INSERT_DEFAULT[dialect], dialect) == sql(eager, dialect)
    assert "ON CONFLICT DO NOTHING" in sql(quotas.INSERT_DEFAULT[dialect], dialect)


@pytest.mark.parametrize("usage", [False, True])
def test_the_append_with_a_settle_keeps_its_usage_flag(usage: bool) -> None:
    statement = sql(quotas.PG_APPEND_SETTLE[usage], "postgresql")
    assert "st AS" in statement and "sq AS" in statement
    assert ("billed AS" in statement) is usage
    assert quotas.PG_APPEND_SETTLE[usage] is quotas.PG_APPEND_SETTLE[usage]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_keyed_session_insert_is_the_same_sql(dialect: str) -> None:
    module = postgresql if dialect == "postgresql" else sqlite
    eager = module.insert(chat_sessions).on_conflict_do_nothing(
        index_elements=["tenant_type", "tenant_id", "key"]).returning(chat_sessions)
    assert sql(statements.INSERT_KEYED_SESSION[dialect], dialect) == sql(eager, dialect)


def test_the_append_is_built_per_usage_flag() -> None:
    assert "billed AS" in sql(statements.PG_APPEND[True], "postgresql")
    assert "billed AS" not in sql(statements.PG_APPEND[False], "postgresql")
    assert list(statements.PG_APPEND) == [False, True]


def _pair(name: str) -> tuple[Index, Index]:
    """The same partial index made eagerly (``postgresql_where=``) and with
    :func:`postgresql_options`, each on a table of its own."""
    made = []
    for lazy in (False, True):
        table = Table("t", MetaData(), Column("a", Integer), Column("b", String))
        if lazy:
            index = postgresql_options(Index(name, table.c.a, sqlite_where=text("b IS NULL")),
                                       where=text("b IS NULL"))
            table.append_constraint(index)
        else:
            index = Index(name, table.c.a, sqlite_where=text("b IS NULL"),
                          postgresql_where=text("b IS NULL"))
            table.append_constraint(index)
        made.append(index)
    return made[0], made[1]


def _attached(index: Index) -> bool:
    return dict.__contains__(index.dialect_options, "postgresql")


def test_an_index_pending_postgresql_options_gives_the_same_ddl() -> None:
    eager, lazy = _pair("ix_t_a")
    assert not _attached(lazy)
    assert sql(CreateIndex(lazy), "sqlite") == sql(CreateIndex(eager), "sqlite")
    assert not _attached(lazy)  # SQLite's DDL asks for SQLite's options only
    assert sql(CreateIndex(lazy), "postgresql") == sql(CreateIndex(eager), "postgresql")
    assert sql(CreateIndex(lazy), "postgresql").endswith("WHERE b IS NULL")
    assert _attached(lazy)


@pytest.mark.parametrize("look", [
    lambda index: dict(index.dialect_kwargs),
    lambda index: list(index.dialect_options),
    lambda index: dict(index.dialect_options.items()),
    lambda index: index.dialect_options["postgresql"]["where"],
    lambda index: "postgresql" in index.dialect_options,
    lambda index: index.dialect_options.get("postgresql"),
    lambda index: len(index.dialect_options),
], ids=["dialect_kwargs", "iter", "items", "getitem", "contains", "get", "len"])
def test_listing_or_asking_for_the_options_attaches_them(look: Any) -> None:
    eager, lazy = _pair("ix_t_a")
    look(lazy)
    assert _attached(lazy)
    assert (sorted(lazy.dialect_kwargs.keys()) == sorted(eager.dialect_kwargs.keys())
            == ["postgresql_where", "sqlite_where"])
    assert str(lazy.dialect_options["postgresql"]["where"]) == "b IS NULL"


def test_a_copy_of_the_table_keeps_the_options() -> None:
    _, lazy = _pair("ix_t_a")
    assert lazy.table is not None
    copied = lazy.table.to_metadata(MetaData())
    (index,) = copied.indexes
    assert str(index.dialect_options["postgresql"]["where"]) == "b IS NULL"
    assert sql(CreateIndex(index), "postgresql").endswith("WHERE b IS NULL")


def test_sqlite_creates_the_tables_without_attaching_them(tmp_path: Any) -> None:
    _, lazy = _pair("ix_t_a")
    assert lazy.table is not None
    engine = create_engine(f"sqlite:///{tmp_path / 'lazy.db'}")
    try:
        lazy.table.metadata.create_all(engine)
    finally:
        engine.dispose()
    assert not _attached(lazy)


def test_pending_options_are_given_once() -> None:
    _, lazy = _pair("ix_t_a")
    with pytest.raises(ValueError, match="ix_t_a"):
        postgresql_options(lazy, where=text("a > 1"))


def test_a_bad_option_still_fails_when_attached() -> None:
    table = Table("t", MetaData(), Column("a", Integer))
    index = postgresql_options(Index("ix_t_bad", table.c.a), no_such_option=1)
    with pytest.raises(Exception, match="no_such_option"):
        dict(index.dialect_kwargs)


def test_the_schemas_postgresql_indexes_keep_their_options() -> None:
    """Every partial index both stores have carries its PostgreSQL ``WHERE`` as on SQLite;
    the PostgreSQL-only ones keep theirs: the LangChain id's ``WHERE`` (migration 0017)
    and the full-text index's ``USING gin``."""
    indexes = [index for table in metadata.tables.values() for index in table.indexes]
    shared = [index for index in indexes
              if index._ddl_if is None and index.dialect_options["sqlite"]["where"] is not None]
    assert len(shared) == 4
    for index in shared:
        where = str(index.dialect_options["sqlite"]["where"])
        assert str(index.dialect_options["postgresql"]["where"]) == where
        assert sql(CreateIndex(index), "postgresql").endswith(f"WHERE {where}")
    postgresql_only = {index.name: index for index in indexes
                       if index._ddl_if is not None and index._ddl_if.dialect == "postgresql"}
    mark = postgresql_only[MARK_INDEX]
    assert str(mark.dialect_options["postgresql"]["where"]) == MARK_PRESENT["postgresql"]
    assert sql(CreateIndex(mark), "postgresql").endswith(f"WHERE {MARK_PRESENT['postgresql']}")
    assert postgresql_only[PG_INDEX].dialect_options["postgresql"]["using"] == "gin"
    assert "USING gin" in sql(CreateIndex(postgresql_only[PG_INDEX]), "postgresql")
