"""Async twins, declared: each wraps one sync object and awaits its methods on the bridge.

As SQLAlchemy's ``AsyncSession`` wraps ``sync_session``, a twin holds the sync object
(``core``) and the keep's :class:`~chatkeep.aio.bridge.Bridge`, never the keep. A method
is written as its signature and docstring under :func:`bridged`, which supplies the body:
the core's method of the same name, run through the bridge. Twins among the arguments
reach the core as their sync objects; a result that has a twin comes back as one (a
``ChatSession`` as an ``AsyncChatSession``, the core itself as this twin). A property that
reads the core's row snapshot (no I/O) is a :class:`mirror`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Self, TypeVar, get_args, get_origin, overload

from chatkeep.aio.bridge import Bridge

S = TypeVar("S")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, Any]])

__all__ = ["Twin", "bridged", "mirror"]

_TWINS: dict[type, type[Twin[Any]]] = {}
"""Sync class -> its twin class (``class AsyncX(Twin[X])`` registers itself)."""


class Twin(Generic[S]):
    """Base of the async twins: ``core`` is the sync object this one wraps (only usable
    inside the bridge)."""

    core: S

    def __init__(self, core: S, bridge: Bridge) -> None:
        self.core = core
        self._bridge = bridge

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if get_origin(base) is Twin:
                _TWINS[get_args(base)[0]] = cls

    def _twin(self, value: Any) -> Any:
        """``value``, a core object (or a list of them) as its twin."""
        if value is self.core:
            return self
        twin = _TWINS.get(type(value))
        if twin is not None:
            return twin(value, self._bridge)
        if type(value) is list and value and type(value[0]) in _TWINS:
            return [self._twin(v) for v in value]
        return value


def core_of(value: Any) -> Any:
    """The sync object behind ``value`` if it is a twin, else ``value``."""
    return value.core if isinstance(value, Twin) else value


def bridged(stub: F) -> F:
    """The twin of the core's method named like ``stub``, which gives the signature and
    docstring (its body never runs)."""
    name = stub.__name__

    @functools.wraps(stub)
    async def call(self: Twin[Any], /, *args: Any, **kwargs: Any) -> Any:
        result = await self._bridge(getattr(self.core, name), *map(core_of, args),
                                    **{k: core_of(v) for k, v in kwargs.items()})
        return self._twin(result)

    return call  # type: ignore[return-value]


class mirror(property, Generic[T]):
    """A read-only property that reads the core's property of the same name (typed and
    documented by it): ``id = mirror(ChatSession.id)``."""

    def __init__(self, source: Callable[[Any], T]) -> None:
        getter = getattr(source, "fget", source)
        name = getter.__name__

        def read(twin: Any) -> Any:
            return getattr(twin.core, name)

        read.__name__, read.__doc__ = name, getter.__doc__
        super().__init__(read, doc=getter.__doc__)

    @overload
    def __get__(self, instance: None, owner: type | None = None, /) -> Self: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None, /) -> T: ...

    def __get__(self, instance: object, owner: type | None = None, /) -> Any:
        return super().__get__(instance, owner)
