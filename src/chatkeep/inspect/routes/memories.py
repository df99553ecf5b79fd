"""Memories by scope, one memory's provenance, and the recall box: the full-text, vector and
fused ranks recall computes for a query, over the scopes a session (or tenant, subject
and actor) may read."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chatkeep.history.plan import previous_texts
from chatkeep.inspect.context import (
    Inspector,
    bad_request,
    choice_param,
    id_param,
    inspector_of,
    not_found,
    ref_param,
    text_param,
)
from chatkeep.inspect.masking import Masker
from chatkeep.memory.hybrid import DEFAULT_FUSION, HybridRetriever, fuse
from chatkeep.memory.scopes import Scope, readable_targets
from chatkeep.memory.text import query_terms
from chatkeep.refs import Ref
from chatkeep.store.inspection_log import read_log
from chatkeep.store.inspection_memories import (
    MemoryFilter,
    distilled_after,
    get_memory,
    list_memories,
    memory_counts,
    memory_vectors,
    memory_versions,
    unembedded,
)
from chatkeep.store.inspection_sessions import get_session
from chatkeep.store.memory_rows import MemoryRow

#: Candidates taken from each ranking (as hybrid recall does by default).
POOL = DEFAULT_FUSION.pool
#: Messages shown before a memory's ``source_through_seq``.
SOURCE_WINDOW = 12


def scope_label(scope: str, subject: Ref | None, actor: Ref | None) -> str:
    """``tenant``, ``subject TYPE:ID`` or ``personal TYPE:ID``."""
    if scope == "subject" and subject is not None:
        return f"subject {subject}"
    if scope == "personal" and actor is not None:
        return f"personal {actor}"
    return scope


def _shown(ins: Inspector, memory: MemoryRow | Any) -> str:
    sealed = getattr(memory, "sealed_pii", None)
    return ins.masker(sealed).text(memory.content)


def memory_list(request: Request) -> Response:
    """``GET /memories``: live (or all) memories, newest first, grouped by scope."""
    ins = inspector_of(request)
    session_id = id_param(request, "session")
    if session_id is not None:
        ins.session(session_id)  # another tenant's session is not found
    f = MemoryFilter(
        tenant=ins.tenant_filter(request),
        scope=choice_param(request, "scope", [s.value for s in Scope]),
        actor=ref_param(request, "actor"), subject=ref_param(request, "subject"),
        session_id=session_id,
        superseded=request.query_params.get("superseded") == "1",
        after=text_param(request, "after", limit=200))
    rows, next_cursor = list_memories(ins.engine, f)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(scope_label(row.scope, row.subject, row.actor), []).append(
            {"row": row, "text": _shown(ins, row)})
    retriever = ins.keep.memory.retriever
    model = retriever.model if isinstance(retriever, HybridRetriever) else None
    missing = unembedded(ins.engine, model, f.tenant) if model else None
    return ins.render(request, "memories.html", f=f, groups=groups, next_cursor=next_cursor,
                      counts=memory_counts(ins.engine, f.tenant), model=model,
                      missing=missing, scopes=[s.value for s in Scope], title="Memories")


def memory_page(request: Request) -> Response:
    """``GET /memories/{id}``: one memory's provenance: its session and the messages it was
    distilled from, the versions it replaced or that replaced it, its vectors."""
    ins = inspector_of(request)
    raw = request.path_params["memory_id"]
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        not_found(f"no memory {raw!r}")
    memory = get_memory(ins.engine, int(raw), ins.tenant)
    if memory is None:
        not_found(f"no memory {raw}" + (f" in tenant {ins.tenant}" if ins.tenant else ""))
    older, newer = memory_versions(ins.engine, memory)
    source = None
    source_key = ""
    messages: list[dict[str, Any]] = []
    after = distilled_after(ins.engine, memory)
    if memory.source_session_id is not None:
        source = get_session(ins.engine, memory.source_session_id, memory.tenant)
    if source is not None:
        start = max(after, memory.source_through_seq - SOURCE_WINDOW)
        window = read_log(ins.engine, source, after=start, limit=SOURCE_WINDOW)
        masker = ins.masker(source.pii_vault)
        source_key = ins.labels(source, masker)[0]
        previous = previous_texts(window.messages)
        messages = [{"m": m, "text": masker.text(m.content, previous.get(m.seq)),
                     "calls": [(c.name, masker.text(c.arguments)) for c in m.tool_calls]}
                    for m in window.messages if m.seq <= memory.source_through_seq]
    retriever = ins.keep.memory.retriever
    return ins.render(
        request, "memory.html", memory=memory, text=_shown(ins, memory),
        older=[{"row": r, "text": _shown(ins, r)} for r in older],
        newer=[{"row": r, "text": _shown(ins, r)} for r in newer], source=source,
        source_key=source_key,
        messages=messages, after=after, vectors=memory_vectors(ins.engine, memory.id),
        model=retriever.model if isinstance(retriever, HybridRetriever) else None,
        scope=scope_label(memory.scope, memory.subject, memory.actor),
        title=f"Memory {memory.id}")


def _recall_scope(ins: Inspector, request: Request) -> tuple[Ref, Ref | None, Ref | None,
                                                             Any]:
    """Whose scopes the recall box reads: a session's, or a tenant's (with its subject
    and actor), within the confinement."""
    session_id = id_param(request, "session")
    if session_id:
        row = ins.session(session_id)
        return row.tenant, row.actor, row.subject, row
    tenant = ins.tenant_filter(request)
    if tenant is None:
        bad_request("recall needs a session or a tenant (TYPE:ID)")
    return tenant, ref_param(request, "actor"), ref_param(request, "subject"), None


def recall_box(request: Request) -> Response:
    """``GET /memories/recall``: each candidate's full-text, vector and fused rank."""
    ins = inspector_of(request)
    query = text_param(request, "q", limit=2000) or ""
    tenant, actor, subject, row = _recall_scope(ins, request)
    keys = [t.key for t in readable_targets(tenant, actor, subject)]
    store = ins.keep.memory.store
    text_hits = store.recall.search(tenant, keys, query_terms(query), POOL)
    retriever = ins.keep.memory.retriever
    vector_hits: list[Any] | None = None
    fused = text_hits
    note = None
    if isinstance(retriever, HybridRetriever):
        session = ins.keep.sessions.get_unscoped(row.id) if row is not None else None
        vector = retriever.query_vector(query, session=session)
        if vector is None:
            note = "the query could not be embedded (blank, or the embedding call failed)"
            vector_hits = []
        else:
            vector_hits = store.recall.vector_search(tenant, keys, vector, retriever.model, POOL)
        fused = fuse(text_hits, vector_hits, POOL, retriever.fusion)
    else:
        note = ("no embedding model is configured (memory.embedding_model): recall is "
                "full-text only, so the fused ranking is the full-text one")
    text_rank = {m.id: i for i, m in enumerate(text_hits, 1)}
    vector_rank = {m.id: i for i, m in enumerate(vector_hits or [], 1)}
    lines = [{"row": m, "text": _shown(ins, m), "fused": i, "text_rank": text_rank.get(m.id),
              "vector_rank": vector_rank.get(m.id), "score": m.score}
             for i, m in enumerate(fused, 1)]
    name = "_recall.html" if request.headers.get("hx-request") == "true" else "recall_page.html"
    return ins.render(request, name, lines=lines, query=query, tenant=tenant,
                      actor=actor, subject=subject, row=row, note=note,
                      hybrid=isinstance(retriever, HybridRetriever),
                      masker=Masker(ins.keep.privacy.redactor))


ROUTES = [
    Route("/memories", memory_list, name="memories"),
    Route("/memories/recall", recall_box, name="recall"),
    Route("/memories/{memory_id}", memory_page, name="memory"),
]
