"""A turn on a fresh session and on a long one: chatkeep beside the Agents SDK's ``SQLiteSession``.

    pip install -e ".[bench]"      # the SDK, for this benchmark only
    python bench/fresh_turn.py [--turns 1200] [--fresh-turns 400] [--long 2000]
                               [--block 25] [--budget 6000] [--variants]
                               [--peer-src PATH | --peer-rev REV] [--breakdown]
                               [--dir DIR] [--markdown]

A turn is what an application does per request: chatkeep appends the user message,
calls ``build_history`` and appends the answer with its usage; the SDK does the same
work its runner does per turn, ``add_items([user])``, ``get_items()``,
``add_items([assistant])``. The *fresh* turn starts from an empty session and a new
session begins every ``--fresh-turns`` turns: at a 6,000-token budget chatkeep's offline
extractive summarizer folds about every thirty turns, so the turns that fold are in the
rate (the folds are counted and printed). The *long* turn runs on a session seeded with
``--long`` messages (chatkeep's backlog folded before the clock starts), where the SDK
reads every stored item per turn and chatkeep what follows its watermark.

Both stores are SQLite files in WAL mode on the same disk at ``synchronous=NORMAL`` and
``FULL`` (each with the level pinned). Every contender runs in turns of ``--block`` turns,
interleaved with the others, so load from elsewhere on the machine falls on all alike;
each rate is total turns over total time, each ratio is against the SDK at the same level
and scenario, in this run.

``--variants`` adds chatkeep with SQLite's ``secure_delete`` off on its connections (what
zeroing freed bytes costs a turn). ``--peer-src PATH`` adds, in the same interleaving,
chatkeep imported from another checkout's ``src`` (a git worktree of an older commit)
running in a child process, for a same-moment A/B; ``--peer-rev REV`` does the same with
this repository's ``src`` at commit ``REV`` (extracted with ``git archive``, nothing
checked out). The child runs alone in its process, beside none of the other contenders'
objects: ``--peer-rev HEAD`` shows what that alone is worth, so an A/B's difference is
read against it.

``--breakdown`` then runs chatkeep's fresh turn at ``NORMAL`` alone and prints where its
CPU time goes, part by part (each function timed in place while it runs; a part inside
another is in both): the two appends, and inside ``build_history`` the read, the plan,
the render, the commit (a fold, when the plan folds), and the request's digest and
manifest, which replay records for every request that leaves. The output is Markdown
(``--markdown`` is accepted, so ``bench/report.py`` calls every bench alike).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import json
import logging
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import event

from _peers import extract_src, peer_commit

SYSTEM = "You are a helpful assistant for a law firm. Answer precisely and cite clauses."
WORDS = [
    "contract", "notice", "clause", "renewal", "termination", "party", "agreement", "payment",
    "invoice", "deadline", "liability", "warranty", "schedule", "amendment", "counsel",
    "review", "draft", "signature", "jurisdiction", "damages", "indemnity", "confidential",
    "delivery", "breach", "remedy", "period",
]
LEVELS = ("NORMAL", "FULL")
SCENARIOS = ("fresh", "long")


def text(rng: random.Random, low: int, high: int) -> str:
    """Words in sentences (so the extractive summarizer has first lines)."""
    n = rng.randint(low, high)
    words = [rng.choice(WORDS) for _ in range(n)]
    for i in range(12, n, 15):
        words[i] += "."
    return " ".join(words).capitalize() + "."


PAIRS = 4096
"""Distinct (user, assistant) pairs, written before the clock starts, then repeated."""


def conversation(seed: int) -> Iterator[tuple[str, str]]:
    """An endless conversation of (user, assistant) texts, the same for every contender;
    made up front, so the timed turns do not pay for writing it."""
    rng = random.Random(seed)
    pairs = [(text(rng, 15, 40), text(rng, 50, 110)) for _ in range(PAIRS)]
    return itertools.cycle(pairs)


class Contender(Protocol):
    """One side: runs a block of turns, says how many folds it made."""

    name: str

    async def block(self, n: int) -> float:
        """Run ``n`` turns; the seconds they took."""

    def folds(self) -> int:
        """Folds made in the timed turns (0 for the SDK)."""


class ChatkeepSide:
    """chatkeep's sync API: a fresh session every ``fresh_turns``, or one long session."""

    def __init__(self, name: str, path: Path, level: str, scenario: str, budget: int,
                 fresh_turns: int, long: int, secure_delete: bool) -> None:
        from chatkeep import Chatkeep

        self.name = name
        self.scenario, self.fresh_turns = scenario, fresh_turns
        config: dict[str, Any] = {"store": {"sqlite_synchronous": level},
                                  "chat": {"max_history_tokens": budget},
                                  "memory": {"distil_on_compress": False}}
        self.keep = Chatkeep(f"sqlite:///{path}", dispatcher="inline", config=config)
        if type(self.keep.compressor.summarizer).__name__ != "ExtractiveSummarizer":
            raise SystemExit("unset OPENAI_* / CHATKEEP_LLM_*: this benchmark runs offline")
        if not secure_delete:
            self.keep.engine.dispose()

            @event.listens_for(self.keep.engine, "connect")
            def _plain(dbapi_connection: Any, _record: Any) -> None:
                dbapi_connection.execute("PRAGMA secure_delete=OFF")

        self.turns = conversation(1)
        self.done = 0
        self.session: Any = None
        self.versions_before = 0
        self.folded = 0
        self._start(long)

    def _start(self, seed: int) -> None:
        from chatkeep import Ref
        from chatkeep.messages import MessageDraft, Role

        if self.session is not None:
            self.folded += self.session.refresh().row.summary_version - self.versions_before
        number = self.done // max(1, self.fresh_turns)
        self.session = self.keep.sessions.create(
            Ref("organization", 1), Ref("user", 1), Ref("matter", f"{self.scenario}-{number}"))
        if seed:
            drafts = []
            for _ in range(seed // 2):
                user, reply = next(self.turns)
                drafts += [MessageDraft(Role.USER, user), MessageDraft(Role.ASSISTANT, reply)]
            for start in range(0, len(drafts), 500):
                self.session.add_drafts(drafts[start:start + 500])
            watermark = -1
            while watermark != (watermark := self.session.refresh().row.summary_watermark):
                self.keep.compressor.build_history(self.session, SYSTEM)  # fold the seeded
                # backlog, a bounded step per call, until a call folds nothing more
        self.versions_before = self.session.refresh().row.summary_version

    def turn(self) -> None:
        """append the user message, build the history, append the answer."""
        from chatkeep.messages import Usage

        if self.scenario == "fresh" and self.done and self.done % self.fresh_turns == 0:
            self._start(0)
        user, reply = next(self.turns)
        self.session.add_user(user)
        history = self.keep.compressor.build_history(self.session, SYSTEM)
        prompt = sum(len(str(m.get("content") or "")) for m in history) // 4
        self.session.add_assistant(reply, usage=Usage(prompt, len(reply) // 4), model="bench")
        self.done += 1

    async def block(self, n: int) -> float:
        begin = time.perf_counter()
        for _ in range(n):
            self.turn()
        return time.perf_counter() - begin

    def folds(self) -> int:
        now = int(self.session.refresh().row.summary_version)
        return self.folded + now - self.versions_before


class SdkSide:
    """The Agents SDK's ``SQLiteSession`` with ``synchronous`` pinned."""

    def __init__(self, name: str, path: Path, level: str, scenario: str,
                 fresh_turns: int, long: int) -> None:
        from agents.memory import SQLiteSession

        class Pinned(SQLiteSession):
            @staticmethod
            def _configure_connection(conn: sqlite3.Connection) -> None:
                SQLiteSession._configure_connection(conn)
                conn.execute(f"PRAGMA synchronous={level}")

        self.kind = Pinned
        self.name, self.path = name, path
        self.scenario, self.fresh_turns = scenario, fresh_turns
        self.turns = conversation(1)
        self.done = 0
        self.session: Any = None
        self.seed = long
        self.started = False

    async def _start(self) -> None:
        number = self.done // max(1, self.fresh_turns)
        self.session = self.kind(f"{self.scenario}-{number}", self.path)
        if self.seed and not self.started:
            items: list[Any] = []
            for _ in range(self.seed // 2):
                user, reply = next(self.turns)
                items += [{"role": "user", "content": user},
                          {"role": "assistant", "content": reply}]
            await self.session.add_items(items)
        self.started = True

    async def turn(self) -> None:
        """add_items([user]), get_items(), add_items([assistant])."""
        if self.session is None or (self.scenario == "fresh" and self.done
                                    and self.done % self.fresh_turns == 0):
            await self._start()
        user, reply = next(self.turns)
        await self.session.add_items([{"role": "user", "content": user}])
        await self.session.get_items()
        await self.session.add_items([{"role": "assistant", "content": reply}])
        self.done += 1

    async def block(self, n: int) -> float:
        begin = time.perf_counter()
        for _ in range(n):
            await self.turn()
        return time.perf_counter() - begin

    def folds(self) -> int:
        return 0


class PeerSide:
    """chatkeep from another checkout, in a child process, driven block by block."""

    def __init__(self, name: str, child: subprocess.Popen[str], key: str) -> None:
        self.name, self.child, self.key = name, child, key

    def _ask(self, request: dict[str, Any]) -> Any:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(json.dumps(request) + "\n")
        self.child.stdin.flush()
        line = self.child.stdout.readline()
        if not line:
            raise SystemExit(f"the peer process ended ({self.name})")
        return json.loads(line)

    async def block(self, n: int) -> float:
        return float(self._ask({"op": "block", "key": self.key, "n": n}))

    def folds(self) -> int:
        return int(self._ask({"op": "folds", "key": self.key}))


PARTS = {
    "append the user message": ("chatkeep.sessions", "ChatSession", "add_user"),
    "build_history: read the session and its unfolded tail":
        ("chatkeep.store.repository", "Repository", "read_history"),
    "build_history: plan (price, fit the budget)": ("chatkeep.history.round", None,
                                                    "plan_history"),
    "build_history: render the wire format": ("chatkeep.history.round", "HistoryRound",
                                              "_render"),
    "build_history: fold, or store placeholders (commit)":
        ("chatkeep.history.round", "HistoryRound", "commit"),
    "build_history: the request's SHA-256 (replay)": ("chatkeep.history.round", None,
                                                      "body_digest"),
    "build_history: the request's manifest written (replay)":
        ("chatkeep.store.repository", "Repository", "record_manifest"),
    "append the answer with its usage": ("chatkeep.sessions", "ChatSession",
                                         "add_assistant"),
}
"""What ``--breakdown`` times in a fresh turn: a label, and the module, class (``None``:
a module-level name, as the round calls it) and name of the function that does it."""


class Timed:
    """Process CPU time spent in named functions, each wrapped in place while the
    breakdown runs (a function inside another is counted in both)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, label: str, module: str, owner: str | None, name: str) -> None:
        target: Any = importlib.import_module(module)
        if owner is not None:
            target = getattr(target, owner)
        original = getattr(target, name)
        spent = self.seconds
        spent[label] = 0.0

        def timed(*args: Any, **kwargs: Any) -> Any:
            begin = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - begin

        self._undo.append((target, name, original))
        setattr(target, name, timed)

    def restore(self) -> None:
        for target, name, original in reversed(self._undo):
            setattr(target, name, original)
        self._undo.clear()


def breakdown(directory: Path, args: argparse.Namespace) -> None:
    """Where the CPU time of a fresh turn at ``NORMAL`` goes (``--breakdown``): chatkeep's
    fresh side run alone for ``--turns`` turns, each part's median over rounds of
    ``--block`` turns, in microseconds per turn."""
    side = ChatkeepSide("chatkeep (NORMAL)", directory / "breakdown.db", "NORMAL", "fresh",
                        args.budget, args.fresh_turns, 0, True)
    for _ in range(args.block):  # untimed: caches, statements, the file
        side.turn()
    timed = Timed()
    for label, (module, owner, name) in PARTS.items():
        timed.wrap(label, module, owner, name)
    rounds: dict[str, list[float]] = {label: [] for label in [*timed.seconds, "turn"]}
    try:
        for _ in range(max(1, args.turns // args.block)):
            for label in timed.seconds:
                timed.seconds[label] = 0.0
            begin = time.process_time()
            for _ in range(args.block):
                side.turn()
            rounds["turn"].append(time.process_time() - begin)
            for label, seconds in timed.seconds.items():
                rounds[label].append(seconds)
    finally:
        timed.restore()
    per_turn = {label: 1e6 * statistics.median(values) / args.block
                for label, values in rounds.items()}
    named = sum(per_turn[label] for label in PARTS)
    print(f"## Where a fresh turn's time goes (NORMAL)\n\n{len(rounds['turn'])} rounds of "
          f"{args.block} turns, chatkeep alone; CPU time per turn (median round), "
          f"{side.folds()} folds\n")
    print("| part | µs per turn | share of the turn |")
    print("|---|---:|---:|")
    whole = per_turn["turn"]
    for label in PARTS:
        print(f"| {label} | {per_turn[label]:,.0f} | {per_turn[label] / whole:.0%} |")
    rest = whole - named
    print(f"| the rest (validation, egress, the bench's own loop) | {rest:,.0f} | "
          f"{rest / whole:.0%} |")
    print(f"| **the whole turn** | {whole:,.0f} | 100% |\n")


def chatkeep_sides(directory: Path, label: str, args: argparse.Namespace,
                   secure_delete: bool = True) -> dict[str, ChatkeepSide]:
    """chatkeep at each level and scenario, keyed ``level/scenario``, each on its own file."""
    sides = {}
    for level in LEVELS:
        for scenario in SCENARIOS:
            path = directory / f"{label}-{level.lower()}-{scenario}.db"
            sides[f"{level}/{scenario}"] = ChatkeepSide(
                f"{label} ({level})", path, level, scenario, args.budget, args.fresh_turns,
                args.long if scenario == "long" else 0, secure_delete)
    return sides


def serve(directory: Path, args: argparse.Namespace) -> None:
    """The peer process: build chatkeep's sides, then answer block and folds requests."""
    sides = chatkeep_sides(directory, "peer", args)
    loop = asyncio.new_event_loop()
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        side = sides[request["key"]]
        if request["op"] == "block":
            answer: Any = loop.run_until_complete(side.block(int(request["n"])))
        else:
            answer = side.folds()
        print(json.dumps(answer), flush=True)


def start_peer(directory: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    """The child process for ``--peer-src``: this script, with that ``src`` first."""
    folder = directory / "peer"
    folder.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(args.peer_src))
    argv = [sys.executable, __file__, "--serve", "--dir", str(folder),
            "--budget", str(args.budget), "--fresh-turns", str(args.fresh_turns),
            "--long", str(args.long)]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=env)
    assert child.stdout is not None
    if json.loads(child.stdout.readline() or "null") != "ready":
        raise SystemExit("the peer process did not start")
    return child


async def run(directory: Path, args: argparse.Namespace) -> None:
    """Build every side, time them in interleaved blocks, print the tables."""
    groups: dict[str, list[Any]] = {}
    ours = chatkeep_sides(directory, "chatkeep", args)
    plain = chatkeep_sides(directory, "chatkeep, secure_delete off", args, False) \
        if args.variants else {}
    child = start_peer(directory, args) if args.peer_src else None
    peer_label = f"chatkeep at {peer_commit(args.peer_src)}" if args.peer_src else ""
    for level in LEVELS:
        for scenario in SCENARIOS:
            key = f"{level}/{scenario}"
            sdk = SdkSide(f"Agents SDK SQLiteSession ({level})",
                          directory / f"sdk-{level.lower()}-{scenario}.db", level, scenario,
                          args.fresh_turns, args.long if scenario == "long" else 0)
            group: list[Any] = [sdk, ours[key]]
            if key in plain:
                group.append(plain[key])
            if child is not None:
                group.append(PeerSide(f"{peer_label} ({level})", child, key))
            groups[key] = group
    seconds: dict[int, float] = {}
    for group in groups.values():  # an untimed block each: caches, statements, files
        for side in group:
            await side.block(2)
    for start in range(0, args.turns, args.block):
        n = min(args.block, args.turns - start)
        for group in groups.values():
            for side in group:
                seconds[id(side)] = seconds.get(id(side), 0.0) + await side.block(n)
    load = os.getloadavg()
    print(f"{args.turns} timed turns per contender in blocks of {args.block}, interleaved; "
          f"a fresh session every {args.fresh_turns} turns; the long session seeded with "
          f"{args.long:,} messages; chat.max_history_tokens {args.budget:,}; summaries "
          f"offline (extractive); Python {platform.python_version()}, SQLite "
          f"{sqlite3.sqlite_version}; load average {load[0]:.2f} at the end\n")
    for scenario in SCENARIOS:
        title = "Fresh session" if scenario == "fresh" else "Long session"
        print(f"## {title}\n")
        print("| store | turns/s | vs SDK, same level | folds |")
        print("|---|---:|---:|---:|")
        for level in LEVELS:
            group = groups[f"{level}/{scenario}"]
            sdk_rate = args.turns / seconds[id(group[0])]
            for side in group:
                rate = args.turns / seconds[id(side)]
                folds = "" if isinstance(side, SdkSide) else f"{side.folds():,}"
                print(f"| {side.name} | {rate:,.0f} | {rate / sdk_rate:.2f}x | {folds} |")
        print()
    if child is not None:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    if args.breakdown:
        breakdown(directory, args)


def main() -> None:
    """Parse the arguments and run in a temporary folder (or ``--dir``); a ``--peer-rev``
    is extracted into a temporary folder either way."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=1200)
    parser.add_argument("--fresh-turns", type=int, default=400)
    parser.add_argument("--long", type=int, default=2000,
                        help="messages the long session is seeded with")
    parser.add_argument("--block", type=int, default=25)
    parser.add_argument("--budget", type=int, default=6000)
    parser.add_argument("--variants", action="store_true",
                        help="also chatkeep with secure_delete off")
    parser.add_argument("--peer-src", type=Path, default=None,
                        help="another checkout's src: chatkeep from there, same run")
    parser.add_argument("--peer-rev", default=None,
                        help="a commit of this repository: its src as --peer-src")
    parser.add_argument("--breakdown", action="store_true",
                        help="then where a fresh turn's CPU time goes, part by part")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    args = parser.parse_args()
    logging.getLogger("chatkeep").setLevel(logging.ERROR)  # the seeded backlog's warnings
    if args.serve:
        serve(args.dir, args)
        return
    with tempfile.TemporaryDirectory(prefix="chatkeep-fresh-turn-") as tmp:
        if args.peer_rev:
            args.peer_src = extract_src(args.peer_rev, Path(tmp) / "peer-src")
        directory = args.dir or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(directory, args))


if __name__ == "__main__":
    main()
