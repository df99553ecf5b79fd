"""What summaries cost: tokens fed to the summariser and calls, chatkeep beside langmem.

    .venv/bin/pip install -e '.[bench]'     # langmem (and compaction-conformance-kit)
    .venv/bin/python bench/summary_economics.py [--turns 400] [--budget 6000]

One run, the same texts for both: a 400-turn conversation (200 user and 200 assistant
messages of 30 to 150 words, deterministic) kept within a 6000-token history budget with a
600-token summary. chatkeep: ``HistoryCompressor.build_history`` before every assistant
answer, its summariser an OpenAI client (the real SDK) against ``FakeOpenAIServer``.
langmem: ``summarize_messages`` (``max_tokens`` = the budget, ``max_summary_tokens`` =
600) before every assistant answer, its model a LangChain runnable. Both models answer
every call with a summary of the same size (it grows by four items, about 100 tokens, per
call, up to the 600-token limit; chatkeep's as JSON items, langmem's as text).

Tokens fed are counted with the same 4-characters-per-token heuristic over the text of
every message sent to the summariser (prompt, previous summary, conversation); the
conversation's tokens with the same counter. The peak history is the largest replay each
one produced (langmem's budget check counts the messages since the last summary, not the
summary and system prompt beside them, so it may go over).
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
    """Calls and tokens fed to one summariser; the largest history it replayed; the tokens
    of conversation it counts as summarised but never showed the summariser."""

    calls: int = 0
    fed: int = 0
    peak: int = 0
    unread: int = 0


def run_chatkeep(texts: list[tuple[str, str]], budget: int, config: ChatConfig,
                 db: Path) -> Tally:
    """chatkeep's compressor over the conversation, its summariser behind the fake API."""
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
            else:
                session.add_assistant(text)
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
            tally.peak = max(tally.peak, sum(COUNTER.count(str(m.content)) + 4
                                             for m in result.messages))
        else:
            messages.append(AIMessage(content=text, id=f"m{n}"))
    summarised = running.summarized_message_ids if running else set()
    tally.unread = sum(COUNTER.count(str(m.content)) for m in messages
                       if m.id in summarised) - shown
    return tally


def main() -> None:
    """Both libraries on the same conversation, one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--budget", type=int, default=6000)
    args = parser.parse_args()
    texts = conversation(args.turns)
    total = sum(COUNTER.count(text) for _, text in texts)
    rows: list[tuple[str, Tally]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in (0.6, 0.4, 0.3, 0.25, 0.2):
            config = ChatConfig(max_history_tokens=args.budget, compress_target=target,
                                summary_max_tokens=SUMMARY_TOKENS)
            rows.append((f"chatkeep, compress_target {target}",
                         run_chatkeep(texts, args.budget, config, Path(tmp) / f"{target}.db")))
    rows.append(("langmem", run_langmem(texts, args.budget)))
    # langmem held to the same budget: summary and system prompt inside it.
    within = args.budget - SUMMARY_TOKENS - COUNTER.count(SYSTEM) - 8
    rows.append(("langmem, within the budget",
                 run_langmem(texts, args.budget, before_summary=within)))
    print(f"{args.turns} turns, {total} conversation tokens, a {args.budget}-token budget, "
          f"{SUMMARY_TOKENS}-token summaries.\n")
    print("| summariser | calls | tokens fed | fed / conversation | largest history "
          "| summarised unread |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, tally in rows:
        print(f"| {name} | {tally.calls} | {tally.fed} | {tally.fed / total:.3f}x | "
              f"{tally.peak} | {tally.unread} |")


if __name__ == "__main__":
    main()
