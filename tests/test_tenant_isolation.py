"""Tenant isolation at the query level, on SQLite and PostgreSQL.

Three tenants share the database: ``organization:1`` (A), ``organization:2`` (B) and
``team:1`` (C, the same id as A under another type). Every public read path is
tried with the wrong tenant, and every statement a tenant-scoped call issues is
checked to carry the tenant in its WHERE clause.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref, SessionNotFound
from chatkeep.cli import app
from chatkeep.messages import Usage
from chatkeep.sessions import ChatSession
from chatkeep.testing import FakeOpenAIServer, Reply

A = Ref("organization", 1)
B = Ref("organization", 2)
C = Ref("team", 1)  # same id as A, other type: must be a different tenant
ALICE = Ref("user", 10)
MATTER = Ref("matter", "M-1")
SECRET = {A: "alpha", B: "bravo", C: "charlie"}  # a word only that tenant's data contains
runner = CliRunner()
CLI_ENV = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "CHATKEEP_DATABASE_URL": ""}


class FactPlayer:
    """Plays the distiller's model: extraction returns the queued facts, decisions ADD."""

    def __init__(self) -> None:
        self.facts: list[dict[str, str]] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        from chatkeep.memory.prompts import DECIDE_SYSTEM

        if body["messages"][0]["content"] == DECIDE_SYSTEM:
            new = json.loads(body["messages"][1]["content"])["new_facts"]
            return Reply.json({"decisions": [{"fact": f["fact"], "event": "ADD"} for f in new]})
        facts, self.facts = self.facts, []
        return Reply.json({"facts": facts}, prompt_tokens=100, completion_tokens=20)


@dataclass
class World:
    keep: Chatkeep
    url: str
    sessions: dict[Ref, ChatSession]


@pytest.fixture
def world(make_keep: Callable[..., Chatkeep], db_url: str) -> Iterator[World]:
    player = FactPlayer()
    with FakeOpenAIServer(responder=player) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0,
                               timeout=5.0)
        keep = make_keep(model=client)
        sessions = {}
        for tenant, word in SECRET.items():
            # The same actor and subject references in every tenant: they must not bridge.
            s = keep.sessions.create(tenant=tenant, actor=ALICE, subject=MATTER,
                                     title=f"{word} title", anonymize_pii=False)
            s.add_user(f"The {word} contract renews in March.")
            s.add_assistant(f"Noted, {word}.", usage=Usage(10 * len(word), 1), model="m")
            player.facts = [{"scope": "tenant", "content": f"The {word} contract renews"},
                            {"scope": "subject", "content": f"Matter {word} is confidential"},
                            {"scope": "personal", "content": f"Alice prefers {word} memos"}]
            keep.memory.distil(s.id)
            sessions[tenant] = s
        yield World(keep, db_url, sessions)


def mentions_other_tenant(text: str, tenant: Ref) -> bool:
    return any(word in text for ref, word in SECRET.items() if ref != tenant)


@contextmanager
def statements(keep: Chatkeep) -> Iterator[list[str]]:
    """Every SQL statement issued inside the block."""
    from sqlalchemy import event

    seen: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(keep.engine, "before_cursor_execute", capture)
    try:
        yield seen
    finally:
        event.remove(keep.engine, "before_cursor_execute", capture)


TENANT_TABLES = ("chat_sessions", "chat_usage", "memories")


def assert_tenant_filtered(seen: list[str]) -> None:
    """Each statement that reads or deletes a tenant-owned table filters on both tenant
    columns of that table (a lookup by primary key alone would not be enough)."""
    checked = 0
    for sql in seen:
        flat = " ".join(sql.split())
        verb = flat.split(" ", 1)[0].upper()
        if verb not in ("SELECT", "DELETE", "UPDATE"):
            continue
        for table in TENANT_TABLES:
            if not re.search(rf"\b(FROM|JOIN|UPDATE) {table}\b", flat):
                continue
            where = flat.split(" WHERE ", 1)[1] if " WHERE " in flat else ""
            assert f"{table}.tenant_type =" in where and f"{table}.tenant_id =" in where, (
                f"{table} queried without its tenant:\n{sql}")
            checked += 1
    assert checked, f"no tenant-owned table was queried: {seen}"


# -- sessions ------------------------------------------------------------------------


@pytest.mark.parametrize("wrong", [B, C, Ref("organization", "1x"), Ref("organizations", 1)],
                         ids=["other-id", "other-type", "longer-id", "longer-type"])
def test_get_with_a_wrong_tenant_is_not_found(world: World, wrong: Ref) -> None:
    keep = world.keep
    mine = world.sessions[A]
    with statements(keep) as seen, pytest.raises(SessionNotFound):
        keep.sessions.get(mine.id, tenant=wrong)
    assert_tenant_filtered(seen)
    with statements(keep) as seen:
        assert keep.sessions.get(mine.id, tenant=A).id == mine.id
    assert_tenant_filtered(seen)


def test_list_returns_only_the_tenants_sessions(world: World) -> None:
    keep = world.keep
    for tenant in SECRET:
        with statements(keep) as seen:
            listed = keep.sessions.list(tenant)
            by_actor = keep.sessions.list(tenant, actor=ALICE)
            by_subject = keep.sessions.list(tenant, subject=MATTER)
        assert_tenant_filtered(seen)
        for result in (listed, by_actor, by_subject):
            assert [s.id for s in result] == [world.sessions[tenant].id]
            assert all(s.tenant == tenant for s in result)
    assert keep.sessions.list(Ref("organization", 3)) == []


def test_usage_of_a_tenant_counts_only_its_own(world: World) -> None:
    keep = world.keep
    for tenant, word in SECRET.items():
        with statements(keep) as seen:
            lines = keep.usage(tenant)
        assert_tenant_filtered(seen)
        assert {line.tenant for line in lines} == {tenant}
        chat = [line for line in lines if line.purpose == "chat"]
        assert [(c.prompt_tokens, c.completion_tokens) for c in chat] == [(10 * len(word), 1)]
    everyone = keep.usage()
    assert {line.tenant for line in everyone} == set(SECRET)


# -- the command line ----------------------------------------------------------------


def test_cli_with_a_wrong_tenant_shows_nothing(world: World,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from chatkeep.cli.common import console

    monkeypatch.setattr(console, "width", 300)  # whole ids on one line in tables
    mine = world.sessions[A]
    db = ["--db", world.url]
    for wrong in ("organization:2", "team:1"):
        shown = runner.invoke(app, ["sessions", "show", mine.id, "--tenant", wrong, *db],
                              env=CLI_ENV)
        assert shown.exit_code == 1, shown.output
        assert "SessionNotFound" in shown.output and "alpha" not in shown.output
        history = runner.invoke(app, ["history", mine.id, "--tenant", wrong, *db],
                                env=CLI_ENV)
        assert history.exit_code == 1 and "alpha" not in history.output
    shown = runner.invoke(app, ["sessions", "show", mine.id, "--tenant", "organization:1",
                                *db], env=CLI_ENV)
    assert shown.exit_code == 0 and "alpha contract" in shown.output
    listed = runner.invoke(app, ["sessions", "list", "--tenant", "team:1", "--wide", *db],
                           env=CLI_ENV)
    assert listed.exit_code == 0
    assert world.sessions[C].id in listed.output and mine.id not in listed.output
    usage = runner.invoke(app, ["usage", "--tenant", "team:1", *db], env=CLI_ENV)
    assert usage.exit_code == 0
    assert "organization" not in usage.output and "team:1" in usage.output


# -- memory --------------------------------------------------------------------------


def test_memory_recall_reads_only_the_sessions_tenant(world: World) -> None:
    keep = world.keep
    for tenant, session in world.sessions.items():
        for query in (None, "contract renews confidential memos alpha bravo charlie"):
            with statements(keep) as seen:
                recalled = keep.memory.recall(session, query)
            assert_tenant_filtered(seen)
            assert len(recalled) == 3  # tenant + subject + personal, all its own
            assert all(m.tenant == tenant for m in recalled)
            assert not any(mentions_other_tenant(m.content, tenant) for m in recalled)
        provided = [m.content for m in keep.memory.provider(session)]
        assert provided and not any(mentions_other_tenant(t, tenant) for t in provided)


def test_memory_list_and_forget_stay_in_the_tenant(world: World) -> None:
    keep = world.keep
    for tenant in SECRET:
        with statements(keep) as seen:
            listed = keep.memory.list(tenant)
            personal = keep.memory.list(tenant, actor=ALICE)
            subject = keep.memory.list(tenant, subject=MATTER)
        assert_tenant_filtered(seen)
        assert len(listed) == 3 and {m.tenant for m in listed} == {tenant}
        assert len(personal) == 1 and len(subject) == 1
    assert keep.memory.list(Ref("organization", 3)) == []

    # Forgetting Alice in B and then all of C leaves A's memories untouched.
    with statements(keep) as seen:
        assert keep.memory.forget(B, ALICE) == 1
        assert keep.memory.forget(C, whole_tenant=True) == 3
    assert_tenant_filtered(seen)
    assert len(keep.memory.list(A)) == 3
    assert [m.content for m in keep.memory.list(B)] and all(
        "Alice" not in m.content for m in keep.memory.list(B))
    assert keep.memory.list(C) == []
    assert len(keep.memory.recall(world.sessions[A])) == 3
