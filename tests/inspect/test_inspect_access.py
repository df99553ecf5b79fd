"""Who can reach what: the Host header, the token, cross-site posts, and a confined
inspector that no edited URL can take to another tenant's rows."""

from __future__ import annotations

import re

from inspect_seed import ORG, OTHER, OTHER_EMAIL, Seeded, config
from starlette.testclient import TestClient

from conftest import ClientFactory

RIVAL = "Rival Corp"


def test_host_header_must_be_loopback(client: TestClient) -> None:
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "127.0.0.1"):
        assert client.get("/sessions", headers={"host": host}).status_code == 200, host
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example", "",
                 "10.0.0.5:8765"):
        response = client.get("/sessions", headers={"host": host})
        assert response.status_code == 400, host
        assert "support-42" not in response.text


def test_token_is_checked_on_every_request(make_client: ClientFactory,
                                           seeded: tuple[str, Seeded]) -> None:
    token = "s3cret-token-value"
    client = make_client(token=token)
    assert client.get("/sessions").status_code == 401
    assert client.get("/static/htmx.min.js").status_code == 401
    assert client.get("/sessions", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/sessions", headers={"authorization": f"Bearer {token}"}).status_code \
        == 200
    assert client.get("/sessions?token=wrong").status_code == 401
    signed = client.get(f"/sessions?state=closed&token={token}")
    assert signed.status_code == 303
    assert signed.headers["location"] == "/sessions?state=closed"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    value = re.match(r"chatkeep_inspect=([^;]+)", cookie).group(1)  # type: ignore[union-attr]
    assert client.get("/sessions").status_code == 200  # the client keeps the cookie
    client.cookies.clear()
    assert client.get("/sessions").status_code == 401
    assert client.get("/sessions", headers={"cookie": f"chatkeep_inspect={value}"}) \
        .status_code == 200
    assert client.get("/sessions", headers={"cookie": "chatkeep_inspect=forged"}) \
        .status_code == 401


def test_bound_everywhere_any_host_but_the_token(make_client: ClientFactory,
                                                 seeded: tuple[str, Seeded]) -> None:
    client = make_client(host="0.0.0.0", token="t0ken", base="http://inspector.lan:8765")
    assert client.get("/sessions").status_code == 401
    assert client.get("/sessions", headers={"authorization": "Bearer t0ken"}).status_code == 200


def test_methods_and_cross_site_posts(make_client: ClientFactory,
                                      seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    client = make_client(reveal=True)
    key = config()["privacy"]["encryption_key"]
    for method in ("PUT", "DELETE", "PATCH"):
        assert client.request(method, f"/sessions/{ids.support}").status_code == 405
    foreign = client.post(f"/sessions/{ids.support}/privacy", data={"key": key},
                          headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403 and "ana.lopez" not in foreign.text
    cross = client.post(f"/sessions/{ids.support}/privacy", data={"key": key},
                        headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    same = client.post(f"/sessions/{ids.support}/privacy", data={"key": key},
                       headers={"origin": "http://127.0.0.1:8765",
                                "sec-fetch-site": "same-origin"})
    assert same.status_code == 200


def test_security_headers(client: TestClient) -> None:
    response = client.get("/sessions")
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"


def test_edited_urls_never_reach_another_tenant(make_client: ClientFactory,
                                                seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    client = make_client(tenant=ORG, reveal=True)
    other_memory = ids.memories["Rival Corp's secret launch is in May."]
    key = config()["privacy"]["encryption_key"]
    for path in (f"/sessions/{ids.other}", f"/sessions/{ids.other}/preview",
                 f"/sessions/{ids.other}/preview?format=anthropic_messages",
                 f"/sessions/{ids.other}/summary", f"/sessions/{ids.other}/privacy",
                 f"/sessions/{ids.other}?after=0", f"/memories/{other_memory}",
                 f"/usage?session={ids.other}", f"/memories/recall?q=launch&session={ids.other}",
                 f"/memories?session={ids.other}"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert RIVAL not in response.text and OTHER_EMAIL not in response.text
    for path in ("/sessions?tenant=organization:2", "/memories?tenant=organization:2",
                 "/usage?tenant=organization:2", "/memories/recall?q=launch&tenant=organization:2",
                 "/usage?tenant=organization:2&csv=ledger"):
        response = client.get(path)
        assert response.status_code == 400, path
        assert RIVAL not in response.text
    for page in ("", "/privacy", "/summary"):
        posted = client.post(f"/sessions/{ids.other}{page}", data={"key": key})
        assert posted.status_code == 404 and OTHER_EMAIL not in posted.text
    # Everything the confined inspector lists is its own tenant's.
    for path in ("/sessions", "/sessions?state=open", "/sessions?sort=tokens", "/memories",
                 "/memories?superseded=1", "/usage", "/memories/recall?q=launch+secret+May"):
        html = client.get(path).text
        assert ids.other not in html and RIVAL not in html and "organization:2" not in html, path
    for table in ("tenants", "sessions", "ledger", "models", "purposes", "time"):
        exported = client.get(f"/usage?csv={table}").text
        assert ids.other not in exported and "organization:2" not in exported
    reconcile = client.get("/usage").text
    assert "Reconciled" in reconcile
    # The same ids reach the rows for an inspector confined to their own tenant.
    own = make_client(tenant=OTHER)
    assert own.get(f"/sessions/{ids.other}").status_code == 200
    assert own.get(f"/sessions/{ids.support}").status_code == 404
    assert own.get(f"/memories/{other_memory}").status_code == 200

