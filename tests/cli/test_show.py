"""``sessions show`` says whether the session's text leaves redacted, as both switches
decide it (it printed the session's switch alone, ``anonymize_pii True``, with the
application's off and nothing redacted)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from chatkeep import Chatkeep, Ref
from chatkeep.cli import app

runner = CliRunner()
ORG = Ref("organization", 7)


def test_show_reports_the_effective_redaction(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Chatkeep(url) as keep:
        plain = keep.sessions.create(ORG).id
        opted_out = keep.sessions.create(ORG, anonymize_pii=False).id

    def show(session_id: str, **env: str) -> str:
        result = runner.invoke(app, ["sessions", "show", session_id, "--db", url], env=env)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    assert "not redacted (the application's switch, privacy.anonymize_pii, is off)" in \
        show(plain)
    on = {"CHATKEEP_PRIVACY__ANONYMIZE_PII": "true"}
    assert "· redacted ·" in show(plain, **on)
    assert "not redacted (the session's switch is off)" in show(opted_out, **on)
