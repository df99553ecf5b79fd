"""``plan_history``: what the next request holds and what, if anything, to fold. No I/O.

From the session's unsummarized messages, its pinned instructions, the outgoing
summary and the budget, the planner says what replays (already clipped and
redacted), what the estimate is, whether it is over budget and why, and which
oldest replayable messages to fold into the summary. The compressor only reads, calls
the summarizer and writes (the async API runs the same compressor through its bridge).
``redact`` grows the session's placeholder vault in memory only: the compressor stores
it once, before anything leaves.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chatkeep.config import ChatConfig
from chatkeep.formats.base import RECORDED_ITEM, Outgoing, fence
from chatkeep.history.clip import redact_then_clip
from chatkeep.history.turns import open_turn, split_turns
from chatkeep.messages import Message, Role, ToolCall
from chatkeep.privacy.filters import TextFilter
from chatkeep.tokens import TokenCounter

#: Tokens a message's framing costs beyond its text (role, separators), as providers bill.
MESSAGE_OVERHEAD = 4
#: Tokens a tool call's framing costs beyond its id, name and arguments.
CALL_OVERHEAD = 4


@dataclass(frozen=True, slots=True)
class HistoryPlan:
    """The planner's verdict for one ``build_history`` call."""

    outgoing: Outgoing
    """What goes out if nothing is folded."""
    tokens: int
    """Estimate of ``outgoing`` (framing and summary header included)."""
    fold: tuple[Message, ...] = ()
    """The oldest replayable messages to fold into the summary (empty = none)."""
    over_budget_reason: str | None = None
    """Why ``outgoing`` is over budget, when it is."""
    clipped: int = 0
    """How many outgoing messages were clipped at ``chat.max_message_tokens``."""


def plan_history(*, system_text: str, pinned_before: Sequence[Message], summary: str | None,
                 messages: Sequence[Message], config: ChatConfig, counter: TokenCounter,
                 redact: TextFilter, format: str, allow_fold: bool = True,
                 keep_closed_tool_turns: bool = False) -> HistoryPlan:
    """Decide the next history. ``system_text`` and ``summary`` are already in outgoing form;
    ``pinned_before`` are the system messages at or below the watermark, ``messages`` the
    ones after it. Raises ``IncompleteToolTurn`` when the open turn waits for a result.

    ``keep_closed_tool_turns``: replay every message after the watermark as recorded, in
    order, closed turns' tool calls, results and reasoning included, and the current turn
    as it stands (a call still waiting for its result too): what an agent framework's own
    session hands back (the OpenAI Agents SDK's). Redaction, clipping and the budget apply
    as always; a fold then ends only where it leaves no result without its call and no
    output without its reasoning."""
    split = split_turns(messages)
    outbound = _Outbound(config, counter, redact, previous_texts(messages))
    pinned = tuple(outbound.text(m.content or "") for m in (*pinned_before, *split.pinned))
    cuts: set[int] | None = None  # where a fold may end (None: after any message)
    if keep_closed_tool_turns:
        live = split.current if split.open else ()
        replayable = [*split.closed, *(() if split.open else split.current)]
        replay = [outbound.verbatim(m) for m in replayable]
        cuts = fold_cuts(replayable, live)
    else:
        live = open_turn(split.current) if split.open else ()
        replayable = [m for m in (*split.closed, *(() if split.open else split.current))
                      if m.replay_text is not None]
        replay = [outbound.replayed(m) for m in replayable]
    opened = [outbound.verbatim(m) for m in live]
    outgoing = Outgoing(system_text, pinned, summary, (*replay, *opened),
                        open_from=len(replay) if opened else None)

    fixed = sum(_text_cost(t, counter) for t in outgoing.system_texts())
    costs = [message_cost(m, counter, format) for m in replay]
    open_cost = sum(message_cost(m, counter, format) for m in opened)
    total = fixed + sum(costs) + open_cost
    budget = config.max_history_tokens
    plan = HistoryPlan(outgoing, total, clipped=outbound.clipped)
    if total <= budget:
        return plan

    # The protected tail: the last recent_messages_min replayable messages, the pending
    # user message of the current turn (never folded, whatever the setting), the open turn.
    pending = 0 if split.open else len([m for m in split.current if m.replay_text])
    protect = min(len(replay), max(config.recent_messages_min, pending))
    foldable = len(replay) - protect
    if cuts is not None:
        foldable = max(c for c in cuts if c <= foldable)
    # After a fold the summary may be as long as its limit: plan with that.
    summary_after = _text_cost(fence("x" * 4 * config.summary_limit), counter)
    fixed_after = fixed - (_text_cost(fence(summary), counter) if summary else 0) \
        + summary_after
    floor = fixed_after + sum(costs[foldable:]) + open_cost
    if foldable == 0:
        return dataclasses.replace(plan, over_budget_reason=(
            f"{total} tokens, {total - budget} over the budget of {budget}, and nothing can "
            f"be folded: the system prompt, pinned instructions, summary and the protected "
            f"tail (the last {protect} messages and the open turn) need that much"))
    target = config.compress_target * budget
    foldable_cost = sum(costs[:foldable])
    batch = fold_batch(budget, target, fixed_after)
    if floor > budget and foldable_cost < batch:
        # Folding everything foldable would still leave the history over the budget: fold
        # in batches of a usual fold's size, not one summarizer call for every new turn.
        return dataclasses.replace(plan, over_budget_reason=(
            f"{total} tokens, {total - budget} over the budget of {budget}: the system "
            f"prompt, pinned instructions, summary and the protected tail need {floor} "
            f"tokens even after a fold; folding waits until {foldable_cost} foldable tokens "
            f"grow to a batch of {batch}"))
    reason = f"{total} tokens, {total - budget} over the budget of {budget}"
    if not allow_fold:
        return dataclasses.replace(plan, over_budget_reason=reason)
    # Fold the oldest messages until the history would cost at most the target: with the
    # default target (0) everything but the protected tail, so each fold is as large, and
    # the next one as late, as the budget allows.
    remaining = sum(costs)
    fold: list[Message] = []
    for index, (message, cost) in enumerate(zip(replayable[:foldable], costs, strict=False)):
        if fold and fixed_after + remaining + open_cost <= target and \
                (cuts is None or index in cuts):
            break
        fold.append(message)
        remaining -= cost
    return dataclasses.replace(plan, fold=tuple(fold), over_budget_reason=reason)


def fold_cuts(messages: Sequence[Message], later: Sequence[Message] = ()) -> set[int]:
    """Where a fold of ``messages`` (replayed verbatim, plumbing included) may end: the
    indexes ``i`` such that folding ``messages[:i]`` leaves behind no tool result whose call
    went into the summary, and no output whose reasoning did (the APIs reject both).
    ``later`` are the messages that follow and are never folded (the open turn): a call
    they answer stays out of every fold."""
    answered = {m.tool_call_id: i for i, m in enumerate(messages) if m.tool_call_id}
    answered_later = {m.tool_call_id for m in later if m.tool_call_id}
    blocked = [0] * (len(messages) + 2)  # a difference array over the cut indexes
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            until = (len(messages) if call.id in answered_later
                     else answered.get(call.id, index))
            if until > index:  # cuts index + 1 .. until split the call from its result
                blocked[index + 1] += 1
                blocked[until + 1] -= 1
        if _reasoning_alone(message):  # reasoning goes with the output that follows it
            blocked[index + 1] += 1
            blocked[index + 2] -= 1
    cuts: set[int] = set()
    depth = 0
    for index in range(len(messages) + 1):
        depth += blocked[index]
        if depth == 0:
            cuts.add(index)
    return cuts


def _reasoning_alone(message: Message) -> bool:
    """An assistant message with no text and no call: a reasoning item recorded by itself
    (the Responses API's), which belongs to the item after it."""
    return message.role is Role.ASSISTANT and message.replay_text is None \
        and not message.tool_calls


def fold_batch(budget: int, target: float, fixed_after: int) -> int:
    """What a usual fold takes when nothing is protected: from the budget down to the
    target, or to what the system prompt, pinned instructions and a full summary need
    (at least a quarter of the budget). When even folding everything foldable cannot bring
    a history within the budget, folding waits for this much instead of firing every turn."""
    return max(budget - max(int(target), fixed_after), budget // 4)


def message_cost(message: Message, counter: TokenCounter, format: str) -> int:
    """Estimated tokens of one outgoing message: framing, text, tool calls, and the native
    payloads it carries for ``format`` (the only format they are sent to)."""
    total = MESSAGE_OVERHEAD + counter.count(message.content or "")
    total += sum(CALL_OVERHEAD + counter.count(c.id + c.name + c.arguments)
                 for c in message.tool_calls)
    if message.tool_call_id:
        total += counter.count(message.tool_call_id)
    native = message.native.get(format)
    if native:
        total += _native_cost(native, total, counter)
    return total


def _native_cost(native: dict[str, Any], counted: int, counter: TokenCounter) -> int:
    """What a message's native payload adds to the ``counted`` cost of its text and calls:
    extras sent beside them (reasoning, thinking blocks) in full; a recorded item sent in
    their place only for what it holds beyond them (its framing, parts that are not text)."""
    extras = {key: value for key, value in native.items() if key != RECORDED_ITEM}
    total = counter.count(json.dumps(extras, ensure_ascii=False)) if extras else 0
    item = native.get(RECORDED_ITEM)
    if item is not None:
        total += max(0, counter.count(json.dumps(item, ensure_ascii=False)) - counted)
    return total


def previous_texts(messages: Sequence[Message]) -> dict[int, str]:
    """For each message, the text of the conversation message before it (its context)."""
    previous: dict[int, str] = {}
    last: str | None = None
    for message in messages:
        if last is not None:
            previous[message.seq] = last
        if message.content and message.role.value != "system":
            last = message.content
    return previous


def _text_cost(text: str, counter: TokenCounter) -> int:
    return MESSAGE_OVERHEAD + counter.count(text)


class _Outbound:
    """Redacts then clips outgoing text (never the other way: a clip can cut a value in
    two and leave half of it raw); counts clipped messages."""

    def __init__(self, config: ChatConfig, counter: TokenCounter, redact: TextFilter,
                 previous: dict[int, str] | None = None) -> None:
        self.cap = config.max_message_tokens
        self.counter = counter
        self.redact = redact
        self.previous = previous or {}
        self.clipped = 0

    def text(self, text: str, context: str | None = None) -> str:
        redacted, cut = redact_then_clip(text, self.cap, self.counter, self.redact, context)
        self.clipped += cut
        return redacted

    def replayed(self, message: Message) -> Message:
        """A closed turn's message: its text alone, no plumbing, no reasoning or thinking;
        only the original wire item of a one-item message stays (``native[fmt]["item"]``),
        so a format can hand back exactly what it recorded when the text is unchanged."""
        text = self.text(message.replay_text or "", self.previous.get(message.seq))
        items = {fmt: {"item": payload["item"]} for fmt, payload in message.native.items()
                 if isinstance(payload, dict) and "item" in payload}
        return message.carrying(text, (), items)

    def verbatim(self, message: Message) -> Message:
        """An open-turn message: everything, text clipped and redacted, arguments redacted
        inside their JSON so they stay valid JSON."""
        content = (None if message.content is None
                   else self.text(message.content, self.previous.get(message.seq)))
        calls = tuple(ToolCall(c.id, c.name, self.arguments(c.arguments))
                      for c in message.tool_calls)
        return message.carrying(content, calls, message.native)

    def arguments(self, arguments: str) -> str:
        try:
            value = json.loads(arguments)
        except ValueError:
            return self.redact(arguments)
        redacted = _redact_strings(value, self.redact)
        return arguments if redacted == value else json.dumps(redacted, ensure_ascii=False)


def _redact_strings(value: Any, redact: TextFilter) -> Any:
    """Every string of a JSON value redacted, object keys included (a key can be an
    e-mail address or a name as well as a value can)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_strings(v, redact) for v in value]
    if isinstance(value, dict):
        return {redact(k): _redact_strings(v, redact) for k, v in value.items()}
    return value
