"""The distiller: a session's undistilled messages -> durable memories.

For each chunk after ``distilled_through`` (user/assistant text only, passed
through the outbound filter): ask the model for facts, drop facts whose scope this
session cannot hold, skip exact (normalised-text) duplicates without a model call,
ask the model to decide ADD / UPDATE / DELETE / NONE for the rest against the
nearest live memories of the same scope, then write the memories and move the
watermark in one compare-and-set transaction. A lost race writes nothing and
re-reads; any failure raises ``DistillationError`` with the watermark untouched.
Every model call is billed to the session (purpose ``distil``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from chatkeep.errors import DistillationError, ModelError
from chatkeep.history.compressor import OutboundFilter
from chatkeep.history.transcript import transcript
from chatkeep.llm.base import ChatModel
from chatkeep.memory.prompts import DecisionItem, decision_messages, extraction_messages
from chatkeep.memory.recall import Retriever
from chatkeep.memory.replies import Event, Fact, parse_decisions, parse_facts
from chatkeep.memory.scopes import ScopeTarget, available_scopes, target_for
from chatkeep.memory.text import content_key
from chatkeep.messages import Message
from chatkeep.sessions import ChatSession
from chatkeep.store.memories import MemoryRow, MemoryStore, MemoryWrite
from chatkeep.tokens import HeuristicCounter, TokenCounter

log = logging.getLogger("chatkeep.memory")

CANDIDATES_PER_FACT = 5
CHUNK_MESSAGES = 200
CHUNK_TOKENS = 6000
MAX_CHUNKS_PER_RUN = 1000


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


def _identity(text: str) -> str:
    return text


class Distiller:
    """Runs the distillation of one session (``MemoryService.distil`` wraps it)."""

    def __init__(self, store: MemoryStore, model: ChatModel, retriever: Retriever, *,
                 model_name: str, language: str = "English",
                 outbound_filter: OutboundFilter | None = None,
                 counter: TokenCounter | None = None) -> None:
        self.store = store
        self.model = model
        self.retriever = retriever
        self.model_name = model_name
        self.language = language
        self.outbound_filter = outbound_filter
        self.counter = counter or HeuristicCounter()

    def run(self, session: ChatSession) -> DistilResult:
        """Distil everything up to the session's last message as of now."""
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
            plan = self._plan(session, chunk, row.distilled_through)
            result.model_calls += plan.model_calls
            committed = self.store.commit_distillation(
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
        redact = (self.outbound_filter.for_session(session) if self.outbound_filter
                  else _identity)
        outbound = [dataclasses.replace(m, content=redact(m.content or "")) for m in chunk
                    if m.replay_text is not None]
        if not outbound:
            return plan  # tool plumbing only: nothing to remember, the watermark still moves
        messages = extraction_messages(
            transcript(outbound), available_scopes(session.actor, session.subject),
            session.subject, self.language)
        # The model wrote in this session's placeholders; a memory outlives the session
        # and is recalled into others, where <EMAIL_1> means someone else. So facts are
        # stored with real values and redacted again for whichever session recalls them.
        facts = [dataclasses.replace(f, content=self._restore(session, f.content))
                 for f in parse_facts(self._ask(session, messages, plan))]
        pending: list[_Pending] = []
        seen: set[tuple[str, str]] = set()
        for fact in facts:
            target = target_for(fact.scope, session.tenant, session.actor, session.subject)
            if target is None:
                plan.dropped += 1
                log.info("session %s: dropped a %s fact: the session has no %s", session.id,
                         fact.scope, "actor" if fact.scope == "personal" else "subject")
                continue
            key = content_key(fact.content)
            if (target.key, key) in seen or self.store.find_known(
                    session.tenant, target.key, key, session.id, after_seq):
                plan.duplicates += 1
                continue
            seen.add((target.key, key))
            candidates = self.retriever.search(session.tenant, [target.key], fact.content,
                                               CANDIDATES_PER_FACT)
            if candidates:
                pending.append(_Pending(fact, target, key, candidates))
            else:
                plan.writes.append(_write(target, fact.content, key))
        if pending:
            self._decide(session, pending, redact, plan)
        return plan

    def _decide(self, session: ChatSession, pending: Sequence[_Pending],
                redact: Callable[[str], str], plan: _Plan) -> None:
        items, aliases = [], []
        for index, item in enumerate(pending):
            alias = {f"m{n}": m for n, m in enumerate(item.candidates, start=1)}
            aliases.append(alias)
            items.append(DecisionItem(index, redact(item.fact.content),
                                      [(a, redact(m.content)) for a, m in alias.items()]))
        reply = self._ask(session, decision_messages(items), plan)
        decisions = parse_decisions(reply, {i: list(a) for i, a in enumerate(aliases)})
        for index, item in enumerate(pending):
            decision = decisions[index]
            old = aliases[index][decision.target] if decision.target else None
            if decision.event is Event.NONE:
                plan.duplicates += 1
            elif decision.event is Event.ADD:
                plan.writes.append(_write(item.target, item.fact.content, item.key))
            else:
                assert old is not None  # parse_decisions requires a target here
                text = self._restore(session, decision.text) if decision.text \
                    else item.fact.content
                plan.writes.append(_write(item.target, text, content_key(text), old.id))

    def _restore(self, session: ChatSession, text: str) -> str:
        return self.outbound_filter.restore(session, text) if self.outbound_filter else text

    def _ask(self, session: ChatSession, messages: list[dict[str, str]], plan: _Plan) -> str:
        plan.model_calls += 1
        try:
            completion = self.model.complete(messages, model=self.model_name, max_tokens=2000,
                                             temperature=0.0, json_mode=True)
        except ModelError as exc:
            raise DistillationError(f"session {session.id}: the model call failed: {exc}") \
                from exc
        if completion.usage is not None:
            session.record_usage("distil", completion.usage, completion.model)
        return completion.text


def _write(target: ScopeTarget, content: str, key: str,
           supersedes: int | None = None) -> MemoryWrite:
    return MemoryWrite(tenant=target.tenant, scope=target.scope.value, scope_key=target.key,
                       subject=target.subject, actor=target.actor, content=content,
                       content_key=key, supersedes=supersedes)
