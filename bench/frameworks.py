"""Per turn, chatkeep beside each framework's own default persistence, at 100 and 10,000
stored items, in one run: latency and the tokens the model would be sent.

    python bench/frameworks.py [--markdown] [--turns 30] [--sizes 100,10000]
                               [--budget 4000] [--only agents,pydantic,langgraph] [--dir DIR]
                               [--peer-src PATH]

Needs the three frameworks (``pip install -e ".[agents,pydantic-ai,langchain]"``) and
``langgraph-checkpoint-sqlite`` for LangGraph's ``SqliteSaver``. No model and no network:
chatkeep summarizes with its offline extractive summarizer (the run stops if a model is
configured through ``llm`` / ``OPENAI_*``), and LangGraph's agent calls a fake chat model.

What a turn is, per framework (each store holds ``items`` messages first, seeded in bulk
and untimed: batches of ``add_items``, one ``save``, LangGraph's ``update_state``, or for
chatkeep without a checkpointer a first ``invoke`` carrying them; then every contender
plays one untimed warm-up turn, where chatkeep folds the seeded backlog, with no bound on
its summarizer calls, as the background fold job would):

* **OpenAI Agents SDK**: the Runner's session calls for one turn, no model:
  ``get_items()`` then ``add_items([user, assistant])``. The SDK's ``SQLAlchemySession``
  (SQLite file through aiosqlite) beside chatkeep's ``ChatkeepSession`` (``AsyncChatkeep``
  on a SQLite file). Model-visible: the items ``get_items()`` returns.
* **Pydantic AI**: load the history, append a user + assistant exchange, save. The
  framework's way, the yardstick the issue names: its ``InMemoryConversationStore``
  (``load``, ``save``) with the conversation written to a JSON file after each turn
  (``ConversationTypeAdapter.dump_json``, fsynced, as the SQLite stores are at
  ``synchronous=FULL``); and, aside, the conversation read from that file and rewritten
  every turn with no store (``validate_json`` / ``dump_json``). chatkeep:
  ``ChatkeepConversationStore`` on SQLite, ``load``, the history the ``ChatkeepHistory``
  capability sends (``store.prepare_request``, what its ``before_model_request`` calls),
  then ``save``; loaded with ``store.for_run(id)`` as chatkeep's docs show it (the record
  and the newest two messages: the capability sends chatkeep's history in their place),
  and, aside, with ``store.load(id)``, which reads every message. Model-visible: the
  stored history the request carries (every loaded message / chatkeep's budgeted part);
  the new prompt comes on top of both.
* **LangGraph** (LangChain v1 ``create_agent``, no tools, a fake chat model): one
  ``invoke`` with one new user message. Two peers: ``SqliteSaver`` alone (the
  framework's default, which keeps and rewrites the whole state), and LangChain's own
  bounded setup, ``SummarizationMiddleware`` (a fake summarizer model, triggered at the
  budget, keeping its default newest 20 messages) with ``SqliteSaver``, held to parity at
  both sizes. Beside them: ``ChatkeepMiddleware`` with no checkpointer (the thread id in
  the config, chatkeep the only store); ``SqliteSaver`` plus ``ChatkeepMiddleware`` with
  its default ``trim_state`` (the state keeps what chatkeep has not folded yet, so the
  checkpointer writes a bounded state), and, aside, with ``trim_state=False`` (the
  checkpointer rewrites the whole state; the middleware only trims what the model is
  sent). ``ChatkeepSaver`` plus ``ChatkeepMiddleware``: chatkeep's own checkpointer,
  whose checkpoints refer to the session's log, one row per checkpoint, keeping them all
  (its default; held to the targets). Model-visible: every message the fake model was sent.

Tokens are counted the same way on both sides, with chatkeep's ``HeuristicCounter`` over
the texts (and tool-call arguments) of what the model would get; the figure printed is
the largest over the warm-up and timed turns (the frameworks' defaults send the whole
history, which only grows). chatkeep's must stay within ``chat.max_history_tokens``
(``--budget``) at every turn. The contenders of one size take turns round-robin (the
starting one rotating each round), so machine noise hits them alike; ratios are
default / chatkeep at the same size, from this run.
Targets: at least parity at 100 items, at least 10x at 10,000, chatkeep within budget;
rows marked "aside" are shown beside them, not held to them (the run says why).

``--peer-src PATH`` (LangGraph): the LangGraph chatkeep contenders also run with chatkeep
imported from another checkout's ``src`` (a git worktree of an older commit: ``git
worktree add /tmp/base <commit>``), in a child process whose turns take their place in
the same round-robin; its rows, named ``... @ <commit>``, are asides: the before of an
A/B in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _peers import peer_commit
from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.history.summarizers import ExtractiveSummarizer
from chatkeep.tokens import HeuristicCounter
from load import text

ORG = Ref("organization", 1)
SYSTEM = "You are a helpful assistant for a law firm. Answer precisely and cite clauses."
FRAMEWORKS = ("agents", "pydantic", "langgraph")
INSTALL = {
    "agents": 'pip install -e ".[agents]" (openai-agents, sqlalchemy[asyncio], aiosqlite)',
    "pydantic": 'pip install -e ".[pydantic-ai]" (pydantic-ai-slim 2.68 or later)',
    "langgraph": 'pip install -e ".[langchain]" langgraph-checkpoint-sqlite',
}
SEED_BATCH = 1000
"""Items per write while seeding (the Agents SDK sessions)."""
COUNTER = HeuristicCounter()


class BenchError(RuntimeError):
    """A contender failed: which one, where, and why."""


# -- texts and tokens -----------------------------------------------------------------------


def conversation_texts(count: int = 2048) -> list[tuple[str, str]]:
    """(user, assistant) texts made before any timing, shared by every contender (as in
    ``bench/async_load.py``: 40-120 and 120-300 words)."""
    rng = random.Random(21)
    return [(text(rng, 40, 120), text(rng, 120, 300)) for _ in range(count)]


TEXTS = conversation_texts()
_IDS = itertools.count()


def pairs(start: int, count: int) -> Iterator[tuple[str, str]]:
    """``count`` exchanges from the shared pool, from ``start`` on."""
    for i in range(start, start + count):
        yield TEXTS[i % len(TEXTS)]


def next_id() -> int:
    return next(_IDS)


_TEXT_KEYS = ("content", "text", "arguments", "output")


def item_tokens(value: Any) -> int:
    """Tokens of Agents SDK input items (dicts): every text, tool argument and output."""
    if isinstance(value, str):
        return COUNTER.count(value)
    if isinstance(value, list):
        return sum(item_tokens(v) for v in value)
    if isinstance(value, dict):
        return sum(item_tokens(value[k]) for k in _TEXT_KEYS if k in value)
    dump = getattr(value, "model_dump", None)
    return item_tokens(dump(exclude_unset=True)) if callable(dump) else 0


def pydantic_tokens(messages: Sequence[Any]) -> int:
    """Tokens of Pydantic AI messages: each part's text, a tool call's arguments."""
    total = 0
    for message in messages:
        for part in message.parts:
            args = getattr(part, "args_as_json_str", None)
            if callable(args):
                total += COUNTER.count(args())
                continue
            content = getattr(part, "content", None)
            if isinstance(content, str):
                total += COUNTER.count(content)
            elif isinstance(content, list):
                total += sum(COUNTER.count(c) for c in content if isinstance(c, str))
            elif content is not None:
                total += COUNTER.count(json.dumps(content, default=str))
    return total


def langchain_tokens(messages: Sequence[Any]) -> int:
    """Tokens of LangChain messages: text and tool-call arguments."""
    return sum(COUNTER.count(str(m.text)) + sum(
        COUNTER.count(json.dumps(call["args"])) for call in getattr(m, "tool_calls", None) or ())
        for m in messages)


# -- a contender -----------------------------------------------------------------------------


@dataclass
class Contender:
    """One store at one size: ``play`` runs one turn and returns (seconds, tokens)."""

    framework: str
    name: str
    items: int
    play: Callable[[int], Awaitable[tuple[float, int]]]
    chatkeep: bool
    aside: str | None = None
    """Why this chatkeep row is shown beside the targets, not held to them (``None``: the
    documented setup, held to them)."""
    targets: dict[int, float] | None = None
    """A peer's own least peer / chatkeep ratios by size (``None``: ``TARGETS``)."""
    latencies: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    turn: int = 0

    async def once(self, timed: bool = True) -> None:
        """One turn: its time kept when ``timed``, its tokens always (the warm-up turn,
        where chatkeep folds the seeded backlog, counts for the budget too)."""
        index = self.turn
        self.turn += 1
        # Collect the other contenders' garbage now (untimed), so a collection their
        # 10,000-message turns made due does not land in this one's timing.
        gc.collect()
        try:
            seconds, tokens = await self.play(index)
        except Exception as exc:
            raise BenchError(f"{self.framework} / {self.name} at {self.items:,} items, "
                             f"turn {index}: {type(exc).__name__}: {exc}") from exc
        self.tokens.append(tokens)
        if timed:
            self.latencies.append(seconds)

    def p(self, q: float) -> float:
        """The ``q`` quantile of a turn, in ms (``statistics.quantiles``, inclusive)."""
        if q == 0.5:
            return 1000 * statistics.median(self.latencies)
        cuts = statistics.quantiles(self.latencies, n=10, method="inclusive")
        return 1000 * cuts[int(q * 10) - 1]


def offline(keep: Chatkeep) -> None:
    """Stop unless ``keep`` summarizes offline (no model configured)."""
    if keep.model is not None or not isinstance(keep.compressor.summarizer,
                                                ExtractiveSummarizer):
        raise SystemExit("a summary model is configured (llm config or OPENAI_* / "
                         "CHATKEEP_LLM_* environment): this benchmark runs offline")


def config(budget: int) -> dict[str, Any]:
    # The seeded backlog folds whole in the untimed warm-up turn (what the fold job does
    # in production: chat.max_fold_calls_per_turn bounds a live turn, not this set-up);
    # a timed turn makes one summarizer call at most either way.
    return {"chat": {"max_history_tokens": budget, "max_fold_calls_per_turn": 10_000},
            "memory": {"distil_on_compress": False}}  # no model: nothing to distil with


# -- OpenAI Agents SDK --------------------------------------------------------------------


def sdk_pair(user: str, assistant: str) -> list[Any]:
    return [{"role": "user", "content": user},
            {"id": f"msg_{next_id():x}", "type": "message", "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "text": assistant, "annotations": []}]}]


async def sdk_seed(session: Any, items: int) -> None:
    batch: list[Any] = []
    for user, assistant in pairs(0, items // 2):
        batch.extend(sdk_pair(user, assistant))
        if len(batch) >= SEED_BATCH:
            await session.add_items(batch)
            batch = []
    if batch:
        await session.add_items(batch)


def sdk_turns(session: Any, items: int) -> Callable[[int], Awaitable[tuple[float, int]]]:
    async def play(turn: int) -> tuple[float, int]:
        new = sdk_pair(*TEXTS[(items // 2 + turn) % len(TEXTS)])
        started = time.perf_counter()
        history = await session.get_items()
        await session.add_items(new)
        seconds = time.perf_counter() - started
        return seconds, item_tokens(history)

    return play


async def agents_contenders(directory: Path, sizes: Sequence[int], budget: int,
                            stack: list[Callable[[], Awaitable[None]]]) -> list[Contender]:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    from chatkeep.integrations.openai_agents import ChatkeepSession

    keep = AsyncChatkeep(f"sqlite:///{directory / 'agents-chatkeep.db'}", config=config(budget),
                         dispatcher="inline")
    await keep.start()
    stack.append(keep.close)
    offline(await keep.core())
    url = f"sqlite+aiosqlite:///{directory / 'agents-sdk.db'}"
    out = []
    for items in sizes:
        theirs = SQLAlchemySession.from_url(f"bench-{items}", url=url, create_tables=True)
        stack.append(theirs.engine.dispose)
        ours = await ChatkeepSession.open(keep, tenant=ORG, session_id=f"bench-{items}")
        await sdk_seed(theirs, items)
        await sdk_seed(ours, items)
        out.append(Contender("OpenAI Agents SDK", "SQLAlchemySession (SQLite, aiosqlite)",
                             items, sdk_turns(theirs, items), False))
        out.append(Contender("OpenAI Agents SDK", "ChatkeepSession", items,
                             sdk_turns(ours, items), True))
    return out


# -- Pydantic AI -----------------------------------------------------------------------------


def pydantic_pair(user: str, assistant: str) -> tuple[Any, Any]:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    return (ModelRequest(parts=[UserPromptPart(user)]),
            ModelResponse(parts=[TextPart(assistant)], model_name="fake"))


def pydantic_history(items: int) -> list[Any]:
    return [m for user, assistant in pairs(0, items // 2)
            for m in pydantic_pair(user, assistant)]


def write_synced(path: Path, data: bytes) -> None:
    """``data`` in ``path``, on disk before returning (as a SQLite commit at FULL)."""
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def json_file_turns(path: Path, items: int) -> Callable[[int], Awaitable[tuple[float, int]]]:
    from pydantic_ai.conversation import ConversationTypeAdapter

    async def play(turn: int) -> tuple[float, int]:
        request, response = pydantic_pair(*TEXTS[(items // 2 + turn) % len(TEXTS)])
        started = time.perf_counter()
        conversation = ConversationTypeAdapter.validate_json(path.read_bytes())
        history = list(conversation.messages)  # what message_history / conversation= sends
        conversation.messages.extend((request, response))
        write_synced(path, ConversationTypeAdapter.dump_json(conversation))
        seconds = time.perf_counter() - started
        return seconds, pydantic_tokens(history)

    return play


def memory_store_turns(memory: Any, path: Path, key: str,
                       items: int) -> Callable[[int], Awaitable[tuple[float, int]]]:
    """Pydantic AI's ``InMemoryConversationStore`` serving the turn (``load``, ``save``),
    the conversation then written to its JSON file (fsynced): what survives a restart."""
    from pydantic_ai.conversation import ConversationTypeAdapter

    async def play(turn: int) -> tuple[float, int]:
        request, response = pydantic_pair(*TEXTS[(items // 2 + turn) % len(TEXTS)])
        started = time.perf_counter()
        conversation = await memory.load(key)
        if conversation is None:
            raise BenchError(f"conversation {key!r} is not in the in-memory store")
        history = list(conversation.messages)  # what message_history / conversation= sends
        conversation.messages.extend((request, response))
        await memory.save(conversation)
        write_synced(path, ConversationTypeAdapter.dump_json(conversation))
        seconds = time.perf_counter() - started
        return seconds, pydantic_tokens(history)

    return play


def store_turns(store: Any, key: str, items: int,
                whole: bool) -> Callable[[int], Awaitable[tuple[float, int]]]:
    async def play(turn: int) -> tuple[float, int]:
        request, response = pydantic_pair(*TEXTS[(items // 2 + turn) % len(TEXTS)])
        started = time.perf_counter()
        conversation = await (store.load(key) if whole else store.for_run(key))
        if conversation is None or conversation.revision is None:
            raise BenchError(f"conversation {key!r} is not in the store")
        prepared = await store.prepare_request(ORG, key, [request], [])
        conversation.messages.extend((request, response))
        await store.save(conversation)
        seconds = time.perf_counter() - started
        return seconds, pydantic_tokens(prepared.history)

    return play


async def pydantic_contenders(directory: Path, sizes: Sequence[int], budget: int,
                              stack: list[Callable[[], Awaitable[None]]]) -> list[Contender]:
    from pydantic_ai.conversation import Conversation, ConversationTypeAdapter
    from pydantic_ai.conversation_store import InMemoryConversationStore

    from chatkeep.integrations.pydantic_ai import ChatkeepConversationStore

    keep = AsyncChatkeep(f"sqlite:///{directory / 'pydantic-chatkeep.db'}",
                         config=config(budget), dispatcher="inline")
    await keep.start()
    stack.append(keep.close)
    offline(await keep.core())
    store = ChatkeepConversationStore(keep, tenant=ORG)
    memory = InMemoryConversationStore()
    out = []
    for items in sizes:
        key = f"bench-{items}"
        await memory.save(Conversation(messages=pydantic_history(items), conversation_id=key))
        out.append(Contender("Pydantic AI", "InMemoryConversationStore + JSON file", items,
                             memory_store_turns(memory, directory / f"memory-{items}.json",
                                                key, items), False))
        path = directory / f"pydantic-{items}.json"
        write_synced(path, ConversationTypeAdapter.dump_json(
            Conversation(messages=pydantic_history(items), conversation_id=key)))
        out.append(Contender("Pydantic AI", "Conversation as JSON in a file", items,
                             json_file_turns(path, items), False, JSON_ALONE_ASIDE))
        for label, whole, aside in (
                ("store.for_run(id)", False, None),
                ("store.load(id)", True, "loads every message, as load(id) must: what a "
                 "page showing the whole conversation pays, not a run")):
            key = f"bench-{items}-{label}"
            await store.save(Conversation(messages=pydantic_history(items),
                                          conversation_id=key))
            out.append(Contender("Pydantic AI", f"ChatkeepConversationStore, {label}", items,
                                 store_turns(store, key, items, whole), True, aside))
    return out


JSON_ALONE_ASIDE = ("the whole conversation read from its JSON file and rewritten every "
                    "turn, without the in-memory store the issue names as the yardstick")


# -- LangGraph -------------------------------------------------------------------------------


SAVER_ASIDE = ("trim_state=False: the checkpointer still writes the whole state every "
               "step, the middleware can only add to SqliteSaver's own cost")

#: LangChain's bounded setup is held to parity at every size (not to the 10x asked of
#: the unbounded defaults).
BOUNDED_TARGETS = {100: 1.0, 10_000: 1.0}


#: The checkpoints ``ChatkeepSaver`` keeps per thread here: ``None``, its default, keeps
#: them all (one row per checkpoint, so a step's write is the same size either way).
SAVER_KEEPS: int | None = None


def fake_model() -> Any:
    """langchain-core's ``GenericFakeChatModel`` answering each call with the next text of
    the shared pool, keeping what it was last sent."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from pydantic import Field

    class FakeModel(GenericFakeChatModel):
        sent: list[Any] = Field(default_factory=list)
        replies: Iterator[int] = Field(default_factory=itertools.count)

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeModel:
            return self

        def _generate(self, messages: list[Any], stop: list[str] | None = None,
                      run_manager: Any = None, **kwargs: Any) -> Any:
            self.sent = list(messages)
            answer = TEXTS[next(self.replies) % len(TEXTS)][1]
            self.messages = iter([AIMessage(answer, id=f"ai-{next_id()}")])
            return super()._generate(messages, stop, run_manager, **kwargs)

    return FakeModel(messages=iter(()))


def langchain_history(items: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [m for user, assistant in pairs(0, items // 2)
            for m in (HumanMessage(user, id=f"h-{next_id()}"),
                      AIMessage(assistant, id=f"a-{next_id()}"))]


def graph_turns(graph: Any, model: Any, thread: str,
                items: int) -> Callable[[int], Awaitable[tuple[float, int]]]:
    run_config = {"configurable": {"thread_id": thread}}

    async def play(turn: int) -> tuple[float, int]:
        user = TEXTS[(items // 2 + turn) % len(TEXTS)][0]
        started = time.perf_counter()
        graph.invoke({"messages": [{"role": "user", "content": user}]}, run_config)
        seconds = time.perf_counter() - started
        return seconds, langchain_tokens(model.sent)

    return play


async def langgraph_contenders(directory: Path, sizes: Sequence[int], budget: int,
                               stack: list[Callable[[], Awaitable[None]]]) -> list[Contender]:
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.checkpoint.sqlite import SqliteSaver

    from chatkeep.integrations.langchain import ChatkeepMiddleware, ChatkeepSaver

    keep = Chatkeep(f"sqlite:///{directory / 'langgraph-chatkeep.db'}", config=config(budget),
                    dispatcher="inline").start()
    offline(keep)

    async def close_keep() -> None:
        keep.close()

    stack.append(close_keep)

    def saver(name: str) -> Any:
        conn = sqlite3.connect(directory / name, check_same_thread=False)

        async def close() -> None:
            conn.close()

        stack.append(close)
        return SqliteSaver(conn)

    def middleware(kind: str) -> list[Any]:
        if kind == "summarization":
            return [SummarizationMiddleware(fake_model(), trigger=("tokens", budget))]
        if kind == "chatkeep":
            return [ChatkeepMiddleware(keep, tenant=ORG)]
        if kind == "untrimmed":
            return [ChatkeepMiddleware(keep, tenant=ORG, trim_state=False)]
        return []

    graphs = []
    ours = ChatkeepSaver(keep, tenant=ORG, keep_last=SAVER_KEEPS)
    saver_name = "ChatkeepSaver" + ("" if SAVER_KEEPS is None
                                    else f"(keep_last={SAVER_KEEPS})")
    for name, checkpointer, kind in (
            ("SqliteSaver", saver("langgraph-sdk.db"), ""),
            ("SummarizationMiddleware + SqliteSaver", saver("langgraph-summarized.db"),
             "summarization"),
            ("SqliteSaver + ChatkeepMiddleware", saver("langgraph-with-chatkeep.db"),
             "chatkeep"),
            ("SqliteSaver + ChatkeepMiddleware(trim_state=False)",
             saver("langgraph-untrimmed.db"), "untrimmed"),
            ("ChatkeepMiddleware, no checkpointer", None, "chatkeep"),
            (f"{saver_name} + ChatkeepMiddleware", ours, "chatkeep")):
        model = fake_model()
        graph = create_agent(model, [], system_prompt=SYSTEM, checkpointer=checkpointer,
                             middleware=middleware(kind))
        graphs.append((name, graph, model, checkpointer, kind))
    out = []
    for items in sizes:
        for index, (name, graph, model, checkpointer, kind) in enumerate(graphs):
            chatkeep = kind in ("chatkeep", "untrimmed")
            thread = f"bench-{index}-{items}"  # a session (and a thread) per contender
            history = langchain_history(items)
            if checkpointer is not None:
                graph.update_state({"configurable": {"thread_id": thread}},
                                   {"messages": history}, as_node="model")
            else:  # chatkeep alone: the history goes in with a first (untimed) run
                graph.invoke({"messages": history}, {"configurable": {"thread_id": thread}})
            aside = SAVER_ASIDE if kind == "untrimmed" else None
            out.append(Contender("LangGraph", name, items,
                                 graph_turns(graph, model, thread, items), chatkeep, aside,
                                 BOUNDED_TARGETS if kind == "summarization" else None))
    return out


# -- --peer-src: chatkeep of another checkout, in a child process --------------------------


async def serve_langgraph(args: argparse.Namespace) -> None:
    """The child of ``--peer-src``: build the LangGraph contenders (with the chatkeep
    ``PYTHONPATH`` names), say which are chatkeep's, then play the turns asked on stdin
    (one JSON line each: the contender's index) and answer each with its seconds and
    tokens."""
    stack: list[Callable[[], Awaitable[None]]] = []
    try:
        contenders = await langgraph_contenders(args.dir, args.sizes, args.budget, stack)
        print(json.dumps([[i, c.name, c.items] for i, c in enumerate(contenders)
                          if c.chatkeep]), flush=True)
        for line in sys.stdin:
            contender = contenders[json.loads(line)]
            gc.collect()
            index = contender.turn
            contender.turn += 1
            print(json.dumps(await contender.play(index)), flush=True)
    finally:
        for close in reversed(stack):
            await close()


async def peer_contenders(directory: Path, args: argparse.Namespace,
                          stack: list[Callable[[], Awaitable[None]]]) -> list[Contender]:
    """The LangGraph chatkeep contenders of ``--peer-src``, played in a child process."""
    folder = directory / "peer"
    folder.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(args.peer_src))
    argv = [sys.executable, __file__, "--serve-langgraph", "--dir", str(folder),
            "--budget", str(args.budget), "--sizes", ",".join(map(str, args.sizes))]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=env)
    assert child.stdin is not None and child.stdout is not None
    pipe_in, pipe_out = child.stdin, child.stdout

    async def close() -> None:
        pipe_in.close()
        child.wait(60)

    stack.append(close)
    named = json.loads(pipe_out.readline() or "null")
    if not isinstance(named, list):
        raise BenchError(f"the --peer-src process ({args.peer_src}) did not start")
    commit = peer_commit(args.peer_src)

    def turns(index: int) -> Callable[[int], Awaitable[tuple[float, int]]]:
        async def play(turn: int) -> tuple[float, int]:
            pipe_in.write(json.dumps(index) + "\n")
            pipe_in.flush()
            answer = json.loads(pipe_out.readline() or "null")
            if answer is None:
                raise BenchError("the --peer-src process stopped")
            return float(answer[0]), int(answer[1])

        return play

    return [Contender("LangGraph", f"{name} @ {commit}", items, turns(index), True,
                      f"chatkeep at {commit} (--peer-src): the before of an A/B")
            for index, name, items in named]


# -- the run --------------------------------------------------------------------------------


BUILDERS = {"agents": agents_contenders, "pydantic": pydantic_contenders,
            "langgraph": langgraph_contenders}


def check_imports(frameworks: Sequence[str]) -> None:
    """Exit naming what to install when a framework (or its default store) is missing."""
    modules = {"agents": ["agents.extensions.memory.sqlalchemy_session", "aiosqlite"],
               "pydantic": ["pydantic_ai.conversation_store"],
               "langgraph": ["langchain.agents", "langgraph.checkpoint.sqlite"]}
    missing = []
    for framework in frameworks:
        for module in modules[framework]:
            try:
                __import__(module)
            except ImportError as exc:
                missing.append(f"{framework}: {exc} -> {INSTALL[framework]}")
                break
    if missing:
        raise SystemExit("missing dependencies:\n  " + "\n  ".join(missing))


async def measure(directory: Path, args: argparse.Namespace) -> list[Contender]:
    """Seed every contender; then, size by size, one warm-up turn each and ``--turns``
    rounds in which every contender of that size plays one turn."""
    stack: list[Callable[[], Awaitable[None]]] = []
    try:
        contenders: list[Contender] = []
        for framework in args.only:
            started = time.perf_counter()
            try:
                contenders += await BUILDERS[framework](directory, args.sizes, args.budget,
                                                        stack)
            except (BenchError, SystemExit):
                raise
            except Exception as exc:
                raise BenchError(f"setting up {framework}: {type(exc).__name__}: {exc}") \
                    from exc
            print(f"seeded {framework} in {time.perf_counter() - started:.1f} s",
                  file=sys.stderr)
        if args.peer_src is not None and "langgraph" in args.only:
            contenders += await peer_contenders(directory, args, stack)
        for items in args.sizes:  # the ratios are within a size: interleave each size
            group = [c for c in contenders if c.items == items]
            started = time.perf_counter()
            for contender in group:  # warm-up; chatkeep folds the seeded backlog here
                await contender.once(timed=False)
            for round_ in range(args.turns):
                shift = round_ % len(group)
                for contender in group[shift:] + group[:shift]:
                    await contender.once()
            print(f"{items:,} items: warm-up and {args.turns} rounds in "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
        return contenders
    finally:
        for close in reversed(stack):
            try:
                await close()
            except Exception as exc:  # report it, and close the rest
                print(f"closing: {type(exc).__name__}: {exc}", file=sys.stderr)


TARGETS = {100: 1.0, 10_000: 10.0}
"""Stored items -> the least default / chatkeep p50 ratio asked for."""


def rows(contenders: Sequence[Contender], budget: int) -> list[list[str]]:
    """One row per chatkeep contender and peer of its framework at the same size; the
    targets hold where neither side is an aside (the framework's first peer is its
    yardstick)."""
    out = []
    for ours in (c for c in contenders if c.chatkeep):
        for peer in (c for c in contenders if not c.chatkeep
                     and c.framework == ours.framework and c.items == ours.items):
            out.append(row(ours, peer, budget))
    return out


def row(ours: Contender, peer: Contender, budget: int) -> list[str]:
    """``ours`` beside ``peer``: latencies, the ratio against its target, tokens."""
    ratio = peer.p(0.5) / ours.p(0.5)
    target = (peer.targets or TARGETS).get(ours.items)
    aside = ours.aside is not None or peer.aside is not None
    if target is None or aside:
        shown = f"{ratio:.2f}x" + (" (aside)" if aside else "")
    elif ratio >= target:
        shown = f"**{ratio:.2f}x** (>= {target:g}x)"
    else:
        shown = f"{ratio:.2f}x (target {target:g}x)"
    fits = max(ours.tokens) <= budget
    return [ours.framework, peer.name, ours.name, f"{ours.items:,}",
            f"{peer.p(0.5):.1f}", f"{peer.p(0.9):.1f}", f"{ours.p(0.5):.1f}",
            f"{ours.p(0.9):.1f}", shown, f"{max(peer.tokens):,}", f"{max(ours.tokens):,}",
            f"{budget:,}", "yes" if fits else "**no**"]


LEFT = 3
"""Columns aligned left (the names)."""


def render(header: Sequence[str], body: Sequence[Sequence[str]], markdown: bool) -> str:
    """Markdown (``--markdown``) or aligned plain text."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "---|" * LEFT + "---:|" * (len(header) - LEFT)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    plain = [[cell.replace("**", "") for cell in row] for row in body]
    widths = [max(len(row[i]) for row in (header, *plain)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(widths[i]) if i < LEFT else c.rjust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, plain)])


def sizes(value: str) -> list[int]:
    out = [int(part.replace("_", "")) for part in value.split(",") if part.strip()]
    if not out or any(n < 2 for n in out):
        raise argparse.ArgumentTypeError("sizes: comma-separated item counts, each >= 2")
    return out


def frameworks(value: str) -> list[str]:
    out = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [f for f in out if f not in FRAMEWORKS]
    if unknown or not out:
        raise argparse.ArgumentTypeError(f"unknown framework(s) {unknown}; choose from "
                                         f"{', '.join(FRAMEWORKS)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--turns", type=int, default=30, help="timed turns per contender")
    parser.add_argument("--sizes", type=sizes, default=[100, 10_000],
                        help="stored items before the timed turns (default 100,10000)")
    parser.add_argument("--budget", type=int, default=4000,
                        help="chatkeep's chat.max_history_tokens")
    parser.add_argument("--only", type=frameworks, default=list(FRAMEWORKS),
                        help="frameworks, comma-separated: " + ", ".join(FRAMEWORKS))
    parser.add_argument("--dir", type=Path, default=None,
                        help="folder for the database and JSON files (default: a temporary one)")
    parser.add_argument("--peer-src", type=Path, default=None,
                        help="LangGraph: also run chatkeep from this checkout's src (A/B)")
    parser.add_argument("--serve-langgraph", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_langgraph:
        asyncio.run(serve_langgraph(args))
        return
    if args.turns < 2:
        parser.error("--turns must be at least 2")
    check_imports(args.only)
    load_before = os.getloadavg()
    try:
        if args.dir is not None:
            args.dir.mkdir(parents=True, exist_ok=True)
            contenders = asyncio.run(measure(args.dir, args))
        else:
            with tempfile.TemporaryDirectory(prefix="chatkeep-frameworks-") as tmp:
                contenders = asyncio.run(measure(Path(tmp), args))
    except BenchError as exc:
        cause = exc.__cause__
        where = ""
        if cause is not None and cause.__traceback__ is not None:
            frame = traceback.extract_tb(cause.__traceback__)[-1]
            where = f" ({frame.filename}:{frame.lineno})"
        raise SystemExit(f"benchmark failed: {exc}{where}") from None
    load_after = os.getloadavg()
    print(f"{args.turns} timed turns per contender, interleaved; chat.max_history_tokens "
          f"{args.budget:,}; summaries offline (extractive); Python "
          f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
          f"{platform.machine()}, {os.cpu_count()} cores; load average (1, 5, 15 min) "
          f"{', '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{', '.join(f'{x:.2f}' for x in load_after)} after\n")
    header = ["framework", "default store", "chatkeep", "items", "default p50 ms",
              "default p90 ms", "chatkeep p50 ms", "chatkeep p90 ms",
              "default / chatkeep (p50)", "default tokens", "chatkeep tokens", "budget",
              "within budget"]
    print(render(header, rows(contenders, args.budget), args.markdown))
    asides = {(c.framework, c.name): c.aside for c in contenders if c.aside is not None}
    if asides:
        print("\nAside (shown, not held to the targets): " + "; ".join(
            f"{framework} / {name}: {why}" for (framework, name), why in asides.items()) + ".")
    print("\nitems: stored before the timed turns (each turn adds two). Tokens: the most "
          "over the warm-up and timed turns, chatkeep's HeuristicCounter on both sides. "
          "Targets: default / chatkeep p50 >= 1x at 100 items and >= 10x at 10,000; "
          "chatkeep's tokens within the budget at every turn.")


if __name__ == "__main__":
    main()
