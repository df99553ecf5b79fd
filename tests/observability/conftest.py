"""The observability tests' fixtures (their helpers are in ``otel_helpers.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from otel_helpers import EXPORTER, READER, Telemetry, World, open_world


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    EXPORTER.clear()  # metrics are cumulative: tests compare before and after
    yield Telemetry(EXPORTER, READER)
    EXPORTER.clear()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = open_world(tmp_path)
    try:
        yield w
    finally:
        w.keep.close()
        w.server.stop()
