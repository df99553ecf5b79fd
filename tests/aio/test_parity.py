"""The async API mirrors the sync one: same public names, same parameters, awaited.

Properties that read the database in the sync API (``ChatSession.messages``) are methods
in both (``read_messages()``), since an async property cannot do I/O.
"""

from __future__ import annotations

import inspect

import pytest

from chatkeep import Chatkeep, ChatSession
from chatkeep.aio import (
    AsyncChatkeep,
    AsyncChatSession,
    AsyncHistoryCompressor,
    AsyncMemoryService,
    AsyncPrivacyGuard,
    AsyncQuotaService,
    AsyncReservation,
    AsyncSessionService,
)
from chatkeep.aio.twins import Twin
from chatkeep.history import HistoryCompressor
from chatkeep.memory import MemoryService
from chatkeep.privacy.guard import PrivacyGuard
from chatkeep.quotas import QuotaService, Reservation
from chatkeep.sessions import SessionService

PAIRS = [(Chatkeep, AsyncChatkeep), (ChatSession, AsyncChatSession),
         (SessionService, AsyncSessionService), (HistoryCompressor, AsyncHistoryCompressor),
         (MemoryService, AsyncMemoryService), (PrivacyGuard, AsyncPrivacyGuard),
         (QuotaService, AsyncQuotaService), (Reservation, AsyncReservation)]
#: Sync methods with no async twin, and why.
NOT_TWINNED = {
    "round": "a step-by-step object over the sync core: framework adapters drive it inside "
             "the bridge (the async keep runs their flows there)",
    "job_handlers": "the async keep's jobs are the core's, run through the bridge",
    "for_session": "returns the core's text filter, used inside the core only",
    "adopt_row": "the core's compressor hands its session a row; the twin reads the core's",
    "pending": "a reservation written inside another write's transaction: the core's "
               "compressor holds it in the manifest's, inside the bridge",
}
#: Parameters the sync side has that the async side does not (or the reverse), and why.
SIGNATURE_EXCEPTIONS = {("build_history", "session"): "accepts either kind of session"}


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(cls).items()
            if not name.startswith("_") and inspect.isfunction(member)}


@pytest.mark.parametrize(("sync", "twin"), PAIRS, ids=[t.__name__ for _, t in PAIRS])
def test_every_sync_method_has_an_async_twin_with_the_same_parameters(
        sync: type, twin: type) -> None:
    twins = public_methods(twin)
    for name, signature in public_methods(sync).items():
        if name in NOT_TWINNED:
            continue
        assert name in twins, f"{twin.__name__} lacks {name}"
        assert [p.name for p in signature.parameters.values()] == \
            [p.name for p in twins[name].parameters.values()], f"{twin.__name__}.{name}"
        for parameter in signature.parameters.values():
            other = twins[name].parameters[parameter.name]
            assert parameter.kind == other.kind, f"{twin.__name__}.{name}({parameter.name})"
            assert parameter.default == other.default, f"{twin.__name__}.{name}({parameter.name})"


@pytest.mark.parametrize(("sync", "twin"), PAIRS, ids=[t.__name__ for _, t in PAIRS])
def test_twins_that_do_io_are_coroutines_and_properties_never_do_io(
        sync: type, twin: type) -> None:
    for name, member in vars(twin).items():
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        if name in ("core", "run") or name in public_methods(sync):
            assert inspect.iscoroutinefunction(member), f"{twin.__name__}.{name} must be awaited"
    sync_properties = {n for n, m in vars(sync).items() if isinstance(m, property)}
    twin_properties = {n for n, m in vars(twin).items() if isinstance(m, property)}
    assert sync_properties - twin_properties <= {"messages", "repository"}


@pytest.mark.parametrize(("sync", "twin"), PAIRS[1:], ids=[t.__name__ for _, t in PAIRS[1:]])
def test_each_declared_twin_method_is_bridged_to_a_sync_method(sync: type, twin: type) -> None:
    """A stub without ``@bridged`` would return ``None`` (its body is a docstring), and
    mypy is told not to flag such bodies in ``aio/``: this is the check instead."""
    assert issubclass(twin, Twin)
    for name, member in vars(twin).items():
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        assert getattr(member, "__wrapped__", None) is not None, f"{twin.__name__}.{name}"
        assert callable(getattr(sync, name, None)), f"{sync.__name__} has no {name}"
