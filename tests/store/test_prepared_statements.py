"""``store.prepared_statements`` and the URL's ``?prepared_statements=``: validated like
the rest of the configuration, taken out of the URL, and turned into each driver's
arguments (no server needed here; tests/store/test_pgbouncer.py runs them through
PgBouncer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chatkeep.store.engine as store_engine
from chatkeep import Chatkeep
from chatkeep.aio.engine import async_target
from chatkeep.config import Config, StoreConfig
from chatkeep.errors import ConfigError, StoreError
from chatkeep.store.engine import make_engine, split_prepared_statements, unprepared_connect_args

PG = "postgresql://app:secret@127.0.0.1:6432/chat"
ASYNCPG_OFF = {"statement_cache_size": 0, "prepared_statement_cache_size": 0}


def test_the_config_key_defaults_on_and_reads_like_other_switches(tmp_path: Path) -> None:
    assert Config().store.prepared_statements is True
    assert Config.from_dict({"store": {"prepared_statements": False}}
                            ).store.prepared_statements is False
    assert Config.from_env({"CHATKEEP_STORE__PREPARED_STATEMENTS": "off"}
                           ).store.prepared_statements is False
    toml = tmp_path / "chatkeep.toml"
    toml.write_text("[store]\nprepared_statements = false\n")
    assert Config.from_toml(toml).store.prepared_statements is False


@pytest.mark.parametrize("bad", ["maybe", 0, 1, None, ""])
def test_a_value_that_is_not_a_switch_is_a_config_error(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"store\.prepared_statements"):
        Config.from_dict({"store": {"prepared_statements": bad}})


def test_a_config_built_by_hand_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"store\.prepared_statements must be true or false"):
        Config(store=StoreConfig(prepared_statements="no")).validate()  # type: ignore[arg-type]


@pytest.mark.parametrize(("query", "value"), [
    ("", None), ("?prepared_statements=false", False), ("?prepared_statements=0", False),
    ("?prepared_statements=Off", False), ("?prepared_statements=true", True),
    ("?connect_timeout=3&prepared_statements=no", False)])
def test_the_url_parameter_leaves_the_url(query: str, value: bool | None) -> None:
    parsed, found = split_prepared_statements(store_engine.parse_url(PG + query))
    assert found is value
    assert "prepared_statements" not in parsed.query
    assert ("connect_timeout" in parsed.query) == ("connect_timeout" in query)


def test_a_bad_url_value_is_a_store_error_naming_the_url_without_its_password() -> None:
    with pytest.raises(StoreError, match=r"prepared_statements must be true or false") as info:
        make_engine(PG + "?prepared_statements=sometimes")
    assert "127.0.0.1:6432/chat" in str(info.value) and "secret" not in str(info.value)
    with pytest.raises(StoreError, match="prepared_statements"):
        async_target(PG + "?prepared_statements=sometimes")
    with pytest.raises(StoreError, match="prepared_statements must be True or False"):
        make_engine(PG, prepared_statements="no")  # type: ignore[arg-type]


def test_each_driver_gets_its_arguments() -> None:
    assert async_target(PG)[1] == {}
    assert async_target(PG + "?prepared_statements=false")[1] == ASYNCPG_OFF
    assert async_target(PG, prepared_statements=False)[1] == ASYNCPG_OFF
    psycopg_url = PG.replace("postgresql", "postgresql+psycopg")
    assert async_target(psycopg_url, prepared_statements=False)[1] == {
        "prepare_threshold": None}
    # the URL wins over the setting, both ways
    assert async_target(PG + "?prepared_statements=true", prepared_statements=False)[1] == {}
    assert async_target(PG + "?prepared_statements=false", prepared_statements=True)[1] \
        == ASYNCPG_OFF
    # what the caller passed is overridden; a statement-name function is dropped
    args = {"statement_cache_size": 100, "prepared_statement_name_func": lambda: "x",
            "timeout": 5}
    unprepared_connect_args("asyncpg", args)
    assert args == {**ASYNCPG_OFF, "timeout": 5}
    assert async_target("sqlite:///x.db?prepared_statements=false")[1] == {}


def test_the_sync_engine_passes_psycopg_no_prepare_threshold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    real = store_engine.create_engine

    def spy(url: Any, **kwargs: Any) -> Any:
        seen.append({"url": url, **kwargs})
        return real(url, **kwargs)

    monkeypatch.setattr(store_engine, "create_engine", spy)
    make_engine(PG + "?prepared_statements=false").dispose()
    make_engine(PG, prepared_statements=False, connect_args={"connect_timeout": 3}).dispose()
    make_engine(PG).dispose()
    assert [s.get("connect_args") for s in seen] == [
        {"prepare_threshold": None}, {"connect_timeout": 3, "prepare_threshold": None}, None]
    assert all("prepared_statements" not in s["url"].query for s in seen)


def test_sqlite_takes_and_ignores_both(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}?prepared_statements=false"
    keep = Chatkeep(url, config={"store": {"prepared_statements": False}})
    try:
        assert keep.start().engine.url.query == {}
    finally:
        keep.close()
