"""One home for errors: every exception class of the package lives in ``chatkeep.errors``
under ``ChatkeepError``, and no module raises a bare builtin exception (issue 25). The
source is read, so a new ``raise ValueError(...)`` fails here before a caller meets it."""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

import chatkeep
from chatkeep import errors

ROOT = Path(chatkeep.__file__).parent
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}
#: Raises the package may keep: Python's own protocols (a module's ``__getattr__`` raises
#: AttributeError; a missing optional extra is an ImportError naming its install hint).
ALLOWED = {"NotImplementedError", "StopIteration", "StopAsyncIteration", "KeyboardInterrupt",
           "AttributeError", "ImportError"}


def raised_builtins() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = target.id if isinstance(target, ast.Name) else None
            if name in BUILTIN_EXCEPTIONS and name not in ALLOWED:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} raises {name}")
    return found


def exception_classes_outside_errors() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "errors.py" and path.parent == ROOT:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(base).endswith(("Error", "Exception", "Closed", "Job"))
                    for base in node.bases):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}")
    return found


def test_no_module_raises_a_bare_builtin_exception() -> None:
    assert raised_builtins() == []


def test_every_exception_class_lives_in_errors() -> None:
    assert exception_classes_outside_errors() == []


def test_every_error_is_a_chatkeep_error_and_drawn_in_the_tree() -> None:
    classes = [value for _, value in inspect.getmembers(errors, inspect.isclass)
               if issubclass(value, BaseException) and value.__module__ == errors.__name__]
    assert len(classes) > 10
    doc = errors.__doc__ or ""
    for cls in classes:
        assert issubclass(cls, errors.ChatkeepError), cls
        assert cls.__name__ in doc, f"{cls.__name__} is missing from the tree in errors.py"
        assert getattr(chatkeep, cls.__name__) is cls, f"chatkeep.{cls.__name__} not exported"
