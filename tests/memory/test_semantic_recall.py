"""Recall by meaning: vectors beside each memory, hybrid ranking, scopes before ranking.

Every test embeds through the real ``openai`` SDK against ``FakeOpenAIServer``'s
``/v1/embeddings``, whose vectors come from a deterministic ``HashEmbedder`` (words, plus
a synonym table so chosen paraphrases land near each other).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memory_helpers import ALICE, BOB, MATTER, ORG, OTHER_ORG, Player, remember
from sqlalchemy import create_engine, event, inspect, text

from chatkeep import Chatkeep, Ref
from chatkeep.config import LLMConfig, MemoryConfig
from chatkeep.errors import ConfigError, StoreError
from chatkeep.memory.embedders import HashEmbedder, OpenAIEmbedder, embedder_from_config
from chatkeep.memory.hybrid import Fusion, HybridRetriever, fuse
from chatkeep.memory.recall import TextRetriever
from chatkeep.memory.scopes import readable_targets
from chatkeep.store import make_engine, migrate
from chatkeep.store.memory_index import (
    GENERATION_TABLE,
    VECTOR_TABLE,
    drop_memory_generations,
)
from chatkeep.store.memory_rows import MemoryRow, MemoryWrite
from chatkeep.testing import FakeOpenAIServer

# Sync axis only: the embedders passed here are sync, and tests read the store below the
# API (engine, raw SQL). The async embedder is tested in tests/aio.
pytestmark = pytest.mark.sync_api

SYNONYMS = {"drink": "beverage", "espresso": "beverage",
            "coffee": "beverage", "tea": "beverage", "likes": "prefers", "like": "prefers",
            "best": "prefers", "strong": "beverage", "weekends": "weekend",
            "saturday": "weekend", "sunday": "weekend", "call": "contact",
            "contacted": "contact", "phone": "contact"}


@pytest.fixture
def embed_server(llm_server: FakeOpenAIServer) -> FakeOpenAIServer:
    llm_server.embedder = HashEmbedder(64, model="fake-embed", synonyms=SYNONYMS)
    return llm_server


@pytest.fixture
def embedder(embed_server: FakeOpenAIServer) -> OpenAIEmbedder:
    client = openai.OpenAI(base_url=embed_server.base_url, api_key="test-key", max_retries=0,
                           timeout=5.0)
    return OpenAIEmbedder("fake-embed", client, batch_size=4)


@pytest.fixture
def skeep(make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI, player: Player,
          embedder: OpenAIEmbedder, requires_pgvector: None) -> Chatkeep:
    """A ``Chatkeep`` with the fake chat model and the embedder on the fake wire (skipped
    on a PostgreSQL without pgvector)."""
    return make_keep(model=openai_client, embedder=embedder)


def _vectors(keep: Chatkeep) -> dict[int, tuple[str, int]]:
    with keep.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT memory_id, model, dim FROM {VECTOR_TABLE}")).all()
    return {int(r[0]): (r[1], int(r[2])) for r in rows}


def test_memories_are_written_with_their_vector_in_one_batched_call(
        skeep: Chatkeep, player: Player, embed_server: FakeOpenAIServer) -> None:
    s = skeep.sessions.create(ORG, ALICE, MATTER)
    remember(skeep, player, s, ("personal", "Prefers espresso over tea."),
             ("tenant", "Invoices are approved by two directors."),
             ("subject", "The hearing is on 3 June."))
    stored = {m.id: m for m in skeep.memory.list(ORG)}
    assert _vectors(skeep) == {i: ("fake-embed", 64) for i in stored}
    # The three facts were embedded together, before the write (one request).
    assert [len(r["input"]) for r in embed_server.embedding_requests] == [3]
    assert embed_server.embedding_requests[0]["encoding_format"] == "float"
    assert skeep.memory.recall_mode == "hybrid"
    assert skeep.memory.vector_status() is not None
    assert skeep.memory.vector_status(ORG).missing == 0  # type: ignore[union-attr]


def test_meaning_wins_when_words_do_not_match_and_words_win_when_they_do(
        skeep: Chatkeep, player: Player, make_keep: Callable[..., Chatkeep]) -> None:
    s = skeep.sessions.create(ORG, ALICE)
    remember(skeep, player, s, ("personal", "Prefers espresso over tea."),
             ("personal", "Does not want to be contacted at weekends."),
             ("tenant", "Invoice INV-4471 is for 3,200 EUR."),
             ("tenant", "Invoice INV-4470 is for 1,150 EUR."),
             ("tenant", "The drinks reception for the Lisbon office is on Friday."))
    words_only = make_keep()  # same database, no embedder: full-text only
    assert words_only.memory.recall_mode == "full-text only"
    plain = words_only.sessions.get_unscoped(s.id)
    assert [m.content for m in words_only.memory.recall(plain, query="can I phone him on "
                                                         "Saturday?")] == []
    hybrid = [m.content for m in skeep.memory.recall(s, query="can I phone him on Saturday?")]
    assert hybrid[0] == "Does not want to be contacted at weekends."
    drink = [m.content for m in skeep.memory.recall(s, query="What does she like to drink?")]
    assert drink[0] == "Prefers espresso over tea."
    # Exact words (an id) still come first, and the near-identical id does not.
    exact = [m.content for m in skeep.memory.recall(s, query="amount of invoice INV-4470")]
    assert exact[0] == "Invoice INV-4470 is for 1,150 EUR."


def test_fuse_rewards_memories_found_by_both_lists() -> None:
    def row(i: int) -> MemoryRow:
        return MemoryRow(id=i, tenant=ORG, scope="tenant", subject=None, actor=None,
                         content=str(i), source_session_id=None, source_through_seq=0,
                         created_at=None, updated_at=None)  # type: ignore[arg-type]
    text_hits, vector_hits = [row(1), row(2), row(3)], [row(4), row(2), row(5)]
    fused = fuse(text_hits, vector_hits, 4, Fusion(k=5, text_weight=1.0))
    assert [m.id for m in fused] == [2, 4, 1, 5]  # equal scores: the better vector rank
    assert fused[0].score == pytest.approx(2 / 7)
    assert [m.id for m in fuse(text_hits, vector_hits, 2, Fusion(k=5, text_weight=0))] == [
        4, 2]


def test_a_failed_embedding_call_writes_the_memory_marked_and_embed_fills_it_in(
        skeep: Chatkeep, player: Player, embed_server: FakeOpenAIServer) -> None:
    s = skeep.sessions.create(ORG, ALICE)
    embed_server.fail_embeddings(10, status=503)
    remember(skeep, player, s, ("personal", "Prefers espresso over tea."),
             ("tenant", "Quotes are always in EUR."))
    assert sorted(m.content for m in skeep.memory.list(ORG)) == [
        "Prefers espresso over tea.", "Quotes are always in EUR."]  # written, never lost
    assert _vectors(skeep) == {}
    status = skeep.memory.vector_status(ORG)
    assert status is not None and (status.embedded, status.missing) == (0, 2)
    # Recall still works, by words only, while the endpoint is down.
    assert [m.content for m in skeep.memory.recall(s, query="quotes currency")] == [
        "Quotes are always in EUR."]
    embed_server._embedding_failures.clear()
    result = skeep.memory.embed_missing()
    assert (result.embedded, result.failed, result.batches) == (2, 0, 1)
    assert len(_vectors(skeep)) == 2
    assert skeep.memory.embed_missing().embedded == 0  # nothing left: resumable, idempotent


@pytest.mark.usefixtures("requires_pgvector")
def test_a_model_change_re_embeds_everything_and_recall_reads_only_the_current_model(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI, player: Player,
        embed_server: FakeOpenAIServer) -> None:
    client = openai.OpenAI(base_url=embed_server.base_url, api_key="k", max_retries=0)
    old = make_keep(model=openai_client, embedder=OpenAIEmbedder("old-model", client))
    s = old.sessions.create(ORG, ALICE)
    remember(old, player, s, ("personal", "Prefers espresso over tea."),
             ("tenant", "Close the office at six."), ("tenant", "Parking is in P2."))
    new = make_keep(model=openai_client, embedder=OpenAIEmbedder("new-model", client,
                                                                 batch_size=2))
    status = new.memory.vector_status()
    assert status is not None and (status.embedded, status.missing) == (0, 3)
    session = new.sessions.get_unscoped(s.id)
    # Before re-embedding, the new model finds no vectors: recall is by words only.
    assert [m.content for m in new.memory.recall(session, query="what to drink")] == []
    first = new.memory.embed_missing(limit=2)  # interrupted after one batch
    assert (first.embedded, first.batches) == (2, 1)
    rest = new.memory.embed_missing()
    assert (rest.embedded, rest.batches) == (1, 1)
    assert {v[0] for v in _vectors(new).values()} == {"new-model"}
    assert new.memory.recall(session, query="what to drink")[0].content == \
        "Prefers espresso over tea."


def test_dedupe_by_meaning_offers_the_paraphrase_to_the_decision(
        skeep: Chatkeep, player: Player, make_keep: Callable[..., Chatkeep],
        openai_client: openai.OpenAI) -> None:
    s = skeep.sessions.create(ORG, ALICE)
    remember(skeep, player, s, ("personal", "Prefers espresso."))
    player.decide = lambda facts: [{"fact": f["fact"], "event": "NONE", "target": "m1"}
                                   for f in facts]
    remember(skeep, player, s, ("personal", "Likes strong coffee best."))
    assert player.decisions and player.decisions[-1][0]["memories"][0]["text"] == \
        "Prefers espresso."
    assert [m.content for m in skeep.memory.list(ORG)] == ["Prefers espresso."]
    # By words alone the paraphrase shares nothing: no candidate, no decision, a duplicate.
    plain = make_keep(model=openai_client)
    calls = len(player.decisions)
    remember(plain, player, plain.sessions.get_unscoped(s.id),
             ("personal", "Enjoys a strong coffee most of all."))
    assert len(player.decisions) == calls
    assert len(plain.memory.list(ORG)) == 2


def test_nearest_neighbours_of_another_tenant_never_crowd_out_or_leak(
        skeep: Chatkeep, player: Player) -> None:
    mine = skeep.sessions.create(OTHER_ORG, BOB)
    remember(skeep, player, mine, ("tenant", "Weekly status goes to the board."),
             ("tenant", "The office closes at six."))
    theirs = skeep.sessions.create(ORG, ALICE)
    # 60 memories elsewhere, every one nearer to the query than anything of ours.
    for n in range(0, 60, 20):
        remember(skeep, player, theirs, *[("tenant", f"Prefers espresso over tea, note {n + i}.")
                                          for i in range(20)])
    found = skeep.memory.recall(mine, query="Prefers espresso over tea", limit=5)
    assert {m.tenant for m in found} == {OTHER_ORG}
    assert len(found) == 2  # the scope's own memories are still found (no post-filtering)
    keys = [t.key for t in readable_targets(OTHER_ORG, BOB, None)]
    near = skeep.memory.store.recall.vector_search(
        OTHER_ORG, keys, HashEmbedder(64, synonyms=SYNONYMS).vector("Prefers espresso over tea"),
        "fake-embed", 3)
    assert [m.tenant for m in near] == [OTHER_ORG, OTHER_ORG]


def test_postgres_hnsw_iterative_scan_still_filters_before_ranking(
        skeep: Chatkeep, player: Player) -> None:
    if skeep.engine.dialect.name != "postgresql":
        pytest.skip("the HNSW index is PostgreSQL's")
    theirs = skeep.sessions.create(ORG, ALICE)
    for n in range(0, 200, 50):
        remember(skeep, player, theirs, *[("tenant", f"Prefers espresso over tea, note {n + i}.")
                                          for i in range(50)])
    mine = skeep.sessions.create(OTHER_ORG, BOB)
    remember(skeep, player, mine, ("tenant", "The office closes at six."))
    store = skeep.memory.store
    vector = HashEmbedder(64, synonyms=SYNONYMS).vector("Prefers espresso over tea")
    with skeep.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    seen: list[str] = []

    def force_index(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if "OPERATOR(" in statement:
            cursor.execute("SET LOCAL enable_sort = off")  # the ordered index scan, please
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + statement, parameters)
            seen.append("\n".join(r[0] for r in cursor.fetchall()))

    from sqlalchemy import event

    event.listen(skeep.engine, "before_cursor_execute", force_index)
    try:
        found = store.recall.vector_search(OTHER_ORG, ["tenant"], vector, "fake-embed", 5)
    finally:
        event.remove(skeep.engine, "before_cursor_execute", force_index)
    assert seen and "ix_memory_vectors_hnsw_64" in seen[0]
    assert [m.content for m in found] == ["The office closes at six."]


def test_missing_pgvector_is_a_clear_error_naming_the_extension(
        db_url: str, embedder: OpenAIEmbedder, pgvector: str | None) -> None:
    """On a server with pgvector its absence is played (the table cannot be made); on one
    without, it is real: the error is the same either way."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite needs no extension")
    keep = Chatkeep(db_url).start()
    with keep.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {VECTOR_TABLE}")
    keep.close()
    from chatkeep.store import memory_vectors as store_module

    original = store_module.create_memory_vector_table
    if pgvector is None:
        store_module.create_memory_vector_table = lambda *a, **k: False  # type: ignore[assignment]
    try:
        with pytest.raises(StoreError, match=r'extension "vector" \(pgvector\)'):
            Chatkeep(db_url, embedder=embedder).start()
    finally:
        store_module.create_memory_vector_table = original
    Chatkeep(db_url).close()  # without an embedding model the database works as before
    if pgvector is not None:
        return  # the extension cannot be had here: the rest needs it
    again = Chatkeep(db_url, embedder=embedder)  # and the table comes back when it can
    assert again.memory.store.vectors.vectors_available()
    again.close()


def test_embedder_from_config_shares_or_separates_the_endpoint() -> None:
    assert embedder_from_config(MemoryConfig(), LLMConfig(), {}) is None
    shared = embedder_from_config(MemoryConfig(embedding_model="e"),
                                  LLMConfig(base_url="http://127.0.0.1:9/v1"), {})
    assert shared is not None and str(shared.client.base_url) == "http://127.0.0.1:9/v1/"
    own = embedder_from_config(
        MemoryConfig(embedding_model="e", embedding_base_url="http://127.0.0.1:8/v1",
                     embedding_api_key="k2", embedding_batch_size=7),
        LLMConfig(base_url="http://127.0.0.1:9/v1", api_key="k1"), {})
    assert own is not None and str(own.client.base_url) == "http://127.0.0.1:8/v1/"
    assert own.client.api_key == "k2" and own.batch_size == 7
    with pytest.raises(ConfigError, match="no endpoint"):
        embedder_from_config(MemoryConfig(embedding_model="e"), LLMConfig(), {})


def test_text_retriever_stays_the_default(keep: Chatkeep) -> None:
    assert isinstance(keep.memory.retriever, TextRetriever)
    assert keep.memory.vector_status() is None


# -- property: 0 cross-scope results over random tenants, actors and subjects ---------------

TENANTS = [Ref("organization", n) for n in (1, 2, 3)]
ACTORS = [None, Ref("user", 10), Ref("user", 11), Ref("user", "ana")]
SUBJECTS = [None, Ref("matter", "M-1"), Ref("matter", "M-2")]
WORDS = ["espresso", "invoice", "weekend", "lease", "hearing", "budget", "tea", "contract"]


@pytest.mark.usefixtures("requires_pgvector")
def test_property_no_cross_scope_result(make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(embedder=HashEmbedder(16, model="h", synonyms=SYNONYMS))
    store = keep.memory.store
    placed: list[tuple[Ref, Ref | None, Ref | None, str]] = []
    session = keep.sessions.create(TENANTS[0])

    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.sampled_from(TENANTS), st.sampled_from(ACTORS),
                              st.sampled_from(SUBJECTS), st.sampled_from(["tenant", "subject",
                                                                          "personal"]),
                              st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
                    max_size=6),
           st.sampled_from(TENANTS), st.sampled_from(ACTORS), st.sampled_from(SUBJECTS),
           st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    def check(new: list[tuple[Ref, Ref | None, Ref | None, str, list[str]]], tenant: Ref,
              actor: Ref | None, subject: Ref | None, query: list[str]) -> None:
        writes = []
        for t, a, s, scope, words in new:
            target = {x.scope.value: x for x in readable_targets(t, a, s)}.get(scope)
            if target is None:
                continue
            content = f"{' '.join(words)} {len(placed)}"
            placed.append((t, target.actor, target.subject, content))
            writes.append(MemoryWrite(
                tenant=t, scope=scope, scope_key=target.key, subject=target.subject,
                actor=target.actor, content=content, content_key=content,
                embedding=tuple(HashEmbedder(16, synonyms=SYNONYMS).vector(content)),
                embedding_model="h"))
        if writes:
            session.add_user("x")
            row = session.refresh().row
            assert store.writes.commit_distillation(session.id, row.distil_version,
                                             session.message_count, writes) is not None
        found = keep.memory.recaller.recall(tenant, actor, subject, " ".join(query), 50)
        allowed = {t.key for t in readable_targets(tenant, actor, subject)}
        for m in found:
            assert m.tenant == tenant
            if m.scope == "subject":
                assert m.subject == subject and "subject" in {k.split(":")[0]
                                                              for k in allowed}
            if m.scope == "personal":
                assert actor is not None and m.actor == actor
        # And every memory of the scope sharing a query word is found (no post-filtering).
        expected = {c for t, a, s, c in placed if t == tenant
                    and (a is None or a == actor) and (s is None or s == subject)
                    and (a is None or s is None) and set(query) & set(c.split())}
        assert expected <= {m.content for m in found} or len(found) == 50

    check()
    assert isinstance(keep.memory.retriever, HybridRetriever)


def test_a_cached_scope_sees_every_write_and_erasure(skeep: Chatkeep, player: Player,
                                                     embedder: OpenAIEmbedder, db_url: str,
                                                     make_keep: Callable[..., Chatkeep],
                                                     openai_client: openai.OpenAI) -> None:
    """SQLite keeps a scope's decoded vectors between recalls, checked against the tenant's
    generation stamp; any memory written, superseded, re-embedded or erased since, through
    this engine or any other connection, must show at once (PostgreSQL runs the same
    checks)."""
    session = skeep.sessions.create(ORG, ALICE)
    remember(skeep, player, session, ("tenant", "Prefers espresso over tea."))
    query = embedder.embed(["espresso"])[0]
    keys = [t.key for t in readable_targets(ORG, ALICE, None)]
    store = skeep.memory.store
    read_vectors: list[str] = []

    def count_vector_reads(conn, cursor, statement, *_):  # type: ignore[no-untyped-def]
        if "embedding" in statement and statement.lstrip().upper().startswith("SELECT"):
            read_vectors.append(statement)

    event.listen(skeep.engine, "before_cursor_execute", count_vector_reads)

    def nearest() -> set[str]:  # the scope holds fewer than 10: all of its live vectors
        return {m.content for m in store.recall.vector_search(ORG, keys, query, "fake-embed", 10)}

    def live_id(content: str) -> int:
        return next(m.id for m in skeep.memory.list(ORG) if m.content == content)

    assert nearest() == {"Prefers espresso over tea."}
    loads = len(read_vectors)
    assert nearest() == {"Prefers espresso over tea."}
    if skeep.engine.dialect.name == "sqlite":
        assert len(read_vectors) == loads  # served from the cache: no vector was read
    remember(skeep, player, session, ("tenant", "Orders a double espresso every morning."))
    assert nearest() == {"Prefers espresso over tea.", "Orders a double espresso every morning."}
    # Superseded by a memory with no vector yet: out of vector recall at once.
    session.add_user("x")
    row = session.refresh().row
    target = {t.scope.value: t for t in readable_targets(ORG, ALICE, None)}["tenant"]
    assert store.writes.commit_distillation(session.id, row.distil_version, session.message_count, [
        MemoryWrite(tenant=ORG, scope="tenant", scope_key=target.key, subject=None,
                    actor=None, content="Drinks only tea now.", content_key="tea-now",
                    supersedes=live_id("Prefers espresso over tea."))]) is not None
    assert nearest() == {"Orders a double espresso every morning."}
    # Re-embedded by another model (a model change), then back by this one.
    double = live_id("Orders a double espresso every morning.")
    assert store.vectors.store_vectors("other-model", [(double, query)]) == 1
    assert nearest() == set()
    assert skeep.memory.embed_missing().embedded == 2  # "double" and "tea now"
    assert nearest() == {"Orders a double espresso every morning.", "Drinks only tea now."}
    # Writes through another engine and another process's kind of connection: a second
    # Chatkeep on the same database, and plain SQL with none of chatkeep's settings.
    other = make_keep(model=openai_client, embedder=embedder)
    remember(other, player, other.sessions.get_unscoped(session.id),
             ("personal", "Takes an espresso before every hearing."))
    assert nearest() == {"Orders a double espresso every morning.",
                         "Takes an espresso before every hearing.", "Drinks only tea now."}
    plain = create_engine(db_url)
    try:
        with plain.begin() as conn:
            conn.execute(text(f"DELETE FROM {VECTOR_TABLE} WHERE memory_id = :id"),
                         {"id": double})
        assert "Orders a double espresso every morning." not in nearest()
        hearing = live_id("Takes an espresso before every hearing.")
        with plain.begin() as conn:
            conn.execute(text("DELETE FROM memories WHERE id = :id"), {"id": hearing})
        assert nearest() == {"Drinks only tea now."}
        with plain.begin() as conn:
            conn.execute(text("UPDATE memories SET superseded_by = id WHERE content = :c"),
                         {"c": "Drinks only tea now."})
        assert nearest() == set()
        with plain.begin() as conn:
            conn.execute(text("UPDATE memories SET superseded_by = NULL WHERE content = :c"),
                         {"c": "Drinks only tea now."})
        assert nearest() == {"Drinks only tea now."}
    finally:
        plain.dispose()
    skeep.memory.forget(ORG, whole_tenant=True)
    assert nearest() == set()
    event.remove(skeep.engine, "before_cursor_execute", count_vector_reads)


def _stamp(conn: sqlite3.Connection, tenant: Ref = ORG) -> int | None:
    row = conn.execute(f"SELECT generation FROM {GENERATION_TABLE} WHERE tenant_type = ? "
                       "AND tenant_id = ?", (tenant.type, tenant.id_text)).fetchone()
    return None if row is None else int(row[0])


def test_every_write_that_can_change_a_tenants_vectors_renews_its_stamp(
        tmp_path: Path) -> None:
    """The SQLite triggers themselves, driven by raw SQL on a plain connection (what any
    other process could do): each kind of write gives the tenant a new stamp, and only
    that tenant."""
    keep = Chatkeep(f"sqlite:///{tmp_path / 'g.db'}").start()
    keep.close()
    conn = sqlite3.connect(tmp_path / "g.db", isolation_level=None)
    columns = ("tenant_type, tenant_id, tenant_id_int, scope, scope_key, content, content_key, "
               "source_through_seq, created_at, updated_at")

    def insert(tenant: Ref, content: str) -> int:
        cursor = conn.execute(
            f"INSERT INTO memories ({columns}) VALUES (?, ?, 1, 'tenant', 'tenant', ?, ?, 0, "
            "'2026-01-01 00:00:00', '2026-01-01 00:00:00')",
            (tenant.type, tenant.id_text, content, content))
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    insert(OTHER_ORG, "theirs")
    seen: list[int | None] = []

    def renews(statement: str, *args: object) -> None:
        before, theirs = _stamp(conn), _stamp(conn, OTHER_ORG)
        conn.execute(statement, args)
        after = _stamp(conn)
        assert after is not None and after != before and after not in seen, statement
        assert _stamp(conn, OTHER_ORG) == theirs, statement
        seen.append(after)

    first = insert(ORG, "one")
    seen.append(_stamp(conn))
    renews(f"INSERT INTO memories ({columns}) VALUES ('organization', '1', 1, 'tenant', "
           "'tenant', 'two', 'two', 0, '2026-01-01', '2026-01-01')")
    (second,) = conn.execute("SELECT id FROM memories WHERE content = 'two'").fetchone()
    blob = b"\0\0\x80\x3f"
    renews(f"INSERT INTO {VECTOR_TABLE} VALUES (?, 'm', 1, ?)", first, blob)
    renews(f"INSERT INTO {VECTOR_TABLE} VALUES (?, 'm', 1, ?)", second, blob)
    renews(f"UPDATE {VECTOR_TABLE} SET model = 'n' WHERE memory_id = ?", first)  # re-embed
    renews(f"INSERT INTO {VECTOR_TABLE} VALUES (?, 'm', 1, ?) ON CONFLICT (memory_id) DO "
           "UPDATE SET model = excluded.model", first, blob)  # store_vectors' upsert
    renews("UPDATE memories SET superseded_by = ? WHERE id = ?", second, first)  # supersede
    renews("UPDATE memories SET superseded_by = NULL WHERE id = ?", first)
    renews("UPDATE memories SET scope_key = 'personal:user:10' WHERE id = ?", first)
    renews(f"DELETE FROM {VECTOR_TABLE} WHERE memory_id = ?", first)
    renews("DELETE FROM memories WHERE id = ?", second)  # its vector goes with it
    assert conn.execute(f"SELECT count(*) FROM {VECTOR_TABLE}").fetchone() == (0,)
    renews("DELETE FROM memories WHERE tenant_type = 'organization' AND tenant_id = '1'")
    # A memory moved to another tenant renews both.
    moved = insert(ORG, "moving")
    ours, theirs = _stamp(conn), _stamp(conn, OTHER_ORG)
    conn.execute("UPDATE memories SET tenant_id = '2' WHERE id = ?", (moved,))
    assert _stamp(conn) != ours and _stamp(conn, OTHER_ORG) != theirs
    conn.close()


FOLD_COLUMNS = ("fold_lease_until DATETIME", "fold_failures INTEGER NOT NULL DEFAULT 0",
                "fold_retry_at DATETIME")


def test_stamps_come_with_migration_0007_and_without_them_search_is_not_cached(
        tmp_path: Path, embedder: OpenAIEmbedder) -> None:
    """A database made before 0007 gets a stamp for every tenant that has memories when it
    upgrades; run against a database still at 0006 (``create_schema=False``), vector
    search reads the scope every time and stays exact."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine, "0006_memory_vectors")
    with engine.begin() as conn:  # 0006 as it shipped: no stamps, a covering index
        drop_memory_generations(None, conn)
        conn.exec_driver_sql(f"CREATE INDEX {VECTOR_TABLE}_model ON {VECTOR_TABLE} "
                             "(memory_id, model, dim)")
        # Sessions need 0008's and 0009's columns (this test looks at 0007's stamps).
        conn.exec_driver_sql("ALTER TABLE chat_sessions ADD COLUMN pii_protected BOOLEAN "
                             "NOT NULL DEFAULT 0")
        conn.exec_driver_sql("ALTER TABLE chat_sessions ADD COLUMN key VARCHAR(255)")
        for column in FOLD_COLUMNS:  # 0010's
            conn.exec_driver_sql(f"ALTER TABLE chat_sessions ADD COLUMN {column}")
        for column in ("expires_at DATETIME", "ttl_seconds INTEGER",  # 0014's
                       "last_recalled_at DATETIME"):
            conn.exec_driver_sql(f"ALTER TABLE memories ADD COLUMN {column}")
    assert GENERATION_TABLE not in inspect(engine).get_table_names()
    keep = Chatkeep(url, embedder=embedder, create_schema=False)
    store = keep.memory.store
    vector = embedder.embed(["espresso"])[0]
    session = keep.sessions.create(ORG, ALICE)
    session.add_user("x")
    row = session.refresh().row
    assert store.writes.commit_distillation(session.id, row.distil_version, 1, [MemoryWrite(
        tenant=ORG, scope="tenant", scope_key="tenant", subject=None, actor=None,
        content="Prefers espresso.", content_key="espresso", embedding=tuple(vector),
        embedding_model="fake-embed")]) is not None

    def nearest() -> list[str]:
        return [m.content for m in store.recall.vector_search(ORG, ["tenant"], vector, "fake-embed",
                                                       5)]

    assert nearest() == ["Prefers espresso."]
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM {VECTOR_TABLE}"))
    assert nearest() == []  # no stamps, no cache: still exact
    keep.close()
    with engine.begin() as conn:  # back to 0006 as it shipped, for the upgrade
        conn.exec_driver_sql("ALTER TABLE chat_sessions DROP COLUMN pii_protected")
        conn.exec_driver_sql("ALTER TABLE chat_sessions DROP COLUMN key")
        for column in FOLD_COLUMNS:
            conn.exec_driver_sql(f"ALTER TABLE chat_sessions DROP COLUMN {column.split()[0]}")
        for name in ("expires_at", "ttl_seconds", "last_recalled_at"):
            conn.exec_driver_sql(f"ALTER TABLE memories DROP COLUMN {name}")
    migrate.upgrade(engine)
    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert _stamp(conn) is not None and _stamp(conn, OTHER_ORG) is None
    indexes = {ix["name"] for ix in inspect(engine).get_indexes(VECTOR_TABLE)}
    assert f"{VECTOR_TABLE}_model" not in indexes
    migrate.downgrade(engine, "0006_memory_vectors")
    assert GENERATION_TABLE not in inspect(engine).get_table_names()
    indexes = {ix["name"] for ix in inspect(engine).get_indexes(VECTOR_TABLE)}
    assert f"{VECTOR_TABLE}_model" in indexes
    with engine.connect() as conn:
        triggers = {r[0] for r in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert not {t for t in triggers if t.startswith(GENERATION_TABLE)}
    assert f"{VECTOR_TABLE}_ad" in triggers
    engine.dispose()
