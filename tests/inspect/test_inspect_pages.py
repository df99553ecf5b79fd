"""Every page of the inspector over a seeded store, on SQLite and PostgreSQL: what it
shows, that it paginates, that it never writes, and that bad ids are 404 pages."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from inspect_seed import EMAIL, MODEL, ORG, OTHER_EMAIL, Seeded, config
from sqlalchemy import create_engine, text
from starlette.testclient import TestClient

from chatkeep import Chatkeep, Ref
from chatkeep.config import Config
from chatkeep.errors import StoreError
from chatkeep.inspect.readonly import open_read_only
from conftest import ClientFactory


def ok(client: TestClient, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code, response.text[:500])
    assert "Traceback" not in response.text
    return response.text


def plain(html: str) -> str:
    """The page's text, tags dropped, entities for <> read back (placeholders)."""
    return re.sub(r"<[^>]+>", " ", html).replace("&lt;", "<").replace("&gt;", ">") \
        .replace("&#39;", "'").replace("&#34;", '"').replace("&amp;", "&")


def snapshot(url: str) -> dict[str, Any]:
    """Everything a write could change, to compare before and after."""
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            out: dict[str, Any] = {}
            for table in ("chat_sessions", "chat_messages", "chat_usage", "memories",
                          "chat_tool_calls"):
                out[table] = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()
            out["rows"] = conn.execute(text(
                "SELECT id, summary_version, summary_watermark, pii_vault_version, "
                "total_tokens, distilled_through, last_seq FROM chat_sessions ORDER BY id")).all()
            return out
    finally:
        engine.dispose()


def test_sessions_list_filters_and_states(client: TestClient,
                                          seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    page = ok(client, "/sessions")
    for key in ("support-42", "sales-7", "other-tenant"):
        assert key in page
    assert client.get("/").headers["location"] == "/sessions"

    def listed(query: str) -> set[str]:
        return set(re.findall(r'href="/sessions/([0-9a-f-]{36})"', ok(client, query)))

    assert listed("/sessions?state=waiting") == {ids.waiting}
    assert listed("/sessions?state=closed") == {ids.closed}
    assert ids.support in listed("/sessions?state=open")
    assert ids.closed not in listed("/sessions?state=active")
    assert ids.support in listed("/sessions?state=over_budget")
    assert listed("/sessions?state=failed_fold") == set()
    with Chatkeep(seeded[0]) as keep:  # a fold of "sales-7" fails: it backs off
        version = keep.sessions.get_unscoped(ids.waiting).row.summary_version
        lease = keep.repository.claim_fold(ids.waiting, version, timedelta(minutes=5))
        assert lease is not None
        keep.repository.release_fold(ids.waiting, lease,
                                     retry_at=datetime.now(UTC) + timedelta(minutes=5))
    assert listed("/sessions?state=failed_fold") == {ids.waiting}
    assert listed("/sessions?key=support") == {ids.support}
    assert listed("/sessions?key=%25") == set()  # a wildcard is matched literally
    assert listed("/sessions?actor=user:7") == {ids.support}
    assert listed("/sessions?subject=ticket:42") == {ids.support}
    assert listed("/sessions?tenant=organization:2") == {ids.other}
    assert listed("/sessions?since=2999-01-01") == set()
    assert len(listed("/sessions?until=2999-01-01")) == 4
    by_tokens = re.findall(r'href="/sessions/([0-9a-f-]{36})"', ok(client, "/sessions?sort=tokens"))
    assert by_tokens[0] == ids.support  # the most billed
    fragment = client.get("/sessions?state=closed", headers={"hx-request": "true",
                                                             "hx-target": "sessions"})
    assert fragment.text.lstrip().startswith('<div id="sessions">')


def test_sessions_keyset_pages(db_url: str, make_client: ClientFactory) -> None:
    keep = Chatkeep(db_url, dispatcher="inline")
    try:
        for n in range(120):
            keep.sessions.open(f"bulk-{n:03d}", tenant=Ref("organization", 3))
    finally:
        keep.close()
    client = make_client()
    seen: list[str] = []
    query = "/sessions?tenant=organization:3"
    pages = 0
    while query:
        html = ok(client, query)
        seen += re.findall(r'href="/sessions/([0-9a-f-]{36})"', html)
        following = re.search(r'class="next" href="([^"]+)"', html)
        query = following.group(1).replace("&amp;", "&") if following else ""
        pages += 1
    assert pages == 3
    assert len(seen) == len(set(seen)) == 120
    assert "120 sessions" in plain(ok(client, "/sessions?tenant=organization:3"))
    assert ok(client, "/sessions?after=garbage")  # a damaged cursor starts over


def test_session_log(client: TestClient, seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    html = ok(client, f"/sessions/{ids.support}")
    text_ = plain(html)
    assert "support-42" in text_ and "Refund for order 1138" in text_
    assert 'class="role-user retracted"' in html and "retracted" in text_
    assert "summary watermark" in text_
    assert "distilled into memories" in text_
    # Tool calls paired with their results, both ways.
    assert re.search(r"lookup_order.*result #\d+", text_, re.S)
    assert re.search(r"result of\s+call_1\s+\(lookup_order\), called at\s+#\d+", text_)
    # Placeholders by default: the stored address never shows.
    assert EMAIL not in html and "<EMAIL_1>" in text_
    assert f'hx-get="/sessions/{ids.support}/preview"' in html
    # Windows of the log: the first one, then the next.
    first = ok(client, f"/sessions/{ids.support}?after=0")
    assert 'id="m1"' in first
    fragment = client.get(f"/sessions/{ids.support}?before=5",
                          headers={"hx-request": "true", "hx-target": "log"})
    assert fragment.text.lstrip().startswith("<section id=\"log\"")
    assert 'id="m4"' in fragment.text and 'id="m5"' not in fragment.text
    for huge in ("after=99999999999999999999", "before=99999999999999999999"):
        ok(client, f"/sessions/{ids.support}?{huge}")


def test_waiting_call_is_shown(client: TestClient, seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    assert "waiting for its result" in plain(ok(client, f"/sessions/{ids.waiting}"))
    preview = plain(ok(client, f"/sessions/{ids.waiting}/preview"))
    assert "call_w" in preview and "IncompleteToolTurn" in preview


@pytest.mark.parametrize("wire", ["openai_chat", "openai_responses", "anthropic_messages"])
def test_preview_in_each_format_writes_nothing(client: TestClient, seeded: tuple[str, Seeded],
                                               wire: str) -> None:
    url, ids = seeded
    before = snapshot(url)
    html = ok(client, f"/sessions/{ids.support}/preview?format={wire}&system=Be+brief.")
    text_ = plain(html)
    assert '<svg class="chart stacked"' in html
    for part in ("system prompt", "pinned", "summary", "tail", "open turn"):
        assert part in text_
    tokens, budget = map(lambda s: int(s.replace(",", "")), re.search(
        r"([\d,]+)\s+of\s+([\d,]+)\s+tokens in", text_).groups())
    assert budget == 160
    parts = [int(v.replace(",", "")) for v in re.findall(r"</span>[a-z ]+<b>([\d,]+)</b>", html)]
    assert len(parts) == 5 and all(p >= 0 for p in parts)
    if wire == "openai_chat":
        assert sum(parts) == tokens  # the bar adds up to the estimate
    assert "approval_status" in text_  # the open turn, verbatim
    assert "=== RECORD ===" in text_  # the summary
    assert EMAIL not in html
    assert snapshot(url) == before


def test_summary_and_folds(client: TestClient, seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    text_ = plain(ok(client, f"/sessions/{ids.support}/summary"))
    assert "Task and next steps" in text_ and "Refund order 1138 to the card." in text_
    assert "Rules" in text_ and "Answer in English." in text_
    assert "Vase broke in transit; refund agreed." in text_
    assert MODEL in text_ and re.search(r"≤\s+#\d+", text_)
    with Chatkeep(seeded[0]) as keep:  # the stored folds: their seq ranges and cost
        folds = keep.repository.folds(ids.support)
    assert folds
    first = folds[-1]
    assert first["from_seq"] == 1 and first["through_seq"] >= 1 and first["calls"] >= 1
    assert re.search(rf"#{first['from_seq']}\s*–\s*#{first['through_seq']}", text_)
    empty = plain(ok(client, f"/sessions/{ids.closed}/summary"))
    assert "No summary yet" in empty


def test_privacy_page_hides_values(client: TestClient, seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    html = ok(client, f"/sessions/{ids.support}/privacy")
    text_ = plain(html)
    assert "<EMAIL_1>" in text_ and "EmailRecognizer" in text_
    assert "<PHONE_1>" in text_ and "PhoneRecognizer" in text_
    assert "sealed (encrypted)" in text_
    assert EMAIL not in html and "hidden" in text_
    assert "Reveal values" not in text_  # not started with --reveal


def test_memories_scopes_provenance_and_recall(client: TestClient,
                                               seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    html = ok(client, "/memories")
    text_ = plain(html)
    for scope in ("tenant", "subject ticket:42", "personal user:7"):
        assert scope in text_
    assert "Refunds over 100 EUR" in text_
    replaced = ids.memories["Order 1138 (a ceramic vase) arrived broken."]
    replacing = ids.memories["Order 1138 replaces: refund approved by the manager."]
    assert f"/memories/{replaced}\"" not in html  # superseded: hidden by default
    assert f"/memories/{replaced}\"" in ok(client, "/memories?superseded=1")
    assert EMAIL not in html and "<EMAIL_1>" in text_  # the value a memory carries

    page = plain(ok(client, f"/memories/{replacing}"))
    assert ids.support in page and "Distilled from session" in page
    assert "Replaced" in page and "ceramic vase" in page
    assert "hash-64" in page  # its vector
    old = plain(ok(client, f"/memories/{replaced}"))
    assert re.search(rf"superseded by\s+#{replacing}", old)

    recall = plain(ok(client, f"/memories/recall?q=refund+card&session={ids.support}"))
    assert "full-text" in recall and "vector" in recall and "fused" in recall
    rows = re.findall(r"\n\s*(\d+)\s+(\d+|–)\s+(\d+|–)\s+[\d.]+\s+#(\d+)", recall)
    assert rows and rows[0][0] == "1"
    assert "Rival Corp" not in recall  # another tenant's memory is never a candidate
    by_tenant = ok(client, "/memories/recall?q=launch&tenant=organization:2")
    assert "Rival Corp" in by_tenant


def test_usage_reconciles_and_exports(client: TestClient, seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    html = ok(client, "/usage")
    text_ = plain(html)
    assert "Reconciled" in text_ and "every session's total equals its ledger" in text_
    assert html.count("<svg") >= 3
    total = int(re.search(r"([\d,]+)\s+tokens in", text_).group(1).replace(",", ""))
    for table in ("tenants", "purposes", "models", "sessions", "time", "ledger"):
        response = client.get(f"/usage?csv={table}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.text)))
        assert rows, table
        if table != "ledger":
            assert sum(int(r["total_tokens"]) for r in rows) == total, table
    ledger = list(csv.DictReader(io.StringIO(client.get("/usage?csv=ledger").text)))
    assert sum(int(r["prompt_tokens"]) + int(r["completion_tokens"]) for r in ledger) == total
    one = plain(ok(client, f"/usage?session={ids.support}&purpose=summary"))
    assert MODEL in one and "this session" in one
    assert ok(client, "/usage?bucket=hour&since=2000-01-01")


def test_inspector_never_writes(seeded: tuple[str, Seeded], client: TestClient) -> None:
    url, ids = seeded
    before = snapshot(url)
    for path in ("/sessions", f"/sessions/{ids.support}", f"/sessions/{ids.support}/preview",
                 f"/sessions/{ids.support}/summary", f"/sessions/{ids.support}/privacy",
                 "/memories", f"/memories/recall?q=refund&session={ids.support}", "/usage"):
        ok(client, path)
    assert snapshot(url) == before
    keep = open_read_only(url, Config.load(config()))
    try:
        with pytest.raises(StoreError):
            keep.sessions.get_unscoped(ids.support).add_user("a write the database must refuse")
    finally:
        keep.close()
    assert snapshot(url) == before


BAD_IDS = ["nope", "00000000-0000-7000-8000-000000000000", "%00", "x" * 300,
           "1'%20OR%20'1'='1", "..%2F..%2Fetc"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_ids_are_404_pages(client: TestClient, bad: str) -> None:
    for path in (f"/sessions/{bad}", f"/sessions/{bad}/preview", f"/sessions/{bad}/summary",
                 f"/sessions/{bad}/privacy", f"/memories/{bad}", f"/usage?session={bad}",
                 f"/memories/recall?q=x&session={bad}"):
        response = client.get(path)
        assert response.status_code == 404, (path, response.status_code)
        assert "Traceback" not in response.text and "<h1>404</h1>" in response.text


def test_bad_parameters_are_400_pages(client: TestClient, seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    for path in ("/sessions?actor=nocolon", "/sessions?since=yesterday", "/sessions?state=x",
                 "/sessions?sort=x", f"/sessions/{ids.support}?after=-1",
                 f"/sessions/{ids.support}/preview?format=xml", "/memories?scope=galaxy",
                 "/usage?csv=passwords", "/memories/recall?q=x", "/memories/99999999999999999999",
                 "/nowhere"):
        response = client.get(path)
        assert response.status_code in (400, 404), (path, response.status_code)
        assert "Traceback" not in response.text


def test_reveal_needs_the_flag_and_the_key(make_client: ClientFactory,
                                          seeded: tuple[str, Seeded],
                                          caplog: pytest.LogCaptureFixture) -> None:
    _, ids = seeded
    off = make_client()
    refused = off.post(f"/sessions/{ids.support}/privacy", data={"key": config()["privacy"][
        "encryption_key"]})
    assert refused.status_code == 403 and "--reveal" in refused.text
    assert EMAIL not in refused.text

    on = make_client(reveal=True)
    page = ok(on, f"/sessions/{ids.support}/privacy")
    assert "Reveal values on this page" in page and EMAIL not in page
    wrong = on.post(f"/sessions/{ids.support}/privacy", data={"key": "not-the-key"})
    assert wrong.status_code == 403 and EMAIL not in wrong.text
    key = config()["privacy"]["encryption_key"]
    granted = on.post(f"/sessions/{ids.support}/privacy", data={"key": key})
    assert granted.status_code == 200 and EMAIL in granted.text
    log = on.post(f"/sessions/{ids.support}", data={"key": key})
    assert log.status_code == 200 and EMAIL in log.text and "revealed" in log.text
    assert EMAIL not in ok(on, f"/sessions/{ids.support}")  # one page, one request
    records = [r.getMessage() for r in caplog.records if r.name == "chatkeep.inspect.reveal"]
    assert any("refused" in r and "privacy" in r for r in records)
    assert sum("granted" in r for r in records) == 2
    summary = on.post(f"/sessions/{ids.support}/summary", data={"key": key})
    assert summary.status_code == 200


def test_other_tenant_values_never_show_unconfined_masked(client: TestClient,
                                                          seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    assert OTHER_EMAIL not in ok(client, f"/sessions/{ids.other}")


def test_a_confined_inspector_lists_only_its_tenant(make_client: ClientFactory,
                                                    seeded: tuple[str, Seeded]) -> None:
    _, ids = seeded
    client = make_client(tenant=ORG)
    html = ok(client, "/sessions")
    assert ids.other not in html and "other-tenant" not in html
    assert "tenant organization:1" in plain(html)
