"""``chatkeep inspect`` itself: the real server over HTTP, its refusals, the missing extra,
and a CLI that stays fast without loading the inspector's dependencies."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from inspect_seed import Seeded
from typer.testing import CliRunner

from chatkeep.cli import app
from conftest import served

runner = CliRunner()


def test_the_real_server_serves_read_only(seeded: tuple[str, Seeded]) -> None:
    url, ids = seeded
    with served(url, "--tenant", "organization:1") as (base, _process), \
            httpx.Client(base_url=base, timeout=10) as http:
        page = http.get("/sessions")
        assert page.status_code == 200 and "support-42" in page.text
        assert "other-tenant" not in page.text
        assert http.get(f"/sessions/{ids.other}").status_code == 404
        assert http.get(f"/sessions/{ids.support}/preview").status_code == 200
        assert http.get("/static/htmx.min.js").text.startswith("var htmx=")
        assert http.get("/sessions", headers={"host": "evil.example"}).status_code == 400
        assert http.put("/sessions").status_code == 405


def test_a_token_off_loopback_and_on_every_request(seeded: tuple[str, Seeded]) -> None:
    url, _ = seeded
    with served(url, "--token", "t-123") as (base, _process), \
            httpx.Client(base_url=base, timeout=10) as http:
        assert http.get("/sessions").status_code == 401
        assert http.get("/sessions", headers={"authorization": "Bearer t-123"}) \
            .status_code == 200


def test_binding_elsewhere_needs_a_token(tmp_path: object) -> None:
    result = runner.invoke(app, ["inspect", "--host", "0.0.0.0", "--db",
                                 "sqlite:///nowhere.db"], env={"CHATKEEP_INSPECT_TOKEN": ""})
    assert result.exit_code == 2, result.output
    assert "token" in " ".join(result.output.split()), result.output


def test_a_missing_database_is_one_line(tmp_path: object) -> None:
    result = runner.invoke(app, ["inspect", "--db", "sqlite:////nonexistent/dir/x.db"])
    assert result.exit_code == 1
    assert "no database" in result.output and "Traceback" not in result.output


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "starlette", None)
    result = runner.invoke(app, ["inspect", "--db", "sqlite:///x.db"])
    assert result.exit_code == 1
    assert "pip install 'chatkeep[inspect]'" in result.output
    from chatkeep.inspect import require_extra

    with pytest.raises(ImportError, match=r"chatkeep\[inspect\]"):
        require_extra()


def test_the_cli_does_not_load_the_inspector() -> None:
    code = ("import sys; from chatkeep.cli import app; "
            "print(sorted(m for m in ('starlette', 'jinja2', 'uvicorn', 'chatkeep.inspect.app')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    help_ = runner.invoke(app, ["inspect", "--help"])
    assert help_.exit_code == 0 and "--reveal" in help_.output and "--tenant" in help_.output
