"""Encryption keys: turning encryption on breaks no existing session, keys rotate, and
``chatkeep privacy rekey`` re-seals every stored mapping (vaults and memories' values)."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from chatkeep import Chatkeep, PrivacyError, Ref
from chatkeep.cli import app
from chatkeep.privacy import new_key
from chatkeep.privacy.rekey import rekey
from chatkeep.privacy.vault import is_sealed, unseal
from chatkeep.store.schema import chat_sessions, memories
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 1)
EMAIL = "maria.garcia@example.com"


def stored_blobs(keep: Chatkeep) -> list[str]:
    with keep.engine.connect() as conn:
        vaults = conn.execute(select(chat_sessions.c.pii_vault).where(
            chat_sessions.c.pii_vault.is_not(None))).scalars().all()
        sealed = conn.execute(select(memories.c.pii).where(
            memories.c.pii.is_not(None))).scalars().all()
    return [*vaults, *sealed]


def deployment(make_keep: Callable[..., Chatkeep], key: str | None,
               server: FakeOpenAIServer) -> Chatkeep:
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    privacy = {"anonymize_pii": True, **({"encryption_key": key} if key else {})}
    return make_keep(model=client, config={"privacy": privacy})


def seed(keep: Chatkeep, server: FakeOpenAIServer) -> str:
    session = keep.sessions.create(ORG, Ref("user", 1))
    session.add_user(f"Please write to {EMAIL} about the invoice.")
    session.add_assistant("I will.")
    keep.compressor.build_history(session, "sys")
    server.script(Reply.json({"facts": [
        {"scope": "personal", "content": "Invoices go to <EMAIL_1>."}]}))
    keep.memory.distil(session.id)
    return session.id


@pytest.mark.sync_api  # reads stored blobs with the engine
def test_plain_vaults_are_refused_once_a_key_is_set_until_rekey_seals_them(
        make_keep: Callable[..., Chatkeep], db_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain vault skips Fernet's integrity check, so with a key set only the explicit
    migration (``chatkeep privacy rekey``) reads one; everything else refuses it."""
    with FakeOpenAIServer() as server:
        plain = deployment(make_keep, None, server)
        session_id = seed(plain, server)
        blobs = stored_blobs(plain)
        assert len(blobs) == 2 and not any(is_sealed(b) for b in blobs)

        key = new_key()
        sealed = deployment(make_keep, key, server)
        session = sealed.sessions.get_unscoped(session_id)
        session.add_user(f"And copy {EMAIL} on the reply.")
        with pytest.raises(PrivacyError, match="chatkeep privacy rekey"):
            sealed.compressor.build_history(session, "sys")
        with pytest.raises(PrivacyError, match="chatkeep privacy rekey"):
            sealed.privacy.restore(session, "<EMAIL_1>")

        monkeypatch.setenv("CHATKEEP_PRIVACY__ENCRYPTION_KEY", key)
        result = CliRunner().invoke(app, ["privacy", "rekey", "--db", db_url])
        assert result.exit_code == 0, result.output
        assert "vaults: 1 re-sealed" in result.output and "memories: 1 re-sealed" in result.output
        assert all(is_sealed(b) for b in stored_blobs(sealed))
        assert all(unseal(b, key) is not None for b in stored_blobs(sealed))
        history = sealed.compressor.build_history(sealed.sessions.get_unscoped(session_id), "sys")
        assert EMAIL not in str(history) and "<EMAIL_1>" in str(history)
        again = rekey(sealed.repository, sealed.memory.store, key)
        assert (again.vaults_current, again.memories_current) == (1, 1)


@pytest.mark.sync_api  # plants a row with the engine
def test_a_planted_plain_vault_is_refused_with_a_key(
        make_keep: Callable[..., Chatkeep]) -> None:
    """Someone who can write the table but lacks the key plants a plain vault mapping
    ``<EMAIL_1>`` to their own address: the application must not restore it."""
    with FakeOpenAIServer() as server:
        keep = deployment(make_keep, new_key(), server)
        session_id = seed(keep, server)
        planted = ('{"format":"chatkeep.pii-vault","version":1,"entries":'
                   '[["<EMAIL_1>","EMAIL","evil@example.com","evil@example.com"]]}')
        with keep.engine.begin() as conn:
            conn.execute(update(chat_sessions).where(chat_sessions.c.id == session_id)
                         .values(pii_vault=planted))
        session = keep.sessions.get_unscoped(session_id)
        with pytest.raises(PrivacyError, match="chatkeep privacy rekey"):
            keep.privacy.restore(session, "Write to <EMAIL_1>.")
        session.add_user("Any news?")
        with pytest.raises(PrivacyError, match="chatkeep privacy rekey"):
            keep.compressor.build_history(session, "sys")


@pytest.mark.sync_api  # reads stored blobs with the engine
def test_rotation_with_the_cli_then_the_old_key_can_go(
        make_keep: Callable[..., Chatkeep], db_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = new_key(), new_key()
    with FakeOpenAIServer() as server:
        keep = deployment(make_keep, old, server)
        session_id = seed(keep, server)
        keep.close()
        monkeypatch.setenv("CHATKEEP_PRIVACY__ENCRYPTION_KEY", f"{new},{old}")
        result = CliRunner().invoke(app, ["privacy", "rekey", "--db", db_url])
        assert result.exit_code == 0, result.output
        assert "vaults: 1 re-sealed" in result.output and "memories: 1 re-sealed" in result.output
        rotated = deployment(make_keep, new, server)  # the old key is gone now
        assert all(unseal(b, new) for b in stored_blobs(rotated))
        session = rotated.sessions.get_unscoped(session_id)
        assert rotated.privacy.restore(session, "<EMAIL_1>") == EMAIL
        with pytest.raises(PrivacyError, match="none of the configured keys"):
            unseal(stored_blobs(rotated)[0], old)


def test_rekey_without_a_key_or_with_the_wrong_key_is_a_clear_error(
        make_keep: Callable[..., Chatkeep]) -> None:
    with FakeOpenAIServer() as server:
        keep = deployment(make_keep, new_key(), server)
        seed(keep, server)
        with pytest.raises(PrivacyError, match="not set"):
            rekey(keep.repository, keep.memory.store, None)
        with pytest.raises(PrivacyError, match=r"session .*none of the configured keys"):
            rekey(keep.repository, keep.memory.store, new_key())
