"""``HistoryCompressor.build_history``: the replay that fits the budget.

Under budget, everything after the summary watermark goes out: closed turns as user
and assistant text, the open turn verbatim with its tool plumbing, pinned system
messages after the system prompt. Over it, the oldest replayable messages (never the
last ``recent_messages_min``, never the open turn) are folded into the running summary
by the summarizer, in chunks that fit its context, and the summary and its new
watermark are stored with compare-and-set, so concurrent callers agree on one summary
per watermark step. By default a fold takes everything but that protected tail, in one
call when it fits the summarizer's context: the fewest calls a history within the budget
allows, since the next fold comes only when the budget is full again
(``compress_target`` > 0 keeps more verbatim after a fold, at the price of more folds).

What to send and what to fold is decided by :func:`chatkeep.history.plan.plan_history`
(plain code over values); this module reads, calls the summarizer and writes. A call
reads only messages after the watermark (an index range) and the session's system
messages (a partial index), so its cost follows the unsummarized tail.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, overload

from chatkeep.config import ChatConfig
from chatkeep.errors import IncompleteToolTurn, InvalidArgument, ModelError, QuotaExceeded
from chatkeep.formats import AnthropicHistory, History, HistoryInfo, get_format
from chatkeep.formats.openai_chat import ChatHistory
from chatkeep.formats.openai_responses import ResponsesHistory
from chatkeep.history.clip import redact_then_clip
from chatkeep.history.plan import previous_texts
from chatkeep.history.round import (
    Deferred,
    FoldResult,
    HistoryRound,
    LostRace,
    RetryPolicy,
    scrubbed,
)
from chatkeep.history.summarizers.base import StructuredSummarizer, Summarizer, SummaryResult
from chatkeep.history.summarizers.extractive import ExtractiveSummarizer
from chatkeep.history.summarizers.llm import LLMSummarizer
from chatkeep.history.summary import StructuredSummary, through_filter
from chatkeep.llm.adapt import as_chat_model
from chatkeep.messages import Message
from chatkeep.privacy.egress import OPEN, Egress, bound
from chatkeep.privacy.filters import OutboundFilter
from chatkeep.quotas import QuotaService, Reservation
from chatkeep.sessions import ChatSession, hold_reservation
from chatkeep.store.repository import Repository
from chatkeep.store.rows import utcnow
from chatkeep.tokens import HeuristicCounter, TokenCounter
from chatkeep.validation import text_problem

log = logging.getLogger("chatkeep.history")

MEMORY_HEADER = "\n\nWhat you remember that applies to this conversation:\n"
#: The job that folds a session's backlog in the background (``fold_backlog``).
FOLD_JOB = "fold"
#: Tokens reserved in each summarizer call for its instructions and framing.
SUMMARY_PROMPT_RESERVE = 400
#: How ``history.info.fold_refused`` begins: the tenant's quota refused the fold's call.
QUOTA_REFUSED = "refused for quota"


class RecalledMemory(Protocol):
    """What a memory provider hands ``build_history``: the text and the personal values it
    holds (sealed), so the session redacts them literally under its own placeholders."""

    @property
    def content(self) -> str:
        """The memory's text, real values included."""
        ...

    @property
    def sealed_pii(self) -> str | None:
        """Sealed set of the personal values ``content`` holds (``None``: none)."""
        ...


CompressHook = Callable[[ChatSession], None]
MemoryProvider = Callable[[ChatSession], Sequence[str | RecalledMemory]]


class HistoryCompressor:
    """Builds the message list for the next model call of a session, in any wire format.

    ``client`` may be an ``openai.OpenAI`` client or a chatkeep ``ChatModel`` (summaries by
    ``model``), a ``Summarizer``, or ``None`` for the offline extractive summarizer.
    ``repository``: where histories are read and summaries stored (``keep.compressor`` has
    the keep's); ``None``, for a compressor used alone: each session's own.
    """

    def __init__(self, client: Any = None, *, model: str | None = None,
                 language: str | None = None, max_history_tokens: int | None = None,
                 recent_messages_min: int | None = None, compress_target: float | None = None,
                 summary_max_tokens: int | None = None, max_message_tokens: int | None = None,
                 summary_input_max_tokens: int | None = None,
                 config: ChatConfig | None = None, counter: TokenCounter | None = None,
                 outbound_filter: OutboundFilter | None = None,
                 on_compress: Sequence[CompressHook] = (),
                 memory_provider: MemoryProvider | None = None,
                 repository: Repository | None = None) -> None:
        overrides: dict[str, Any] = {k: v for k, v in {
            "summary_model": model, "language": language,
            "max_history_tokens": max_history_tokens,
            "recent_messages_min": recent_messages_min, "compress_target": compress_target,
            "summary_max_tokens": summary_max_tokens, "max_message_tokens": max_message_tokens,
            "summary_input_max_tokens": summary_input_max_tokens}.items() if v is not None}
        self.config = dataclasses.replace(config or ChatConfig(), **overrides)
        self.config.validate()
        self.counter = counter or HeuristicCounter()
        self.summarizer = self._make_summarizer(client)
        self.outbound_filter = outbound_filter
        self.on_compress: list[CompressHook] = list(on_compress)
        #: Called when a turn's fold stopped at ``chat.max_fold_calls_per_turn`` with more
        #: to fold (the keep dispatches the ``"fold"`` job there).
        self.on_backlog: list[CompressHook] = []
        self.memory_provider = memory_provider
        self.repository = repository
        #: Reserves each model call on the session tenant's quota (``keep.quotas``; the
        #: keep sets it): the summarizer's folds, and ``build_history(max_output_tokens=)``.
        self.quotas: QuotaService | None = None

    def _make_summarizer(self, client: Any) -> Summarizer:
        if client is None:
            return ExtractiveSummarizer(self.config.summary_limit, counter=self.counter)
        if isinstance(client, Summarizer):
            return client
        return LLMSummarizer(as_chat_model(client), self.config.summary_model,
                             max_summary_tokens=self.config.summary_limit,
                             counter=self.counter)

    # -- the public call -----------------------------------------------------------------

    @overload
    def build_history(self, session: ChatSession, system_prompt: str, *,
                      memories: Sequence[str] | None = None,
                      format: Literal["openai_chat"] = "openai_chat",
                      max_output_tokens: int | None = None) -> ChatHistory: ...

    @overload
    def build_history(self, session: ChatSession, system_prompt: str, *,
                      memories: Sequence[str] | None = None,
                      format: Literal["openai_responses"],
                      max_output_tokens: int | None = None) -> ResponsesHistory: ...

    @overload
    def build_history(self, session: ChatSession, system_prompt: str, *,
                      memories: Sequence[str] | None = None,
                      format: Literal["anthropic_messages"],
                      max_output_tokens: int | None = None) -> AnthropicHistory: ...

    def build_history(self, session: ChatSession, system_prompt: str, *,
                      memories: Sequence[str] | None = None,
                      format: str = "openai_chat",
                      max_output_tokens: int | None = None) -> History[Any]:
        """The messages to send next, in ``format``: system prompt (+ memories), pinned
        system messages, summary, closed turns' text, then the open turn verbatim.

        ``format``: ``"openai_chat"`` (Chat Completions ``messages``, the default),
        ``"openai_responses"`` (Responses ``input`` items) or ``"anthropic_messages"``
        (``messages``, with the system text in ``.system``). The result is a list of the
        format's message dicts carrying ``tokens``, ``over_budget``, ``compressed`` and
        ``info``. Raises ``IncompleteToolTurn`` when a tool call of the open turn has no
        result yet. Never raises because the summarizer failed (a reply that cannot be
        stored counts as failing): it then replays everything after the previous watermark
        with the previous summary. ``session`` or ``memories`` of the wrong type is
        ``InvalidArgument``. Fails closed on privacy:
        if the session redacts and redaction cannot run, ``PrivacyError`` is raised.

        ``max_output_tokens``: the output ceiling you give the model call. With it, the
        call's tokens (this history's estimate plus the ceiling) are reserved on the
        session tenant's quota (and its actor's) before the history is returned:
        ``QuotaExceeded`` when they do not fit (send nothing then). The reservation's id
        is ``history.info.reservation``; ``session.add_assistant_response(reply)`` settles
        it at the reply's usage (``keep.quotas.release(id)`` when the call fails).
        """
        if max_output_tokens is not None:
            check_output_ceiling(max_output_tokens)
        history_round = self.round(session, system_prompt, memories=memories, format=format)
        if max_output_tokens is not None and self.quotas is not None:
            history_round.pending = self.quotas.pending(
                session.tenant, max_output_tokens, actor=session.actor, session_id=session.id,
                purpose="chat")
        history = history_round.build()
        held = history_round.held
        if held is not None and held.id is not None:
            hold_reservation(session, held)
            history.info = dataclasses.replace(history.info, reservation=held.id)
        return history

    def round(self, session: ChatSession, system_prompt: str, *,
              memories: Sequence[str] | None = None, format: str = "openai_chat",
              keep_closed_tool_turns: bool = False, allow_fold: bool = True,
              policy: RetryPolicy | None = None,
              max_fold_calls: int | Literal["config"] | None = "config") -> HistoryRound:
        """The round that builds one request for ``session``
        (:class:`~chatkeep.history.round.HistoryRound`: ``prepare``, render, ``commit``,
        or ``run`` / ``build`` to drive it), for a caller that renders its own body (a
        framework adapter). Memories are recalled here, once, as ``build_history`` does
        (pass ``memories=[]`` for none). ``keep_closed_tool_turns`` replays every live
        message as recorded, closed turns' tool calls, results and reasoning included,
        and never raises ``IncompleteToolTurn`` (what a framework's own session returns,
        for an integration such as ``ChatkeepSession``; see ``plan_history``).
        ``allow_fold=False`` plans without folding. ``max_fold_calls``: summarizer calls
        the round may make (``chat.max_fold_calls_per_turn`` by default; ``None``: no
        bound, as the background fold job runs). Arguments of the wrong type are
        ``InvalidArgument``."""
        get_format(format)
        _check_session(session)
        _check_system_prompt(system_prompt)
        _check_memories(memories)
        recalled: Sequence[str | RecalledMemory] | None = memories
        if memories is None and self.memory_provider is not None:
            self._learn(session)
            recalled = self._recall(session)
        texts = [m if isinstance(m, str) else m.content for m in recalled or ()]
        return HistoryRound(self, session, _with_memories(system_prompt, texts),
                            prompt=system_prompt,
                            format=format, recalled=() if recalled is None else recalled,
                            keep_closed_tool_turns=keep_closed_tool_turns,
                            allow_fold=allow_fold, policy=policy,
                            max_fold_calls=self.config.max_fold_calls_per_turn
                            if max_fold_calls == "config" else max_fold_calls,
                            on_backlog=self.on_backlog)

    @overload
    def preview_history(self, session: ChatSession, system_prompt: str, *,
                        memories: Sequence[str] | None = None,
                        format: Literal["openai_chat"] = "openai_chat") -> ChatHistory: ...

    @overload
    def preview_history(self, session: ChatSession, system_prompt: str, *,
                        memories: Sequence[str] | None = None,
                        format: Literal["openai_responses"]) -> ResponsesHistory: ...

    @overload
    def preview_history(self, session: ChatSession, system_prompt: str, *,
                        memories: Sequence[str] | None = None,
                        format: Literal["anthropic_messages"]) -> AnthropicHistory: ...

    def preview_history(self, session: ChatSession, system_prompt: str, *,
                        memories: Sequence[str] | None = None,
                        format: str = "openai_chat") -> History[Any]:
        """What the model would receive from the stored state, as ``build_history`` shapes
        it, for people to look at (the CLI's ``history``, the inspector): it never folds,
        calls a model, bills, recalls memories (pass ``memories`` to see them) or writes,
        so it is safe on a read-only database. ``info.preview`` is set, and
        ``info.would_fold`` says how many messages the next ``build_history`` folds.

        Display only: a value first detected here has a placeholder that is not stored
        yet, so send what ``build_history`` returns, never a preview."""
        # The round's own plan, never committed (``memories=[]`` when none are given:
        # a preview recalls nothing).
        prepared = self.round(session, system_prompt,
                              memories=[] if memories is None else memories,
                              format=format).prepare()
        plan = prepared.plan
        outgoing = dataclasses.replace(plan.outgoing, summary_role=self.config.summary_role)
        info = HistoryInfo(plan.tokens, self.config.max_history_tokens,
                           over_budget_reason=plan.over_budget_reason, clipped=plan.clipped,
                           format=format, preview=True, would_fold=len(plan.fold))
        return scrubbed(get_format(format).to_wire(outgoing, info), prepared.egress, session)

    def _repository_for(self, session: ChatSession) -> Repository:
        """Where ``session``'s history is read and its summary stored."""
        return self.repository if self.repository is not None else session.repository

    def _retry_at(self, failures: int) -> datetime:
        """When a session that failed ``failures`` folds in a row tries again."""
        delay = min(self.config.fold_retry_after * 2.0 ** (failures - 1),
                    self.config.fold_retry_max)
        return utcnow() + timedelta(seconds=delay)

    def _egress(self, session: ChatSession, known: Sequence[str | None] = ()) -> Egress:
        if self.outbound_filter is None:
            return OPEN
        return self.outbound_filter.for_session(session, known)

    def _model_summary(self, session: ChatSession, stored: str | None,
                       redact: Egress) -> StructuredSummary | None:
        """Outgoing form of the stored summary (what replays and what the summarizer reads):
        read (JSON or a plain-text summary of any earlier version), then each of its texts
        restored and filtered, so a summary written before redaction was switched on is
        redacted too. Values are filtered as the text they are, never JSON-escaped."""
        summary = StructuredSummary.load(stored)
        if summary is None or self.outbound_filter is None:
            return summary
        restore = self.outbound_filter.restore_stored
        return summary.map_texts(lambda texts: through_filter(
            texts, lambda text: redact(restore(session, text))))

    def _stored_form(self, session: ChatSession, summary: StructuredSummary) -> str:
        """What to store: each model-written text in its stored form (``store_form``), then
        the summary serialised (plain text when it is a narrative alone)."""
        if self.outbound_filter is not None:
            store = self.outbound_filter.store_form
            summary = summary.map_texts(lambda texts: through_filter(
                texts, lambda text: store(session, text)))
        return summary.dump()

    # -- folding -------------------------------------------------------------------------

    def _chunks(self, fold: Sequence[Message], redact: Egress,
                limit: int | None = None) -> list[list[Message]]:
        """The fold as the summarizer will read it: text clipped so one message fits a call,
        redacted, and split into chunks that each fit ``summary_input_max_tokens``; at
        most ``limit`` chunks (the rest of the fold is not read: a later turn folds it)."""
        room = (self.config.summary_input_max_tokens - self.config.summary_limit
                - SUMMARY_PROMPT_RESERVE)
        cap = min(self.config.max_message_tokens, room)
        chunks: list[list[Message]] = [[]]
        used = 0
        previous = previous_texts(fold)
        for message in fold:
            text = redact_then_clip(message.replay_text or "", cap, self.counter, redact,
                                    previous.get(message.seq))[0]
            cost = self.counter.count(text) + 4
            if chunks[-1] and used + cost > room:
                if limit is not None and len(chunks) >= limit:
                    break
                chunks.append([])
                used = 0
            chunks[-1].append(message.carrying(text, (), {}))
            used += cost
        return chunks

    def _summarize(self, session: ChatSession, previous: StructuredSummary | None,
                   fold: Sequence[Message], egress: Egress, *, max_calls: int | None = None,
                   renew: Callable[[], bool] = lambda: True
                   ) -> FoldResult | LostRace | Deferred | None:
        """Fold ``fold`` chunk by chunk, in at most ``max_calls`` summarizer calls; returns
        the new summary and the seq it covers, or ``None`` when the first chunk failed. A
        later chunk's failure keeps what the earlier ones folded (the watermark stops
        there), so progress is never thrown away; so does a lost claim (``renew``, called
        between calls to extend the fold's lease, answers ``False``), and a call the
        tenant's quota cannot hold (``Deferred(quota=True)`` when it is the first: nothing
        was sent, the previous summary stays). The placeholders of
        every chunk are stored before the first call (``LostRace("vault")`` when another
        writer stored first: the caller plans again), and each call goes out through
        ``egress``."""
        summary, through = previous, 0
        calls = prompt_tokens = completion_tokens = 0
        model: str | None = None
        limit = self.config.summary_limit
        chunks = self._chunks(fold, egress, max_calls)
        if not egress.flush():
            return LostRace("vault")
        for index, chunk in enumerate(chunks):
            if index and not renew():
                log.info("session %s: the fold's claim ended; storing what is folded so "
                         "far", session.id)
                break
            try:
                held = self._reserve_fold(session, summary, chunk)
            except QuotaExceeded as exc:  # never raise: the previous summary stays
                log.warning("session %s: not folding: %s", session.id, exc)
                if index == 0:
                    return Deferred(f"{QUOTA_REFUSED}: {exc}", quota=True)
                break
            try:
                with bound(egress):
                    result, folded = self._fold(summary, chunk)
            except Exception as exc:  # never raise to the caller: replay instead
                if held is not None:
                    held.release()
                log.warning("session %s: summarizer failed (%s: %s); keeping the previous "
                            "summary and replaying everything after seq %d", session.id,
                            type(exc).__name__, exc, through or session.row.summary_watermark)
                break
            if held is not None:
                held.settle(result.usage)
            self._bill(session, result)
            calls += 1
            if result.usage is not None:
                prompt_tokens += result.usage.prompt_tokens
                completion_tokens += result.usage.completion_tokens
            model = model or result.model
            # A summary over its limit is shrunk (narrative first, then whole items by type
            # priority), so the budget the fold planned holds.
            summary, through = folded.fit(limit, self.counter), chunk[-1].seq
        if through == 0 or summary is None:
            return None
        return FoldResult(summary, through, {"calls": calls, "prompt_tokens": prompt_tokens,
                                             "completion_tokens": completion_tokens,
                                             "model": model},
                          more=through < fold[-1].seq)

    def _reserve_fold(self, session: ChatSession, previous: StructuredSummary | None,
                      chunk: Sequence[Message]) -> Reservation | None:
        """The reservation of one summarizer call (its input: the previous summary, the
        chunk and the instructions; its output ceiling: the summary's limit), or ``None``
        when no model is called (the offline summarizer) or no quotas are wired."""
        if self.quotas is None or isinstance(self.summarizer, ExtractiveSummarizer):
            return None
        tokens = (sum(self.counter.count(m.content or "") + 4 for m in chunk)
                  + (self.counter.count(previous.render()) if previous else 0)
                  + SUMMARY_PROMPT_RESERVE + self.config.summary_limit)
        held = self.quotas.reserve(session.tenant, tokens, actor=session.actor,
                                   session_id=session.id, purpose="summary")
        return held if held.id is not None else None

    def fold_backlog(self, session: ChatSession) -> int:
        """Fold what the budget asks for, with no per-turn bound on summarizer calls (the
        ``"fold"`` job, dispatched when a turn left a backlog): rounds without a system
        prompt until none folds; returns how many folds were stored. Never raises for the
        summarizer, as ``build_history`` does not."""
        folds = 0
        while True:
            history_round = self.round(session, "", memories=[], max_fold_calls=None)
            history_round.records = False  # nothing of it is sent
            try:
                history_round.build()
            except IncompleteToolTurn:
                return folds  # the open turn waits for a result: the next turn folds
            if not history_round.state.compressed:
                return folds
            folds += 1
            if not history_round.backlog:  # (a backlog here: a chunk failed, or the lease)
                return folds

    def _fold(self, previous: StructuredSummary | None,
              chunk: Sequence[Message]) -> tuple[SummaryResult, StructuredSummary]:
        """One summarizer call: the structured summary in and out when the summarizer
        keeps one; otherwise the replayed text in, and its reply is the whole new summary."""
        language = self.config.language
        if isinstance(self.summarizer, StructuredSummarizer):
            result = self.summarizer.fold(previous, chunk, language)
            if isinstance(result, SummaryResult) and result.summary is not None:
                return result, _storable(result.summary)
        else:
            result = self.summarizer.summarize(
                (previous.render() or None) if previous else None, chunk, language)
        if not isinstance(result, SummaryResult) or not result.text.strip():
            raise ModelError("the summarizer returned no text")
        base = previous or StructuredSummary()
        return result, _storable(StructuredSummary(
            narrative=result.text.strip(), folds=base.folds + 1, next_id=base.next_id))

    def _bill(self, session: ChatSession, result: SummaryResult) -> None:
        if result.usage is None:
            return
        try:
            session.record_usage("summary", result.usage, result.model)
        except Exception:
            log.exception("session %s: could not record summarizer usage", session.id)

    def _after_compress(self, session: ChatSession) -> None:
        for hook in self.on_compress:
            try:
                hook(session)
            except Exception:
                log.exception("session %s: on_compress hook %r failed", session.id, hook)

    def _learn(self, session: ChatSession) -> None:
        """Before recall embeds its query: what this history will detect is stored in the
        session's vault first, so the query (masked with the stored vault) never carries a
        value only the rest of the history reveals ("my name is ..." two messages back).
        Detection is cached, so the planning that follows pays for it once."""
        egress = self._egress(session)
        if egress is OPEN:
            return
        _, _, messages = self._repository_for(session).read_history(session.id)
        previous = previous_texts(messages)
        for message in messages:
            egress(message.replay_text or message.content or "", previous.get(message.seq))
        egress.flush()  # a lost race: another writer stored the mapping; recall reads it

    def _recall(self, session: ChatSession) -> Sequence[str | RecalledMemory] | None:
        assert self.memory_provider is not None
        try:
            return self.memory_provider(session)
        except Exception:
            log.exception("session %s: memory recall failed; building history without it",
                          session.id)
            return None


def _check_session(session: object) -> None:
    """A session is what ``keep.sessions`` hands out; ``None``, an id or anything else is a
    typed error here rather than an ``AttributeError`` further down. (Duck-typed: what
    stands in for a ``ChatSession``, as the test suite's bridge does, has its repository.)"""
    if not isinstance(session, ChatSession) and not hasattr(session, "repository"):
        raise InvalidArgument("session must be a chat session (from keep.sessions), "
                              f"got {type(session).__name__}")


def check_output_ceiling(max_output_tokens: object) -> int:
    """``max_output_tokens``: a positive ``int`` (the output ceiling of the call), else
    ``InvalidArgument`` (before anything is built or written)."""
    if isinstance(max_output_tokens, bool) or not isinstance(max_output_tokens, int) \
            or max_output_tokens < 1:
        raise InvalidArgument("max_output_tokens must be a positive whole number of tokens, "
                              f"got {max_output_tokens!r}")
    return max_output_tokens


def _check_system_prompt(system_prompt: object) -> None:
    if not isinstance(system_prompt, str):
        raise InvalidArgument("system_prompt must be a string (use '' for none), "
                              f"got {type(system_prompt).__name__}")


def _check_memories(memories: object) -> None:
    """``memories``: ``None`` or a list whose items are texts or recalled memories (a
    ``content`` text each); a lone string would be read letter by letter, so it is refused."""
    if memories is None:
        return
    if isinstance(memories, str | bytes) or not isinstance(memories, Sequence):
        raise InvalidArgument("memories must be a list of strings (or recalled memories), "
                              f"got {type(memories).__name__}")
    for index, memory in enumerate(memories):
        if not isinstance(memory, str) and not isinstance(getattr(memory, "content", None),
                                                          str):
            raise InvalidArgument(f"memories[{index}] must be a string or a recalled memory, "
                                  f"got {type(memory).__name__}")


def _storable(summary: StructuredSummary) -> StructuredSummary:
    """``summary`` if each of its texts can be stored on every backend. A reply holding a
    NUL or a lone surrogate is a failed call (``ModelError``): were it written, every later
    turn of the session would fail on it, not just this fold."""
    for text in summary.texts():
        problem = text_problem(text)
        if problem:
            raise ModelError(f"the summarizer's reply {problem}; it cannot be stored")
    return summary


def _with_memories(system_prompt: str, memories: Sequence[str] | None) -> str:
    if not memories:
        return system_prompt
    return system_prompt + MEMORY_HEADER + "\n".join(f"- {m}" for m in memories)
