"""A session's app key and title are personal data too: every page, heading, ``<title>``,
usage table and CSV masks them like message text unless a keyed reveal shows them; and a
title links to its session, as the short id does."""

from __future__ import annotations

import csv
import io
import re

import pytest
from inspect_seed import LABEL_EMAIL, LABEL_PHONE, VAULT_KEY, Seeded, add_labelled_session
from starlette.testclient import TestClient

from conftest import ClientFactory

RAW = (LABEL_EMAIL, LABEL_PHONE)
CSVS = ("tenants", "purposes", "models", "sessions", "time", "ledger")


def page_title(html: str) -> str:
    found = re.search(r"<title>(.*?)</title>", html, re.S)
    assert found, html[:300]
    return found.group(1)


def no_raw(text: str, where: str) -> None:
    for value in RAW:
        assert value not in text, (where, value)


@pytest.fixture
def labelled(seeded: tuple[str, Seeded]) -> str:
    return add_labelled_session(seeded[0])


def test_key_and_title_are_masked_everywhere(client: TestClient, labelled: str) -> None:
    pages = ["/sessions", "/sessions?key=mail", f"/sessions/{labelled}",
             f"/sessions/{labelled}/summary", f"/sessions/{labelled}/privacy",
             f"/sessions/{labelled}/preview", "/usage", f"/usage?session={labelled}"]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        no_raw(response.text, path)
    fragment = client.get("/sessions", headers={"hx-request": "true", "hx-target": "sessions"})
    no_raw(fragment.text, "the htmx table")
    log = client.get(f"/sessions/{labelled}").text
    assert "Session &lt;EMAIL_" in page_title(log)  # the tab's title, masked
    heading = re.search(r"<h1>.*?</h1>", log, re.S)
    assert heading and '<mark class="ph">&lt;EMAIL_' in heading.group(0)
    assert '<dd>Call back on <mark class="ph">&lt;PHONE_' in log
    for tab in ("summary", "privacy"):
        assert "&lt;EMAIL_" in page_title(client.get(f"/sessions/{labelled}/{tab}").text)
    listed = client.get("/sessions").text
    assert '<td><mark class="ph">&lt;EMAIL_' in listed
    memory = re.search(r'href="/memories/(\d+)"', client.get(
        f"/memories?session={labelled}").text)
    assert memory, "the labelled session's memory"
    provenance = client.get(f"/memories/{memory.group(1)}").text
    assert "Distilled from session" in provenance and "&lt;EMAIL_" in provenance
    no_raw(provenance, "a memory's provenance")
    for table in CSVS:
        body = client.get(f"/usage?csv={table}").text
        no_raw(body, f"{table}.csv")
    rows = list(csv.DictReader(io.StringIO(client.get("/usage?csv=sessions").text)))
    mine = [r for r in rows if r["session"] == labelled]
    assert mine and mine[0]["key"].startswith("<EMAIL_")
    assert mine[0]["title"].startswith("Call back on <PHONE_")


def test_a_keyed_reveal_shows_them(make_client: ClientFactory, labelled: str,
                                   caplog: pytest.LogCaptureFixture) -> None:
    on = make_client(reveal=True)
    page = on.post(f"/sessions/{labelled}", data={"key": VAULT_KEY})
    assert page.status_code == 200
    assert LABEL_EMAIL in page_title(page.text) and LABEL_PHONE in page.text
    for tab in ("summary", "privacy"):
        shown = on.post(f"/sessions/{labelled}/{tab}", data={"key": VAULT_KEY})
        assert shown.status_code == 200 and LABEL_EMAIL in page_title(shown.text), tab

    assert "Reveal values" in on.get("/sessions").text
    listed = on.post("/sessions?key=mail", data={"key": VAULT_KEY})
    assert listed.status_code == 200 and LABEL_EMAIL in listed.text
    assert LABEL_PHONE in listed.text and "the reveal was logged" in listed.text
    refused = on.post("/sessions", data={"key": "not-the-key"})
    assert refused.status_code == 403 and "Not revealed" in refused.text
    no_raw(refused.text, "a refused reveal")
    no_raw(on.get("/sessions").text, "the list after a reveal")  # one request, one page

    usage = on.post("/usage", data={"key": VAULT_KEY})
    assert usage.status_code == 200 and LABEL_EMAIL in usage.text
    exported = on.post("/usage", data={"key": VAULT_KEY, "csv": "sessions"})
    assert exported.headers["content-type"].startswith("text/csv")
    rows = {r["session"]: r for r in csv.DictReader(io.StringIO(exported.text))}
    assert rows[labelled]["key"] == f"mail-{LABEL_EMAIL}"
    assert rows[labelled]["title"] == f"Call back on {LABEL_PHONE}"
    no_raw(on.get("/usage?csv=sessions").text, "the CSV without a reveal")
    wrong = on.post("/usage", data={"key": "nope", "csv": "sessions"})
    assert wrong.status_code == 403 and not wrong.headers["content-type"].startswith("text/csv")
    no_raw(wrong.text, "a refused CSV")
    records = [r.getMessage() for r in caplog.records if r.name == "chatkeep.inspect.reveal"]
    assert any("granted" in r and "sessions list" in r for r in records)
    assert any("refused" in r and "usage" in r for r in records)


def test_reveal_needs_the_flag_on_lists_too(client: TestClient, labelled: str) -> None:
    assert "Reveal values" not in client.get("/sessions").text
    for path in ("/sessions", "/usage"):
        refused = client.post(path, data={"key": VAULT_KEY, "csv": "sessions"})
        assert refused.status_code == 403 and "--reveal" in refused.text, path
        no_raw(refused.text, path)


def test_titles_link_to_their_session(client: TestClient, seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    html = client.get("/sessions").text
    for session_id, title in ((ids.closed, "Closed chat"),
                              (ids.support, "Refund for order 1138")):
        assert re.search(rf'<a class="title" href="/sessions/{session_id}">\s*{title}\s*</a>',
                         html), title
