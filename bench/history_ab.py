"""``build_history`` now beside an older commit of chatkeep, in one run (issue 31).

    python bench/history_ab.py [--peer-rev 05c3a39] [--calls 600] [--block 20]
                               [--markdown]

Each side is a child process running this script with its own chatkeep ``src`` first on
``PYTHONPATH``: this checkout's, and the ``--peer-rev`` commit's (extracted with ``git
archive``). Each seeds its own SQLite file (WAL, the same disk) with the sessions
``bench/history.py`` times (100, 10,000 and 100,000 messages, a summary in place, a
20-message tail after the watermark), then answers ``block`` requests: ``--block`` calls
of ``build_history`` on each session, in turn. The parent asks the sides in turn, a block
at a time, so load from elsewhere on the machine falls on all alike; a figure is the
median call, and the ratio is ours over the peer's (a time ratio: below ``1.00x`` is
faster). The target: at most ``1.03x``.

Since issue 34, every ``build_history`` also records the request's replay manifest (one
write the older commit does not make). A third side, this checkout with the round's
manifest off (``HistoryRound.records = False``, as the background fold job runs it),
tells the round's own cost apart from that write's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import extract_src

SIZES = (100, 10_000, 100_000)
TARGET = 1.03
SRC = Path(__file__).resolve().parent.parent / "src"


def child(directory: Path, record: bool) -> None:
    """A side: seed the sessions, say ready, then time blocks as the parent asks."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import history
    from chatkeep import Chatkeep

    keep = Chatkeep(f"sqlite:///{directory / 'history.db'}", dispatcher="inline")
    sessions = {size: keep.sessions.get_unscoped(history.seed_session(keep, size))
                for size in SIZES}

    def build(session: Any) -> Any:
        if record:
            return keep.compressor.build_history(session, history.SYSTEM)
        round_ = keep.compressor.round(session, history.SYSTEM)
        round_.records = False
        return round_.build()

    for session in sessions.values():
        for _ in range(20):  # warm caches and the connection pool
            build(session)
    import chatkeep

    print(json.dumps(["ready", chatkeep.__file__]), flush=True)
    for line in sys.stdin:
        n = json.loads(line)["n"]
        times: dict[int, list[float]] = {size: [] for size in SIZES}
        for _ in range(n):
            for size, session in sessions.items():
                start = time.perf_counter()
                built = build(session)
                times[size].append(time.perf_counter() - start)
                assert len(built) == 2 + history.TAIL, "the tail replays verbatim"
        print(json.dumps({str(k): v for k, v in times.items()}), flush=True)


class Side:
    """A child process and the call times it reported."""

    def __init__(self, name: str, src: Path, directory: Path, record: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(src)}
        argv = [sys.executable, __file__, "--child", str(directory)]
        if not record:
            argv.append("--no-record")
        self.name, self.src = name, src
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env)
        self.times: dict[int, list[float]] = {size: [] for size in SIZES}

    def ready(self) -> None:
        assert self.process.stdout is not None
        said = json.loads(self.process.stdout.readline() or "null")
        if not (isinstance(said, list) and said[0] == "ready"):
            raise SystemExit(f"{self.name}: the child process did not start")
        if not Path(said[1]).resolve().is_relative_to(self.src.resolve()):
            raise SystemExit(f"{self.name}: imported chatkeep from {said[1]}, not {self.src}")

    def block(self, n: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"n": n}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the child process ended")
        for size, values in json.loads(line).items():
            self.times[int(size)].extend(values)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)

    def median_ms(self, size: int) -> float:
        return statistics.median(self.times[size]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-rev", default="05c3a39",
                        help="the commit to compare with (default: issue 31's 'today')")
    parser.add_argument("--calls", type=int, default=600, help="timed calls per session")
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--markdown", action="store_true", help="(it is Markdown already)")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, not args.no_record)
        return
    with tempfile.TemporaryDirectory(prefix="chatkeep-history-ab-") as tmp:
        folder = Path(tmp)
        peer_src = extract_src(args.peer_rev, folder / "peer-src")
        sides = [Side("this checkout", SRC, folder / "ours"),
                 Side("this checkout, manifest off", SRC, folder / "ours-off", record=False),
                 Side(f"chatkeep at {args.peer_rev}", peer_src, folder / "peer")]
        for side in sides:
            side.ready()
        done = 0
        while done < args.calls:
            n = min(args.block, args.calls - done)
            order = sides if (done // args.block) % 2 == 0 else sides[::-1]
            for side in order:
                side.block(n)
            done += n
        for side in sides:
            side.close()
    load = os.getloadavg()[0]
    print(f"{args.calls} calls of `build_history` per session and side, in blocks of "
          f"{args.block}, interleaved; median call; SQLite (file, WAL); load average "
          f"{load:.2f} at the end\n")
    peer = sides[-1]
    print("| messages | " + " | ".join(s.name for s in sides) + " | ratio | "
          "ratio, manifest off |")
    print("|---:|" + "---:|" * (len(sides) + 2))
    worst = 0.0
    for size in SIZES:
        ratio = sides[0].median_ms(size) / peer.median_ms(size)
        off = sides[1].median_ms(size) / peer.median_ms(size)
        worst = max(worst, off)
        cells = " | ".join(f"{s.median_ms(size):.3f} ms" for s in sides)
        print(f"| {size:,} | {cells} | {ratio:.2f}x | {off:.2f}x |")
    print(f"\nThe round's own cost against {args.peer_rev} (manifest off), the worst size: "
          f"{worst:.2f}x (target `<= {TARGET}x`: "
          f"{'met' if worst <= TARGET else 'missed'}). The manifest's write is the "
          "difference between the two ratios.")


if __name__ == "__main__":
    main()
