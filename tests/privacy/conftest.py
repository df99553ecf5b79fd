"""Make ``chatkeep`` importable from a plain checkout (no ``pip install -e .`` yet)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("chatkeep") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
