"""What summaries cost: tokens fed to the summarizer and calls, chatkeep beside langmem.

    .venv/bin/pip install -e '.[bench]'     # langmem (and compaction-conformance-kit)
    .venv/bin/python bench/summary_economics.py [--turns 400] [--budget 6000] [--markdown]

One run, the same texts for both: a 400-turn conversation (200 user and 200 assistant
messages of 30 to 150 words, deterministic) kept within a 6000-token history budget with a
600-token summary. chatkeep: ``HistoryCompressor.build_history`` before every assistant
answer, its summarizer an OpenAI client (the real SDK) against ``FakeOpenAIServer``.
langmem: ``summarize_messages`` (``max_tokens`` = the budget, ``max_summary_tokens`` =
600) before every assistant answer, its model a LangChain runnable. Both models answer
every call with a summary of about the same size (it grows by four items, about 60
tokens, per call, up to the 600-token limit; chatkeep's as JSON items, langmem's as text).

Tokens fed are counted with the same 4-characters-per-token heuristic over the text of
every message sent to the summarizer (prompt, previous summary, conversation); the
conversation's tokens with the same counter. The peak history is the largest replay each
one produced (langmem's budget check counts the messages since the last summary, not the
summary and system prompt beside them, so it may go over). "Question folded" counts the
histories that do not end with the user message being answered (it went into the
summary, and the model answers a summary of it). "Summarized" is the
conversation counted as summarized at the end (before chatkeep's watermark; langmem's
summarized message ids), and fed / summarized what each summarized token cost: tokens fed
depend on where the conversation stops relative to the last fold, this ratio much less.

The lossless floor is what no summarizer can beat on this workload if it keeps every
history within the budget and shows its model every message it counts as summarized.
A history (checked before every assistant answer, as above) is the system prompt, the
summary and the unsummarized messages, each with 4 tokens of framing; the summary after
k calls is s_k tokens, as the workload's model writes it for langmem (s_0 = 0); ``tail``
messages (the question being answered, or chatkeep's protected tail) stay verbatim:

* calls >= C_min, the number of folds of the schedule that folds only when the history
  would otherwise be over the budget, and then everything but the tail. No schedule
  needs fewer: after as many folds, this one's watermark is never behind another's
  (folding later or less only leaves more to fold);
* tokens fed >= (T - U) + s_1 + ... + s_(C_min - 1): every summarized message read once,
  the previous summary once per call after the first, no instructions at all. T is the
  conversation's tokens; U the most of it that can still be unsummarized at the end, the
  longest run of last messages that fits the budget beside the system prompt and a
  summary of s_(C_min), plus the final answer (no history is built after it).

The output is Markdown (``--markdown`` is accepted, so ``bench/report.py`` calls every
bench alike).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
    from langchain_core.runnables import RunnableLambda
    from langmem.short_term import RunningSummary, summarize_messages
except ImportError:  # pragma: no cover - a bench-only dependency
    sys.exit("bench/summary_economics.py needs langmem: pip install -e '.[bench]'")

import openai

from chatkeep import Chatkeep, HistoryCompressor, Ref
from chatkeep.config import ChatConfig
from chatkeep.testing import FakeOpenAIServer, Reply
from chatkeep.tokens import HeuristicCounter

COUNTER = HeuristicCounter()
SYSTEM = "You are a helpful assistant for a small software consultancy."
SUMMARY_TOKENS = 600
#: Tokens of framing one message costs in a history (role, separators).
FRAMING = 4
WORDS = ("the", "client", "asked", "about", "invoices", "deadlines", "the", "migration",
         "plan", "budget", "staging", "database", "review", "tests", "deployment", "timezone",
         "report", "contract", "scope", "estimate", "risk", "meeting", "notes", "backlog",
         "priority", "release", "feature", "customer", "support", "ticket")


def conversation(turns: int, seed: int = 7) -> list[tuple[str, str]]:
    """``turns`` messages alternating user and assistant, 30 to 150 words each."""
    rng = random.Random(seed)
    out = []
    for n in range(turns):
        role = "user" if n % 2 == 0 else "assistant"
        words = [rng.choice(WORDS) for _ in range(rng.randint(30, 150))]
        out.append((role, f"Turn {n}: " + " ".join(words) + "."))
    return out


def summary_text(call: int) -> str:
    """The summary a model writes on its ``call``-th call (same size for both)."""
    items = [f"Item {n}: the client set point {n} about the plan and its budget."
             for n in range(1, 4 * call + 1)]
    text = " ".join(items)
    while COUNTER.count(text) > SUMMARY_TOKENS:
        items.pop(0)
        text = " ".join(items)
    return text


@dataclass
class Tally:
    """Calls and tokens fed to one summarizer; the largest history it replayed; the tokens
    of conversation it counts as summarized, and of those the ones it never showed the
    summarizer."""

    calls: int = 0
    fed: int = 0
    peak: int = 0
    unread: int = 0
    summarized: int = 0
    question_folded: int = 0


def lossless_floor(texts: list[tuple[str, str]], budget: int, tail: int) -> Tally:
    """The floor of the module docstring: fewest calls, fewest tokens fed (a bound each);
    the largest history is that of the fewest-calls schedule."""
    sizes = [COUNTER.count(text) for _, text in texts]
    cost = [size + FRAMING for size in sizes]
    system = COUNTER.count(SYSTEM) + FRAMING

    def summary(k: int) -> int:
        return COUNTER.count(summary_text(k)) + FRAMING if k else 0

    floor = Tally()
    watermark = 0
    checks = [n for n, (role, _) in enumerate(texts) if role == "user"]
    for n in checks:
        if system + summary(floor.calls) + sum(cost[watermark:n + 1]) > budget:
            watermark = max(watermark, n + 1 - tail)
            floor.calls += 1
        floor.peak = max(floor.peak,
                         system + summary(floor.calls) + sum(cost[watermark:n + 1]))
    room = budget - system - summary(floor.calls)
    last = checks[-1] + 1 if checks else 0
    start = last
    while start > 0 and sum(cost[start - 1:last]) <= room:
        start -= 1
    floor.summarized = sum(sizes[:start])
    floor.fed = floor.summarized + sum(summary(k) - FRAMING for k in range(1, floor.calls))
    return floor


def run_chatkeep(texts: list[tuple[str, str]], budget: int, config: ChatConfig,
                 db: Path) -> Tally:
    """chatkeep's compressor over the conversation, its summarizer behind the fake API."""
    tally = Tally()

    def model(body: dict[str, Any]) -> Reply:
        tally.calls += 1
        tally.fed += sum(COUNTER.count(m["content"]) for m in body["messages"])
        return Reply.json({"add": [{"type": "fact", "text": f"Point {tally.calls}.{n}: the "
                                    "client set this about the plan and its budget."}
                                   for n in range(4)],
                           "narrative": "The client and the assistant planned the work."})

    with FakeOpenAIServer(responder=model) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
        keep = Chatkeep(f"sqlite:///{db}", dispatcher="inline",
                        config={"memory": {"distil_on_compress": False}})
        compressor = HistoryCompressor(client, model="scripted", config=config)
        session = keep.sessions.create(tenant=Ref("bench", "economics"))
        for role, text in texts:
            if role == "user":
                session.add_user(text)
                history = compressor.build_history(session, SYSTEM)
                tally.peak = max(tally.peak, history.tokens)
                tally.question_folded += history[-1].get("content") != text
            else:
                session.add_assistant(text)
        watermark = session.refresh().summary_watermark
        tally.summarized = sum(COUNTER.count(m.content or "") for m in session.messages
                               if m.seq <= watermark)
        keep.close()
    return tally


def run_langmem(texts: list[tuple[str, str]], budget: int,
                before_summary: int | None = None) -> Tally:
    """langmem's ``summarize_messages`` over the same conversation."""
    tally = Tally()
    shown = 0

    def model(messages: Any) -> AIMessage:
        nonlocal shown
        tally.calls += 1
        listed = messages.to_messages() if hasattr(messages, "to_messages") else messages
        tally.fed += sum(COUNTER.count(str(m.content)) for m in listed)
        shown += sum(COUNTER.count(str(m.content)) for m in listed[:-1]
                     if isinstance(m, HumanMessage | AIMessage))
        return AIMessage(content=summary_text(tally.calls))

    messages: list[BaseMessage] = [SystemMessage(content=SYSTEM, id="system")]
    running: RunningSummary | None = None
    for n, (role, text) in enumerate(texts):
        if role == "user":
            messages.append(HumanMessage(content=text, id=f"m{n}"))
            result = summarize_messages(messages, running_summary=running,
                                        model=RunnableLambda(model), max_tokens=budget,
                                        max_tokens_before_summary=before_summary,
                                        max_summary_tokens=SUMMARY_TOKENS)
            running = result.running_summary or running
            tally.question_folded += result.messages[-1].id != f"m{n}"
            tally.peak = max(tally.peak, sum(COUNTER.count(str(m.content)) + 4
                                             for m in result.messages))
        else:
            messages.append(AIMessage(content=text, id=f"m{n}"))
    summarized = running.summarized_message_ids if running else set()
    tally.summarized = sum(COUNTER.count(str(m.content)) for m in messages
                           if m.id in summarized)
    tally.unread = tally.summarized - shown
    return tally


def main() -> None:
    """Both libraries on the same conversation, one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--budget", type=int, default=6000)
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    args = parser.parse_args()
    texts = conversation(args.turns)
    total = sum(COUNTER.count(text) for _, text in texts)
    tail = ChatConfig().recent_messages_min
    rows: list[tuple[str, Tally]] = [
        (f"lossless floor, last {tail} messages verbatim (chatkeep's protected tail)",
         lossless_floor(texts, args.budget, tail)),
        ("lossless floor, only the question verbatim", lossless_floor(texts, args.budget, 1)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        default = ChatConfig(max_history_tokens=args.budget, summary_max_tokens=SUMMARY_TOKENS)
        rows.append((f"chatkeep (default), compress_target {default.compress_target:g}",
                     run_chatkeep(texts, args.budget, default, Path(tmp) / "default.db")))
        for target in (0.6, 0.4, 0.3, 0.25, 0.2):
            config = ChatConfig(max_history_tokens=args.budget, compress_target=target,
                                summary_max_tokens=SUMMARY_TOKENS)
            label = " (the previous default)" if target == 0.6 else ""
            rows.append((f"chatkeep, compress_target {target}{label}",
                         run_chatkeep(texts, args.budget, config, Path(tmp) / f"{target}.db")))
    rows.append(("langmem", run_langmem(texts, args.budget)))
    # langmem held to the same budget: summary and system prompt inside it.
    within = args.budget - SUMMARY_TOKENS - COUNTER.count(SYSTEM) - 8
    rows.append(("langmem, within the budget",
                 run_langmem(texts, args.budget, before_summary=within)))
    print(f"{args.turns} turns, {total} conversation tokens, a {args.budget}-token budget, "
          f"{SUMMARY_TOKENS}-token summaries.\n")
    print("| summarizer | calls | tokens fed | fed / conversation | summarized "
          "| fed / summarized | largest history | summarized unread | question folded |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, tally in rows:
        over = " (over budget!)" if tally.peak > args.budget else ""
        print(f"| {name} | {tally.calls} | {tally.fed} | {tally.fed / total:.3f}x | "
              f"{tally.summarized} | {tally.fed / max(1, tally.summarized):.3f}x | "
              f"{tally.peak}{over} | {tally.unread} | {tally.question_folded} |")


if __name__ == "__main__":
    main()
