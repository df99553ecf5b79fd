"""The async lifecycle mirrors the sync one: same names, same parameters, awaited."""

from __future__ import annotations

import inspect

from chatkeep.aio.lifecycle import AsyncHoldService
from chatkeep.lifecycle.holds import HoldService


def _methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if not name.startswith("_") and inspect.isfunction(member)}


def test_the_hold_service_twin_has_every_method_with_the_same_parameters() -> None:
    twins = _methods(AsyncHoldService)
    assert set(twins) == set(_methods(HoldService))
    for name, signature in _methods(HoldService).items():
        other = twins[name].parameters
        assert [(p.name, p.kind, p.default) for p in signature.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in other.values()], name
        assert inspect.iscoroutinefunction(vars(AsyncHoldService)[name])
        assert getattr(vars(AsyncHoldService)[name], "__wrapped__", None) is not None
