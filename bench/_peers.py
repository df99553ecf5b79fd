"""What the same-run A/B benches (``--peer-src``, ``--peer-rev``) need of the other side:
its ``src`` extracted at a commit, and the commit a ``src`` stands for."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""This repository's checkout."""


def extract_src(rev: str, folder: Path) -> Path:
    """This repository's ``src`` at commit ``rev``, written under ``folder`` (a folder
    named after the commit, so the tables name it), with ``git archive``: nothing is
    checked out, and the working tree is left alone."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev],
                            capture_output=True, text=True, check=True).stdout.strip()
    target = folder / commit
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def peer_commit(src: Path) -> str:
    """The short commit of the checkout ``src`` sits in; for a ``src`` that
    :func:`extract_src` wrote, the commit its folder is named after (else its path)."""
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return src.parent.name if src.name == "src" else str(src)
    return out.stdout.strip()
