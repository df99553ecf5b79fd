"""A turn with a quota set against the same turn without (issue 33), on SQLite and
(with ``--postgres``) PostgreSQL, as ratios in one run.

    python bench/quotas.py [--turns 600] [--block 50] [--postgres URL]

A turn is what a hand-written loop does around its model call (the call itself left out,
so the ratio is chatkeep's own overhead at its largest): ``add_user``, ``build_history``,
then ``add_assistant_response`` of a completion with its usage. The quota turn passes
``max_output_tokens`` on a tenant with a quota, so its history is reserved before it is
returned and settled by the answer; the peer is the same turn on a tenant without a quota
and without ``max_output_tokens`` (chatkeep before issue 33). The two take turns in
blocks of ``--block`` turns, each on its own session, so drift hits both alike; each rate
is total turns over total time. Targets: at most ``1.10x`` the time per turn on
PostgreSQL, ``1.15x`` on SQLite. The statements a reservation and its settle add are
counted on the engine's statement events in a separate pass (listening switches the
store to its Core executors, so the timed passes run without a listener).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

from chatkeep import Chatkeep, Ref

PLAIN, QUOTA = Ref("org", "plain"), Ref("org", "quota")
MAX_OUTPUT = 200


def completion(n: int) -> dict[str, Any]:
    """A Chat Completions answer with its usage, as the SDK returns it (as a dict)."""
    return {"id": f"c{n}", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"Answer {n}."}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}}


def turn(keep: Chatkeep, session: Any, n: int, quota: bool) -> None:
    session.add_user(f"Question {n}: where is my parcel, and when does it arrive?")
    if quota:
        keep.compressor.build_history(session, "Be brief.", max_output_tokens=MAX_OUTPUT)
    else:
        keep.compressor.build_history(session, "Be brief.")
    session.add_assistant_response(completion(n))


def statements_per_turn(keep: Chatkeep, quota: bool, turns: int = 20) -> float:
    """Statements sent per turn, counted on the engine's events."""
    count = [0]

    def seen(*_: Any) -> None:
        count[0] += 1

    session = keep.sessions.create(QUOTA if quota else PLAIN)
    turn(keep, session, 0, quota)  # warm
    event.listen(keep.engine, "before_cursor_execute", seen)
    try:
        for n in range(turns):
            turn(keep, session, n, quota)
    finally:
        event.remove(keep.engine, "before_cursor_execute", seen)
    return count[0] / turns


def run(url: str, turns: int, block: int) -> dict[str, float]:
    keep = Chatkeep(url, dispatcher="inline")
    try:
        keep.start()
        keep.quotas.clear(PLAIN)
        keep.quotas.set(QUOTA, tokens=10**15, window="month")
        counted = {kind: statements_per_turn(keep, kind == "quota")
                   for kind in ("plain", "quota")}
        elapsed = {"plain": 0.0, "quota": 0.0}
        done = {"plain": 0, "quota": 0}
        while done["plain"] < turns:
            for kind in ("plain", "quota"):
                session = keep.sessions.create(QUOTA if kind == "quota" else PLAIN)
                start = time.perf_counter()
                for n in range(block):
                    turn(keep, session, n, kind == "quota")
                elapsed[kind] += time.perf_counter() - start
                done[kind] += block
        quota = keep.quotas.get(QUOTA)
        assert quota is not None and quota.reserved == 0  # every reservation settled
    finally:
        keep.close()
    plain_rate, quota_rate = done["plain"] / elapsed["plain"], done["quota"] / elapsed["quota"]
    return {"plain turns/s": plain_rate, "quota turns/s": quota_rate,
            "ratio": plain_rate / quota_rate, "plain statements": counted["plain"],
            "quota statements": counted["quota"],
            "added statements": counted["quota"] - counted["plain"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (a scratch db)")
    args = parser.parse_args()
    stores = [("SQLite", f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}", 1.15)]
    if args.postgres:
        stores.append(("PostgreSQL", args.postgres, 1.10))
    print(f"{'store':<11} {'plain turns/s':>14} {'quota turns/s':>14} {'ratio':>7} "
          f"{'target':>7} {'statements/turn':>16} {'added':>6}")
    for name, url, target in stores:
        r = run(url, args.turns, args.block)
        print(f"{name:<11} {r['plain turns/s']:>14.1f} {r['quota turns/s']:>14.1f} "
              f"{r['ratio']:>6.2f}x {target:>6.2f}x "
              f"{r['plain statements']:>7.1f} -> {r['quota statements']:<6.1f} "
              f"{r['added statements']:>+6.1f}")


if __name__ == "__main__":
    main()
