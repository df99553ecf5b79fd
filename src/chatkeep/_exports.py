"""A package's public names from one table, each loaded on first use (PEP 562).

A package writes ``{module: (name, ...)}`` once; ``lazy_exports`` derives its ``__all__``,
its module ``__getattr__`` (import the defining module, bind the name in the package, so
later look-ups are plain attribute reads) and its ``__dir__``. The package mirrors the
table in ``if TYPE_CHECKING:`` imports (``from m import Name as Name``) for mypy and IDEs;
tests/test_exports.py fails when the two disagree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, tuple[str, ...]]
                 ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package`` from ``table`` (each
    defining module and the public names it gives). A name listed twice is a bug in the
    table, reported here (at import) rather than resolved silently."""
    module_of: dict[str, str] = {}
    for module, names in table.items():
        for name in names:
            if name in module_of:
                raise ImportError(f"{package}: {name!r} is listed under both "
                                  f"{module_of[name]} and {module}")
            module_of[name] = module
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # once: later look-ups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *module_of})

    return sorted(module_of), __getattr__, __dir__
