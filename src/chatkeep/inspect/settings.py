"""Which settings the inspector runs with, and where its history budget came from.

The dry run and the "over budget" state use ``chat.max_history_tokens``: the inspector
must read the application's value, not its own default, or a session built with 400
tokens is previewed against 6,000. ``chatkeep inspect`` loads the config as every
command does (``--config`` / ``CHATKEEP_CONFIG``, then ``CHATKEEP_SECTION__KEY``
variables); :func:`budget_origin` says which of them set the budget, so the page can
name it and say when it is only chatkeep's default.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from chatkeep.config import Config

BUDGET_ENV = "CHATKEEP_CHAT__MAX_HISTORY_TOKENS"
"""The variable that sets the budget (as ``Config.load`` reads it)."""
DEFAULT = "chatkeep's default"
"""The origin of a budget nothing set."""


def load_settings(config: Config | None, config_file: str | None,
                  environ: Mapping[str, str] | None = None) -> tuple[Config, str]:
    """The config to inspect with (``config`` when given, else what ``Config.load``
    reads from ``config_file`` and the environment) and where its budget came from."""
    if config is not None:
        return config, "the config given to the inspector"
    env = os.environ if environ is None else environ
    return Config.load(None, toml_path=config_file, environ=env), \
        budget_origin(config_file, env)


def budget_origin(config_file: str | None, environ: Mapping[str, str]) -> str:
    """Where ``Config.load(None, toml_path=config_file, environ=environ)`` takes
    ``chat.max_history_tokens`` from: the variable (it overrides the file), the file, or
    the default."""
    if environ.get(BUDGET_ENV, "").strip():
        return f"{BUDGET_ENV} in the environment"
    path = config_file or environ.get("CHATKEEP_CONFIG")
    if path and _sets_budget(path):
        return f"chat.max_history_tokens in {Path(path).name}"
    return DEFAULT


def _sets_budget(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return False  # Config.load has already said what is wrong with it
    chat = data.get("chat")
    return isinstance(chat, dict) and "max_history_tokens" in chat
