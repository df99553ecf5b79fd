"""The read commands start without the model-facing layers (issue 32 item 11): ``sessions
list``, ``sessions show``, ``usage``, ``tenants`` and ``db current`` read the store, so
they import neither the history, privacy and memory layers nor the model guard, the
recognizers' phone numbers, OpenTelemetry or an SDK (the facade builds those on first use;
bench/cli_startup.py times the commands); nor, on SQLite, the PostgreSQL dialect (no
statement or index option of it is built at import), forgetting's modules (erasure, holds,
retention: the facade builds them on first use; ``sessions show`` reads the session's
holds through the lifecycle store alone), the dump, the wire formats, or rich's progress
bars."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chatkeep import Chatkeep, Ref, Usage

#: What a read command must not import (each a module or a package prefix). The packages'
#: own ``__init__`` (chatkeep.memory, chatkeep.privacy) load nothing until a name is used.
HEAVY = ("chatkeep.history.compressor", "chatkeep.history.round", "chatkeep.privacy.guard",
         "chatkeep.privacy.detector", "chatkeep.privacy.recognizers", "chatkeep.privacy.redactor",
         "chatkeep.memory.service", "chatkeep.memory.distiller", "chatkeep.memory.recall",
         "chatkeep.memory.embedders", "chatkeep.llm.adapt", "chatkeep.observability",
         "chatkeep.integrations", "phonenumbers", "openai", "anthropic", "opentelemetry",
         "sqlalchemy.dialects.postgresql", "chatkeep.lifecycle", "chatkeep.store.retention",
         "chatkeep.store.dump", "chatkeep.formats", "rich.progress")
#: What only ``sessions show`` imports of that (the lifecycle store, for the holds).
STORE_LIFECYCLE = "chatkeep.store.lifecycle"

COMMAND = """
import gc, json, sys
sys.argv = ["chatkeep", *sys.argv[1:]]
from chatkeep.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
"""
#: A command, then the modules it loaded of ``heavy``.
PROBE = COMMAND + """
heavy = %r
print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))
"""


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A SQLite file with one session (messages, usage, a summary folded offline), and
    that session's id."""
    url = f"sqlite:///{tmp_path_factory.mktemp('startup') / 'chat.db'}"
    with Chatkeep(url, config={"chat": {"max_history_tokens": 1200,
                                        "recent_messages_min": 2}}) as keep:
        session = keep.sessions.create(Ref("organization", 7), title="clause 4")
        for turn in range(24):
            session.add_user(f"Where is clause {turn} of the lease? " * 4)
            session.add_assistant(f"Clause {turn} is on page {turn + 2}. " * 4,
                                  usage=Usage(12, 7), model="m")
        keep.compressor.build_history(session, "Be brief.")
        assert keep.sessions.get(session.id, Ref("organization", 7)).summary
        return url, session.id


def _loaded(argv: list[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE % (heavy,), *argv],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    *output, loaded = result.stdout.splitlines()
    assert output, "the command printed nothing"
    names: list[str] = json.loads(loaded)
    return names


@pytest.mark.parametrize("command", [
    ["sessions", "list", "--tenant", "organization:7"],
    ["sessions", "list", "--tenant", "organization:7", "--json"],
    ["sessions", "show", "{id}"],
    ["sessions", "show", "{id}", "--json"],
    ["usage"],
    ["tenants"],
    ["db", "current"],
], ids=" ".join)
def test_a_read_command_imports_no_heavy_layer(database: tuple[str, str],
                                               command: list[str]) -> None:
    url, session_id = database
    argv = [part.format(id=session_id) for part in command]
    heavy = HEAVY if command[:2] == ["sessions", "show"] else (*HEAVY, STORE_LIFECYCLE)
    assert _loaded([*argv, "--db", url], heavy) == []


def test_the_probe_sees_a_command_that_loads_them(database: tuple[str, str]) -> None:
    """The same probe on ``history`` (which builds what the model receives) lists them:
    the check above can fail."""
    url, session_id = database
    loaded = _loaded(["history", session_id, "--db", url])
    assert "chatkeep.history.compressor" in loaded and "chatkeep.privacy.detector" in loaded
    assert "chatkeep.formats" in loaded


@pytest.mark.parametrize(("command", "loads"), [
    (["holds", "list", "--tenant", "organization:7"], "chatkeep.lifecycle"),
    (["export"], "chatkeep.store.dump"),
    (["db", "upgrade"], "sqlalchemy.dialects.postgresql"),  # Alembic's DDL modules load it
], ids=" ".join)
def test_the_probe_sees_what_other_commands_load(database: tuple[str, str],
                                                 command: list[str], loads: str) -> None:
    """The names added to the check above are loaded by the commands that need them."""
    url, _ = database
    assert loads in _loaded([*command, "--db", url], (*HEAVY, STORE_LIFECYCLE))


#: A command, then what the cyclic collector holds frozen and whether it is on.
GC_PROBE = COMMAND + """
print(json.dumps([gc.get_freeze_count(), gc.isenabled()]))
"""


def test_the_imports_are_frozen_out_of_the_collector(database: tuple[str, str]) -> None:
    """``main`` imports the CLI with the cyclic collector off, then freezes what the
    imports made (a tenth of start-up went to collections scanning them): the command
    itself runs with the collector on."""
    url, _ = database
    result = subprocess.run([sys.executable, "-c", GC_PROBE, "tenants", "--db", url],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    frozen, enabled = json.loads(result.stdout.splitlines()[-1])
    assert frozen > 50_000 and enabled is True


def test_sessions_show_says_what_the_guard_says(tmp_path: Path) -> None:
    """``sessions show`` reads the switches without the guard: the same answer."""
    from chatkeep.cli.sessions import _redacts

    for app_switch in (True, False):
        with Chatkeep(f"sqlite:///{tmp_path / f'{app_switch}.db'}",
                      config={"privacy": {"anonymize_pii": app_switch}}) as keep:
            for own in (True, False):
                session = keep.sessions.create(Ref("organization", 1), anonymize_pii=own)
                assert _redacts(keep, session) is keep.privacy.redacts(session)
