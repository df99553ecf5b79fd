"""Canaries in every surface, for several people, subjects and tenants, and ways to look
for them: in the rows the API serves, in the SQLite file's bytes (with its WAL and shm),
in a fresh ``pg_dump``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import sqlalchemy as sa

from chatkeep import Chatkeep, MessageDraft, Ref, Role, ToolCall, Usage
from chatkeep.memory.embedders.hashing import HashEmbedder
from chatkeep.store import make_engine

T1, T2 = Ref("org", 1), Ref("org", 2)
ANN, BOB = Ref("user", "ann"), Ref("user", "bob")
CASE = Ref("case", 9)
PEOPLE = [(ANN, None), (ANN, CASE), (BOB, CASE), (BOB, None)]
SURFACES = ("title", "key", "meta", "state", "user", "uname", "msgmeta", "args", "tool",
            "result", "answer", "native", "summary", "vault")


def label(tenant: Ref, actor: Ref, subject: Ref | None) -> str:
    return f"t{tenant.id}{actor.id}{subject.id if subject else 'x'}"


def canary(surface: str, owner: str) -> str:
    """One token (letters and digits), so the text index holds it whole."""
    return f"zq{surface}{owner}qz"


@dataclass
class World:
    """What was planted: session ids and canaries by owner label; memory canaries by
    what they are."""

    sessions: dict[str, str] = field(default_factory=dict)
    canaries: dict[str, list[str]] = field(default_factory=dict)
    memories: dict[str, str] = field(default_factory=dict)
    memory_ids: dict[str, int] = field(default_factory=dict)

    def of(self, tenant: Ref, actor: Ref | None = None, subject: Ref | None = None) -> list[str]:
        """Every session canary of the matching owners."""
        found = []
        for (t, a, s) in [(t, a, s) for t in (T1, T2) for a, s in PEOPLE]:
            if t == tenant and (actor is None or a == actor) and (subject is None or s == subject):
                found += self.canaries[label(t, a, s)]
        return found


def plant(db_url: str) -> World:
    """Sessions in every surface for each of PEOPLE in two tenants, and memories: each
    actor's personal one, one distilled from an ANN session carrying her address, one
    distilled from it with none of her values, a subject memory, a tenant memory."""
    world = World()
    keep = Chatkeep(db_url, embedder=HashEmbedder())
    try:
        for tenant in (T1, T2):
            for actor, subject in PEOPLE:
                owner = label(tenant, actor, subject)
                c = {s: canary(s, owner) for s in SURFACES}
                world.canaries[owner] = list(c.values())
                session = keep.sessions.open(c["key"], tenant, actor, subject, title=c["title"],
                                             metadata={"note": c["meta"],
                                                       "ck.integration": {"s": c["state"]}})
                world.sessions[owner] = session.id
                session.add_user(f"hello {c['user']}", name=c["uname"],
                                 metadata={"m": c["msgmeta"]})
                session.add_assistant(tool_calls=[ToolCall(
                    "call1", c["tool"], json.dumps({"q": c["args"]}))],
                    usage=Usage(prompt_tokens=11, completion_tokens=5))
                session.add_tool_result("call1", f"found {c['result']}")
                session.add_drafts([MessageDraft(Role.ASSISTANT, f"answer {c['answer']}",
                                                 native={"openai_responses": {
                                                     "encrypted_content": c["native"]}})])
                session.add_user("and then?")
                row = session.refresh().row
                assert keep.repository.compare_and_set_summary(
                    session.id, row.summary_version, f"summary {c['summary']}", 2,
                    {"from_seq": 1, "calls": 1, "prompt_tokens": 3, "completion_tokens": 1,
                     "model": "m"}) is not None
                assert keep.repository.compare_and_set_vault(session.id, row.pii_vault_version,
                                                             f"sealed {c['vault']}")
            for actor in (ANN, BOB):
                text = f"prefers tea {canary('personal', label(tenant, actor, None))}"
                memory = keep.memory.add(tenant, text, scope="personal", actor=actor)
                world.memories[f"personal {tenant} {actor}"] = text
                world.memory_ids[f"personal {tenant} {actor}"] = memory.id
            source = world.sessions[label(tenant, ANN, None)]
            for name, text in (
                    ("valued", f"write to ann@example.com {canary('valued', str(tenant.id))}"),
                    ("plain", f"the office opens at nine {canary('plain', str(tenant.id))}")):
                memory = keep.memory.add(tenant, text)
                world.memories[f"{name} {tenant}"] = text
                world.memory_ids[f"{name} {tenant}"] = memory.id
                with keep.engine.begin() as conn:
                    conn.execute(sa.text("UPDATE memories SET source_session_id = :s "
                                         "WHERE id = :i"), {"s": source, "i": memory.id})
            text = f"the case is filed {canary('subject', str(tenant.id))}"
            memory = keep.memory.add(tenant, text, scope="subject", subject=CASE)
            world.memories[f"subject {tenant}"] = text
            world.memory_ids[f"subject {tenant}"] = memory.id
            text = f"the company sells boats {canary('tenant', str(tenant.id))}"
            memory = keep.memory.add(tenant, text)
            world.memories[f"tenant {tenant}"] = text
            world.memory_ids[f"tenant {tenant}"] = memory.id
    finally:
        keep.close()
    return world


def disk_bytes(db_url: str) -> bytes:
    """SQLite: the file with its WAL and shm; PostgreSQL: a fresh ``pg_dump`` of the
    test's schema."""
    if db_url.startswith("sqlite"):
        path = Path(db_url.removeprefix("sqlite:///"))
        return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
                        if p.exists())
    assert shutil.which("pg_dump")
    schema = re.search(r"search_path%3D([A-Za-z0-9_]+)", db_url)
    if schema is not None:
        name = schema.group(1)
        dsn = re.sub(r"[?&]options=[^&]*", "",
                     unquote(db_url).replace("postgresql+psycopg", "postgresql"))
    else:  # through PgBouncer: its database ck_pgb_N is the schema of that name
        from support.postgres import PG_URL

        found = re.search(r"/(ck_pgb_[0-9]+)", db_url)
        assert found is not None, db_url
        name, dsn = found.group(1), PG_URL
    dsn = dsn.replace("?prepared_statements=false", "").replace("&prepared_statements=false", "")
    done = subprocess.run(["pg_dump", "--data-only", "-n", name, dsn],
                          capture_output=True, check=True, timeout=120)
    return done.stdout


def on_disk(db_url: str, canaries: list[str]) -> list[str]:
    """Which of ``canaries`` the disk (or the dump) holds."""
    data = disk_bytes(db_url)
    return [c for c in canaries if c.encode() in data]


def usage_totals(db_url: str) -> tuple[int, int, int]:
    """Rows, prompt and completion tokens of the whole ledger."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT count(*), coalesce(sum(prompt_tokens), 0), "
                                       "coalesce(sum(completion_tokens), 0) FROM chat_usage"
                                       )).one()
        return int(row[0]), int(row[1]), int(row[2])
    finally:
        engine.dispose()
