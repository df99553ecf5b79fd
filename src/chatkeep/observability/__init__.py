"""OpenTelemetry for chatkeep: GenAI spans and metrics, with no raw value in them.

Behind the ``otel`` extra (``opentelemetry-api`` only; the application brings the SDK and
its exporter). The hooks in the history round, the guarded model, the summarizer fold, the
distiller and the embedding requests check :data:`tracing.ON` once; when the API is not
installed nothing here imports it and nothing else runs. ``tracing`` makes the spans,
``metrics`` the instruments, ``attributes`` the names (the GenAI conventions' and
chatkeep's own under ``chatkeep.*``) and the scope a call runs in, ``capture`` the content
a span may carry (off by default; when on, only bodies as they left through the egress).
"""

from __future__ import annotations

from chatkeep.observability.capture import capture_enabled, configure
from chatkeep.observability.metrics import record_quota_refusal, record_store_duration

__all__ = ["capture_enabled", "configure", "record_quota_refusal", "record_store_duration"]
