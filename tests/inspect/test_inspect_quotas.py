"""The usage page shows each tenant's quotas as they stand (issue 33): the limit per
window, what the window spent, what calls hold reserved and the reservations in flight
(those past their lease waiting for the sweep); a confined inspector shows its tenant's
only; the table exports as CSV like the page's others."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from datetime import timedelta

import pytest
from inspect_seed import ANA, ORG, OTHER, Seeded
from starlette.testclient import TestClient

from chatkeep import Chatkeep
from chatkeep.store.rows import utcnow

ClientFactory = Callable[..., TestClient]

# The seeded store embeds its memories: on a PostgreSQL without pgvector, skipped with the
# reason (failed under CHATKEEP_REQUIRE_SERVICES=1).
pytestmark = pytest.mark.usefixtures("requires_pgvector")


def _quotas(url: str) -> None:
    """ORG: 50,000 a day, 1,200 spent, 300 held by a call in flight and 200 by one whose
    worker died (its lease ended); ANA in ORG: 9,000 per 24h; OTHER: 7,000 a month."""
    keep = Chatkeep(url, config={"quotas": {"lease": 60}})
    try:
        keep.quotas.set(ORG, tokens=50_000, window="day")
        keep.quotas.set(ORG, tokens=9_000, window="24h", actor=ANA)
        keep.quotas.set(OTHER, tokens=7_000, window="month")
        keep.quotas.reserve(ORG, 1_200).settle(1_200)
        keep.quotas.reserve(ORG, 300)
        now = utcnow()
        keep.quotas.clock = lambda: now - timedelta(minutes=5)
        keep.quotas.reserve(ORG, 200)  # its lease ended four minutes ago
    finally:
        keep.close()


def _rows(html: str) -> list[list[str]]:
    section = html[html.index('id="quotas"'):]
    section = section[:section.index("</table>")]
    rows = [[re.sub(r"<[^>]+>", "", cell).strip() for cell in
             re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", section, re.S)]
    return [r for r in rows if len(r) == 10]


def test_the_usage_page_shows_each_quota_spent_and_reserved(
        seeded: tuple[str, Seeded], make_client: ClientFactory) -> None:
    _quotas(seeded[0])
    response = make_client().get("/usage")
    assert response.status_code == 200
    rows = {(r[0], r[1]): r for r in _rows(response.text)}
    assert rows[(str(ORG), "")][2:] == [
        "day", "50,000", "1,200", "500", "48,300", "2", "1", rows[(str(ORG), "")][9]]
    assert rows[(str(ORG), str(ANA))][2:9] == [
        "86400s", "9,000", "0", "0", "9,000", "0", "0"]
    assert rows[(str(OTHER), "")][2:5] == ["month", "7,000", "0"]
    assert rows[(str(ORG), "")][9].endswith("T00:00:00+00:00")  # the next UTC midnight

    exported = make_client().get("/usage?csv=quotas")
    assert exported.headers["content-type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(exported.text)))
    org = next(r for r in lines if r["tenant"] == str(ORG) and r["actor"] == "")
    assert (org["quota_tokens"], org["spent_tokens"], org["reserved_tokens"],
            org["reservations"], org["expired"]) == ("50000", "1200", "500", "2", "1")


def test_a_confined_inspector_shows_its_tenants_quotas_only(
        seeded: tuple[str, Seeded], make_client: ClientFactory) -> None:
    _quotas(seeded[0])
    html = make_client(tenant=OTHER).get("/usage").text
    assert [(r[0], r[1]) for r in _rows(html)] == [(str(OTHER), "")]
    lines = list(csv.DictReader(io.StringIO(
        make_client(tenant=OTHER).get("/usage?csv=quotas").text)))
    assert [r["tenant"] for r in lines] == [str(OTHER)]
    filtered = make_client().get(f"/usage?tenant={ORG.type}:{ORG.id}").text
    assert {r[0] for r in _rows(filtered)} == {str(ORG)}


def test_without_quotas_the_page_says_so_and_names_the_default(
        seeded: tuple[str, Seeded], make_client: ClientFactory) -> None:
    html = make_client().get("/usage").text
    assert "No quotas stored." in html
    settings = {"quotas": {"default_tokens": 25_000, "default_window": "month"}}
    html = make_client(settings=settings).get("/usage").text
    assert "limited to 25,000 tokens per month" in html
