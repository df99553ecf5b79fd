"""The docs site works offline (issue 35, item 6): no page loads a script or a stylesheet
from another host, and code is coloured by the vendored highlight.js."""

from __future__ import annotations

import re
from pathlib import Path

ASSET = re.compile(r'<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]+)"', re.I)


def test_no_page_loads_an_asset_from_another_host(site: Path) -> None:
    remote = {}
    for page in site.rglob("*.html"):
        for url in ASSET.findall(page.read_text("utf-8")):
            if re.match(r"(?:https?:)?//", url):
                remote[url] = page.relative_to(site)
    assert not remote, remote


def test_code_is_coloured_by_the_vendored_highlight_js(site: Path) -> None:
    page = (site / "quickstart" / "index.html").read_text("utf-8")
    scripts = re.findall(r'<script\b[^>]*\bsrc="([^"]+)"', page)
    assert any(src.endswith("assets/highlight/highlight.min.js") for src in scripts), scripts
    assert any(src.endswith("assets/highlight/init.js") for src in scripts), scripts
    vendored = site / "assets" / "highlight" / "highlight.min.js"
    assert "Highlight.js v11" in vendored.read_text("utf-8")[:200]
    assert "hljs.highlightAll()" in (site / "assets" / "highlight" / "init.js").read_text()
