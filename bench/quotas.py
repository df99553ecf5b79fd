"""A turn with a quota set against the same turn without (issue 33), on SQLite and
(with ``--postgres``) PostgreSQL, as ratios in one run.

    python bench/quotas.py [--turns 600] [--block 50] [--postgres URL] [--markdown]

A turn is what a hand-written loop does around its model call (the call itself left out,
so the ratio is chatkeep's own overhead at its largest): ``add_user``, ``build_history``,
then ``add_assistant_response`` of a completion with its usage. The quota turn passes
``max_output_tokens`` on a tenant with a quota, so its history is reserved before it is
returned and settled by the answer; the peer is the same turn on a tenant without a quota
and without ``max_output_tokens`` (chatkeep before issue 33). The two run in blocks of
``--block`` turns: each block a new session of each kind, whose turns alternate one by
one (the kind going first alternating too), so load on the machine at any moment hits
both alike; each rate is total turns over total (timed) time, and the ratio is the median
over the blocks of the quota session's time over the plain one's (a load spike on a
shared machine moves one block, not the figure); the ratio of the totals is shown
beside it. Targets: at most ``1.10x`` the time per turn on
PostgreSQL, ``1.15x`` on SQLite. The statements a reservation and its settle add are
counted on the engine's statement events in a separate pass (listening switches the
store to its Core executors, so the timed passes run without a listener). The
reservation is written in the transaction that records the request's replay manifest,
and the settle inside the answer's append (each its own statements, no commit of its
own), so a reservation adds statements to a turn, not commits. PostgreSQL runs in a
fresh schema (the shared test database's tables would carry earlier runs' dead rows:
its server runs without autovacuum).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _suite  # noqa: F401  (tests/support on the path)
from chatkeep import Chatkeep, Ref
from support.completions import chat_answer
from support.postgres import scratch_schema
from support.statements import captured

PLAIN, QUOTA = Ref("org", "plain"), Ref("org", "quota")
MAX_OUTPUT = 200


def turn(keep: Chatkeep, session: Any, n: int, quota: bool) -> None:
    session.add_user(f"Question {n}: where is my parcel, and when does it arrive?")
    if quota:
        keep.compressor.build_history(session, "Be brief.", max_output_tokens=MAX_OUTPUT)
    else:
        keep.compressor.build_history(session, "Be brief.")
    session.add_assistant_response(chat_answer(f"Answer {n}.", answer_id=f"c{n}"))


def statements_per_turn(keep: Chatkeep, quota: bool, turns: int = 20) -> float:
    """Statements sent per turn, counted on the engine's events."""
    session = keep.sessions.create(QUOTA if quota else PLAIN)
    turn(keep, session, 0, quota)  # warm
    with captured(keep.engine) as sent:
        for n in range(turns):
            turn(keep, session, n, quota)
    return len(sent) / turns


def run(url: str, turns: int, block: int, synchronous: str = "FULL") -> dict[str, float]:
    keep = Chatkeep(url, dispatcher="inline",
                    config={"store": {"sqlite_synchronous": synchronous}})
    try:
        keep.start()
        keep.quotas.clear(PLAIN)
        keep.quotas.set(QUOTA, tokens=10**15, window="month")
        counted = {kind: statements_per_turn(keep, kind == "quota")
                   for kind in ("plain", "quota")}
        elapsed = {"plain": 0.0, "quota": 0.0}
        done = {"plain": 0, "quota": 0}
        ratios: list[float] = []
        while done["plain"] < turns:
            # A block: one new session of each kind, their turns taken one by one, the
            # kind going first alternating, so load on the machine at any moment hits
            # both alike; the block's ratio is one sample.
            sessions = {kind: keep.sessions.create(QUOTA if kind == "quota" else PLAIN)
                        for kind in ("plain", "quota")}
            took = {"plain": 0.0, "quota": 0.0}
            for n in range(block):
                for kind in (("plain", "quota") if n % 2 == 0 else ("quota", "plain")):
                    start = time.perf_counter()
                    turn(keep, sessions[kind], n, kind == "quota")
                    took[kind] += time.perf_counter() - start
            for kind in took:
                elapsed[kind] += took[kind]
                done[kind] += block
            ratios.append(took["quota"] / took["plain"])
        quota = keep.quotas.get(QUOTA)
        assert quota is not None and quota.reserved == 0  # every reservation settled
    finally:
        keep.close()
    plain_rate, quota_rate = done["plain"] / elapsed["plain"], done["quota"] / elapsed["quota"]
    return {"plain turns/s": plain_rate, "quota turns/s": quota_rate,
            "ratio": statistics.median(ratios), "total ratio": plain_rate / quota_rate,
            "blocks": len(ratios), "plain statements": counted["plain"],
            "quota statements": counted["quota"],
            "added statements": counted["quota"] - counted["plain"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (a scratch db)")
    parser.add_argument("--markdown", action="store_true",
                        help="a Markdown table (what bench/report.py puts in the docs)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    # SQLite at its default (FULL: every commit synced to disk), and at NORMAL beside it
    # (no target): what the reservation costs without its sync.
    stores: list[tuple[str, str, float | None, str]] = [
        ("SQLite", f"sqlite:///{folder / 'full.db'}", 1.15, "FULL"),
        ("SQLite, NORMAL", f"sqlite:///{folder / 'normal.db'}", None, "NORMAL")]
    if args.postgres:
        stores.append(("PostgreSQL", args.postgres, 1.10, "FULL"))
    results = []
    for name, url, target, synchronous in stores:
        if name == "PostgreSQL":  # a fresh schema: no other run's dead rows in its tables
            with scratch_schema(url, "ck_quota_bench") as fresh:
                results.append((name, target, run(fresh, args.turns, args.block, synchronous)))
        else:
            results.append((name, target, run(url, args.turns, args.block, synchronous)))
    if args.markdown:
        print(f"{args.turns} turns of each kind per store, in blocks of {args.block} "
              "(each block a new session of each kind, their turns alternating); the model "
              "call left out.\n")
        print("| store | plain turns/s | quota turns/s | ratio (median of blocks) | ratio of "
              "totals | target | statements per turn, plain -> quota | added by a "
              "reservation |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, target, r in results:
            print(f"| {name} | {r['plain turns/s']:.1f} | {r['quota turns/s']:.1f} | "
                  f"{r['ratio']:.2f}x | {r['total ratio']:.2f}x | "
                  f"{'aside' if target is None else f'`<= {target:.2f}x`'} | "
                  f"{r['plain statements']:.1f} -> {r['quota statements']:.1f} | "
                  f"{r['added statements']:+.1f} |")
        return
    print(f"{'store':<15} {'plain turns/s':>14} {'quota turns/s':>14} {'ratio':>7} "
          f"{'totals':>7} {'target':>7} {'statements/turn':>16} {'added':>6}")
    for name, target, r in results:
        print(f"{name:<15} {r['plain turns/s']:>14.1f} {r['quota turns/s']:>14.1f} "
              f"{r['ratio']:>6.2f}x {r['total ratio']:>6.2f}x "
              f"{'-' if target is None else f'{target:.2f}x':>7} "
              f"{r['plain statements']:>7.1f} -> {r['quota statements']:<6.1f} "
              f"{r['added statements']:>+6.1f}")


if __name__ == "__main__":
    main()
