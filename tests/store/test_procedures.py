"""The store's procedures (``chatkeep.store.procedures``) on a scripted executor: no
database, each rule checked with literals. What runs, in which order and in which kind of
connection; what a refusal asks before it says why; how an integrity error reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any

import pytest

from chatkeep import InvalidMessage, Ref, SessionClosed, SessionNotFound, StoreError, Usage
from chatkeep.messages import MessageDraft, Role, ToolCall
from chatkeep.store import procedures
from chatkeep.store import statements as sql
from chatkeep.store.executor import Executor
from chatkeep.store.rows import MESSAGE_FIELDS, SESSION_FIELDS, BilledUsage

NOW = datetime(2026, 11, 5, 9, 30, tzinfo=UTC)


class Duplicate(Exception):
    """The scripted transport's integrity error."""


def session_row(last_seq: int = 0, **values: Any) -> tuple[Any, ...]:
    """A ``chat_sessions`` row as a driver returns it."""
    row = dict.fromkeys(SESSION_FIELDS)
    row.update(id="s1", tenant_type="organization", tenant_id="7", tenant_id_int=True,
               anonymize_pii=True, total_tokens=0, last_seq=last_seq, summary_watermark=0,
               summary_version=0, distilled_through=0, distil_version=0,
               pii_vault_version=0, pii_protected=False, last_message_at=NOW,
               created_at=NOW, metadata={})
    row.update(values)
    return tuple(row[name] for name in SESSION_FIELDS)


def message_row(seq: int, role: str = "user") -> tuple[Any, ...]:
    row = dict.fromkeys(MESSAGE_FIELDS)
    row.update(session_id="s1", seq=seq, role=role, content=f"m{seq}", created_at=NOW,
               metadata={})
    return tuple(row[name] for name in MESSAGE_FIELDS)


class Script:
    """An executor and its transport in one: each statement answered from a queue of
    row lists (none left: no rows), every statement recorded with its values."""

    def __init__(self, answers: Mapping[Any, list[list[Any]]] | None = None, *,
                 dialect: str = "sqlite", fails: Any = None) -> None:
        self.answers = {statement: list(rows) for statement, rows in (answers or {}).items()}
        self.dialect = dialect
        self.integrity_errors: tuple[type[Exception], ...] = (Duplicate,)
        self.fails = fails
        self.ran: list[tuple[Any, Any]] = []
        self.opened: list[str] = []

    def rows(self, statement: Any, params: Mapping[str, Any]) -> Sequence[Any]:
        self.ran.append((statement, dict(params)))
        queue = self.answers.get(statement)
        return queue.pop(0) if queue else []

    def many(self, statement: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        self.ran.append((statement, [dict(row) for row in rows]))
        if statement is self.fails:
            raise Duplicate('duplicate key value violates unique constraint "chat_tool_calls_pkey"')

    def _open(self, kind: str) -> AbstractContextManager[Executor]:
        self.opened.append(kind)
        return nullcontext(self)

    def transaction(self, *, synced: bool = True) -> AbstractContextManager[Executor]:
        return self._open("transaction" if synced else "transaction, unsynced")

    def autocommit(self) -> AbstractContextManager[Executor]:
        return self._open("autocommit")

    def reading(self) -> AbstractContextManager[Executor]:
        return self._open("reading")

    @property
    def statements(self) -> list[Any]:
        return [statement for statement, _ in self.ran]


def tool_turn() -> list[tuple[MessageDraft, int | None, BilledUsage | None]]:
    """A call and its answer in one batch, the call billed."""
    return [(MessageDraft(Role.ASSISTANT, "calling", (ToolCall("c1", "f", "{}"),)), 3,
             BilledUsage("chat", Usage(1, 2), "m")),
            (MessageDraft(Role.TOOL, "r1", tool_call_id="c1"), 1, None)]


def test_an_append_claims_then_records_calls_and_answers_before_the_messages() -> None:
    script = Script({sql.CLAIM_SEQ: [[session_row(last_seq=5)]], sql.ANSWER_CALL: [[("c1",)]]})
    messages, session = procedures.append(script, "s1", tool_turn(), lambda: NOW)
    assert script.opened == ["transaction"]
    assert script.statements == [sql.CLAIM_SEQ, sql.INSERT_TOOL_CALL, sql.ANSWER_CALL,
                                 sql.INSERT_MESSAGE, sql.INSERT_USAGE]
    claim, calls, answer, inserted, usage = (values for _, values in script.ran)
    assert claim == {"b_session_id": "s1", "b_count": 2, "b_now": NOW, "b_billed": 3}
    assert calls == [{"session_id": "s1", "call_id": "c1", "call_seq": 4, "name": "f",
                      "result_seq": None}]
    assert answer == {"b_session_id": "s1", "b_call_id": "c1", "b_seq": 5}
    assert [(row["seq"], row["role"], row["tool_calls"]) for row in inserted] == [
        (4, "assistant", [{"id": "c1", "type": "function",
                           "function": {"name": "f", "arguments": "{}"}}]),
        (5, "tool", None)]
    assert usage == [{"session_id": "s1", "tenant_type": "organization", "tenant_id": "7",
                      "tenant_id_int": True, "purpose": "chat", "model": "m",
                      "prompt_tokens": 1, "completion_tokens": 2, "created_at": NOW}]
    assert [(m.seq, m.role) for m in messages] == [(4, Role.ASSISTANT), (5, Role.TOOL)]
    assert session.tenant == Ref("organization", 7) and session.last_seq == 5


def test_a_plain_batch_on_postgresql_is_one_autocommit_statement() -> None:
    script = Script({sql.PG_APPEND[True]: [[session_row(last_seq=2)]]}, dialect="postgresql")
    batch = [(MessageDraft(Role.USER, "hi"), 1, None),
             (MessageDraft(Role.ASSISTANT, "hello"), 1, BilledUsage("chat", Usage(2, 3)))]
    messages, _ = procedures.append(script, "s1", batch, lambda: NOW)
    assert script.opened == ["autocommit"] and script.statements == [sql.PG_APPEND[True]]
    values = script.ran[0][1]
    assert values["b_count"] == 2 and values["b_billed"] == 5
    assert [row["k"] for row in values["b_rows"]] == [1, 2]
    assert values["b_usages"] == [{"purpose": "chat", "model": None, "prompt_tokens": 2,
                                   "completion_tokens": 3}]
    assert [m.seq for m in messages] == [1, 2]
    script = Script({sql.CLAIM_SEQ: [[session_row(last_seq=5)]], sql.ANSWER_CALL: [[("c1",)]]},
                    dialect="postgresql")
    procedures.append(script, "s1", tool_turn(), lambda: NOW)  # tool plumbing: a transaction
    assert script.opened == ["transaction"] and script.statements[0] is sql.CLAIM_SEQ


@pytest.mark.parametrize(("dialect", "claim"), [("sqlite", sql.CLAIM_SEQ),
                                                 ("postgresql", sql.PG_APPEND[False])])
def test_a_refused_claim_asks_whether_the_session_exists_and_writes_nothing(
        dialect: str, claim: Any) -> None:
    batch = [(MessageDraft(Role.USER, "hi"), 1, None)]
    missing = Script(dialect=dialect)
    with pytest.raises(SessionNotFound, match=r"^no session 's1'$"):
        procedures.append(missing, "s1", batch, lambda: NOW)
    closed = Script({sql.SESSION_EXISTS: [[("s1",)]]}, dialect=dialect)
    with pytest.raises(SessionClosed, match=r"^session 's1' is closed$"):
        procedures.append(closed, "s1", batch, lambda: NOW)
    assert missing.statements == closed.statements == [claim, sql.SESSION_EXISTS]


@pytest.mark.parametrize(("found", "said"), [
    ([], "tool result for 'c1' has no matching earlier tool call in this session"),
    ([[(9, None)]], "tool result for 'c1' has no matching earlier tool call in this session"),
    ([[(2, 3)]], "tool call 'c1' was already answered by message seq 3"),
])
def test_a_refused_answer_reads_the_call_to_say_why(found: list[Any], said: str) -> None:
    script = Script({sql.CLAIM_SEQ: [[session_row(last_seq=5)]], sql.CALL_FOUND: found})
    batch = [(MessageDraft(Role.TOOL, "r", tool_call_id="c1"), 1, None)]
    with pytest.raises(InvalidMessage) as raised:
        procedures.append(script, "s1", batch, lambda: NOW)
    assert str(raised.value) == said
    assert script.statements == [sql.CLAIM_SEQ, sql.ANSWER_CALL, sql.CALL_FOUND]  # no insert


def test_a_tool_message_without_its_call_id_is_refused() -> None:
    script = Script({sql.CLAIM_SEQ: [[session_row(last_seq=1)]]})
    with pytest.raises(InvalidMessage, match="needs the tool_call_id"):
        procedures.append(script, "s1", [(MessageDraft(Role.TOOL, "r"), 1, None)],
                          lambda: NOW)


def test_an_integrity_error_names_a_reused_call_id_else_is_a_store_error() -> None:
    script = Script({sql.CLAIM_SEQ: [[session_row(last_seq=2)]], sql.ANSWER_CALL: [[("c1",)]]},
                    fails=sql.INSERT_TOOL_CALL)
    with pytest.raises(InvalidMessage, match=r"a tool call id in \['c1'\] is already used"):
        procedures.append(script, "s1", tool_turn(), lambda: NOW)
    script = Script({sql.CLAIM_SEQ: [[session_row(last_seq=1)]]}, fails=sql.INSERT_MESSAGE)
    with pytest.raises(StoreError, match=r"^could not append message: duplicate key"):
        procedures.append(script, "s1", [(MessageDraft(Role.USER, "hi"), 1, None)],
                          lambda: NOW)


def test_the_history_read_takes_the_tail_after_the_watermark_on_one_connection() -> None:
    script = Script({sql.SESSION_BY_ID: [[session_row(last_seq=3)]],
                     sql.ALL_LIVE: [[message_row(1, "system"), message_row(2)]]})
    row, below, after = procedures.read_history(script, "s1")
    assert script.opened == ["reading"] and script.statements == [sql.SESSION_BY_ID, sql.ALL_LIVE]
    assert below == [] and [m.seq for m in after] == [1, 2] and row.last_seq == 3
    script = Script({sql.SESSION_BY_ID: [[session_row(last_seq=5, summary_watermark=3)]],
                     sql.UNSUMMARIZED: [[message_row(1, "system"), message_row(4),
                                     message_row(5)]]})
    row, below, after = procedures.read_history(script, "s1")
    assert script.ran[1] == (sql.UNSUMMARIZED, {"b_session_id": "s1", "b_watermark": 3})
    assert [m.seq for m in below] == [1] and [m.seq for m in after] == [4, 5]
    with pytest.raises(SessionNotFound, match=r"^no session 'gone'$"):
        procedures.read_history(Script(), "gone")


def test_the_summary_compare_and_set_is_one_statement_in_a_transaction() -> None:
    script = Script({sql.SET_SUMMARY: [[session_row(summary="s", summary_version=4)]]})
    row = procedures.set_summary(script, "s1", 3, "s", 7)
    assert row is not None and row.summary_version == 4
    assert script.opened == ["transaction"]
    assert script.ran[0] == (sql.SET_SUMMARY, {"b_session_id": "s1", "b_expected": 3,
                                           "b_summary": "s", "b_watermark": 7})
    # ... and the summary kept at its version, in the same transaction (replay).
    assert [(s, [{k: r[k] for k in ("version", "watermark", "summary")} for r in rows])
            for s, rows in script.ran[1:]] == [
        (sql.INSERT_SUMMARY_VERSION, [{"version": 4, "watermark": 7, "summary": "s"}])]
    assert procedures.set_summary(Script(), "s1", 3, "s", 7) is None  # the race was lost
