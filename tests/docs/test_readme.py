"""The README's example runs as written (twice: the second run reopens the conversation by
its key), and the docs site builds with ``--strict`` (every link and reference resolves)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Example", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's Example section has no python block"
    return match.group(1)


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    code = readme_example()
    assert len(code.strip().splitlines()) <= 16
    for run, stored in ((1, 2), (2, 4)):
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"sent {stored} messages, stored {stored}", run


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    result = subprocess.run([mkdocs, "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
