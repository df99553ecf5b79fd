"""Every public name is documented, and the package's top-level names import."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import chatkeep


def _undocumented() -> list[str]:
    missing = []
    for info in pkgutil.walk_packages(chatkeep.__path__, "chatkeep."):
        if ".migrations" in info.name:
            continue  # Alembic revision scripts
        module = importlib.import_module(info.name)
        if not module.__doc__:
            missing.append(info.name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not obj.__doc__:
                missing.append(f"{info.name}.{name}")
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    target = value.fget if isinstance(value, property) else value
                    if (not attr.startswith("_") and inspect.isfunction(target)
                            and not target.__doc__):
                        missing.append(f"{info.name}.{name}.{attr}")
    return missing


def test_every_public_name_has_a_docstring() -> None:
    assert _undocumented() == []


def test_top_level_names_resolve() -> None:
    for name in chatkeep.__all__:
        assert getattr(chatkeep, name) is not None
