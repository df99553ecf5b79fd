"""One strict build of the docs site, shared by the tests of this folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` writes it."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([mkdocs, "build", "--strict", "-q", "-d", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return out
