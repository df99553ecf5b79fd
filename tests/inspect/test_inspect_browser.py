"""The inspector in a real headless Chromium: ``chatkeep inspect`` serving a seeded store on
a free loopback port, clicked through sessions → session → summary → memory provenance →
usage, with a screenshot of each view under ``test-artifacts/inspector/<backend>/``.

Playwright drives Debian's Chromium through ``executable_path`` (``playwright install``
downloads a browser build, which this project never does; ``scripts/services.sh`` installs
the ``chromium`` package). Without a browser the test skips with the reason, and fails
instead under ``CHATKEEP_REQUIRE_SERVICES=1`` (CI).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inspect_seed import EMAIL, MODEL, Seeded, add_wide_session

from conftest import served

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "inspector"
CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium-headless-shell",
              "/usr/bin/chromium", "/usr/bin/chromium-browser")


def _skip_or_fail(reason: str) -> None:
    print(f"\nSKIP: {reason}")
    if os.environ.get("CHATKEEP_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (CHATKEEP_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def chromium_path() -> str | None:
    """``CHATKEEP_CHROMIUM``, or the first Debian Chromium installed."""
    chosen = os.environ.get("CHATKEEP_CHROMIUM")
    if chosen:
        return chosen if Path(chosen).exists() else None
    for candidate in CANDIDATES:
        if Path(candidate).exists():
            return candidate
    return shutil.which("chromium")


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium through Playwright (skips, or fails in CI, without one)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover
        _skip_or_fail("playwright is not installed (pip install playwright; it is in the "
                      "dev extra)")
    path = chromium_path()
    if path is None:
        _skip_or_fail("no Chromium found (apt-get install chromium; scripts/services.sh "
                      "does it): " + ", ".join(CANDIDATES))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


def test_click_through_the_inspector(browser: Any, seeded: tuple[str, Seeded]) -> None:
    from playwright.sync_api import expect

    url, ids = seeded
    backend = "sqlite" if url.startswith("sqlite") else "postgresql"
    shots = ARTIFACTS / backend
    shots.mkdir(parents=True, exist_ok=True)
    with served(url) as (base, _process):
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda message: problems.append(f"console: {message.text}")
                if message.type == "error" else None)
        page.on("response", lambda response: problems.append(
            f"{response.status} {response.url}") if response.status >= 400 else None)

        # Sessions: the list, then a filter applied by htmx in place.
        page.goto(f"{base}/sessions")
        page.wait_for_selector("#sessions table")
        assert page.locator("#sessions tbody tr").count() == 4
        page.screenshot(path=str(shots / "sessions.png"), full_page=True)
        page.select_option("select[name=state]", "waiting")
        expect(page.locator("#sessions tbody tr")).to_have_count(1)
        assert "sales-7" in page.inner_text("#sessions")
        expect(page).to_have_url(re.compile(r".*state=waiting.*"))  # htmx pushed it
        page.select_option("select[name=state]", "")
        expect(page.locator("#sessions tbody tr")).to_have_count(4)

        # A session: the stored log beside the dry run, loaded by htmx.
        page.locator("#sessions tr", has_text="support-42").locator("a").first.click()
        page.wait_for_url(re.compile(rf".*/sessions/{ids.support}$"))
        page.wait_for_selector("#preview svg.chart.stacked")
        log = page.inner_text("#log")
        assert "summary watermark" in log and "retracted" in log
        assert "<EMAIL_1>" in log and EMAIL not in page.content()
        preview = page.inner_text("#preview")
        assert "open turn" in preview and "of 160 tokens in openai_chat" in preview
        page.screenshot(path=str(shots / "session.png"), full_page=True)
        page.click("#preview nav.formats a:has-text('anthropic_messages')")
        expect(page.locator("#preview p.estimate")).to_contain_text("anthropic_messages")
        assert "tool_use" in page.inner_text("#preview")

        # The summary and its folds.
        page.click("nav.tabs a:has-text('Summary')")
        page.wait_for_selector("text=Fold history")
        body = page.inner_text("main")
        assert "Refund order 1138 to the card." in body and MODEL in body
        page.screenshot(path=str(shots / "summary.png"), full_page=True)

        # Memories: the list by scope, the recall box, one memory's provenance.
        page.click("header nav a:has-text('Memories')")
        page.wait_for_selector("text=Recall")
        page.fill(".recallbox input[name=q]", "refund card")
        page.fill(".recallbox input[name=session]", ids.support)
        page.click(".recallbox button")
        page.wait_for_selector("#recall table")
        assert "full-text" in page.inner_text("#recall")
        page.screenshot(path=str(shots / "memories.png"), full_page=True)
        replacing = ids.memories["Order 1138 replaces: refund approved by the manager."]
        page.click(f"a[href='/memories/{replacing}']")
        page.wait_for_selector("text=Provenance")
        body = page.inner_text("main")
        assert "Distilled from session" in body and "ceramic vase" in body
        page.screenshot(path=str(shots / "memory.png"), full_page=True)
        page.click("main a.mono")  # back to the session it came from
        page.wait_for_url(re.compile(rf".*/sessions/{ids.support}$"))

        # Usage: charts, tables, and the reconciliation.
        page.click("header nav a:has-text('Usage')")
        page.wait_for_selector("#reconcile")
        assert "Reconciled" in page.inner_text("#reconcile")
        assert page.locator("svg.chart").count() >= 3
        page.screenshot(path=str(shots / "usage.png"), full_page=True)

        # Privacy, placeholders only.
        page.goto(f"{base}/sessions/{ids.support}/privacy")
        assert "EmailRecognizer" in page.inner_text("main")
        assert EMAIL not in page.content()
        page.screenshot(path=str(shots / "privacy.png"), full_page=True)
        assert problems == [], problems
    for name in ("sessions", "session", "summary", "memories", "memory", "usage", "privacy"):
        assert (shots / f"{name}.png").stat().st_size > 10_000, name


#: Every log cell's box against the preview panel's and the log column's (in CSS pixels).
_OVERLAPS = """() => {
  const panel = document.querySelector('#preview').getBoundingClientRect();
  const column = document.querySelector('#log').getBoundingClientRect();
  const out = [];
  for (const cell of document.querySelectorAll('#log td')) {
    const r = cell.getBoundingClientRect();
    const under = r.right > panel.left && r.left < panel.right
      && r.bottom > panel.top && r.top < panel.bottom;
    if (under || r.right > column.right + 0.5 || cell.scrollWidth > cell.clientWidth + 1)
      out.push(cell.innerText.slice(0, 50));
  }
  return {cells: document.querySelectorAll('#log td').length, out: out,
          beside: column.right <= panel.left};
}"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_log_is_never_under_the_preview(browser: Any, seeded: tuple[str, Seeded],
                                            width: int) -> None:
    url, ids = seeded
    wide = add_wide_session(url)
    with served(url) as (base, _process):
        page = browser.new_page(viewport={"width": width, "height": 900})
        for session_id in (ids.support, wide):
            page.goto(f"{base}/sessions/{session_id}")
            page.wait_for_selector("#preview svg.chart.stacked")
            found = page.evaluate(_OVERLAPS)
            assert found["cells"] > 10 and found["beside"], found
            assert found["out"] == [], (width, session_id, found["out"])
        backend = "sqlite" if url.startswith("sqlite") else "postgresql"
        (ARTIFACTS / backend).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / backend / f"wide-{width}.png"), full_page=True)
