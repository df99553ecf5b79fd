"""The inspector's pure parts, with literals: charts, cursors, the host and reveal rules,
and the budget split."""

from __future__ import annotations

import re
from typing import Any

import pytest

from chatkeep.formats.base import fence
from chatkeep.inspect import svg
from chatkeep.inspect.masking import check_reveal, split_placeholders
from chatkeep.inspect.preview import budget_parts
from chatkeep.inspect.security import allowed_hosts, host_name, is_loopback
from chatkeep.privacy.vault import PlaceholderVault, new_key, seal
from chatkeep.store.inspection_sessions import STATES, _state_clause, valid_id
from chatkeep.store.keyset import decode_cursor, encode_cursor
from chatkeep.tokens import HeuristicCounter


def widths(markup: str) -> list[float]:
    return [float(w) for w in re.findall(r'<rect class="s\d" [^>]*width="([\d.]+)"', markup)]


def test_stacked_bar_scales_to_the_larger_of_total_and_budget() -> None:
    bar = svg.stacked_bar([("system", 100), ("pinned", 0), ("tail", 300)], 800, width=800)
    assert widths(bar) == [100.0, 300.0]  # the empty part draws nothing
    assert 'x1="800"' in bar  # the budget at the right edge
    over = svg.stacked_bar([("tail", 1600)], 800, width=800)
    assert widths(over) == [800.0] and 'x1="400"' in over


def test_charts_escape_their_labels() -> None:
    hostile = '<script>alert("x")</script>'
    for markup in (svg.stacked_bar([(hostile, 5)], 10),
                   svg.stacked_columns(["2026-01-01"], [(hostile, [5])]),
                   svg.bars([(hostile, 5)])):
        assert "<script>" not in markup and "&lt;script&gt;" in markup
    columns = svg.stacked_columns(["a", "b", "c"], [("chat", [1, 2, 3]), ("summary", [3, 0, 1])])
    assert columns.count("<rect") == 5
    assert svg.stacked_columns([], []).startswith("<svg")


def test_cursors_round_trip_and_survive_garbage() -> None:
    from datetime import UTC, datetime

    moment = datetime(2026, 11, 3, 9, 30, tzinfo=UTC)
    assert decode_cursor(encode_cursor(moment, "abc")) == [moment.isoformat(),
                                                                           "abc"]
    for garbage in ("", "!!!", "e30", "bm90IGpzb24"):
        assert decode_cursor(garbage) is None


def test_ids() -> None:
    assert valid_id("01a240e3-fb37-75e6-beb5-0d8d0f8e6e19")
    for bad in ("", "x" * 65, "a b", "a\x00", "../x", "'; drop"):
        assert not valid_id(bad)


def test_hosts() -> None:
    for host in ("127.0.0.1", "127.8.9.1", "localhost", "::1", "[::1]"):
        assert is_loopback(host)
    for host in ("0.0.0.0", "10.0.0.1", "example.com", "localhost.evil"):
        assert not is_loopback(host)
    assert host_name("[::1]:8765") == "::1"
    assert host_name("LocalHost:80") == "localhost"
    assert host_name("127.0.0.1") == "127.0.0.1"
    assert allowed_hosts("0.0.0.0") is None
    assert "192.168.1.4" in (allowed_hosts("192.168.1.4") or ())


def test_reveal_rules() -> None:
    key = new_key()
    vault = PlaceholderVault()
    vault.placeholder_for("EMAIL", "a@b.example")
    sealed, plain = seal(vault, key), seal(vault, None)
    assert not check_reveal(enabled=False, typed_key=key, blob=sealed,
                            configured_key=key).granted
    assert not check_reveal(enabled=True, typed_key=" ", blob=sealed, configured_key=key).granted
    assert not check_reveal(enabled=True, typed_key=new_key(), blob=sealed,
                            configured_key=None).granted
    granted = check_reveal(enabled=True, typed_key=key, blob=sealed, configured_key=None)
    assert granted.granted and granted.vault is not None
    assert granted.vault.value_for("<EMAIL_1>") == "a@b.example"
    # No sealed mapping: the typed key must be a configured one.
    assert not check_reveal(enabled=True, typed_key=key, blob=plain,
                            configured_key=None).granted
    assert not check_reveal(enabled=True, typed_key="nope", blob=None,
                            configured_key=key).granted
    assert check_reveal(enabled=True, typed_key=key, blob=None,
                        configured_key=f"{new_key()},{key}").granted


def test_placeholders_are_found_for_highlighting() -> None:
    assert split_placeholders(r"mail <EMAIL_1> not <\EMAIL_2>") == [
        ("mail ", False), ("<EMAIL_1>", True), (" not ", False), (r"<\EMAIL_2>", False)]


def test_budget_parts_follow_the_planner() -> None:
    counter = HeuristicCounter()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You help."},
        {"role": "system", "content": "Always be brief."},
        {"role": "system", "content": fence("Earlier: hello.")},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    parts = dict(budget_parts(messages, "You help.", counter))
    assert parts["system prompt"] == 4 + counter.count("You help.")
    assert parts["pinned"] == 4 + counter.count("Always be brief.")
    assert parts["summary"] == 4 + counter.count(fence("Earlier: hello."))
    assert parts["tail"] == 8 + counter.count("hi") + counter.count("hello")
    assert parts["open turn"] == (4 + counter.count("weather?") + 4 + 4 + counter.count("c1w{}")
                                  + 4 + counter.count("sunny") + counter.count("c1"))
    closed = dict(budget_parts(messages[:6], "", counter))
    assert closed["system prompt"] == 0 and closed["open turn"] == 0
    assert closed["pinned"] == 8 + counter.count("You help.") + counter.count("Always be brief.")


@pytest.mark.parametrize("state", STATES)
def test_every_state_has_a_clause(state: str) -> None:
    assert _state_clause(state, 100) is not None
