"""Statements built on first use (issue 32 item 11): the same SQL as the eager
constructs they replace, built once, and nothing built before it is asked for."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from chatkeep.store import quotas
from chatkeep.store.lazy import LazyStatements, dialect_insert
from chatkeep.store.schema import chat_quotas, chat_replay_texts

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
    assert "settle_taken" in statement and "settle_quotas" in statement
    assert ("billed AS" in statement) is usage
    assert quotas.PG_APPEND_SETTLE[usage] is quotas.PG_APPEND_SETTLE[usage]
