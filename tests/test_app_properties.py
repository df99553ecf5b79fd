"""Property-based: generated bad input, through every public method and CLI command, on
SQLite and PostgreSQL, is a ``ChatkeepError`` (or CLI exit 1/2 without a traceback) and
leaves the database exactly as it was.

Each example draws an operation and a value the operation must refuse; the database is
dumped (every row of every table, and PostgreSQL's sequences) before and after, and on
SQLite ``data_version`` shows whether any connection committed anything at all.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable, Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chatkeep import Chatkeep, ChatkeepError, ChatSession, MessageDraft, Ref, Role, Usage
from chatkeep.cli import app
from chatkeep.cli.common import parse_time
from support.seeded import ALICE, ORG, WriteWatch, dump, seed

pytestmark = pytest.mark.sync_api  # dumps tables and seeds memories below the public API

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# -- values a column would refuse ---------------------------------------------------------

surrogates = st.integers(0xD800, 0xDFFF).map(chr)
with_nul = st.tuples(st.text(max_size=5), st.text(max_size=5)).map(lambda p: f"{p[0]}\x00{p[1]}")
with_surrogate = st.tuples(st.text(max_size=5), surrogates, st.text(max_size=5)).map("".join)
not_text = st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.binary(),
                     st.lists(st.integers(), max_size=2), st.just({"a": 1}), st.just(object()))
unstorable = st.one_of(with_nul, with_surrogate)


def too_long(limit: int) -> st.SearchStrategy[str]:
    """Text one to a few characters over a ``String(limit)`` column."""
    return st.integers(limit + 1, limit + 40).map(lambda n: "x" * n)


def bad_text(limit: int | None) -> st.SearchStrategy[Any]:
    """Anything a text column of ``limit`` characters refuses (or a non-string)."""
    options = [unstorable, not_text]
    if limit is not None:
        options.append(too_long(limit))
    return st.one_of(*options)


bad_count = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**31),
                       st.integers(min_value=2**63), st.floats(), st.booleans(),
                       st.text(max_size=3), st.none())
bad_limit = st.one_of(st.integers(max_value=0), st.integers(min_value=2**31), st.floats(),
                      st.booleans(), st.text(max_size=3))
bad_memory_id = st.one_of(st.integers(max_value=0), st.integers(min_value=2**63),
                          st.floats(), st.booleans(), st.text(max_size=3), st.none())
bad_bool = st.one_of(st.integers(), st.text(max_size=4), st.none(), st.floats())
json_ok = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10, 10),
                                 st.text(max_size=4)),
                       lambda inner: st.lists(inner, max_size=2)
                       | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=4)
bad_json_leaf = st.one_of(st.just(math.nan), st.just(math.inf), st.just(-math.inf),
                          unstorable, st.integers(min_value=2**63), st.just(object()),
                          st.just({1, 2}), st.binary(min_size=1, max_size=3))
bad_metadata = st.one_of(
    st.dictionaries(st.text(max_size=3), json_ok, max_size=2).flatmap(
        lambda good: bad_json_leaf.map(lambda leaf: {**good, "bad": leaf})),
    st.dictionaries(st.one_of(st.integers(), st.none(), st.booleans(), st.floats()),
                    st.integers(), min_size=1, max_size=2),
    unstorable.map(lambda key: {key: 1}),
    st.one_of(st.integers(), st.text(min_size=1, max_size=3),
              st.lists(st.integers(), min_size=1, max_size=2)),
)
bad_ref_arg = st.one_of(not_text, st.text(max_size=5), st.just(("organization", 7)))


# -- the operations -------------------------------------------------------------------------

Op = Callable[[Chatkeep, ChatSession, Any], Any]


def _record(payload: Any) -> Op:
    return lambda keep, s, v: s.record(payload(v), format="openai_chat")


OPERATIONS: dict[str, tuple[Op, st.SearchStrategy[Any]]] = {
    "create title": (lambda k, s, v: k.sessions.create(ORG, title=v), bad_text(255)),
    "create metadata": (lambda k, s, v: k.sessions.create(ORG, metadata=v), bad_metadata),
    "create anonymize_pii": (lambda k, s, v: k.sessions.create(ORG, anonymize_pii=v),
                             bad_bool),
    "create tenant": (lambda k, s, v: k.sessions.create(v), bad_ref_arg),
    "create actor": (lambda k, s, v: k.sessions.create(ORG, v), bad_ref_arg.filter(
        lambda v: v is not None)),
    "Ref type": (lambda k, s, v: k.sessions.create(Ref(v, 1)),
                 st.one_of(bad_text(64), st.just(" "))),
    "Ref id": (lambda k, s, v: k.sessions.create(Ref("organization", v)),
               st.one_of(bad_text(255).filter(lambda v: not isinstance(v, int)),
                         st.integers(min_value=10**255), st.just(" "))),
    "add_user content": (lambda k, s, v: s.add_user(v),
                         st.one_of(unstorable, not_text, st.just(""), st.just("  \n"))),
    "add_user name": (lambda k, s, v: s.add_user("hello", name=v),
                      bad_text(255).filter(lambda v: v is not None)),
    "add_user metadata": (lambda k, s, v: s.add_user("hello", metadata=v), bad_metadata),
    "add_system content": (lambda k, s, v: s.add_system(v), bad_text(None)),
    "add_assistant model": (lambda k, s, v: s.add_assistant("ok", model=v),
                            bad_text(255).filter(lambda v: v is not None)),
    "add_assistant usage": (lambda k, s, v: s.add_assistant("ok", usage=v),
                            st.one_of(st.builds(Usage, bad_count, st.just(0)),
                                      st.builds(Usage, st.just(0), bad_count),
                                      st.integers(), st.text(max_size=3))),
    "add_assistant nothing": (lambda k, s, v: s.add_assistant(v, tool_calls=None),
                              st.one_of(st.none(), st.just(""), st.just(" "))),
    "tool call id": (lambda k, s, v: s.add_assistant(
        tool_calls=[{"id": v, "type": "function", "function": {"name": "f"}}]),
        st.one_of(too_long(255), unstorable)),
    "tool call reused id": (lambda k, s, v: s.add_assistant(
        tool_calls=[{"id": v, "type": "function", "function": {"name": "f"}}]),
        st.sampled_from(["call-1", "call-open"])),
    "tool call name": (lambda k, s, v: s.add_assistant(
        tool_calls=[{"id": "c-new", "type": "function", "function": {"name": v}}]),
        st.one_of(too_long(255), unstorable, st.just(""))),
    "tool call arguments": (lambda k, s, v: s.add_assistant(
        tool_calls=[{"id": "c-new", "type": "function",
                     "function": {"name": "f", "arguments": v}}]),
        st.one_of(unstorable, st.just({"x": {1, 2}}))),
    "tool_calls shape": (lambda k, s, v: s.add_assistant("ok", tool_calls=v),
                         st.one_of(st.integers(), st.text(min_size=1, max_size=3),
                                   st.just([{"id": "c", "function": "f"}]),
                                   st.just([5]), st.just({"id": "c"}))),
    "add_tool_result content": (lambda k, s, v: s.add_tool_result("call-open", v),
                                st.one_of(st.none(), st.integers(), st.floats(),
                                          unstorable, st.just(object()))),
    "add_tool_result id": (lambda k, s, v: s.add_tool_result(v, "result"),
                           st.one_of(bad_text(255), st.just("call-1"),
                                     st.just("no-such-call"), st.just(""))),
    "add_message role": (lambda k, s, v: s.add_message(v, "hi"),
                         st.one_of(st.text(max_size=6).filter(
                             lambda r: r not in {"user", "assistant", "tool", "system"}),
                             st.integers(), st.none())),
    "add_tokens": (lambda k, s, v: s.add_tokens(v), bad_count),
    "add_tokens model": (lambda k, s, v: s.add_tokens(1, model=v),
                         bad_text(255).filter(lambda v: v is not None)),
    "record_usage usage": (lambda k, s, v: s.record_usage("chat", v),
                           st.one_of(st.none(), st.integers(), st.builds(Usage, bad_count,
                                                                         st.just(1)))),
    "record_usage purpose": (lambda k, s, v: s.record_usage(v, Usage(1, 1)),
                             st.one_of(st.text(max_size=8).filter(
                                 lambda p: p not in {"chat", "summary", "distil", "manual"}),
                                 st.integers(), st.none())),
    "record openai_chat": (_record(lambda v: [v]), st.one_of(
        st.fixed_dictionaries({"role": st.just("user"), "content": bad_text(None)}),
        st.fixed_dictionaries({"role": st.just("user"), "content": st.just("hi"),
                               "name": bad_text(255).filter(lambda v: isinstance(v, str))}),
        st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none()}),
        st.fixed_dictionaries({"role": st.just("user"), "content": st.just(
            [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}])}),
        st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": st.just("nope"),
                               "content": st.just("r")}),
        st.text(max_size=3), st.integers())),
    "add_assistant_response": (lambda k, s, v: s.add_assistant_response(v), st.one_of(
        st.none(), st.integers(), st.text(max_size=4), st.just([]),
        st.just({"choices": []}),
        st.just({"choices": [5]}),
        st.just({"choices": [{"message": {"role": "assistant", "content": 5}}]}),
        st.just({"choices": [{"message": {"role": "assistant", "content": None}}]}),
        st.just({"choices": [{"message": {"role": "assistant", "content": "ok"}}],
                 "usage": {"prompt_tokens": "many", "completion_tokens": 1}}),
        st.integers(min_value=2**31).map(lambda n: {
            "choices": [{"message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": n, "completion_tokens": 1}}),
        unstorable.map(lambda t: {"choices": [{"message": {"role": "assistant",
                                                            "content": t}}]}),
        st.just({"choices": [{"message": {"role": "assistant", "tool_calls": [
            {"id": "call-1", "type": "function", "function": {"name": "f"}}]}}]}),
        st.just({"type": "message", "role": "assistant", "content": [{"type": "image"}]}),
        st.just({"object": "response", "output": [{"type": "function_call"}]}))),
    "add_assistant_response metadata": (lambda k, s, v: s.add_assistant_response(
        {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}, metadata=v),
        bad_metadata),
    "record other formats": (lambda k, s, v: s.record(v[1], format=v[0]), st.tuples(
        st.sampled_from(["openai_responses", "anthropic_messages", "bogus"]),
        st.one_of(st.integers(), st.just([{"role": "user", "content": [{"type": "x"}]}]),
                  st.just([{"type": "function_call_output", "call_id": "nope",
                            "output": "x"}]),
                  st.just([{"role": "user", "content": 5}]), st.just([5]),
                  unstorable.map(lambda t: [{"role": "user", "content": t}])))),
    "record batch rollback": (_record(lambda v: [{"role": "user", "content": "fine"},
                                                 {"role": "user", "content": v}]),
                              unstorable),
    "add_drafts": (lambda k, s, v: s.add_drafts(v), st.one_of(
        st.just([MessageDraft(Role.USER, "ok"), "not a draft"]),
        bad_text(None).map(lambda c: [MessageDraft(Role.USER, "ok"),
                                      MessageDraft(Role.USER, c)]),
        bad_metadata.map(lambda m: [MessageDraft(Role.USER, "ok", metadata=m)]),
        st.integers(), st.text(min_size=1, max_size=3))),
    "anonymize_pii setter": (lambda k, s, v: setattr(s, "anonymize_pii", v), bad_bool),
    "messages_after": (lambda k, s, v: s.messages_after(v), bad_count.filter(
        lambda v: v is not None)),
    "get": (lambda k, s, v: k.sessions.get_unscoped(v), st.one_of(unstorable, not_text,
                                                         st.text(max_size=40))),
    "get tenant": (lambda k, s, v: k.sessions.get(s.id, tenant=v), bad_ref_arg),
    "tenant_of": (lambda k, s, v: k.sessions.tenant_of(v), st.one_of(unstorable, not_text)),
    "list limit": (lambda k, s, v: k.sessions.list(ORG, limit=v), bad_limit),
    "list actor": (lambda k, s, v: k.sessions.list(ORG, actor=v),
                   bad_ref_arg.filter(lambda v: v is not None)),
    "usage since": (lambda k, s, v: k.usage(ORG, since=v), st.one_of(
        st.text(max_size=10), st.integers(), st.just(date(2030, 1, 1)))),
    "usage inverted": (lambda k, s, v: k.usage(ORG, since=v, until=datetime(2020, 1, 1)),
                       st.datetimes(min_value=datetime(2020, 1, 1))),
    "memory list scope": (lambda k, s, v: k.memory.list(ORG, scope=v),
                          st.text(max_size=8).filter(
                              lambda v: v not in {"tenant", "subject", "personal"})),
    "memory list limit": (lambda k, s, v: k.memory.list(ORG, limit=v), bad_limit),
    "memory recall query": (lambda k, s, v: k.memory.recall(s, query=v),
                            st.one_of(unstorable, st.integers(), st.lists(st.text()))),
    "memory recall limit": (lambda k, s, v: k.memory.recall(s, limit=v), bad_limit),
    "memory forget whole_tenant": (lambda k, s, v: k.memory.forget(ORG, whole_tenant=v),
                                   bad_bool),
    "memory forget actor": (lambda k, s, v: k.memory.forget(ORG, v),
                            bad_ref_arg.filter(lambda v: v is not None)),
    "memory sweep idle_after": (lambda k, s, v: k.memory.sweep(idle_after=v), st.one_of(
        st.integers(), st.floats(), st.text(max_size=4))),
    "memory sweep batch_size": (lambda k, s, v: k.memory.sweep(batch_size=v), bad_limit),
    "memory rewind": (lambda k, s, v: k.memory.rewind(s.id, v), bad_count.filter(
        lambda v: v is not None)),
    "memory add content": (lambda k, s, v: k.memory.add(ORG, v), st.one_of(
        bad_text(10_000), st.sampled_from(["", "  ", "?!"]))),
    "memory add scope": (lambda k, s, v: k.memory.add(ORG, "A fact.", scope=v), st.one_of(
        st.text(max_size=8).filter(lambda v: v not in {"tenant", "subject", "personal"}),
        st.sampled_from(["personal", "subject"]), st.integers(), st.none())),
    "memory add actor": (lambda k, s, v: k.memory.add(ORG, "A fact.", scope="personal",
                                                      actor=v), bad_ref_arg),
    "memory update content": (lambda k, s, v: k.memory.update(
        ORG, k.memory.list(ORG)[0].id, v), bad_text(10_000)),
    "memory get id": (lambda k, s, v: k.memory.get(ORG, v), bad_memory_id),
    "memory delete id": (lambda k, s, v: k.memory.delete(ORG, v), bad_memory_id),
    "build_history system": (lambda k, s, v: k.compressor.build_history(s, v),
                             st.one_of(st.none(), st.integers(), st.lists(st.text()))),
}


@pytest.fixture
def seeded(keep: Chatkeep, db_url: str) -> Iterator[tuple[Chatkeep, ChatSession, WriteWatch]]:
    session = seed(keep)
    watch = WriteWatch(db_url)
    yield keep, session, watch
    watch.close()


@PROPERTY
@given(data=st.data())
def test_bad_input_to_any_public_method_is_refused_and_writes_nothing(
        seeded: tuple[Chatkeep, ChatSession, WriteWatch], data: st.DataObject) -> None:
    keep, session, watch = seeded
    name = data.draw(st.sampled_from(sorted(OPERATIONS)), label="operation")
    operation, values = OPERATIONS[name]
    value = data.draw(values, label="value")
    before, version = dump(keep.engine), watch.version()
    with pytest.raises(ChatkeepError):
        operation(keep, session.refresh(), value)
    assert watch.version() == version, f"{name}: a transaction was committed"
    assert dump(keep.engine) == before, f"{name}: the database changed"


# -- the CLI ---------------------------------------------------------------------------------

runner = CliRunner()

bad_ref_text = st.one_of(
    st.text(max_size=6).filter(lambda t: ":" not in t),           # no colon
    st.text(max_size=4).map(lambda t: f":{t}"),                   # empty type
    st.text(max_size=4).filter(lambda t: ":" not in t).map(lambda t: f"{t}:"),  # empty id
    st.text(min_size=1, max_size=3).filter(lambda t: ":" not in t and t.strip()).map(
        lambda t: f"{t}:{'9' * 300}"),                            # id over 255
    st.text(max_size=3).map(lambda t: f"org:{t}\x00"),            # NUL
    surrogates.map(lambda c: f"org:{c}"),                         # lone surrogate
)


def _int_in(text: str, low: int, high: int) -> bool:
    """Whether Click would take ``text`` as an int within ``[low, high]``."""
    try:
        return low <= int(text) <= high
    except ValueError:
        return False


def bad_int_text(low: int = 1, high: int = 2**31 - 1) -> st.SearchStrategy[str]:
    """Option text an ``int`` option ranging over ``[low, high]`` must refuse."""
    return st.one_of(st.integers(max_value=low - 1).map(str),
                     st.integers(min_value=high + 1).map(str),
                     st.text(max_size=4)).filter(lambda t: not _int_in(t, low, high))


def _is_date(text: str) -> bool:
    try:
        parse_time(text)
    except typer.BadParameter:
        return False
    return True


bad_date_text = st.one_of(st.text(max_size=10), st.sampled_from(
    ["2026-13", "2026-00", "2026-11-31", "11/2026", "२०२६", "2026-1", "yesterday"])
).filter(lambda t: not _is_date(t))
no_option = st.text(min_size=1, max_size=8).filter(lambda t: not t.startswith("-"))
bad_duration = st.one_of(st.text(max_size=6), st.sampled_from(
    ["999999999999d", "1e9", "-5m", "5x", "१२m", "nan", "inf"]))


def _commands(session_id: str) -> dict[str, tuple[Callable[[Any], list[str]],
                                                  st.SearchStrategy[Any]]]:
    return {
        "sessions list tenant": (lambda v: ["sessions", "list", "--tenant", v], bad_ref_text),
        "sessions list limit": (lambda v: ["sessions", "list", "--tenant", "org:1",
                                           "--limit", v], bad_int_text()),
        "sessions show id": (lambda v: ["sessions", "show", v],
                             st.one_of(unstorable, no_option)),
        "sessions show tail": (lambda v: ["sessions", "show", session_id, "--tail", v],
                               bad_int_text(0)),
        "sessions show tenant": (lambda v: ["sessions", "show", session_id, "--tenant", v],
                                 bad_ref_text),
        "history format": (lambda v: ["history", session_id, "--format", v],
                           st.text(max_size=8).filter(lambda t: t not in {
                               "openai_chat", "openai_responses", "anthropic_messages"})),
        "usage since": (lambda v: ["usage", "--since", v], bad_date_text),
        "usage inverted": (lambda v: ["usage", "--since", f"{2000 + v}-06",
                                      "--until", f"{2000 + v}-05"], st.integers(1, 99)),
        "usage tenant": (lambda v: ["usage", "--tenant", v], bad_ref_text),
        "memories list limit": (lambda v: ["memories", "list", "--tenant", "org:1",
                                           "--limit", v], bad_int_text()),
        "memories list scope": (lambda v: ["memories", "list", "--tenant", "org:1",
                                           "--scope", v],
                                st.text(max_size=6).filter(
                                    lambda t: t not in {"tenant", "subject", "personal"})),
        "memories forget tenant": (lambda v: ["memories", "forget", "--tenant", v,
                                              "--whole-tenant", "--yes"], bad_ref_text),
        "memories forget both": (lambda v: ["memories", "forget", "--tenant",
                                            "organization:7", "--actor", v,
                                            "--whole-tenant", "--yes"],
                                 st.sampled_from(["user:3", "user:1"])),
        "sweep idle-after": (lambda v: ["sweep", "--idle-after", v], bad_duration),
        "sweep batch-size": (lambda v: ["sweep", "--batch-size", v], bad_int_text()),
        "import tenant": (lambda v: ["import", "__GOOD__", "--tenant", v], bad_ref_text),
        "import title": (lambda v: ["import", "__GOOD__", "--tenant", "org:1", "--title", v],
                         st.one_of(too_long(255), unstorable)),
        "import line": (lambda v: ["import", v, "--tenant", "org:1"], st.one_of(
            bad_text(None).filter(lambda c: isinstance(c, str)).map(
                lambda c: [{"role": "user", "content": c}]),
            st.just([{"role": "assistant", "content": None}]),
            st.just([{"role": "user", "content": ""}]),
            st.just([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            st.just([{"role": "user", "content": "hi", "name": {"first": "A"}}]),
            st.just([{"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f"}}]},
                {"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f"}}]}]),
            too_long(255).map(lambda name: [{"role": "user", "content": "hi", "name": name}]),
            st.just([]),
            st.just("not json"),
            st.binary(min_size=1, max_size=4).map(lambda b: b"\xff" + b),
        )),
        "demo budget": (lambda v: ["demo", "--budget", v], bad_int_text(100)),
        "db downgrade": (lambda v: ["db", "downgrade", v],
                         st.text(alphabet=string.ascii_letters, min_size=1, max_size=6).filter(
                             lambda t: t not in {"base", "head", "heads"})),
    }


def _import_file(tmp: Path, lines: Any) -> str:
    path = tmp / "import.jsonl"
    if isinstance(lines, bytes):
        path.write_bytes(lines)
    elif isinstance(lines, str):
        path.write_text(lines, encoding="utf-8", errors="surrogatepass")
    else:
        path.write_text("".join(json.dumps(line) + "\n" for line in lines),
                        encoding="utf-8", errors="surrogatepass")
    return str(path)


@settings(PROPERTY, max_examples=80)
@given(data=st.data())
def test_bad_input_to_any_cli_command_exits_1_or_2_and_writes_nothing(
        seeded: tuple[Chatkeep, ChatSession, WriteWatch], db_url: str, tmp_path: Path,
        data: st.DataObject) -> None:
    keep, session, watch = seeded
    commands = _commands(session.id)
    name = data.draw(st.sampled_from(sorted(commands)), label="command")
    build, values = commands[name]
    value = data.draw(values, label="value")
    if name == "import line":
        value = _import_file(tmp_path, value)
    args = [_import_file(tmp_path, [{"role": "user", "content": "hi"}]) if a == "__GOOD__"
            else a for a in build(value)]
    before, version = dump(keep.engine), watch.version()
    result = runner.invoke(app, [*args, "--db", db_url],
                           env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "",
                                "CHATKEEP_DATABASE_URL": ""})
    assert result.exit_code in (1, 2), (name, args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (name, args, result.exception)
    assert "Traceback" not in result.output
    assert watch.version() == version, f"{name}: a transaction was committed"
    assert dump(keep.engine) == before, f"{name}: the database changed"


# -- references mean what they say ------------------------------------------------------------

ref_ids = st.one_of(
    st.text(alphabet="0123456789", min_size=1, max_size=4),
    st.text(alphabet="0123456789+-_ ٠١٢٣٧۷७০²³¹⁷０７𝟕", min_size=1, max_size=4),
    st.text(min_size=1, max_size=4),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(type_=st.text(min_size=1, max_size=6).filter(lambda t: ":" not in t and t.strip()),
       id_=ref_ids)
def test_a_parsed_reference_is_exactly_the_text_typed(type_: str, id_: str) -> None:
    typed = f"{type_}:{id_}"
    try:
        ref = Ref.parse(typed)
    except ChatkeepError:
        return  # refused outright (blank, NUL, ...): names no tenant at all
    assert str(ref) == typed and ref.id_text == id_
    assert isinstance(ref.id, int) == (id_.isascii() and id_.isdigit()
                                       and str(int(id_)) == id_)


@settings(PROPERTY, max_examples=30)
@given(id_=ref_ids.filter(lambda i: i != "7"))
def test_no_cli_tenant_names_a_different_tenant_than_typed(keep: Chatkeep, db_url: str,
                                                           id_: str) -> None:
    if not keep.sessions.list(ORG):
        seed(keep)
    typed = f"organization:{id_}"
    listed = runner.invoke(app, ["sessions", "list", "--tenant", typed, "--json",
                                 "--db", db_url])
    if listed.exit_code == 0:
        assert json.loads(listed.stdout) == [], typed  # organization:7's session: never
    else:
        assert listed.exit_code == 2, listed.output
    erased = runner.invoke(app, ["memories", "forget", "--tenant", typed, "--whole-tenant",
                                 "--yes", "--db", db_url])
    assert erased.exit_code in (0, 2), erased.output
    assert len(keep.memory.list(ORG)) == 2, f"{typed} erased organization:7's memories"
    assert len(keep.memory.list(ORG, actor=ALICE)) >= 1
