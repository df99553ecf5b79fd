"""The settings the inspector runs with: the budget its dry run uses (the application's,
named on the page), the redaction state it reports (the library's rule, as ``chatkeep
sessions show`` reports it), and its refusal to serve beyond loopback without a token."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
import pytest
from inspect_seed import ORG, VAULT_KEY, Seeded
from starlette.testclient import TestClient

from chatkeep import Chatkeep
from chatkeep.cli.sessions import redaction as cli_redaction
from chatkeep.config import Config
from chatkeep.errors import ConfigError
from chatkeep.inspect.app import create_app, open_app
from chatkeep.inspect.settings import BUDGET_ENV, DEFAULT, budget_origin, load_settings
from conftest import BASE, served

PRIVACY = {"privacy": {"anonymize_pii": True, "encryption_key": VAULT_KEY}}


# -- the budget ---------------------------------------------------------------------------


def test_budget_origin_follows_config_load(tmp_path: Path) -> None:
    sets = tmp_path / "app.toml"
    sets.write_text("[chat]\nmax_history_tokens = 400\n")
    silent = tmp_path / "other.toml"
    silent.write_text("[privacy]\nanonymize_pii = true\n")
    env = {BUDGET_ENV: "2000"}
    assert budget_origin(None, {}) == DEFAULT
    assert budget_origin(str(sets), {}) == "chat.max_history_tokens in app.toml"
    assert budget_origin(None, {"CHATKEEP_CONFIG": str(sets)}) == \
        "chat.max_history_tokens in app.toml"
    assert budget_origin(str(silent), {}) == DEFAULT
    assert budget_origin(str(sets), env).startswith(BUDGET_ENV)  # the variable wins
    for file, environ, budget in ((None, {}, 6000), (str(sets), {}, 400),
                                  (str(sets), env, 2000), (str(silent), {}, 6000)):
        config, origin = load_settings(None, file, environ)
        assert config.chat.max_history_tokens == budget
        assert origin == budget_origin(file, environ)
    given, origin = load_settings(Config.load({"chat": {"max_history_tokens": 900}}), None)
    assert given.chat.max_history_tokens == 900 and "given" in origin


def _preview(base: str, session_id: str) -> str:
    with httpx.Client(base_url=base, timeout=20) as http:
        response = http.get(f"/sessions/{session_id}/preview")
    assert response.status_code == 200
    return html.unescape(re.sub(r"<[^>]+>", " ", response.text))


def test_the_dry_run_uses_the_apps_budget_and_says_so(seeded: tuple[str, Seeded],
                                                      tmp_path: Path) -> None:
    url, ids = seeded
    app_toml = tmp_path / "app.toml"
    app_toml.write_text("[chat]\nmax_history_tokens = 400\n")
    with served(url, "--config", str(app_toml), settings=PRIVACY) as (base, _process):
        page = _preview(base, ids.support)
    assert re.search(r"of\s+400\s+tokens in", page), page[:2000]
    assert "Budget 400 tokens: chat.max_history_tokens in app.toml" in page
    assert "If the application sets another" not in page
    env = {**PRIVACY, "chat": {"max_history_tokens": 2000}}
    with served(url, settings=env) as (base, _process):
        page = _preview(base, ids.support)
    assert re.search(r"of\s+2,000\s+tokens in", page)
    assert f"Budget 2,000 tokens: {BUDGET_ENV} in the environment" in page
    with served(url, settings=PRIVACY) as (base, _process):
        page = _preview(base, ids.support)
    assert re.search(r"of\s+6,000\s+tokens in", page)
    assert "Budget 6,000 tokens: chatkeep's default" in page
    assert "chatkeep inspect --config" in page  # how to give it the app's


# -- the redaction state ------------------------------------------------------------------


def test_the_header_shows_the_effective_redaction(db_url: str) -> None:
    off = {"privacy": {"anonymize_pii": False}}
    with Chatkeep(db_url, config=off, dispatcher="inline") as keep:
        plain_ = keep.sessions.open("app-switch-off", tenant=ORG)
        plain_.add_user("hello")
        opted_out = keep.sessions.open("session-switch-off", tenant=ORG,
                                       anonymize_pii=False)
    with Chatkeep(db_url, config={"privacy": {"anonymize_pii": True}},
                  dispatcher="inline") as keep:
        protected = keep.sessions.open("protected", tenant=ORG)
        protected.add_user("hello")
    expected = {
        (False, plain_.id): "not redacted (the application's switch",
        (False, opted_out.id): "not redacted (the session's switch is off)",
        (False, protected.id): "redacted (protected",
        (True, plain_.id): "redacted",
        (True, opted_out.id): "not redacted (the session's switch is off)",
    }
    for app_switch in (False, True):
        settings = Config.load({"privacy": {"anonymize_pii": app_switch}})
        app, inspector = open_app(db_url, config=settings)
        try:
            client = TestClient(app, base_url=BASE)
            for (switch, session_id), words in expected.items():
                if switch != app_switch:
                    continue
                page = client.get(f"/sessions/{session_id}").text
                shown = re.search(r"<dt>redaction</dt><dd>(.*?)</dd>", page, re.S)
                assert shown, page[:1000]
                state = html.unescape(shown.group(1))
                assert state.startswith(words), (app_switch, state)
                cli = cli_redaction(inspector.keep,
                                    inspector.keep.sessions.get_unscoped(session_id))
                assert state.startswith(cli), (state, cli)
                privacy = client.get(f"/sessions/{session_id}/privacy").text
                said = re.search(r"<dt>redacts</dt><dd>(\w+)", privacy)
                assert said and said.group(1) == ("yes" if words.startswith("redacted")
                                                  else "no")
        finally:
            inspector.keep.close()


# -- binding ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.com", ""])
def test_create_app_refuses_to_serve_beyond_loopback_without_a_token(
        seeded: tuple[str, Seeded], host: str, tmp_path: Path) -> None:
    _app, inspector = open_app(seeded[0], config=Config.load(PRIVACY))
    try:
        with pytest.raises(ConfigError, match="token"):
            create_app(inspector, host=host, token=None)
        with pytest.raises(ConfigError, match="token"):
            create_app(inspector, host=host, token="")
        guarded = TestClient(create_app(inspector, host=host, token="t-1"), base_url=BASE)
        assert guarded.get("/sessions").status_code == 401
        for loopback in ("127.0.0.1", "localhost", "::1"):
            assert create_app(inspector, host=loopback) is not None
    finally:
        inspector.keep.close()
    # open_app refuses before it opens anything: a missing database is not even looked at.
    with pytest.raises(ConfigError):
        open_app(f"sqlite:///{tmp_path / 'absent.db'}", host=host)
