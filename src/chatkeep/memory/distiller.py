"""The distiller: a session's undistilled messages -> durable memories.

For each chunk after ``distilled_through`` (user/assistant text only, passed
through the outbound filter): ask the model for facts, drop facts whose scope this
session cannot hold, skip exact (normalised-text) duplicates without a model call,
ask the model to decide ADD / UPDATE / DELETE / NONE for the rest against the
nearest live memories of the same scope (by words, and by meaning when an embedder
is configured: their vectors are computed here, before the write), then write the
memories and move the watermark in one compare-and-set transaction. A lost race writes nothing and
re-reads; any failure raises ``DistillationError`` with the watermark untouched.
Every model call is billed to the session (purpose ``distil``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from chatkeep.errors import DistillationError, ModelError, QuotaExceeded
from chatkeep.history.plan import previous_texts
from chatkeep.history.transcript import transcript
from chatkeep.llm.adapt import as_chat_model
from chatkeep.llm.base import ChatModel
from chatkeep.memory.carried import MemoryValues
from chatkeep.memory.hybrid import HybridRetriever, Payer
from chatkeep.memory.prompts import DecisionItem, decision_messages, extraction_messages
from chatkeep.memory.recall import Retriever
from chatkeep.memory.replies import Event, Fact, parse_decisions, parse_facts
from chatkeep.memory.scopes import ScopeTarget, available_scopes, target_for
from chatkeep.memory.text import content_key
from chatkeep.messages import Message
from chatkeep.observability import tracing as telemetry
from chatkeep.privacy.egress import OPEN, Egress, bound
from chatkeep.privacy.filters import OutboundFilter
from chatkeep.quotas import QuotaService, Reservation
from chatkeep.sessions import ChatSession
from chatkeep.store.memories import MemoryStore
from chatkeep.store.memory_rows import MemoryRow, MemoryWrite
from chatkeep.tokens import HeuristicCounter, TokenCounter

log = logging.getLogger("chatkeep.memory")

CANDIDATES_PER_FACT = 5
CHUNK_MESSAGES = 200
CHUNK_TOKENS = 6000
MAX_CHUNKS_PER_RUN = 1000
DISTIL_MAX_TOKENS = 2000
"""The output ceiling of each distiller call (what its quota reservation holds)."""


@dataclass
class DistilResult:
    """What one ``distil`` run did (counts over all its chunks)."""

    session_id: str
    distilled_through: int = 0
    """The session's watermark when the run ended."""
    chunks: int = 0
    added: int = 0
    """Memory rows written (new facts, and the new versions of updated ones)."""
    superseded: int = 0
    """Existing memories retired by an UPDATE or DELETE."""
    duplicates: int = 0
    """Facts not stored because a memory already says them."""
    dropped: int = 0
    """Facts whose scope the session cannot hold (personal with no actor, ...)."""
    model_calls: int = 0
    lost_races: int = 0
    """Chunks another worker committed first (nothing written for them here)."""
    memory_ids: list[int] = field(default_factory=list)


@dataclass
class _Plan:
    writes: list[MemoryWrite] = field(default_factory=list)
    duplicates: int = 0
    dropped: int = 0
    model_calls: int = 0


@dataclass
class _Pending:
    fact: Fact
    target: ScopeTarget
    key: str
    candidates: list[MemoryRow]
    sealed: str | None


class DistillerFilter(OutboundFilter, Protocol):
    """The outbound filter, plus what the distiller needs to store facts with real values."""

    def restore(self, session: ChatSession, text: str) -> str:
        """Real values back into model-written text (a fact)."""
        ...

    def sealed_values(self, session: ChatSession, text: str) -> str | None:
        """The personal values ``text`` holds, sealed, for the memory to carry."""
        ...


class Distiller:
    """Runs the distillation of one session (``MemoryService.distil`` wraps it)."""

    def __init__(self, store: MemoryStore, model: ChatModel, retriever: Retriever, *,
                 model_name: str, language: str = "English",
                 outbound_filter: DistillerFilter | None = None,
                 counter: TokenCounter | None = None,
                 quotas: QuotaService | None = None) -> None:
        self.store = store
        self.quotas = quotas  # each model and embedding call reserves on the tenant's quota
        self.model = as_chat_model(model)  # sends only through the egress bound in _ask
        self.retriever = retriever
        self.model_name = model_name
        self.language = language
        self.outbound_filter = outbound_filter
        self.counter = counter or HeuristicCounter()

    def run(self, session: ChatSession) -> DistilResult:
        """Distil everything up to the session's last message as of now (in an
        ``update_memory`` span when OpenTelemetry is installed)."""
        if telemetry.ON:
            return telemetry.distil(session, lambda: self._run(session))
        return self._run(session)

    def _run(self, session: ChatSession) -> DistilResult:
        result = DistilResult(session.id)
        target_seq = session.refresh().message_count
        for _ in range(MAX_CHUNKS_PER_RUN):
            row = session.refresh().row
            result.distilled_through = row.distilled_through
            if row.distilled_through >= target_seq:
                return result
            chunk = self._chunk(session.repository.read_messages(
                session.id, after_seq=row.distilled_through, through_seq=target_seq,
                limit=CHUNK_MESSAGES), target_seq)
            # Retracted messages are not remembered; their seqs still move the watermark.
            chunk = [m if m.retracted_at is None else dataclasses.replace(m, content=None)
                     for m in chunk]
            plan = self._plan(session, chunk, row.distilled_through)
            result.model_calls += plan.model_calls
            committed = self.store.writes.commit_distillation(
                session.id, row.distil_version, chunk[-1].seq, plan.writes)
            if committed is None:
                result.lost_races += 1
                log.info("session %s: another worker distilled through seq %d first",
                         session.id, chunk[-1].seq)
                continue
            result.chunks += 1
            result.added += len(committed.inserted)
            result.memory_ids += committed.inserted
            result.superseded += committed.superseded
            result.duplicates += plan.duplicates + committed.duplicates
            result.dropped += plan.dropped
            result.distilled_through = chunk[-1].seq
            log.info("session %s: distilled through seq %d: %d written, %d superseded, "
                     "%d duplicates", session.id, chunk[-1].seq, len(committed.inserted),
                     committed.superseded, plan.duplicates + committed.duplicates)
        raise DistillationError(f"session {session.id}: gave up after {MAX_CHUNKS_PER_RUN} "
                                "chunks")

    def _chunk(self, messages: Sequence[Message], target_seq: int) -> list[Message]:
        """The oldest messages up to ``target_seq`` that fit ``CHUNK_TOKENS`` (at least one)."""
        chunk: list[Message] = []
        tokens = 0
        for message in messages:
            if message.seq > target_seq:
                break
            tokens += self.counter.count(message.replay_text or "")
            if chunk and tokens > CHUNK_TOKENS:
                break
            chunk.append(message)
        if not chunk:
            raise DistillationError("no messages to distil below the target seq")
        return chunk

    # -- one chunk -----------------------------------------------------------------------

    def _plan(self, session: ChatSession, chunk: Sequence[Message], after_seq: int) -> _Plan:
        plan = _Plan()
        redact = self._filter(session)
        talk = [m for m in chunk if m.replay_text is not None]
        previous = previous_texts(talk)
        outbound = [dataclasses.replace(m, content=redact(m.content or "", previous.get(m.seq)))
                    for m in talk]
        if not outbound:
            return plan  # tool plumbing only: nothing to remember, the watermark still moves
        # The subject reference is data too ("customer:ana.garcia@example.com").
        subject = redact(str(session.subject)) if session.subject is not None else None
        messages = extraction_messages(
            transcript(outbound), available_scopes(session.actor, session.subject),
            subject, self.language)
        # The model wrote in this session's placeholders; a memory outlives the session
        # and is recalled into others, where <EMAIL_1> means someone else. So facts are
        # stored with real values and redacted again for whichever session recalls them.
        facts = [dataclasses.replace(f, content=self._restore(session, f.content))
                 for f in parse_facts(self._ask(session, messages, plan, redact))]
        values = MemoryValues(self.outbound_filter, session, talk)
        pending: list[_Pending] = []
        seen: set[tuple[str, str]] = set()
        kept: list[tuple[Fact, ScopeTarget, str]] = []
        for fact in facts:
            target = target_for(fact.scope, session.tenant, session.actor, session.subject)
            if target is None:
                plan.dropped += 1
                log.info("session %s: dropped a %s fact: the session has no %s", session.id,
                         fact.scope, "actor" if fact.scope == "personal" else "subject")
                continue
            key = content_key(fact.content)
            if (target.key, key) in seen or self.store.recall.find_known(
                    session.tenant, target.key, key, session.id, after_seq):
                plan.duplicates += 1
                continue
            seen.add((target.key, key))
            kept.append((fact, target, key))
        # The values each memory will carry, computed once: the embedding request masks
        # exactly these, so a retry or a backfill (which only has ``sealed_pii``) sends
        # the same text as the first attempt.
        carried = [values.sealed(fact.content) for fact, _, _ in kept]
        # Embeddings before the write transaction, one batched call: the candidates are the
        # nearest live memories by meaning as well as by words (dedupe by meaning), and the
        # same vectors are stored with the new memories.
        vectors = self._embed(session, [fact.content for fact, _, _ in kept], carried)
        for (fact, target, key), sealed, vector in zip(kept, carried, vectors, strict=True):
            candidates = self._candidates(session, target, fact.content, vector, sealed)
            if candidates:
                pending.append(_Pending(fact, target, key, candidates, sealed))
            else:
                plan.writes.append(self._write(target, fact.content, key, sealed))
        if pending:
            self._decide(session, pending, plan, values)
        known = {fact.content: v for (fact, _, _), v in zip(kept, vectors, strict=True)}
        plan.writes = self._with_vectors(session, plan.writes, known)
        return plan

    def _embed(self, session: ChatSession, texts: Sequence[str],
               sealed: Sequence[str | None]) -> list[list[float] | None]:
        """Vectors for memory texts, each masked with the values it carries, reserved on
        the session tenant's quota: refused (or failed), none, and the memories are
        written without them for ``embed_missing`` to fill in later."""
        if not isinstance(self.retriever, HybridRetriever) or not texts:
            return [None] * len(texts)
        try:
            return self.retriever.embed(texts, sealed, payer=Payer.of(session))
        except QuotaExceeded:
            return [None] * len(texts)

    def _candidates(self, session: ChatSession, target: ScopeTarget, content: str,
                    vector: list[float] | None, sealed: str | None) -> list[MemoryRow]:
        """The nearest live memories of ``target``; when the batched embedding failed, the
        search embeds ``content`` again, masked with the same carried values."""
        if isinstance(self.retriever, HybridRetriever):
            return self.retriever.search(session.tenant, [target.key], content,
                                         CANDIDATES_PER_FACT, vector=vector, sealed=sealed,
                                         payer=Payer.of(session))
        return self.retriever.search(session.tenant, [target.key], content,
                                     CANDIDATES_PER_FACT)

    def _with_vectors(self, session: ChatSession, writes: list[MemoryWrite],
                      known: dict[str, list[float] | None]) -> list[MemoryWrite]:
        """The writes with their vectors (texts an UPDATE rewrote are embedded here, in
        one more call, masked with the values their write carries). A failed call leaves
        ``embedding`` unset: the memory is written all the same and ``memories embed``
        picks it up later."""
        if not isinstance(self.retriever, HybridRetriever) or not writes:
            return writes
        fresh: dict[str, str | None] = {}
        for w in writes:
            if w.content not in known:
                fresh.setdefault(w.content, w.sealed_pii)
        texts = sorted(fresh)
        vectors = self._embed(session, texts, [fresh[t] for t in texts])
        known = {**known, **dict(zip(texts, vectors, strict=True))}
        model = self.retriever.model
        return [dataclasses.replace(w, embedding=tuple(v), embedding_model=model)
                if (v := known.get(w.content)) is not None else w for w in writes]

    def _write(self, target: ScopeTarget, content: str, key: str, sealed: str | None,
               supersedes: int | None = None) -> MemoryWrite:
        """A memory carrying the personal values it holds (``sealed``, see
        ``MemoryValues``), so recall redacts them literally in any session."""
        return MemoryWrite(tenant=target.tenant, scope=target.scope.value,
                           scope_key=target.key, subject=target.subject, actor=target.actor,
                           content=content, content_key=key, supersedes=supersedes,
                           sealed_pii=sealed)

    def _decide(self, session: ChatSession, pending: Sequence[_Pending], plan: _Plan,
                values: MemoryValues) -> None:
        # Candidates may come from other sessions: their values join this session's vault.
        redact = self._filter(session, [m.sealed_pii for p in pending for m in p.candidates])
        items, aliases = [], []
        for index, item in enumerate(pending):
            alias = {f"m{n}": m for n, m in enumerate(item.candidates, start=1)}
            aliases.append(alias)
            items.append(DecisionItem(index, redact(item.fact.content),
                                      [(a, redact(m.content)) for a, m in alias.items()]))
        reply = self._ask(session, decision_messages(items), plan, redact)
        decisions = parse_decisions(reply, {i: list(a) for i, a in enumerate(aliases)})
        for index, item in enumerate(pending):
            decision = decisions[index]
            old = aliases[index][decision.target] if decision.target else None
            if decision.event is Event.NONE:
                plan.duplicates += 1
            elif decision.event is Event.ADD:
                plan.writes.append(self._write(item.target, item.fact.content, item.key,
                                               item.sealed))
            else:
                assert old is not None  # parse_decisions requires a target here
                text = self._restore(session, decision.text) if decision.text \
                    else item.fact.content
                # The rewritten text may merge values of the memories it was shown.
                sealed = values.sealed(text, [m.sealed_pii for m in item.candidates])
                plan.writes.append(self._write(item.target, text, content_key(text), sealed,
                                               old.id))

    def _filter(self, session: ChatSession, known: Sequence[str | None] = ()) -> Egress:
        if self.outbound_filter is None:
            return OPEN
        return self.outbound_filter.for_session(session, known)

    def _reserve(self, session: ChatSession, tokens: int, purpose: str) -> Reservation | None:
        """The reservation of one call made for ``session``'s tenant, or ``None`` when no
        quotas are wired or none applies. A refusal is a ``DistillationError`` (nothing
        sent, the watermark untouched): the sweep retries the range later."""
        if self.quotas is None:
            return None
        try:
            held = self.quotas.reserve(session.tenant, tokens, actor=session.actor,
                                       session_id=session.id, purpose=purpose)
        except QuotaExceeded as exc:
            raise DistillationError(f"session {session.id}: {purpose} refused for quota, "
                                    f"retried later: {exc}") from exc
        return held if held.id is not None else None

    def _restore(self, session: ChatSession, text: str) -> str:
        return self.outbound_filter.restore(session, text) if self.outbound_filter else text

    def _ask(self, session: ChatSession, messages: list[dict[str, str]], plan: _Plan,
             egress: Egress) -> str:
        """One model call, through the session's egress: the whole request is scrubbed and
        its placeholders are stored before it is sent (a value first seen late in the
        request is redacted early in it too)."""
        plan.model_calls += 1
        held = self._reserve(session, sum(self.counter.count(m.get("content") or "") + 4
                                          for m in messages) + DISTIL_MAX_TOKENS, "distil")
        try:
            with bound(egress):
                completion = self.model.complete(messages, model=self.model_name,
                                                 max_tokens=DISTIL_MAX_TOKENS,
                                                 temperature=0.0, json_mode=True)
        except BaseException as exc:
            if held is not None:
                held.release()
            if isinstance(exc, ModelError):
                raise DistillationError(f"session {session.id}: the model call failed: "
                                        f"{exc}") from exc
            raise
        if held is not None:
            held.settle(completion.usage)
        if completion.usage is not None:
            session.record_usage("distil", completion.usage, completion.model)
        return completion.text

