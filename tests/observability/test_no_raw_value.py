"""With privacy on and content capture on, no raw or normalised personal value appears in
any span name, attribute, event or metric label, in each wire format: what a span
captures is the body the egress returned (placeholders), never the caller's text."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from egress_helpers import FORMS, KINDS, PLACEHOLDER, POOLS, assert_never_raw, written
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_helpers import Telemetry, open_world

from chatkeep import Ref
from chatkeep.observability import configure

ORG = Ref("organization", 1)
ACTOR = Ref("user", 3)
FORMATS = ("openai_chat", "openai_responses", "anthropic_messages")
FILLER = "More detail about the request follows here. " * 10
VALUES = {kind: POOLS[kind][0] for kind in KINDS}


def _said(kind: str, value: str, form: str) -> str:
    if kind == "name":
        return f"Hello, my name is {written(value, form)}."
    return f"My {kind} is {written(value, form)}, please note it."


def _exported(telemetry: Telemetry) -> list[tuple[str, str]]:
    """Every text the exporter and reader hold: span names, attributes, events, links,
    metric names and labels."""
    out: list[tuple[str, str]] = []
    for span in telemetry.spans():
        out.append((f"span {span.name}", span.name))
        out.append((f"{span.name} attributes", json.dumps(dict(span.attributes or {}),
                                                          ensure_ascii=False, default=str)))
        for event in span.events:
            out.append((f"{span.name} event {event.name}",
                        json.dumps([event.name, dict(event.attributes or {})],
                                   ensure_ascii=False, default=str)))
        out.append((f"{span.name} status", str(span.status.description)))
    data = telemetry.reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    out.append((f"metric {metric.name}",
                                json.dumps([metric.name, dict(point.attributes or {})],
                                           ensure_ascii=False, default=str)))
    return out


def _drive(folder: Path, telemetry: Telemetry, fmt: str, said: dict[str, str]) -> None:
    world = open_world(folder)
    try:
        session = world.keep.sessions.create(ORG, ACTOR)
        for i, (kind, value) in enumerate(VALUES.items()):
            session.add_user(_said(kind, value, "plain") + " " + FILLER)
            session.add_assistant(f"Noted ({i}). " + said[kind] + " " + FILLER)
        session.add_user("What do you have on file? " + " ".join(said.values()))
        history = world.keep.compressor.build_history(session, "You help.", format=fmt)  # type: ignore[call-overload]
        assert history.info.compressed
        world.keep.memory.recall(session, query="contact details " + said["email"])
    finally:
        world.keep.close()
        world.server.stop()


@pytest.fixture
def capture_on() -> Any:
    configure(capture_content=True)
    yield
    configure(capture_content=False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_captured_content_holds_placeholders_only(fmt: str, telemetry: Telemetry,
                                                  capture_on: None, tmp_path: Path) -> None:
    said = {kind: _said(kind, value, "plain") for kind, value in VALUES.items()}
    _drive(tmp_path, telemetry, fmt, said)
    captured = [dict(s.attributes)["gen_ai.input.messages"] for s in telemetry.spans()
                if "gen_ai.input.messages" in dict(s.attributes or {})]
    # Capture ran (the summarizer's and the distiller's requests), with placeholders in it.
    assert len(captured) >= 2
    assert any(PLACEHOLDER.search(text) for text in captured)
    assert all(json.loads(text)[0]["role"] for text in captured)
    assert_never_raw(_exported(telemetry), VALUES)


PROPERTY = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@PROPERTY
@given(forms=st.fixed_dictionaries({kind: st.sampled_from(FORMS) for kind in KINDS}),
       fmt=st.sampled_from(FORMATS))
def test_no_raw_value_in_any_span_or_label(forms: dict[str, str], fmt: str,
                                           telemetry: Telemetry, capture_on: None) -> None:
    telemetry.exporter.clear()
    said = {kind: _said(kind, VALUES[kind], forms[kind]) for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="otel-") as folder:
        _drive(Path(folder), telemetry, fmt, said)
    assert telemetry.spans()
    assert_never_raw(_exported(telemetry), VALUES)
