"""keep.quotas: set, get, remaining, clear and list, per tenant and per actor, with typed
errors for bad arguments (raised before anything is written); a reservation that fits,
one that does not (nothing written), settling and releasing; on both stores, sync and
async."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.errors import ConfigError, InvalidArgument, InvalidReference, QuotaExceeded

ORG, OTHER = Ref("organization", 1), Ref("organization", 2)
ALICE, BOB = Ref("user", 10), Ref("user", 11)


def test_set_get_remaining_clear(keep: Chatkeep) -> None:
    assert keep.quotas.get(ORG) is None and keep.quotas.remaining(ORG) is None
    quota = keep.quotas.set(ORG, tokens=1000, window="day")
    assert (quota.tokens, quota.window, quota.spent, quota.reserved) == (1000, "day", 0, 0)
    assert quota.remaining == 1000 and quota.resets_at.hour == 0
    assert keep.quotas.set(ORG, tokens=500, window="month").window == "month"
    assert keep.quotas.remaining(ORG) == 500
    assert keep.quotas.get(OTHER) is None  # another tenant has none
    assert keep.quotas.clear(ORG) is True and keep.quotas.clear(ORG) is False
    assert keep.quotas.get(ORG) is None


def test_rolling_windows_and_actor_quotas(keep: Chatkeep) -> None:
    assert keep.quotas.set(ORG, tokens=900, window="24h").window == "86400s"
    assert keep.quotas.set(ORG, tokens=900, window=timedelta(minutes=30)).window == "1800s"
    keep.quotas.set(ORG, tokens=100, window="day", actor=ALICE)
    assert keep.quotas.remaining(ORG, actor=ALICE) == 100  # the tighter of the two
    assert keep.quotas.remaining(ORG, actor=BOB) == 900
    assert [(q.actor, q.tokens) for q in keep.quotas.list(ORG)] == [(None, 900), (ALICE, 100)]
    assert keep.quotas.clear(ORG, actor=ALICE) is True
    assert keep.quotas.remaining(ORG, actor=ALICE) == 900


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"tokens": -1}, InvalidArgument), ({"tokens": 1.5}, InvalidArgument),
    ({"tokens": True}, InvalidArgument), ({"tokens": "10"}, InvalidArgument),
    ({"tokens": 10, "window": ""}, InvalidArgument),
    ({"tokens": 10, "window": "fortnight"}, InvalidArgument),
    ({"tokens": 10, "window": timedelta(0)}, InvalidArgument),
    ({"tokens": 10, "window": 3}, InvalidArgument),
    ({"tokens": 10, "actor": "user:1"}, InvalidReference),
])
def test_bad_arguments_are_typed_errors_and_write_nothing(
        keep: Chatkeep, kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        keep.quotas.set(ORG, **kwargs)
    assert keep.quotas.list() == []


def test_a_tenant_must_be_a_ref(keep: Chatkeep) -> None:
    with pytest.raises(InvalidReference):
        keep.quotas.set("organization:1", tokens=10)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        keep.quotas.reserve(ORG, -5)


def test_reservations_fit_or_are_refused_with_nothing_written(keep: Chatkeep) -> None:
    keep.quotas.set(ORG, tokens=100)
    held = keep.quotas.reserve(ORG, 60)
    assert held.id is not None and keep.quotas.get(ORG).reserved == 60  # type: ignore[union-attr]
    with pytest.raises(QuotaExceeded) as refused:
        keep.quotas.reserve(ORG, 41)
    assert refused.value.remaining == 40 and refused.value.requested == 41
    assert refused.value.resets_at is not None and refused.value.tenant == ORG
    assert keep.quotas.get(ORG).reserved == 60  # type: ignore[union-attr]
    assert keep.quotas.reserve(OTHER, 10_000).id is None  # no quota: nothing held
    assert keep.quotas.settle(held.id, 25) is True
    assert keep.quotas.settle(held.id, 25) is False  # once
    quota = keep.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (25, 0)
    released = keep.quotas.reserve(ORG, 75)
    assert keep.quotas.remaining(ORG) == 0
    assert released.id is not None and keep.quotas.release(released.id) is True
    assert keep.quotas.remaining(ORG) == 75


def test_an_actor_quota_refuses_without_touching_the_tenant_quota(keep: Chatkeep) -> None:
    keep.quotas.set(ORG, tokens=1000)
    keep.quotas.set(ORG, tokens=50, actor=ALICE)
    with pytest.raises(QuotaExceeded) as refused:
        keep.quotas.reserve(ORG, 60, actor=ALICE)
    assert refused.value.actor == ALICE and refused.value.remaining == 50
    assert keep.quotas.get(ORG).reserved == 0  # type: ignore[union-attr]
    held = keep.quotas.reserve(ORG, 40, actor=ALICE)
    assert keep.quotas.get(ORG).reserved == 40  # type: ignore[union-attr]
    assert keep.quotas.get(ORG, actor=ALICE).reserved == 40  # type: ignore[union-attr]
    assert held.id is not None and keep.quotas.settle(held.id, 30)
    assert keep.quotas.get(ORG).spent == 30  # type: ignore[union-attr]
    assert keep.quotas.get(ORG, actor=ALICE).spent == 30  # type: ignore[union-attr]
    keep.quotas.reserve(ORG, 900, actor=BOB)  # Bob is limited by the tenant's only


def test_config_default_applies_to_tenants_without_their_own(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config={"quotas": {"default_tokens": 100, "default_window": "month"}})
    quota = keep.quotas.get(ORG)
    assert quota is not None and quota.default and quota.tokens == 100
    keep.quotas.reserve(ORG, 100)
    with pytest.raises(QuotaExceeded):
        keep.quotas.reserve(ORG, 1)
    keep.quotas.set(OTHER, tokens=5000)  # its own wins over the default
    keep.quotas.reserve(OTHER, 4000)


@pytest.mark.parametrize("section", [
    {"default_tokens": -1}, {"default_window": ""}, {"lease": 0}, {"output_ceiling": 0}])
def test_bad_config_is_a_config_error(section: dict[str, Any]) -> None:
    from chatkeep.config import Config

    with pytest.raises(ConfigError):
        Config.from_dict({"quotas": section})
