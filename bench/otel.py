"""The cost of chatkeep's OpenTelemetry hooks on a turn, as ratios in one run.

    python bench/otel.py [--turns 200] [--rounds 7] [--messages 40] [--markdown]

A turn here is its ``build_history`` on a SQLite file: a session of ``--messages``
messages ending in a user message, within budget (no fold, no model call), so the table
holds what the hooks add to the instrumented round itself, undiluted by the appends. It
runs four ways, interleaved round by round in one process so the machine's drift hits
each alike:

* **hooks off**: as if ``opentelemetry`` were not installed (``tracing.ON`` false: each
  hook is one attribute check), the peer every ratio is against;
* **API only**: the API installed, no provider set (its proxy tracer, non-recording spans);
* **no-op provider**: the API's ``NoOpTracerProvider`` and ``NoOpMeterProvider``;
* **SDK, in-memory**: the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter``, and an SDK ``MeterProvider`` with an ``InMemoryMetricReader``.

The table gives each way's median time per turn over the rounds and its ratio to hooks
off. The target (issue 34): at most 1.05x with the API alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chatkeep import Chatkeep, Ref
from chatkeep.observability import metrics, tracing
from chatkeep.sessions import ChatSession

FILLER = "A sentence of ordinary length about the customer's request. " * 3


def _ways() -> dict[str, Callable[[], None]]:
    """Each way -> what switches the hooks to it."""
    exporter = InMemorySpanExporter()
    sdk_tracer = TracerProvider()
    sdk_tracer.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    sdk_meter = MeterProvider(metric_readers=[reader])
    api = (trace.get_tracer("chatkeep"), metrics._Instruments())
    noop = (trace.NoOpTracerProvider().get_tracer("chatkeep"),
            metrics._Instruments(otel_metrics.NoOpMeterProvider().get_meter("chatkeep")))
    sdk = (sdk_tracer.get_tracer("chatkeep"),
           metrics._Instruments(sdk_meter.get_meter("chatkeep")))

    def use(on: bool, pair: tuple[object, metrics._Instruments] | None) -> Callable[[], None]:
        def switch() -> None:
            tracing.ON = on
            tracing.ALWAYS = on  # the hooks run without a global provider set
            metrics.ON = on
            if pair is not None:
                tracing._tracers[:] = [pair[0]]  # type: ignore[list-item]
                metrics._made[:] = [pair[1]]
            exporter.clear()
        return switch

    return {"hooks off": use(False, None), "API only": use(True, api),
            "no-op provider": use(True, noop), "SDK, in-memory": use(True, sdk)}


def _turn(keep: Chatkeep, session: ChatSession) -> None:
    keep.compressor.build_history(session, "You help customers.")


def main() -> None:
    """Run the four ways interleaved and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--markdown", action="store_true", help="(it is Markdown already)")
    args = parser.parse_args()
    ways = _ways()
    times: dict[str, list[float]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(prefix="otel-bench-") as folder:
        keep = Chatkeep(f"sqlite:///{Path(folder) / 'chat.db'}", dispatcher="inline",
                        config={"chat": {"max_history_tokens": 60000},
                                "memory": {"distil_on_compress": False}})
        sessions = {}
        for name in ways:
            session = keep.sessions.create(Ref("organization", 1))
            for i in range(args.messages // 2):
                session.add_user(f"Earlier question {i}. {FILLER}")
                session.add_assistant(f"Earlier answer {i}. {FILLER}")
            session.add_user(f"And now? {FILLER}")
            sessions[name] = session
        for name, switch in ways.items():  # warm each way up, untimed
            switch()
            for _ in range(20):
                _turn(keep, sessions[name])
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                ways[name]()
                session = sessions[name]
                start = time.perf_counter()
                for _ in range(args.turns):
                    _turn(keep, session)
                times[name].append((time.perf_counter() - start) / args.turns)
        keep.close()
    ways["hooks off"]()
    base = statistics.median(times["hooks off"])
    print(f"{args.turns} turns x {args.rounds} rounds per way, interleaved; a session of "
          f"{args.messages} messages per way (SQLite file), no fold.\n")
    print("| way | median per turn | ratio to hooks off |")
    print("|---|---:|---:|")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"| {name} | {median * 1e3:.3f} ms | {median / base:.3f}x |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
