"""``chatkeep --version`` answers without loading the CLI (it took about 1 s when it
imported every command); ``import chatkeep`` loads its names on first use."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("sqlalchemy", "openai", "typer", "rich", "phonenumbers", "chatkeep.app")

PROBE = """
import sys
sys.argv = ["chatkeep", "--version"]
from chatkeep.cli import main
main()
print(sorted({m.split(".")[0] if not m.startswith("chatkeep") else m
              for m in sys.modules if m.startswith(%r)}))
"""


def test_version_loads_nothing_heavy() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE % (HEAVY,)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    version, loaded = result.stdout.splitlines()
    assert version.startswith("chatkeep ")
    assert loaded == "[]"


def test_import_chatkeep_is_lazy_and_complete() -> None:
    code = ("import sys, chatkeep; assert 'sqlalchemy' not in sys.modules; "
            "names = [getattr(chatkeep, n) for n in chatkeep.__all__]; "
            "assert chatkeep.Chatkeep.__module__ == 'chatkeep.app'; print(len(names))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 30
