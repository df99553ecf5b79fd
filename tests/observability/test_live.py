"""The round's hooks run only while telemetry has somewhere to go: with the API installed
and no provider set, a ``build_history`` runs none of them (they would only cost time);
once the application sets a tracer or a meter provider, the next round records. Run in
a fresh interpreter: this suite's own helpers set global providers, once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    from chatkeep import Chatkeep, Ref
    from chatkeep.observability import tracing

    calls = []
    real = tracing.build_history

    def counting(rnd, build):
        calls.append(rnd.session.id)
        return real(rnd, build)

    tracing.build_history = counting
    keep = Chatkeep(f"sqlite:///{sys.argv[1]}", dispatcher="inline")
    session = keep.sessions.create(Ref("organization", 1))
    session.add_user("Hello")
    assert not tracing.live()
    keep.compressor.build_history(session, "Be brief.")
    assert calls == [], calls

    which = sys.argv[2]
    if which == "tracer":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter)

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
    else:
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    assert tracing.live()
    keep.compressor.build_history(session, "Be brief.")
    assert calls == [session.id], calls
    if which == "tracer":
        names = [s.name for s in exporter.get_finished_spans()]
        assert "chatkeep.build_history" in names, names
    else:
        data = reader.get_metrics_data()
        names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics
                 for m in sm.metrics}
        assert "chatkeep.store.duration" in names, names
    print("ok")
""")


def run(tmp_path: Path, which: str) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "k.db"), which],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_no_provider_no_hooks_then_a_tracer_provider_records(tmp_path: Path) -> None:
    assert run(tmp_path, "tracer") == "ok"


def test_a_meter_provider_alone_turns_the_hooks_on(tmp_path: Path) -> None:
    assert run(tmp_path, "meter") == "ok"
