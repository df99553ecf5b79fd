"""A package's public names are written once, in its ``_EXPORTS`` table (issue 31 item 5):
``__all__`` and the lazy loader derive from it, and the ``if TYPE_CHECKING:`` imports that
type checkers and IDEs read mirror it exactly (each ``from m import Name as Name``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import chatkeep
from chatkeep._exports import lazy_exports

SRC = Path(chatkeep.__file__).parent
#: Every package whose public names load through ``lazy_exports``.
LAZY = sorted(path for path in SRC.rglob("__init__.py") if "lazy_exports(" in path.read_text())


def _package(path: Path) -> str:
    return ".".join(("chatkeep", *path.parent.relative_to(SRC).parts))


def _mirror(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """The ``if TYPE_CHECKING:`` imports, as ``{module: names}``; an import that is not
    ``Name as Name`` (so not a re-export for mypy) fails here."""
    mirror: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        for item in node.body:
            assert isinstance(item, ast.ImportFrom) and item.module, ast.unparse(item)
            for alias in item.names:
                assert alias.asname == alias.name, f"{ast.unparse(item)}: write Name as Name"
                mirror[item.module] = (*mirror.get(item.module, ()), alias.name)
    return mirror


def test_some_package_loads_its_names_lazily() -> None:
    assert _package(SRC / "__init__.py") in [_package(path) for path in LAZY]


@pytest.mark.parametrize("path", LAZY, ids=_package)
def test_the_type_checking_imports_mirror_the_table(path: Path) -> None:
    package = importlib.import_module(_package(path))
    table = package._EXPORTS
    assert _mirror(ast.parse(path.read_text())) == table
    listed = sorted(name for names in table.values() for name in names)
    assert [name for name in package.__all__ if name in listed] == listed
    # Any other public name is defined in the package itself (chatkeep.privacy's
    # ENTITY_TYPES), not loaded.
    assert all(name in vars(package) for name in set(package.__all__) - set(listed))


@pytest.mark.parametrize("path", LAZY, ids=_package)
def test_each_name_resolves_to_its_module(path: Path) -> None:
    package = importlib.import_module(_package(path))
    for module, names in package._EXPORTS.items():
        for name in names:
            assert getattr(package, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'Nonexistent'"):
        package.Nonexistent  # noqa: B018
    assert set(package.__all__) <= set(dir(package))


def test_a_name_listed_twice_is_refused() -> None:
    with pytest.raises(ImportError, match=r"'Ref' is listed under both chatkeep\.refs "
                                          r"and chatkeep\.errors"):
        lazy_exports("chatkeep", {"chatkeep.refs": ("Ref",), "chatkeep.errors": ("Ref",)})
