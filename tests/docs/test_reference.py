"""The API reference lists every public name (issue 35, item 1).

Each public module's ``__all__``, read when the test runs (so a name added this session is
held to it too), must have its own entry in the built reference pages: an anchor naming the
object through a module it can be imported from. Internals of the public classes stay out.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import chatkeep

ROOT = Path(__file__).resolve().parents[2]
#: Packages that are no public API: the store's SQL, the shells, the demo's data.
INTERNAL = ("chatkeep.store", "chatkeep.cli", "chatkeep.inspect", "chatkeep.demo")
#: Public modules that are not packages (their names are the classes and functions they
#: define, or their ``__all__``).
MODULES = ("chatkeep", "chatkeep.errors", "chatkeep.config", "chatkeep.messages",
           "chatkeep.refs", "chatkeep.jobs", "chatkeep.jobs.celery",
           "chatkeep.privacy.streaming", "chatkeep.testing.langchain")
#: What the reference must never show: the internals of the public classes.
HIDDEN = ("chatkeep.sessions.ChatSession.row", "chatkeep.sessions.ChatSession.repository",
          "chatkeep.sessions.ChatSession.adopt_row",
          "chatkeep.sessions.SessionService.get_unscoped",
          "chatkeep.aio.AsyncSessionService.get_unscoped")
_ANCHOR = re.compile(r'\bid="(chatkeep[\w.]*)"')


def public_modules() -> list[str]:
    """Every package under ``chatkeep`` with an ``__all__`` (found when the test runs, so
    a new package is held to the reference at once), and :data:`MODULES`."""
    found = set(MODULES)
    for info in pkgutil.walk_packages(chatkeep.__path__, "chatkeep."):
        if not info.ispkg or info.name.startswith(INTERNAL):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an integration whose extra is missing
            continue
        if hasattr(module, "__all__"):
            found.add(info.name)
    return sorted(found)


def public_names(module: ModuleType) -> list[str]:
    """The module's ``__all__``, or the classes and functions it defines."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return sorted(name for name, value in vars(module).items()
                  if not name.startswith("_") and getattr(value, "__module__", None)
                  == module.__name__ and callable(value))


def resolve(path: str) -> Any:
    """The object an anchor names (``chatkeep.aio.AsyncChatSession``), or a sentinel."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                value = getattr(value, part)
        except AttributeError:
            return _MISSING
        return value
    return _MISSING


_MISSING = object()


@pytest.fixture(scope="module")
def anchors(site: Path) -> set[str]:
    found: set[str] = set()
    for page in (site / "reference").rglob("*.html"):
        found.update(_ANCHOR.findall(page.read_text("utf-8")))
    return found


def _entries(anchors: set[str]) -> Iterator[tuple[str, Any]]:
    for anchor in anchors:
        yield anchor.rsplit(".", 1)[-1], anchor


def test_every_public_name_has_an_entry_in_the_reference(anchors: set[str]) -> None:
    by_name: dict[str, list[str]] = {}
    for name, anchor in _entries(anchors):
        by_name.setdefault(name, []).append(anchor)
    missing = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        for name in public_names(module):
            value = getattr(module, name)
            if not any(resolve(anchor) is value or anchor == f"{module_name}.{name}"
                       for anchor in by_name.get(name, ())):
                missing.append(f"{module_name}.{name}")
    assert not missing, "not in the API reference (docs/reference/): " + ", ".join(missing)


def test_the_reference_names_the_facade_and_every_framework_class(anchors: set[str]) -> None:
    for anchor in ("chatkeep.Chatkeep", "chatkeep.aio.AsyncChatSession",
                   "chatkeep.store.repository.UsageLine", "chatkeep.jobs.celery.CeleryDispatcher",
                   "chatkeep.integrations.openai_agents.ChatkeepSession",
                   "chatkeep.integrations.pydantic_ai.ChatkeepConversationStore",
                   "chatkeep.integrations.pydantic_ai.ChatkeepHistory",
                   "chatkeep.integrations.langchain.ChatkeepMiddleware",
                   "chatkeep.integrations.langchain.ChatkeepStore"):
        assert anchor in anchors, anchor


def test_the_reference_leaves_the_internals_out(anchors: set[str]) -> None:
    shown = [anchor for anchor in HIDDEN if anchor in anchors]
    assert not shown, shown
    assert not any(anchor.rsplit(".", 1)[-1].startswith("_") for anchor in anchors)


def test_the_facade_page_shows_the_constructor_and_the_parts() -> None:
    page = (ROOT / "docs" / "reference" / "facade.md").read_text("utf-8")
    for part in ("keep.sessions", "keep.compressor", "keep.memory", "keep.privacy"):
        assert f"`{part}`" in page, part
