"""The async lifecycle mirrors the sync one: same names, same parameters, awaited."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from chatkeep.aio.lifecycle import AsyncHoldService, AsyncRetentionService
from chatkeep.lifecycle.holds import HoldService
from chatkeep.lifecycle.retention import RetentionService


def _methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if not name.startswith("_") and inspect.isfunction(member)}


@pytest.mark.parametrize(("sync", "twin"), [(HoldService, AsyncHoldService),
                                             (RetentionService, AsyncRetentionService)])
def test_each_lifecycle_twin_has_every_method_with_the_same_parameters(
        sync: type, twin: type) -> None:
    twins = _methods(twin)
    assert set(twins) == set(_methods(sync))
    for name, signature in _methods(sync).items():
        other = twins[name].parameters
        assert [(p.name, p.kind, p.default) for p in signature.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in other.values()], name
        assert inspect.iscoroutinefunction(vars(twin)[name])
        assert getattr(vars(twin)[name], "__wrapped__", None) is not None


def test_the_lifecycle_twins_are_exported_from_chatkeep_aio(tmp_path: Path) -> None:
    """``keep.holds`` and ``keep.retention`` of an ``AsyncChatkeep`` are public names."""
    import chatkeep.aio as aio
    from chatkeep.aio import AsyncChatkeep

    for cls in (AsyncHoldService, AsyncRetentionService):
        assert getattr(aio, cls.__name__) is cls and cls.__name__ in aio.__all__
        assert cls.__doc__
    keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'k.db'}")  # builds its parts, opens nothing
    assert isinstance(keep.holds, aio.AsyncHoldService)
    assert isinstance(keep.retention, aio.AsyncRetentionService)
