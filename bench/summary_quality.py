"""What chatkeep's summaries keep: the compaction conformance kit against the compressor.

    .venv/bin/pip install -e '.[bench]'     # compaction-conformance-kit (and langmem)
    .venv/bin/python bench/summary_quality.py [--seeds 1-4] [--rounds 5] [--json out.json]
                                              [--markdown]

The kit (``compaction-conformance-kit`` on PyPI) plants typed items in a conversation
(safety rules, hard constraints, facts, goal state, user preferences: four of each, two of
them updated later), compacts it for several rounds at a fixed budget (a fraction of the
transcript's characters) and checks which items survive. Here, in one run and on the same
sessions (the kit's randomized corpus, seeds 1-4):

* the kit's own compactors (each compacts its previous round's output);
* ``chatkeep-offline``: ``HistoryCompressor`` with the offline ``ExtractiveSummarizer``;
* ``chatkeep-llm``: ``HistoryCompressor`` with an OpenAI client (the real SDK) against
  ``FakeOpenAIServer``, whose scripted model answers with the kit's planted items only when
  they appear in the new part of the conversation it is given: it never repeats an item
  from the previous summary (so the merge, the priorities and never dropping an item are
  what is measured, not a model's memory), adds an item for each planted statement it
  reads, and updates by id the item an update supersedes.

A chatkeep round is what a round is to a running summary: round 1 replays the whole
conversation turn by turn (``build_history`` before every answer, folding as a
production app would); each later round adds a stretch of the kit's filler conversation
(no planted items) at least one budget long, so nothing survives in the verbatim tail and
only what the summary kept is still there. The output measured is the history
``build_history`` returns, as ``[role] text`` lines, within the round's character budget.

Every figure is printed twice: with the kit's type labels ("SAFETY RULE: ...") in the
conversation, and with them stripped, since a real user never labels a rule. The output
is Markdown (``--markdown`` is accepted, so ``bench/report.py`` calls every bench alike).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

try:
    from compaction_kit import (
        Canary,
        CanaryType,
        ChecklistCompactor,
        CompactedContext,
        LossyTruncationCompactor,
        NaiveSummaryCompactor,
        PinnedRulesCompactor,
        SeededSession,
        SemanticChecklistCompactor,
        SummaryTailCompactor,
        Turn,
        UpdateAwareChecklistCompactor,
        build_random_session,
        run_conformance,
    )
except ImportError:  # pragma: no cover - a bench-only dependency
    sys.exit("bench/summary_quality.py needs the kit: pip install -e '.[bench]' "
             "(compaction-conformance-kit)")

import openai

from chatkeep import Chatkeep, HistoryCompressor, Ref
from chatkeep.config import ChatConfig
from chatkeep.formats.base import fence
from chatkeep.history.summary import StructuredSummary
from chatkeep.testing import FakeOpenAIServer, Reply
from chatkeep.tokens import HeuristicCounter

BUDGETS = (0.10, 0.20, 0.30)
COUNTER = HeuristicCounter()
TYPES = [t.value for t in CanaryType]
SHORT = {"safety_rule": "rules", "hard_constraint": "constraints", "fact": "facts",
         "goal_state": "goal state", "user_preference": "preferences"}
LABEL = re.compile(r"\b(?:SAFETY RULE|HARD CONSTRAINT|FACT|GOAL STATE|USER PREFERENCE): ")
KIND = {"safety_rule": "rule", "hard_constraint": "constraint", "fact": "fact",
        "goal_state": "task", "user_preference": "preference"}
FILLER = ("Reviewing the ingestion pipeline module layout and service boundaries.",
          "Discussing caching headers for the static asset route and CDN behavior.",
          "Adding a smoke test that hits the health endpoint after each deploy.",
          "The design doc for webhooks is still in draft and section four is open.",
          "Cache invalidation is event-driven; the TTL is only a backstop.")
ACK = "Acknowledged. Continuing with the plan."
#: The fold target (a share of the budget) and the verbatim tail (messages): at budgets
#: this small the summary gets the room (as the kit's checklists drop their recent-activity
#: tail first), what is left of the target after the fence and one message.
COMPRESS_TARGET, RECENT, TAIL_TOKENS = 0.95, 0, 8


def strip_labels(session: SeededSession,
                 canaries: list[Canary]) -> tuple[SeededSession, list[Canary]]:
    """The same session and items with the kit's type labels removed from the text."""
    turns = tuple(replace(t, text=LABEL.sub("", t.text)) for t in session.turns)
    return (replace(session, turns=turns),
            [replace(c, content=LABEL.sub("", c.content)) for c in canaries])


# -- the scripted summary model ------------------------------------------------------------


@dataclass
class Planted:
    """A statement the scripted model recognises: a planted item or its stale predecessor."""

    text: str
    kind: str
    key: str  # the same for an item and the statements it supersedes


class ScriptedModel:
    """Answers a summarizer request with the planted statements found in the new part of
    the conversation (never those only in the previous summary); a statement whose key an
    existing item already has updates that item by id."""

    def __init__(self) -> None:
        self.planted: list[Planted] = []
        self.calls = 0
        self.json_requests = 0

    def use(self, session: SeededSession, canaries: list[Canary]) -> None:
        """Recognise this session's statements from now on."""
        self.planted = [Planted(c.content, KIND[c.type.value], c.id) for c in canaries]
        texts = {c.content for c in canaries}
        for turn in session.turns:  # stale predecessors: planted turns that are not items
            if turn.role == "user" and turn.canary_id is None and turn.text not in texts:
                for c in canaries:
                    if c.superseded_tokens and any(tok in turn.text
                                                   for tok in c.superseded_tokens):
                        self.planted.append(Planted(turn.text, KIND[c.type.value], c.id))

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.calls += 1
        if body.get("response_format") == {"type": "json_object"}:
            self.json_requests += 1
        prompt = body["messages"][1]["content"]
        items_part, _, rest = prompt.partition("\n\nNarrative so far:")
        new_part = rest.split("New part of the conversation:\n", 1)[1]
        ids = {line.split("] ", 1)[1]: line[1:].split("]", 1)[0]  # "[f3] text" -> f3
               for line in items_part.splitlines() if line.startswith("[")}
        found: dict[str, Planted] = {}
        for planted in self.planted:
            if planted.text in new_part:
                position = new_part.index(planted.text)
                best = found.get(planted.key)
                if best is None or new_part.index(best.text) < position:
                    found[planted.key] = planted  # the latest statement of a key wins
        add, update = [], []
        for planted in found.values():
            held = next((item_id for text, item_id in ids.items()
                         if any(p.key == planted.key and p.text == text
                                for p in self.planted)), None)
            if held is not None and planted.text not in ids:
                update.append({"id": held, "text": planted.text})
            elif held is None:
                add.append({"type": planted.kind, "text": planted.text})
        return Reply.json({"add": add, "update": update,
                           "narrative": "The user and the assistant worked through the "
                                        "project's setup, tests and deployment details."})


# -- chatkeep as a kit compactor -----------------------------------------------------------


class ChatkeepCompactor:
    """``HistoryCompressor`` on a real session, round after round (see the module doc)."""

    def __init__(self, name: str, keep: Chatkeep, client: Any = None) -> None:
        self.name = name
        self.keep = keep
        self.client = client
        self.summary_texts: list[str] = []

    def compact(self, turns: list[Turn], round_num: int = 1,
                budget_chars: int | None = None) -> CompactedContext:
        assert budget_chars is not None
        if round_num == 1:
            budget = budget_chars // 4
            fixed = COUNTER.count(fence("")) + 4
            summary = max(16, int(budget * COMPRESS_TARGET) - fixed - TAIL_TOKENS)
            self.compressor = HistoryCompressor(self.client, model="scripted", config=ChatConfig(
                max_history_tokens=budget, summary_max_tokens=summary,
                compress_target=COMPRESS_TARGET, recent_messages_min=RECENT))
            self.session = self.keep.sessions.create(tenant=Ref("bench", "quality"))
            conversation = [t for t in turns if t.role in ("user", "assistant")]
        else:  # one more fold: new conversation with nothing planted pushes the tail out
            conversation = []
            while sum(len(t.text) for t in conversation) < budget_chars:
                n = len(conversation) // 2 + round_num
                conversation += [Turn("user", FILLER[n % len(FILLER)]), Turn("assistant", ACK)]
        history: Any = None
        for turn in conversation:
            if turn.role == "user":
                self.session.add_user(turn.text)
            else:
                self.session.add_assistant(turn.text)
                # The kit's system turn is the app's system prompt: sent by the app on
                # every call, not compaction output (the kit's compactors leave it out too).
                history = self.compressor.build_history(self.session, "")
        summary = StructuredSummary.load(self.session.refresh().summary)
        self.summary_texts.append(summary.render() if summary else "")
        text = "\n".join(f"[{m['role']}] {m['content']}" for m in history)
        return CompactedContext(text=text, compactor_name=self.name, round_num=round_num)


# -- running -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One compactor at one budget, label setting, over all seeds (final round)."""

    survived: dict[str, int]
    total: dict[str, int]
    compliant: bool
    in_summary: int = 0
    rounds_all_rules: int = 0  # runs whose rules and constraints survived every round

    def rate(self, kind: str | None = None) -> float:
        """Survival of ``kind`` (all types when ``None``)."""
        if kind is None:
            return sum(self.survived.values()) / max(1, sum(self.total.values()))
        return self.survived[kind] / max(1, self.total[kind])


@contextmanager
def scripted_server(model: ScriptedModel) -> Iterator[openai.OpenAI]:
    """The fake endpoint with the scripted model behind it, and a real SDK client."""
    with FakeOpenAIServer(responder=model) as server:
        yield openai.OpenAI(base_url=server.base_url, api_key="bench", max_retries=0)


def evaluate(factory: Callable[[], Any], sessions: list[tuple[SeededSession, list[Canary]]],
             budget: float, rounds: int, model: ScriptedModel | None) -> Outcome:
    """Run the kit's conformance rounds on every session; tally the final round."""
    survived = dict.fromkeys(TYPES, 0)
    total = dict.fromkeys(TYPES, 0)
    compliant, in_summary, all_rules = True, 0, 0
    for session, canaries in sessions:
        if model is not None:
            model.use(session, canaries)
        compactor = factory()
        run = run_conformance(session, compactor, rounds=rounds, canaries=canaries,
                              budget_fraction=budget)
        final = run.rounds[-1]
        compliant = compliant and all(r.within_budget for r in run.rounds)
        for canary in canaries:
            total[canary.type.value] += 1
            survived[canary.type.value] += int(final.survived[canary.id])
        governing = [c.id for c in canaries if c.type in (CanaryType.SAFETY_RULE,
                                                          CanaryType.HARD_CONSTRAINT)]
        all_rules += int(all(r.survived[cid] for r in run.rounds for cid in governing))
        if isinstance(compactor, ChatkeepCompactor):
            text = compactor.summary_texts[-1].lower()
            in_summary += sum(all(tok.lower() in text for tok in c.required_tokens)
                              for c in canaries)
    return Outcome(survived, total, compliant, in_summary, all_rules)


def table(results: dict[tuple[str, float, bool], Outcome], names: list[str],
          budgets: tuple[float, ...], labelled: bool) -> str:
    """Markdown: per-type final-round survival by compactor and budget."""
    head = ["budget", "compactor", *(SHORT[t] for t in TYPES), "all", "compliant"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for budget in budgets:
        for name in names:
            o = results[(name, budget, labelled)]
            cells = [f"{budget:.0%}", name, *(f"{o.rate(t):.0%}" for t in TYPES),
                     f"**{o.rate():.0%}**", "yes" if o.compliant else "NO"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    """Run every compactor at every budget, with and without labels; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-4", help="kit corpus seeds, e.g. 1-4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    labelled_sessions = [build_random_session(seed) for seed in seeds]
    corpora = {True: labelled_sessions,
               False: [strip_labels(s, c) for s, c in labelled_sessions]}
    kit: dict[str, Callable[[], Any]] = {
        "lossy-truncation": LossyTruncationCompactor, "naive-summary": NaiveSummaryCompactor,
        "summary-plus-tail": SummaryTailCompactor, "pinned-rules": PinnedRulesCompactor,
        "checklist-carrying": ChecklistCompactor,
        "update-aware-checklist": UpdateAwareChecklistCompactor,
        "semantic-checklist": SemanticChecklistCompactor}
    model = ScriptedModel()
    results: dict[tuple[str, float, bool], Outcome] = {}
    with tempfile.TemporaryDirectory() as tmp, scripted_server(model) as client:
        keep = Chatkeep(f"sqlite:///{Path(tmp) / 'bench.db'}", dispatcher="inline",
                        config={"memory": {"distil_on_compress": False}})
        ours: dict[str, tuple[Callable[[], Any], ScriptedModel | None]] = {
            "chatkeep-offline": (lambda: ChatkeepCompactor("chatkeep-offline", keep), None),
            "chatkeep-llm": (lambda: ChatkeepCompactor("chatkeep-llm", keep, client), model)}
        for budget in BUDGETS:
            for labelled, sessions in corpora.items():
                for name, factory in kit.items():
                    results[(name, budget, labelled)] = evaluate(
                        factory, sessions, budget, args.rounds, None)
                for name, (factory, scripted) in ours.items():
                    results[(name, budget, labelled)] = evaluate(
                        factory, sessions, budget, args.rounds, scripted)
        keep.close()
    names = [*kit, *ours]
    runs = len(seeds)
    print(f"Final round ({args.rounds} rounds), seeds {args.seeds}: share of planted items "
          "that survive, by type.\n")
    for labelled in (True, False):
        print("### " + ("With the kit's type labels" if labelled else
                        "Labels stripped from the conversation") + "\n")
        print(table(results, names, BUDGETS, labelled) + "\n")
    print("### chatkeep: rules and constraints kept in every round; planted items held by "
          "the summary itself in the final round\n")
    print("| budget | labels | path | runs keeping every rule and constraint, every round |"
          " items in the summary |")
    print("|---|---|---|---|---|")
    for budget in BUDGETS:
        for labelled in (True, False):
            for name in ours:
                o = results[(name, budget, labelled)]
                print(f"| {budget:.0%} | {'yes' if labelled else 'no'} | {name} | "
                      f"{o.rounds_all_rules}/{runs} | {o.in_summary}/{sum(o.total.values())} |")
    best_free = {b: max(results[(n, b, False)].rate() for n in kit) for b in BUDGETS}
    print("\nBest label-free figure of the kit's compactors: " + ", ".join(
        f"{b:.0%}: {v:.0%}" for b, v in best_free.items()))
    print(f"Scripted model: {model.calls} calls, {model.json_requests} asked for JSON "
          "with response_format.")
    if args.json:
        args.json.write_text(json.dumps({
            f"{n}|{b}|{'labels' if lab else 'no-labels'}": {
                "by_type": {t: o.rate(t) for t in TYPES}, "all": o.rate(),
                "compliant": o.compliant, "in_summary": o.in_summary,
                "rules_every_round": o.rounds_all_rules}
            for (n, b, lab), o in results.items()}, indent=2))


if __name__ == "__main__":
    main()
