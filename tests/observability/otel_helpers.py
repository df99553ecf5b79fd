"""Shared by the observability tests: the SDK's in-memory span exporter and metric reader,
set as the process's providers once, and a keep whose model and embedding endpoint are
the recording fake server (the fixtures are in ``conftest.py``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "privacy"))

from egress_helpers import ModelPlayer

from chatkeep import Chatkeep
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.testing import FakeOpenAIServer

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


@dataclass
class Telemetry:
    """What the in-memory exporter and reader hold."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[Any]:
        return [s for s in self.spans() if s.name == name]

    def points(self, metric: str) -> list[Any]:
        """Every data point of ``metric`` recorded so far."""
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        out += list(m.data.data_points)
        return out


@dataclass
class World:
    keep: Chatkeep
    server: FakeOpenAIServer
    player: ModelPlayer


def open_world(folder: Path, *, budget: int = 500) -> World:
    """A keep on a fresh SQLite file, privacy on, a small budget (the summarizer folds),
    memories recalled with embeddings; its model the recording fake server."""
    player = ModelPlayer()
    server = FakeOpenAIServer(responder=player,
                              embedder=HashEmbedder(64, model="fake-embed")).start()
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=10.0)
    keep = Chatkeep(f"sqlite:///{folder / 'chat.db'}", model=client, dispatcher="inline",
                    config={"privacy": {"anonymize_pii": True},
                            "chat": {"max_history_tokens": budget, "recent_messages_min": 1},
                            "memory": {"recall_in_history": True,
                                       "embedding_model": "fake-embed",
                                       "embedding_base_url": server.base_url,
                                       "embedding_api_key": "k"},
                            "llm": {"max_retries": 0}})
    return World(keep, server, player)
