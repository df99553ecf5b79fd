"""chatkeep's metric instruments, made on first use from ``opentelemetry.metrics``.

``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` follow the GenAI
conventions (with the tenant and purpose beside their attributes), and three are
chatkeep's own: ``chatkeep.folds``, ``chatkeep.quota.refused`` and
``chatkeep.store.duration``. The ``record_*`` functions are safe to call from anywhere: with
the API absent they return after one check, with no provider its no-op meter drops them.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from chatkeep.observability import attributes as a

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter

TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
FOLDS = "chatkeep.folds"
QUOTA_REFUSED = "chatkeep.quota.refused"
STORE_DURATION = "chatkeep.store.duration"

#: The conventions' advised buckets.
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                  16777216, 67108864]
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                     20.48, 40.96, 81.92]
_STORE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]


def _available() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):
        return False


ON = _available()
"""Whether ``opentelemetry`` can be imported (checked without importing it)."""


class _Instruments:
    """The five instruments, made once on chatkeep's meter (the global provider's, or
    ``meter``'s: a bench compares providers in one process)."""

    def __init__(self, meter: Meter | None = None) -> None:
        if meter is None:
            from opentelemetry import metrics

            meter = metrics.get_meter("chatkeep", a.version())
        self.tokens: Histogram = meter.create_histogram(
            TOKEN_USAGE, unit="{token}", description="Tokens used by a GenAI call",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS)
        self.duration: Histogram = meter.create_histogram(
            OPERATION_DURATION, unit="s", description="Duration of a GenAI operation",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS)
        self.folds: Counter = meter.create_counter(
            FOLDS, unit="{fold}", description="Summary folds, by outcome")
        self.refused: Counter = meter.create_counter(
            QUOTA_REFUSED, unit="{reservation}",
            description="Quota reservations refused (nothing was sent)")
        self.store: Histogram = meter.create_histogram(
            STORE_DURATION, unit="s", description="Duration of a store operation",
            explicit_bucket_boundaries_advisory=_STORE_BUCKETS)


_made: list[_Instruments] = []


def instruments() -> _Instruments:
    """chatkeep's instruments (made on the first call)."""
    if not _made:
        _made.append(_Instruments())
    return _made[0]


def labels(base: dict[str, Any]) -> dict[str, Any]:
    """A call's span attributes as metric labels: without the session id, which names one
    conversation of an unbounded number (a series per session would exhaust a metric's
    attribute sets, the SDK's cardinality limit, and every backend's budget); tenant,
    purpose, operation, provider and models stay."""
    return {key: value for key, value in base.items() if key != a.SESSION_ID}


def record_tokens(base: dict[str, Any], input_tokens: int | None,
                  output_tokens: int | None) -> None:
    """Token usage of one call: ``base`` holds its operation, provider, models and scope."""
    histogram = instruments().tokens
    series = labels(base)
    if input_tokens is not None:
        histogram.record(input_tokens, {**series, a.TOKEN_TYPE: "input"})
    if output_tokens is not None:
        histogram.record(output_tokens, {**series, a.TOKEN_TYPE: "output"})


def record_duration(base: dict[str, Any], seconds: float) -> None:
    """Duration of one GenAI operation (``base`` with ``error.type`` when it failed)."""
    instruments().duration.record(seconds, labels(base))


def record_fold(tenant: str | None, outcome: str) -> None:
    """One fold's outcome (``folded``, ``failed``, ``deferred``, ``refused``,
    ``lost_race``)."""
    labels = {a.FOLD_OUTCOME: outcome}
    if tenant is not None:
        labels[a.TENANT] = tenant
    instruments().folds.add(1, labels)


def record_quota_refusal(tenant: str, purpose: str) -> None:
    """A quota reservation was refused for ``tenant`` (``type:id``, see
    :func:`~chatkeep.observability.attributes.tenant_label`) and ``purpose``: the counter
    the quotas code calls, one check when the API is absent."""
    if ON:
        instruments().refused.add(1, {a.TENANT: tenant, a.PURPOSE: purpose})


def record_store_duration(operation: str, seconds: float) -> None:
    """How long one store ``operation`` took (``read_history``, ``compare_and_set``...)."""
    if ON:
        instruments().store.record(seconds, {a.STORE_OPERATION: operation})
