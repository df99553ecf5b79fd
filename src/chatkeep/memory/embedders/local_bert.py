"""The numpy half of ``LocalEmbedder``: all-MiniLM-L6-v2's pipeline without torch.

Exactly what sentence-transformers runs for that model (``modules.json``: Transformer,
Pooling, Normalize), here in numpy, float32 like the reference:

1. the HF fast tokenizer read from ``tokenizer.json`` (lower-casing WordPiece, ``[CLS]``
   ... ``[SEP]``), truncated to ``max_seq_length`` = 256 tokens, special tokens included
   (the file itself says 128 and pads to a fixed 128: both are overridden, as
   sentence-transformers overrides them);
2. BERT (6 layers, hidden 384, 12 heads, GELU with erf, LayerNorm eps 1e-12): word +
   position + token-type-0 embeddings, then per layer self-attention over the unpadded
   keys and the feed-forward block, each with its residual and LayerNorm;
3. the mean of the last hidden states over the real tokens (the attention mask), then
   L2 normalisation.

Texts of a batch are padded to its longest; the attention mask keeps padding out of
every real token's attention and out of the mean, so a text's vector does not depend on
what it is batched with. Batches are formed from texts of similar length (sorted by
token count) so little is padded. Imported only when a ``LocalEmbedder`` loads: numpy,
tokenizers and safetensors are the ``local`` extra.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load as load_tensors
from tokenizers import Tokenizer

from chatkeep.errors import ModelError

Array = npt.NDArray[np.float32]
FloatArray = TypeVar("FloatArray", npt.NDArray[np.float32], npt.NDArray[np.float64])

HIDDEN = 384
HEADS = 12
HEAD_SIZE = HIDDEN // HEADS
INTERMEDIATE = 1536
LAYERS = 6
VOCAB = 30522
MAX_POSITIONS = 512
TYPE_VOCAB = 2
LAYER_NORM_EPS = 1e-12

_MASKED = np.float32(np.finfo(np.float32).min)
"""Added to the attention scores of padding keys (what transformers adds): exp() of it
is exactly 0, so padding gets no attention at all."""

# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (|erf| rounds to 1 in float32 beyond): the
# float32 rational approximation of Eigen and XLA. Its own error is below 7e-8 (evaluated
# in float64); evaluated in float32, as here, below 5e-7: the order of the
# Abramowitz-Stegun formula torch's vectorised CPU GELU uses (5e-7 in float32), at a sixth
# of the cost of float64, and no change to the final vectors' 2e-7 agreement. Both
# precisions are checked against math.erf in the tests.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def erf(x: FloatArray) -> FloatArray:
    """The error function, elementwise, in ``x``'s precision (float32: error below 5e-7;
    float64: below 7e-8)."""
    kind = x.dtype.type
    clipped: FloatArray = np.clip(x, kind(-4.0), kind(4.0))
    square = clipped * clipped
    p = square * kind(_ERF_P[0])
    for c in _ERF_P[1:-1]:
        p += kind(c)
        p *= square
    p += kind(_ERF_P[-1])
    q = square * kind(_ERF_Q[0])
    for c in _ERF_Q[1:-1]:
        q += kind(c)
        q *= square
    q += kind(_ERF_Q[-1])
    clipped *= p
    clipped /= q
    return clipped


_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))
_GELU_ROWS = 64
"""Rows of the (tokens, 1536) activations GELU works through at a time: its ~20 passes
then stay in the CPU's cache (several times faster than whole-matrix passes)."""


def gelu_(x: Array) -> Array:
    """GELU with erf (BERT's ``hidden_act = "gelu"``, not the tanh approximation), in
    place: ``x * (1 + erf(x / sqrt 2)) / 2``."""
    for start in range(0, x.shape[0], _GELU_ROWS):
        rows = x[start:start + _GELU_ROWS]
        factor = erf(rows * _SQRT_HALF)
        factor += np.float32(1.0)
        factor *= np.float32(0.5)
        rows *= factor
    return x


def layer_norm_(x: Array, weight: Array, bias: Array) -> Array:
    """LayerNorm over the last axis (biased variance, eps 1e-12, as torch's), in place."""
    x -= x.mean(axis=-1, keepdims=True)
    deviation = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True)
                        + np.float32(LAYER_NORM_EPS))
    x /= deviation
    x *= weight
    x += bias
    return x


@dataclass(frozen=True, slots=True)
class Layer:
    """One encoder layer's weights, laid out for ``x @ w`` (torch stores ``w.T``)."""

    qkv_w: Array
    """Query, key and value projections side by side: (384, 1152)."""
    qkv_b: Array
    out_w: Array
    out_b: Array
    attention_norm_w: Array
    attention_norm_b: Array
    up_w: Array
    up_b: Array
    down_w: Array
    down_b: Array
    output_norm_w: Array
    output_norm_b: Array


def _tensor(tensors: Mapping[str, npt.NDArray[np.generic]], name: str,
            shape: tuple[int, ...]) -> Array:
    value = tensors.get(name)
    if value is None:
        raise ModelError(f"no tensor {name!r}")
    if value.shape != shape or value.dtype != np.float32:
        raise ModelError(f"{name}: {value.dtype} {value.shape}, expected float32 {shape}")
    return np.ascontiguousarray(value, dtype=np.float32)


def _linear(tensors: Mapping[str, npt.NDArray[np.generic]], name: str, inputs: int,
            outputs: int) -> tuple[Array, Array]:
    weight = _tensor(tensors, f"{name}.weight", (outputs, inputs))
    return np.ascontiguousarray(weight.T), _tensor(tensors, f"{name}.bias", (outputs,))


def _layer(tensors: Mapping[str, npt.NDArray[np.generic]], n: int) -> Layer:
    prefix = f"encoder.layer.{n}"
    projections = [_linear(tensors, f"{prefix}.attention.self.{part}", HIDDEN, HIDDEN)
                   for part in ("query", "key", "value")]
    out_w, out_b = _linear(tensors, f"{prefix}.attention.output.dense", HIDDEN, HIDDEN)
    up_w, up_b = _linear(tensors, f"{prefix}.intermediate.dense", HIDDEN, INTERMEDIATE)
    down_w, down_b = _linear(tensors, f"{prefix}.output.dense", INTERMEDIATE, HIDDEN)
    return Layer(
        qkv_w=np.ascontiguousarray(np.concatenate([w for w, _ in projections], axis=1)),
        qkv_b=np.concatenate([b for _, b in projections]),
        out_w=out_w, out_b=out_b,
        attention_norm_w=_tensor(tensors, f"{prefix}.attention.output.LayerNorm.weight",
                                 (HIDDEN,)),
        attention_norm_b=_tensor(tensors, f"{prefix}.attention.output.LayerNorm.bias",
                                 (HIDDEN,)),
        up_w=up_w, up_b=up_b, down_w=down_w, down_b=down_b,
        output_norm_w=_tensor(tensors, f"{prefix}.output.LayerNorm.weight", (HIDDEN,)),
        output_norm_b=_tensor(tensors, f"{prefix}.output.LayerNorm.bias", (HIDDEN,)))


class MiniLM:
    """all-MiniLM-L6-v2 in numpy: ``encode(texts)`` -> unit vectors, (n, 384) float32.

    Immutable once built, so one instance serves any number of threads at once."""

    def __init__(self, tensors: Mapping[str, npt.NDArray[np.generic]], tokenizer: Tokenizer,
                 max_seq_length: int) -> None:
        if not 2 <= max_seq_length <= MAX_POSITIONS:
            raise ModelError(f"max_seq_length must be from 2 to {MAX_POSITIONS}")
        # Keys may carry the "bert." prefix of a BertModel saved inside another class.
        tensors = {name.removeprefix("bert."): value for name, value in tensors.items()}
        self.word = _tensor(tensors, "embeddings.word_embeddings.weight", (VOCAB, HIDDEN))
        self.position = _tensor(tensors, "embeddings.position_embeddings.weight",
                                (MAX_POSITIONS, HIDDEN))
        self.token_type = _tensor(tensors, "embeddings.token_type_embeddings.weight",
                                  (TYPE_VOCAB, HIDDEN))[0].copy()
        self.norm_w = _tensor(tensors, "embeddings.LayerNorm.weight", (HIDDEN,))
        self.norm_b = _tensor(tensors, "embeddings.LayerNorm.bias", (HIDDEN,))
        self.layers = tuple(_layer(tensors, n) for n in range(LAYERS))
        if f"encoder.layer.{LAYERS}.output.dense.weight" in tensors:
            raise ModelError(f"more than {LAYERS} layers: not all-MiniLM-L6-v2")
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_seq_length, strategy="longest_first")
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length

    @classmethod
    def from_bytes(cls, weights: bytes, tokenizer_json: bytes,
                   max_seq_length: int) -> MiniLM:
        """Built from the bytes of ``model.safetensors`` and ``tokenizer.json`` (those the
        caller verified: nothing is read again from disk). ``ValueError`` when they are
        not this model's."""
        try:
            tensors = load_tensors(weights)
            tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
        except Exception as exc:  # safetensors and tokenizers raise their own types
            raise ModelError(f"{type(exc).__name__}: {exc}") from exc
        return cls(tensors, tokenizer, max_seq_length)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, ``[CLS]`` and ``[SEP]`` included, truncated."""
        # encode() per text, not encode_batch(): no thread pool in the tokenizer, so no
        # fork-after-parallelism warning in Celery's prefork workers (and encoding costs
        # microseconds against the forward pass's milliseconds).
        return [self.tokenizer.encode(text).ids for text in texts]

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> Array:
        """Unit vectors of ``texts`` in order, (len(texts), 384); batches of
        ``batch_size`` texts of similar length, each padded to its longest."""
        ids = self.token_ids(texts)
        out = np.empty((len(ids), HIDDEN), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            width = len(ids[rows[0]])
            batch = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.float32)
            for row, i in enumerate(rows):
                batch[row, :len(ids[i])] = ids[i]
                mask[row, :len(ids[i])] = 1.0
            out[rows] = self.forward(batch, mask)
        return out

    def forward(self, ids: npt.NDArray[np.int64], mask: Array) -> Array:
        """Unit sentence vectors (batch, 384) of padded token ids (batch, length) and their
        attention mask (1.0 for a token, 0.0 for padding)."""
        batch, length = ids.shape
        x = self.word[ids] + self.position[:length] + self.token_type
        x = layer_norm_(x.reshape(batch * length, HIDDEN), self.norm_w, self.norm_b)
        key_bias = ((1.0 - mask) * _MASKED)[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(HEAD_SIZE))
        for layer in self.layers:
            qkv = x @ layer.qkv_w
            qkv += layer.qkv_b
            # each (batch, heads, length, head size)
            q, k, v = qkv.reshape(batch, length, 3, HEADS, HEAD_SIZE).transpose(2, 0, 3, 1, 4)
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += key_bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, HIDDEN)
            attended = context @ layer.out_w
            attended += layer.out_b
            attended += x
            x = layer_norm_(attended, layer.attention_norm_w, layer.attention_norm_b)
            hidden = x @ layer.up_w
            hidden += layer.up_b
            output = gelu_(hidden) @ layer.down_w
            output += layer.down_b
            output += x
            x = layer_norm_(output, layer.output_norm_w, layer.output_norm_b)
        states = x.reshape(batch, length, HIDDEN)
        summed = (states * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: Array = (pooled / np.maximum(norms, np.float32(1e-12))).astype(np.float32)
        return unit
