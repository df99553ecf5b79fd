"""What the same-run A/B benches (``--peer-src``) say of the other side."""

from __future__ import annotations

import subprocess
from pathlib import Path


def peer_commit(src: Path) -> str:
    """The short commit of the checkout ``src`` sits in (or its path)."""
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return str(src)
    return out.stdout.strip()
