"""The text of text-like files a request names by URL, read before it is scrubbed.

Pydantic AI's model adapters download a text-like file given by URL (``DocumentUrl`` of a
``text/*``, JSON, XML, YAML or TOML document) and inline its text into the request after
every capability has run, so no egress would see it. The capability reads those files
first, with Pydantic AI's own downloader (its SSRF rules and ``force_download`` as the
adapter would apply them), and the scrub sends their scrubbed text in their place.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import FileUrl
from pydantic_ai.models import download_item


async def read_texts(files: Sequence[FileUrl]) -> dict[str, str]:
    """URL -> text of each of ``files``, as the model adapter would download it."""
    texts: dict[str, str] = {}
    for item in files:
        if item.url not in texts:
            texts[item.url] = (await download_item(item, data_format="text"))["data"]
    return texts
