"""``HistoryCompressor.build_history``: the replay that fits the budget.

Under budget, everything after the summary watermark goes verbatim. Over it,
the oldest replayable turns (never the last ``recent_messages_min``) are folded
into the running summary by the summariser, and the summary and its new
watermark are stored with compare-and-set, so concurrent callers agree on one
summary per watermark step. Folding goes down to ``compress_target`` of the
budget, so compression does not fire again on the very next turn.

A call reads only messages after the watermark (an index range), so its cost
follows the unsummarised tail, not the session's length.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from chatkeep.config import ChatConfig
from chatkeep.history.summarizer import (
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    SummaryResult,
)
from chatkeep.llm.base import as_chat_model
from chatkeep.messages import Message
from chatkeep.sessions import ChatSession
from chatkeep.tokens import HeuristicCounter, TokenCounter

log = logging.getLogger("chatkeep.history")

SUMMARY_HEADER = "Summary of the earlier conversation:\n"
MEMORY_HEADER = "\n\nWhat you remember that applies to this conversation:\n"
MAX_CAS_ATTEMPTS = 4


class OutboundFilter(Protocol):
    """Turns text into what may leave for a model on a session's behalf (PII redaction)."""

    def for_session(self, session: ChatSession) -> Callable[[str], str]:
        """A text filter for ``session`` (the identity when the session does not redact)."""
        ...

    def restore(self, session: ChatSession, text: str) -> str:
        """Undo the filter on model-written text (a stored summary) before filtering it
        again, so its placeholders are kept rather than escaped as user-typed ones."""
        ...


CompressHook = Callable[[ChatSession], None]
MemoryProvider = Callable[[ChatSession], Sequence[str]]


def _identity(text: str) -> str:
    return text


class HistoryCompressor:
    """Builds the OpenAI-format message list for the next model call of a session.

    ``client`` may be an ``openai.OpenAI`` client or a chatkeep ``ChatModel`` (summaries by
    ``model``), a ``Summarizer``, or ``None`` for the offline extractive summariser.
    """

    def __init__(self, client: Any = None, *, model: str | None = None,
                 language: str | None = None, max_history_tokens: int | None = None,
                 recent_messages_min: int | None = None, compress_target: float | None = None,
                 summary_max_tokens: int | None = None, config: ChatConfig | None = None,
                 counter: TokenCounter | None = None,
                 outbound_filter: OutboundFilter | None = None,
                 on_compress: Sequence[CompressHook] = (),
                 memory_provider: MemoryProvider | None = None) -> None:
        overrides: dict[str, Any] = {k: v for k, v in {
            "summary_model": model, "language": language,
            "max_history_tokens": max_history_tokens,
            "recent_messages_min": recent_messages_min, "compress_target": compress_target,
            "summary_max_tokens": summary_max_tokens}.items() if v is not None}
        self.config = dataclasses.replace(config or ChatConfig(), **overrides)
        self.config.validate()
        self.counter = counter or HeuristicCounter()
        self.summarizer = self._make_summarizer(client)
        self.outbound_filter = outbound_filter
        self.on_compress: list[CompressHook] = list(on_compress)
        self.memory_provider = memory_provider

    def _make_summarizer(self, client: Any) -> Summarizer:
        if client is None:
            return ExtractiveSummarizer(self.config.summary_max_tokens, counter=self.counter)
        if isinstance(client, Summarizer):
            return client
        return LLMSummarizer(as_chat_model(client), self.config.summary_model,
                             max_summary_tokens=self.config.summary_max_tokens,
                             counter=self.counter)

    # -- the public call -----------------------------------------------------------------

    def build_history(self, session: ChatSession, system_prompt: str, *,
                      memories: Sequence[str] | None = None) -> list[dict[str, str]]:
        """The messages to send next: system prompt (+ memories), summary, then the tail.

        Never raises because the summariser failed: it then replays everything after
        the previous watermark with the previous summary. Never contains tool messages
        or tool calls. Fails closed on privacy: if the session redacts and redaction
        cannot run (a wrong encryption key), ``PrivacyError`` is raised and nothing is sent.
        """
        if memories is None and self.memory_provider is not None:
            memories = self._recall(session)
        lost_races = 0
        while True:
            # Re-read first: the switches, summary and watermark may have moved elsewhere.
            redact, row = self._filter(session.refresh()), session.row
            system_text = redact(_with_memories(system_prompt, memories))
            replay = self._replay(session, row.summary_watermark, redact)
            summary = self._model_text(session, row.summary, redact)
            # After losing several races in a row, replay what is stored, verbatim.
            fold = ([] if lost_races == MAX_CAS_ATTEMPTS
                    else self._choose_fold(system_text, summary, replay))
            if not fold:
                return self._render(system_text, summary, replay)
            result = self._summarize(session, summary, fold, redact)
            if result is None:
                return self._render(system_text, summary, replay)
            new_row = session.repository.compare_and_set_summary(
                session.id, row.summary_version, result.text, fold[-1].seq)
            if new_row is None:
                log.info("session %s: another caller compressed first; re-reading", session.id)
                lost_races += 1
                continue
            session._replace_row(new_row)
            log.info("session %s: folded %d messages, watermark %d -> %d", session.id,
                     len(fold), row.summary_watermark, new_row.summary_watermark)
            self._after_compress(session)
            return self._render(system_text, self._model_text(session, result.text, redact),
                                replay[len(fold):])

    def _filter(self, session: ChatSession) -> Callable[[str], str]:
        return self.outbound_filter.for_session(session) if self.outbound_filter else _identity

    def _model_text(self, session: ChatSession, text: str | None,
                    redact: Callable[[str], str]) -> str | None:
        """Outgoing form of model-written text (the summary): restored, then filtered, so a
        summary written before redaction was switched on is redacted too."""
        if not text:
            return None
        if self.outbound_filter is None:
            return text
        return redact(self.outbound_filter.restore(session, text))

    @staticmethod
    def _replay(session: ChatSession, watermark: int,
                redact: Callable[[str], str]) -> list[tuple[Message, str]]:
        """Replayable messages after ``watermark`` with their outgoing (redacted) text."""
        return [(m, redact(text)) for m in session.messages_after(watermark)
                if (text := m.replay_text) is not None]

    # -- steps ---------------------------------------------------------------------------

    def cost(self, system_text: str, summary: str | None,
             replay: Sequence[tuple[Message, str]]) -> int:
        """Tokens the rendered history would cost."""
        total = self.counter.count(system_text) if system_text else 0
        if summary:
            total += self.counter.count(SUMMARY_HEADER + summary)
        return total + sum(self.counter.count(text) for _, text in replay)

    def _choose_fold(self, system_text: str, summary: str | None,
                     replay: Sequence[tuple[Message, str]]) -> list[Message]:
        cfg = self.config
        if self.cost(system_text, summary, replay) <= cfg.max_history_tokens:
            return []
        foldable = replay[: max(0, len(replay) - cfg.recent_messages_min)]
        # After folding, the summary is at most summary_max_tokens long.
        fixed = self.counter.count(system_text) + cfg.summary_max_tokens
        remaining = sum(self.counter.count(text) for _, text in replay)
        target = cfg.compress_target * cfg.max_history_tokens
        fold: list[Message] = []
        for message, text in foldable:
            if fold and fixed + remaining <= target:
                break
            fold.append(message)
            remaining -= self.counter.count(text)
        return fold

    def _summarize(self, session: ChatSession, previous: str | None, fold: Sequence[Message],
                   redact: Callable[[str], str]) -> SummaryResult | None:
        outbound = [dataclasses.replace(m, content=redact(m.content or "")) for m in fold]
        try:
            result = self.summarizer.summarize(previous, outbound, self.config.language)
            if not isinstance(result, SummaryResult) or not result.text.strip():
                raise ValueError("the summariser returned no text")
        except Exception as exc:  # never raise to the caller: replay instead
            log.warning("session %s: summariser failed (%s: %s); keeping the previous summary "
                        "and replaying everything after seq %d", session.id,
                        type(exc).__name__, exc, session.row.summary_watermark)
            return None
        if result.usage is not None:
            try:
                session.record_usage("summary", result.usage, result.model)
            except Exception:
                log.exception("session %s: could not record summariser usage", session.id)
        return result

    def _after_compress(self, session: ChatSession) -> None:
        for hook in self.on_compress:
            try:
                hook(session)
            except Exception:
                log.exception("session %s: on_compress hook %r failed", session.id, hook)

    def _recall(self, session: ChatSession) -> Sequence[str] | None:
        assert self.memory_provider is not None
        try:
            return self.memory_provider(session)
        except Exception:
            log.exception("session %s: memory recall failed; building history without it",
                          session.id)
            return None

    @staticmethod
    def _render(system_text: str, summary: str | None,
                replay: Sequence[tuple[Message, str]]) -> list[dict[str, str]]:
        out = [{"role": "system", "content": system_text}] if system_text else []
        if summary:
            out.append({"role": "system", "content": SUMMARY_HEADER + summary})
        out.extend({"role": m.role.value, "content": text} for m, text in replay)
        return out


def _with_memories(system_prompt: str, memories: Sequence[str] | None) -> str:
    if not memories:
        return system_prompt
    return system_prompt + MEMORY_HEADER + "\n".join(f"- {m}" for m in memories)
