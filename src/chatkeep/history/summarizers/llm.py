"""``LLMSummarizer``: fold old turns with a (cheap) chat model.

The model is asked for an edit of the structured summary (typed items to add, update or
retire by id, and a short narrative) as JSON, merged in code
(:mod:`chatkeep.history.summary`); a plain-text reply is kept as the narrative.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from chatkeep.errors import ModelError
from chatkeep.history.summarizers.base import SummaryResult, as_structured
from chatkeep.history.summary import StructuredSummary, merge, read_reply
from chatkeep.history.transcript import transcript
from chatkeep.llm.adapt import as_chat_model
from chatkeep.llm.base import ChatModel, Completion
from chatkeep.messages import Message
from chatkeep.tokens import HeuristicCounter, TokenCounter

log = logging.getLogger("chatkeep.history")


SYSTEM_PROMPT = """\
Update a conversation's running summary. Reply with one JSON object: {{"add": [{{"type": \
"...", "text": "..."}}], "update": [{{"id": "...", "text": "..."}}], "retire": ["id"], \
"narrative": "..."}}. Types: rule (the user's instructions), constraint (budget, deadline, \
limit), task (state, next steps, open questions), fact (facts, decisions), preference. Add \
each new thing worth keeping as one short item, exact values kept; update items whose value \
changed; retire items no longer true; items not named stay. Narrative: at most {max_words} \
words. Keep placeholders like <EMAIL_1>. Write in {language}."""

USER_PROMPT = """\
Items so far:
{items}

Narrative so far:
{narrative}

New part of the conversation:
{transcript}"""

#: Tokens a reply may run past three times the summary limit before it is refused.
REPLY_SLACK = 200


class LLMSummarizer:
    """Summarize with a (cheap) chat model; the prompt asks for the configured language.

    The model is asked for JSON (``response_format`` when the endpoint supports it: one
    that rejects it is asked again without, and not asked with it again). A JSON reply is
    checked strictly and merged by item id; a plain-text reply becomes the narrative and
    leaves the items as they were; an empty or failed reply raises (``ModelError``).
    """

    def __init__(self, model: ChatModel, model_name: str = "gpt-4o-mini", *,
                 max_summary_tokens: int = 600, counter: TokenCounter | None = None,
                 json_mode: bool = True) -> None:
        # Guarded: it sends only through the egress bound around the call (the compressor
        # binds the session's), whoever built this summarizer.
        self.model = as_chat_model(model)
        self.model_name = model_name
        self.max_summary_tokens = max_summary_tokens
        self.counter = counter or HeuristicCounter()
        self.json_mode = json_mode

    def build_messages(self, previous: StructuredSummary | str | None,
                       messages: Sequence[Message], language: str) -> list[dict[str, str]]:
        """The exact request body (exposed so tests and users can see the prompt). The
        previous summary goes in once: its items with their ids, and its narrative."""
        summary = as_structured(previous)
        max_words = max(40, int(self.max_summary_tokens * 0.3))
        items = summary.ledger() if summary and summary.items else "(none)"
        narrative = summary.narrative.strip() if summary and summary.narrative.strip() \
            else "(none)"
        return [
            {"role": "system",
             "content": SYSTEM_PROMPT.format(language=language, max_words=max_words)},
            {"role": "user", "content": USER_PROMPT.format(
                items=items, narrative=narrative, transcript=transcript(messages))},
        ]

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        """``fold`` over a summary given as text (its stored or replayed form)."""
        return self.fold(as_structured(previous), messages, language)

    def fold(self, previous: StructuredSummary | None, messages: Sequence[Message],
             language: str) -> SummaryResult:
        """Ask the model and merge its edit; a reply far over the length limit is refused
        (``ModelError``), and so is an off-shape JSON reply."""
        completion = self._complete(self.build_messages(previous, messages, language))
        text = completion.text.strip()
        # A reply far past the requested length is not a summary (runaway or echo).
        tokens = self.counter.count(text)
        if tokens > self.max_summary_tokens * 3 + REPLY_SLACK:
            raise ModelError(f"summary reply of {tokens} tokens is far over the "
                             f"{self.max_summary_tokens}-token limit; refusing it")
        summary = merge(previous, read_reply(text, previous))
        summary = summary.fit(self.max_summary_tokens, self.counter)
        return SummaryResult(summary.render(), completion.usage, completion.model, summary)

    def _complete(self, messages: list[dict[str, str]]) -> Completion:
        options: dict[str, Any] = {"model": self.model_name, "temperature": 0.2,
                                   "max_tokens": self.max_summary_tokens * 2 + REPLY_SLACK}
        if self.json_mode:
            try:
                return self.model.complete(messages, json_mode=True, **options)
            except (ModelError, TypeError) as exc:
                if not _refuses_json_mode(exc):
                    raise
                log.info("%s refuses response_format; asking for JSON in the prompt only",
                         self.model_name)
                self.json_mode = False
        return self.model.complete(messages, **options)


def _refuses_json_mode(exc: Exception) -> bool:
    text = str(exc).lower()
    if isinstance(exc, TypeError):
        return "json_mode" in text
    return "response_format" in text or "json_object" in text or "json mode" in text
