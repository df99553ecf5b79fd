"""Summarisers: fold old turns (and the previous summary) into a new running summary.

``LLMSummarizer`` asks a cheap model; ``ExtractiveSummarizer`` is the offline,
deterministic fallback that keeps the first sentence of each turn and needs no
network. Both receive only user/assistant text, already redacted when the
session redacts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from chatkeep.errors import ModelError
from chatkeep.history.transcript import SPEAKER, transcript
from chatkeep.llm.base import ChatModel
from chatkeep.messages import Message, Usage
from chatkeep.tokens import HeuristicCounter, TokenCounter


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A new running summary and the usage it cost (``None`` offline)."""

    text: str
    usage: Usage | None = None
    model: str | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Folds ``messages`` into ``previous``; raises on failure (the compressor handles it)."""

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        """Fold ``messages`` into ``previous``, writing in ``language``."""
        ...


SYSTEM_PROMPT = """\
You maintain the running summary of a conversation between a user and an AI assistant.
You receive the current summary (possibly empty) and the next part of the conversation.
Write the updated summary so that it replaces both: keep every fact, decision, name,
number, commitment and open question a reader needs to continue the conversation;
drop greetings and repetition. Keep placeholders such as <EMAIL_1> or <PERSON_2>
exactly as written. Write in {language}. Stay under {max_words} words.
Reply with the summary text only."""

USER_PROMPT = """\
Current summary:
{previous}

Next part of the conversation:
{transcript}"""


class LLMSummarizer:
    """Summarise with a (cheap) chat model; the prompt asks for the configured language."""

    def __init__(self, model: ChatModel, model_name: str = "gpt-4o-mini", *,
                 max_summary_tokens: int = 600, counter: TokenCounter | None = None) -> None:
        self.model = model
        self.model_name = model_name
        self.max_summary_tokens = max_summary_tokens
        self.counter = counter or HeuristicCounter()

    def build_messages(self, previous: str | None, messages: Sequence[Message],
                       language: str) -> list[dict[str, str]]:
        """The exact request body (exposed so tests and users can see the prompt)."""
        max_words = max(50, int(self.max_summary_tokens * 0.7))
        return [
            {"role": "system",
             "content": SYSTEM_PROMPT.format(language=language, max_words=max_words)},
            {"role": "user", "content": USER_PROMPT.format(
                previous=previous or "(none yet)", transcript=transcript(messages))},
        ]

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        """Ask the model; a reply far over the length limit is refused (``ModelError``)."""
        completion = self.model.complete(
            self.build_messages(previous, messages, language), model=self.model_name,
            max_tokens=self.max_summary_tokens * 2, temperature=0.2)
        text = completion.text.strip()
        # A reply far past the requested length is not a summary (runaway or echo).
        if self.counter.count(text) > self.max_summary_tokens * 3:
            raise ModelError(
                f"summary of {self.counter.count(text)} tokens is far over the "
                f"{self.max_summary_tokens}-token limit; refusing it")
        return SummaryResult(text, completion.usage, completion.model)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


class ExtractiveSummarizer:
    """Offline and deterministic: one line per turn, its first sentence, newest kept.

    Not a real summary: an outline for use with no model at all (the demo, tests,
    air-gapped installs). Oldest lines are dropped first to stay within the limit.
    """

    OMITTED = "(earlier points omitted)"

    def __init__(self, max_summary_tokens: int = 600, max_line_chars: int = 200,
                 counter: TokenCounter | None = None) -> None:
        self.max_summary_tokens = max_summary_tokens
        self.max_line_chars = max_line_chars
        self.counter = counter or HeuristicCounter()

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        """Append one line per turn to ``previous``; ``language`` is ignored (extractive)."""
        lines = [ln for ln in (previous or "").splitlines() if ln and ln != self.OMITTED]
        for message in messages:
            text = message.replay_text
            if text is None:
                continue
            first = _SENTENCE_END.split(" ".join(text.split()), maxsplit=1)[0]
            if len(first) > self.max_line_chars:
                first = first[: self.max_line_chars - 1].rstrip() + "…"
            lines.append(f"- {SPEAKER[message.role.value]}: {first}")
        dropped = False
        while len(lines) > 1 and self.counter.count("\n".join(lines)) > self.max_summary_tokens:
            lines.pop(0)
            dropped = True
        if dropped:
            lines.insert(0, self.OMITTED)
        return SummaryResult("\n".join(lines))
