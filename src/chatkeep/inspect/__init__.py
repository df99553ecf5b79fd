"""``chatkeep inspect``: a local, read-only web inspector over a chatkeep store.

Sessions, the stored log beside what the model receives now, the summary and its folds,
memories with their provenance, the usage ledger and the redaction vault, served by
Starlette with Jinja2 templates and the vendored htmx (``static/``): no CDN, no build
step. It opens the database read-only and never writes.

Needs the ``inspect`` extra (``pip install 'chatkeep[inspect]'``). Importing this package
imports none of it; :func:`require_extra` says what is missing, and
``chatkeep.inspect.app.create_app`` builds the application.
"""

from __future__ import annotations

import importlib

EXTRA_HINT = "pip install 'chatkeep[inspect]'"
"""How to get what the inspector needs."""
_NEEDS = ("starlette", "jinja2", "uvicorn")


def require_extra() -> None:
    """Import the inspector's dependencies, or raise ``ImportError`` naming the extra."""
    for name in _NEEDS:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(f"the inspector needs {name!r}, which is not installed: "
                              f"{EXTRA_HINT}") from exc


__all__ = ["EXTRA_HINT", "require_extra"]
