"""CLI start-up: how long the read commands take, beside ``--version`` and a bare Python.

    python bench/cli_startup.py [--runs 15] [--markdown]

Each command runs ``--runs`` times in a fresh process on a small SQLite file (the demo's
tenant, a few sessions), after one untimed run, with Python's bytecode cache on as an
installed package has it (``PYTHONDONTWRITEBYTECODE`` is dropped for the runs: with it, an
editable install compiles every module of chatkeep again at each start); the table gives
the median and the fastest run, and the
modules whose import costs most in one ``python -X importtime`` run of ``sessions
list``. The target (issue 32): a read command starts in under 0.5 s on a quiet machine;
the bare interpreter's row says how quiet the machine was.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHATKEEP = Path(sys.executable).with_name("chatkeep")


#: The environment of every run: bytecode cached, as for an installed package.
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
       "COLUMNS": "80"}


def timed(argv: list[str], runs: int) -> tuple[float, float]:
    """Median and fastest wall time of ``argv`` over ``runs`` fresh processes (after one
    untimed run, which writes the bytecode cache)."""
    subprocess.run(argv, check=True, capture_output=True, env=ENV)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=ENV)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


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


def main() -> None:
    """Seed a database, time the commands, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--markdown", action="store_true", help="(it is Markdown already)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chatkeep-cli-") as tmp:
        db = f"sqlite:///{Path(tmp) / 'chat.db'}"
        subprocess.run([str(CHATKEEP), "demo", "--db", db], check=True, capture_output=True)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "chatkeep --version": [str(CHATKEEP), "--version"],
            "chatkeep sessions list": [str(CHATKEEP), "sessions", "list", "--tenant",
                                       "organization:7", "--db", db],
            "chatkeep usage": [str(CHATKEEP), "usage", "--db", db],
            "chatkeep db current": [str(CHATKEEP), "db", "current", "--db", db],
        }
        print(f"{args.runs} fresh processes per command; Python "
              f"{sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f}\n")
        print("| command | median | fastest |")
        print("|---|---:|---:|")
        for name, argv in commands.items():
            median, fastest = timed(argv, args.runs)
            print(f"| `{name}` | {median:.2f} s | {fastest:.2f} s |")
        print("\nHeaviest imports of `chatkeep sessions list` (cumulative, one run):\n")
        print("| package | import |")
        print("|---|---:|")
        for package, seconds in heaviest_imports(commands["chatkeep sessions list"]):
            print(f"| `{package}` | {seconds:.3f} s |")


if __name__ == "__main__":
    main()
