"""``chatkeep replay``: the turns listed at 80 columns, a turn rebuilt and checked, exit
codes 0 (match), 3 (no match, what was erased printed), 4 (built before replay), 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref
from chatkeep.cli import app

runner = CliRunner()
ORG = Ref("organization", 7)


def _run(url: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["replay", *args, "--db", url], env={"COLUMNS": "80"})
    return result.exit_code, result.output


def test_replay_lists_checks_and_marks_erasures(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Chatkeep(url, config={"chat": {"max_history_tokens": 200}}) as keep:
        session = keep.sessions.create(ORG)
        fact = keep.memory.add(ORG, "Trains to Paris leave hourly.")
        for n in range(6):
            session.add_user(f"Question {n} about the trains to Paris. " * 3)
            build: Any = keep.compressor.build_history  # (memories: recalled rows too)
            build(session, "Be brief.", memories=[fact],
                  format=("openai_chat", "anthropic_messages")[n % 2])
            session.add_assistant(f"Answer {n}: every hour. " * 3)
    code, out = _run(url, session.id)
    assert code == 0, out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "anthropic_messages" in out and "6" in out.split()

    code, out = _run(url, session.id, "--turn", "4")
    assert code == 0, out
    assert "matches its recorded SHA-256" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80

    code, out = _run(url, session.id, "--turn", "-1", "--json", "--show")
    data = json.loads(out)
    assert code == 0 and data["match"] and data["manifest"]["memories"] == [fact.id]
    assert data["request"]["system"].startswith("Be brief.")

    with Chatkeep(url) as keep:
        keep.memory.delete(ORG, fact.id)
    code, out = _run(url, session.id, "--turn", "2")
    assert code == 3, out
    assert f"memory #{fact.id} erased" in out

    code, out = _run(url, session.id, "--turn", "9")
    assert code == 1 and "TurnNotFound" in out

    with Chatkeep(url) as keep, keep.repository.transaction() as conn:
        conn.exec_driver_sql("UPDATE chat_replay_manifests SET manifest = NULL "
                             "WHERE turn = 1")  # as migration 0015 leaves a session
    code, out = _run(url, session.id, "--turn", "1")
    assert code == 4 and "before replay existed" in " ".join(out.split())
    code, out = _run(url, session.id)
    assert "before replay" in out
