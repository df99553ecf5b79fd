"""Memory distiller bookkeeping on the labelled conversation set (prints markdown).

Run from the repository root: ``python bench/memory_eval.py [DATABASE_URL] [--markdown]``
(default: a fresh SQLite file in a temporary directory). The output is Markdown
(``--markdown`` is accepted, so ``bench/report.py`` calls every bench alike); the exit
status is 1 when a bookkeeping check fails.

Every conversation in ``tests/data/memory/conversations.jsonl`` is loaded into its
own session (tenant / actor / subject as labelled, tool calls included) and
distilled, in file order, through ``FakeOpenAIServer``, whose responder plays a
model that answers exactly as the labels say: the extraction returns the
conversation's labelled facts; the ADD / UPDATE / DELETE / NONE decision answers
NONE for ``duplicate_of``, DELETE for ``supersedes`` (pointing at the labelled
memory, *if* retrieval showed it among the candidates; a restatement of a fact
that a later label replaced is NONE against the replacement) and ADD otherwise. So the
model is perfect and what is measured is chatkeep's bookkeeping: what gets written,
what is kept out as a duplicate, what is superseded, that a second run writes
nothing, and that recall never hands a memory to a session outside its scope.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:
    import chatkeep  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

import openai  # noqa: E402

from chatkeep import Chatkeep, ChatSession, Memory, Ref  # noqa: E402
from chatkeep.memory.prompts import DECIDE_SYSTEM  # noqa: E402
from chatkeep.memory.text import normalise  # noqa: E402
from chatkeep.testing import FakeOpenAIServer, Reply  # noqa: E402

DATA = ROOT / "tests" / "data" / "memory" / "conversations.jsonl"


def load(path: Path = DATA) -> list[dict[str, Any]]:
    """The labelled conversations, in file order."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _ref(data: dict[str, Any] | None) -> Ref | None:
    return None if data is None else Ref(data["type"], data["id"])


class LabelledModel:
    """A responder that plays a perfect model from the labels."""

    def __init__(self, conversations: Sequence[dict[str, Any]]) -> None:
        self.by_opening = {self._opening(c): c for c in conversations}
        self.facts = {f"{c['id']}:{n}": fact for c in conversations
                      for n, fact in enumerate(c["facts"])}
        self.by_text = {normalise(f["content"]): key for key, f in self.facts.items()}
        self.successor = {f["supersedes"]: key for key, f in self.facts.items()
                          if f["action"] == "supersedes"}
        self.retrieval_misses: list[str] = []
        self.extractions = self.decisions = 0

    @staticmethod
    def _opening(conversation: dict[str, Any]) -> str:
        first = next(m for m in conversation["messages"] if m["role"] == "user")
        return " ".join(str(first["content"]).split())

    def __call__(self, body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        user = " ".join(body["messages"][1]["content"].split())
        if system == DECIDE_SYSTEM:
            self.decisions += 1
            new_facts = json.loads(body["messages"][1]["content"])["new_facts"]
            return Reply.json({"decisions": [self._decide(f) for f in new_facts]})
        self.extractions += 1
        for opening, conversation in self.by_opening.items():
            if opening in user:
                return Reply.json({"facts": [{"scope": f["scope"], "content": f["content"]}
                                             for f in conversation["facts"]]})
        return Reply.json({"facts": []})  # a later chunk of a long conversation

    def _decide(self, new_fact: dict[str, Any]) -> dict[str, Any]:
        key = self.by_text[normalise(new_fact["text"])]
        label = self.facts[key]
        action = label["action"]
        if action == "add":
            return {"fact": new_fact["fact"], "event": "ADD"}
        chain = [label[action]]
        while action == "duplicate_of" and chain[-1] in self.successor:
            chain.append(self.successor[chain[-1]])  # a replaced fact: the newer one covers it
        wanted = {normalise(self.facts[key]["content"]) for key in chain}
        for memory in new_fact["memories"]:
            if normalise(memory["text"]) in wanted:
                event = "NONE" if action == "duplicate_of" else "DELETE"
                return {"fact": new_fact["fact"], "event": event, "target": memory["id"]}
        self.retrieval_misses.append(key)  # the model cannot see what it was not shown
        return {"fact": new_fact["fact"], "event": "ADD"}


@dataclass
class Row:
    """Per-conversation figures."""

    id: str
    scopes: str
    facts: int
    expected_written: int
    written: int = 0
    duplicates: int = 0
    superseded: int = 0
    dropped: int = 0
    model_calls: int = 0


@dataclass
class Report:
    """Everything the bench measures."""

    rows: list[Row] = field(default_factory=list)
    rerun_written: int = 0
    rerun_model_calls: int = 0
    redistil_written: int = 0
    redistil_duplicates: int = 0
    live: int = 0
    stored: int = 0
    pairs_checked: int = 0
    leaks: int = 0
    superseded_recalled: int = 0
    own_found: int = 0
    own_total: int = 0
    retrieval_misses: list[str] = field(default_factory=list)

    @property
    def written(self) -> int:
        return sum(r.written for r in self.rows)

    @property
    def expected_written(self) -> int:
        return sum(r.expected_written for r in self.rows)


def _load_session(keep: Chatkeep, conversation: dict[str, Any]) -> ChatSession:
    tenant = _ref(conversation["tenant"])
    assert tenant is not None
    session = keep.sessions.create(tenant, _ref(conversation["actor"]),
                                   _ref(conversation["subject"]), title=conversation["id"])
    for m in conversation["messages"]:
        session.add_message(m["role"], m.get("content"), tool_calls=m.get("tool_calls"),
                            tool_call_id=m.get("tool_call_id"), name=m.get("name"))
    return session


def applies(memory: Memory, session: ChatSession) -> bool:
    """The scope rule, restated independently of the code under test."""
    if memory.tenant != session.tenant:
        return False
    if memory.scope == "tenant":
        return True
    if memory.scope == "subject":
        return session.subject is not None and memory.subject == session.subject
    return session.actor is not None and memory.actor == session.actor


def run(db_url: str, conversations: Sequence[dict[str, Any]] | None = None) -> Report:
    """Distil the set into ``db_url`` (a fresh database), twice, then check every pair."""
    conversations = list(conversations if conversations is not None else load())
    player = LabelledModel(conversations)
    report = Report()
    with FakeOpenAIServer(player) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
        with Chatkeep(db_url, model=client) as keep:
            sessions = []
            for conversation in conversations:
                session = _load_session(keep, conversation)
                sessions.append(session)
                result = keep.memory.distil(session.id)
                actions = [f["action"] for f in conversation["facts"]]
                report.rows.append(Row(
                    conversation["id"], "/".join(
                        k for k in ("actor", "subject") if conversation[k]) or "tenant only",
                    len(actions), sum(a != "duplicate_of" for a in actions),
                    result.added, result.duplicates, result.superseded, result.dropped,
                    result.model_calls))
            # Second full run: the same sessions again, then the same ranges re-read.
            for session in sessions:
                again = keep.memory.distil(session.id)
                report.rerun_written += again.added
                report.rerun_model_calls += again.model_calls
            for session in sessions:
                keep.memory.rewind(session.id)
                redo = keep.memory.distil(session.id)
                report.redistil_written += redo.added
                report.redistil_duplicates += redo.duplicates
            _check_pairs(keep, sessions, report)
    report.retrieval_misses = sorted(set(player.retrieval_misses))
    return report


def _check_pairs(keep: Chatkeep, sessions: Sequence[ChatSession], report: Report) -> None:
    tenants = {s.tenant for s in sessions}
    everything = [m for t in tenants
                  for m in keep.memory.list(t, include_superseded=True, limit=100_000)]
    report.stored = len(everything)
    live = [m for m in everything if m.superseded_by is None]
    report.live = len(live)
    for session in sessions:
        for memory in everything:
            report.pairs_checked += 1
            found = {m.id for m in keep.memory.recall(session, query=memory.content,
                                                      limit=100_000)}
            if memory.id in found and not applies(memory, session):
                report.leaks += 1
            if memory.id in found and memory.superseded_by is not None:
                report.superseded_recalled += 1
            if memory.superseded_by is None and applies(memory, session):
                report.own_total += 1
                report.own_found += memory.id in found


def markdown(report: Report) -> str:
    """The report as the markdown the README quotes."""
    lines = [
        "| conversation | session has | labelled facts | expected writes | written | "
        "duplicates avoided | superseded | dropped | model calls |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.rows:
        lines.append(f"| {r.id} | {r.scopes} | {r.facts} | {r.expected_written} | {r.written} "
                     f"| {r.duplicates} | {r.superseded} | {r.dropped} | {r.model_calls} |")
    total = report.rows
    lines.append(f"| **total ({len(total)})** | | {sum(r.facts for r in total)} | "
                 f"{report.expected_written} | {report.written} | "
                 f"{sum(r.duplicates for r in total)} | {sum(r.superseded for r in total)} | "
                 f"{sum(r.dropped for r in total)} | {sum(r.model_calls for r in total)} |")
    lines += [
        "",
        f"- memories per conversation: {report.written / max(1, len(total)):.2f} "
        f"({report.stored} rows, {report.live} live)",
        f"- second run, same sessions: {report.rerun_written} written, "
        f"{report.rerun_model_calls} model calls",
        f"- second run, same ranges re-read (watermarks rewound): "
        f"{report.redistil_written} written, {report.redistil_duplicates} duplicates avoided",
        f"- cross-scope leaks: {report.leaks} over {report.pairs_checked} "
        "(session, memory) recall checks",
        f"- superseded memories returned by recall: {report.superseded_recalled}",
        f"- live memories found by their own text where they apply: "
        f"{report.own_found}/{report.own_total}",
        f"- labelled duplicates/contradictions retrieval did not surface: "
        f"{', '.join(report.retrieval_misses) or 'none'}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("url", nargs="?", help="a fresh database (default: SQLite, temporary)")
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    args = parser.parse_args(argv[1:])
    if args.url:
        report = run(args.url)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            report = run(f"sqlite:///{Path(tmp) / 'memory_eval.db'}")
    print(markdown(report))
    ok = (report.rerun_written == report.redistil_written == report.leaks
          == report.superseded_recalled == 0 and report.written == report.expected_written)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
