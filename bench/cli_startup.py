"""CLI start-up: how long the read commands take, beside ``--version`` and a bare Python.

    python bench/cli_startup.py [--runs 15] [--peer-src PATH | --peer-rev REV] [--markdown]

Each command runs ``--runs`` times in a fresh process on a small SQLite file (the demo's
tenant, a few sessions), after one untimed run, with Python's bytecode cache on as an
installed package has it (``PYTHONDONTWRITEBYTECODE`` is dropped for the runs: with it, an
editable install compiles every module of chatkeep again at each start); the table gives
the median and the fastest run (wall time) and the median CPU time (user and system: on a
loaded machine the wall time mostly waits for a core), and the
modules whose import costs most in one ``python -X importtime`` run of ``sessions
list``. The target (issue 32): a read command starts in under 0.5 s on a quiet machine;
the bare interpreter's row says how quiet the machine was.

``--peer-src PATH`` adds an A/B in the same run: each read command started from this
checkout's ``src`` and from ``PATH`` (another checkout's ``src``, e.g. ``git archive
OLD src | tar -x -C /tmp/old``), both by the same launcher (``python -c`` importing
``chatkeep.cli``, ``PYTHONPATH`` set), in alternating runs so that load from elsewhere
falls on both alike; the ratio is the peer's median over ours. Each side reads a demo
database its own chatkeep wrote (an older chatkeep refuses a database a newer migration
reached). ``--peer-rev REV`` does
the same with this repository's ``src`` at commit ``REV`` (extracted with ``git
archive`` into a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peers import extract_src, peer_commit

CHATKEEP = Path(sys.executable).with_name("chatkeep")
SRC = Path(__file__).resolve().parent.parent / "src"

#: How ``--peer-src`` starts a command from a given ``src`` (as the console script does).
LAUNCH = "import sys; from chatkeep.cli import main; sys.argv[0] = 'chatkeep'; sys.exit(main())"


#: The environment of every run: bytecode cached, as for an installed package.
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
       "COLUMNS": "80"}


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system, of the child) of one run of ``argv``: on a
    loaded machine the wall time waits for a core, the CPU time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed(argv: list[str], runs: int) -> tuple[float, float, float]:
    """Median and fastest wall time, and median CPU time, of ``argv`` over ``runs`` fresh
    processes (after one untimed run, which writes the bytecode cache)."""
    subprocess.run(argv, check=True, capture_output=True, env=ENV)
    walls, cpus = zip(*(run_once(argv, ENV) for _ in range(runs)), strict=True)
    return statistics.median(walls), min(walls), statistics.median(cpus)


def launched(src: Path, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command ``chatkeep argv`` started with chatkeep imported from ``src``."""
    return [sys.executable, "-c", LAUNCH, *argv], {**ENV, "PYTHONPATH": str(src)}


def paired(argv: list[str], peer_argv: list[str], peer: Path,
           runs: int) -> list[tuple[float, float]]:
    """Median wall and CPU time of ``chatkeep argv`` from this checkout and of ``chatkeep
    peer_argv`` from ``peer``, in alternating fresh processes (after one untimed run of
    each)."""
    sides = [launched(SRC, argv), launched(peer, peer_argv)]
    times: list[list[tuple[float, float]]] = [[], []]
    for command, env in sides:
        subprocess.run(command, check=True, capture_output=True, env=env)
    for _ in range(runs):
        for (command, env), out in zip(sides, times, strict=True):
            out.append(run_once(command, env))
    return [(statistics.median(t[0] for t in side), statistics.median(t[1] for t in side))
            for side in times]


def heaviest_imports(argv: list[str], count: int = 8) -> list[tuple[str, float]]:
    """The top-level packages whose import took longest (cumulative), in seconds."""
    code = ("import sys, runpy; sys.argv = " + repr(["chatkeep", *argv[1:]])
            + "; from chatkeep.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass")
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=ENV,
                         capture_output=True, text=True, check=True).stderr
    totals: dict[str, float] = {}
    for line in out.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line[12:].split("|"))
        if not cumulative.isdigit():
            continue
        top = name.split(".")[0]
        totals[top] = max(totals.get(top, 0.0), int(cumulative) / 1e6)
    return sorted(totals.items(), key=lambda item: -item[1])[:count]


def read_commands(db: str, src: Path | None = None) -> dict[str, list[str]]:
    """The read commands timed, as arguments to ``chatkeep``, on the demo's database (the
    demo written first, by chatkeep from ``src`` when given, else the console script)."""
    def chatkeep(*argv: str) -> str:
        command, env = (([str(CHATKEEP), *argv], ENV) if src is None
                        else launched(src, list(argv)))
        return subprocess.run(command, env=env, check=True, capture_output=True,
                              text=True).stdout

    chatkeep("demo", "--db", db)
    listed = chatkeep("sessions", "list", "--tenant", "organization:demo-firm", "--json",
                      "--db", db)
    session_id = json.loads(listed)[0]["id"]
    return {
        "chatkeep sessions list": ["sessions", "list", "--tenant", "organization:demo-firm",
                                   "--db", db],
        "chatkeep sessions show": ["sessions", "show", session_id, "--db", db],
        "chatkeep usage": ["usage", "--db", db],
        "chatkeep tenants": ["tenants", "--db", db],
        "chatkeep db current": ["db", "current", "--db", db],
    }


def print_peer_table(reads: dict[str, list[str]], peer_reads: dict[str, list[str]],
                     peer: Path, runs: int) -> None:
    """Each read command from this checkout and from ``peer``, alternating."""
    print(f"\nThe same commands from this checkout and from chatkeep at "
          f"{peer_commit(peer)} (`--peer-src`), alternating, {runs} runs each, each on a "
          f"demo database its own chatkeep wrote; load average "
          f"{os.getloadavg()[0]:.2f}:\n")
    print("| command | this checkout | peer | peer / this | CPU, this | CPU, peer | peer / this |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, argv in reads.items():
        (ours, our_cpu), (theirs, their_cpu) = paired(argv, peer_reads[name], peer, runs)
        print(f"| `{name}` | {ours:.2f} s | {theirs:.2f} s | {theirs / ours:.2f}x | "
              f"{our_cpu:.2f} s | {their_cpu:.2f} s | {their_cpu / our_cpu:.2f}x |")


def main() -> None:
    """Seed a database, time the commands, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--peer-src", type=Path, default=None,
                        help="another checkout's src: the read commands from there, same run")
    parser.add_argument("--peer-rev", default=None,
                        help="a commit of this repository: its src as --peer-src")
    parser.add_argument("--markdown", action="store_true", help="(it is Markdown already)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chatkeep-cli-") as tmp:
        if args.peer_rev:
            args.peer_src = extract_src(args.peer_rev, Path(tmp) / "peer")
        db = f"sqlite:///{Path(tmp) / 'chat.db'}"
        reads = read_commands(db)
        commands = {"python -c pass": [sys.executable, "-c", "pass"],
                    "chatkeep --version": [str(CHATKEEP), "--version"],
                    **{name: [str(CHATKEEP), *argv] for name, argv in reads.items()}}
        print(f"{args.runs} fresh processes per command; Python "
              f"{sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f}\n")
        print("| command | median | fastest | CPU (median) |")
        print("|---|---:|---:|---:|")
        for name, argv in commands.items():
            median, fastest, cpu = timed(argv, args.runs)
            print(f"| `{name}` | {median:.2f} s | {fastest:.2f} s | {cpu:.2f} s |")
        if args.peer_src is not None:
            peer_reads = read_commands(f"sqlite:///{Path(tmp) / 'peer.db'}", args.peer_src)
            print_peer_table(reads, peer_reads, args.peer_src, args.runs)
        print("\nHeaviest imports of `chatkeep sessions list` (cumulative, one run):\n")
        print("| package | import |")
        print("|---|---:|")
        for package, seconds in heaviest_imports(commands["chatkeep sessions list"]):
            print(f"| `{package}` | {seconds:.3f} s |")


if __name__ == "__main__":
    main()
