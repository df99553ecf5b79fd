"""Privacy wired into chatkeep: the two switches, redaction of everything sent to a model,
stable placeholders stored per session, restore, encryption at rest."""

from __future__ import annotations

import threading
from datetime import timedelta

import openai
import pytest

from chatkeep import Chatkeep, PrivacyError, Ref
from chatkeep.privacy import new_key
from chatkeep.sessions import SessionService
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 1)
EMAIL_A = "maria.garcia@example.com"
EMAIL_B = "j.smith+billing@corp.example.co.uk"
PHONE = "+34 612 345 678"
CARD = "4111 1111 1111 1111"
IBAN = "GB82 WEST 1234 5698 7654 32"
PII_VALUES = [EMAIL_A, EMAIL_B, PHONE, CARD, IBAN, "612345678", "4111111111111111",
              "GB82WEST12345698765432"]


def privacy_keep(make_keep, client=None, **privacy) -> Chatkeep:
    return make_keep(model=client, config={
        "privacy": {"anonymize_pii": True, **privacy},
        "chat": {"max_history_tokens": 800, "summary_max_tokens": 150},
        "memory": {"distil_on_compress": False}})


@pytest.mark.parametrize(("app_switch", "session_switch", "redacted"), [
    (False, False, False), (False, True, False), (True, False, False), (True, True, True)])
def test_two_switch_truth_table(make_keep, app_switch: bool, session_switch: bool,
                                redacted: bool) -> None:
    keep = make_keep(config={"privacy": {"anonymize_pii": app_switch}})
    session = keep.sessions.create(ORG, anonymize_pii=session_switch)
    session.add_user(f"write to {EMAIL_A}")
    history = keep.compressor.build_history(session, "sys")
    assert (EMAIL_A not in history[1]["content"]) is redacted
    assert ("<EMAIL_1>" in history[1]["content"]) is redacted


def test_defaults_are_app_off_session_on(keep: Chatkeep) -> None:
    assert keep.config.privacy.anonymize_pii is False
    assert keep.sessions.create(ORG).anonymize_pii is True


def test_session_switch_changed_later_takes_effect(make_keep) -> None:
    keep = privacy_keep(make_keep)
    session = keep.sessions.create(ORG)
    session.add_user(f"mail {EMAIL_A}")
    assert "<EMAIL_1>" in keep.compressor.build_history(session, "")[0]["content"]
    keep.sessions.get_unscoped(session.id).set_anonymize_pii(False)  # the user asked otherwise
    assert EMAIL_A in keep.compressor.build_history(session, "")[0]["content"]


def test_nothing_raw_leaves_through_replay_and_summarizer(make_keep) -> None:
    with FakeOpenAIServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        # The summarizer echoes what it was given, placeholders included.
        server.responder = lambda body: Reply.ok(
            "Summary: " + body["messages"][1]["content"][-300:])
        keep = privacy_keep(make_keep, client)
        session = keep.sessions.create(ORG, actor=Ref("user", 1))
        replays = []
        for i in range(12):
            session.add_user(f"Turn {i}: my email is {EMAIL_A}, my colleague is {EMAIL_B}, "
                             f"call {PHONE}, card {CARD}, IBAN {IBAN}. " + "context " * 30)
            session.add_assistant(f"Noted {EMAIL_A} and {EMAIL_B}. " + "reply " * 30)
            replays.append(keep.compressor.build_history(session, f"Client is {EMAIL_A}"))
        assert session.summary_watermark > 0, "compression must have fired"
        bodies = server.bodies()
    assert bodies, "the summarizer must have been called"
    outbound = bodies + [str(r) for r in replays]
    for text in outbound:
        for value in PII_VALUES:
            assert value not in text
    # Stable placeholders: the same address is the same placeholder in every turn,
    # across compression, and two different people are two placeholders.
    for replay in replays:
        assert "<EMAIL_1>" in replay[0]["content"]
        user_turns = [m["content"] for m in replay if m["role"] == "user"]
        assert all("<EMAIL_1>" in t and "<EMAIL_2>" in t for t in user_turns)
    assert "<EMAIL_1>" in (session.refresh().summary or "")
    # The summary goes back out with its placeholders intact (not escaped as user text).
    summary_message = replays[-1][1]["content"]
    assert "<EMAIL_1>" in summary_message and "<\\EMAIL" not in summary_message
    vault = keep.privacy.vault(session)
    assert vault.value_for("<EMAIL_1>") == EMAIL_A and vault.value_for("<EMAIL_2>") == EMAIL_B
    # Stored messages keep the original text.
    assert EMAIL_A in (session.messages[0].content or "")


def test_restore_puts_values_back_and_leaves_mangled_placeholders(make_keep) -> None:
    keep = privacy_keep(make_keep)
    session = keep.sessions.create(ORG)
    session.add_user(f"{EMAIL_A} and {EMAIL_B}")
    keep.compressor.build_history(session, "")
    model_output = "I wrote to <EMAIL_2> and cc'd <EMAIL_1>; also <EMAIL 1> and <EMAIL_9>."
    assert keep.privacy.restore(session, model_output) == (
        f"I wrote to {EMAIL_B} and cc'd {EMAIL_A}; also <EMAIL 1> and <EMAIL_9>.")
    other = keep.sessions.create(ORG)  # another session's placeholders mean nothing here
    assert keep.privacy.restore(other, "<EMAIL_1>") == "<EMAIL_1>"


def test_mapping_is_encrypted_at_rest_with_a_key(make_keep) -> None:
    key = new_key()
    keep = privacy_keep(make_keep, encryption_key=key)
    session = keep.sessions.create(ORG)
    session.add_user(f"reach me at {EMAIL_A}")
    keep.compressor.build_history(session, "")
    blob, _ = keep.repository.read_vault(session.id)
    assert blob and EMAIL_A not in blob and "maria" not in blob
    assert keep.privacy.restore(session, "<EMAIL_1>") == EMAIL_A
    wrong = privacy_keep(make_keep, encryption_key=new_key())
    with pytest.raises(PrivacyError):
        wrong.privacy.restore(wrong.sessions.get_unscoped(session.id), "<EMAIL_1>")
    with pytest.raises(PrivacyError):  # fail closed: never send text it cannot redact
        wrong.compressor.build_history(wrong.sessions.get_unscoped(session.id), "")


@pytest.mark.sync_api  # calls the core's egress from threads
def test_concurrent_redaction_never_gives_a_placeholder_two_values(make_keep) -> None:
    keep = privacy_keep(make_keep)
    session = keep.sessions.create(ORG)
    start = threading.Barrier(4, timeout=10)
    outputs: dict[int, str] = {}

    def redact(worker: int) -> None:
        handle = keep.sessions.get_unscoped(session.id)
        egress = keep.privacy.for_session(handle)
        start.wait()
        for _ in range(8):  # as build_history does: redact, store, plan again on a lost race
            text = egress(f"worker{worker}@example.com")
            if egress.flush():
                outputs[worker] = text
                return

    threads = [threading.Thread(target=redact, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    vault = keep.privacy.vault(session)
    assert sorted(outputs.values()) == [f"<EMAIL_{n}>" for n in range(1, 5)]
    for worker, placeholder in outputs.items():
        assert vault.value_for(placeholder) == f"worker{worker}@example.com"


def test_a_summary_written_before_redaction_was_switched_on_is_redacted(make_keep) -> None:
    plain = make_keep(config={"chat": {"max_history_tokens": 400, "summary_max_tokens": 100}})
    session = plain.sessions.create(ORG)
    for i in range(10):
        session.add_user(f"turn {i}: contact {EMAIL_A} " + "words " * 20)
    plain.compressor.build_history(session, "")
    assert EMAIL_A in (session.refresh().summary or "")
    redacting = privacy_keep(make_keep)
    history = redacting.compressor.build_history(redacting.sessions.get_unscoped(session.id), "")
    assert all(EMAIL_A not in m["content"] for m in history)
    assert "<EMAIL_1>" in history[0]["content"]


def _scripted_model(body: dict) -> Reply:
    """Summaries echo their input; extraction keeps one fact naming the first e-mail
    placeholder it was shown; decisions add."""
    system = body["messages"][0]["content"]
    if "extract durable memories" in system:
        import re

        seen = re.findall(r"<EMAIL_\d+>", body["messages"][1]["content"])
        facts = [{"scope": "tenant", "content": f"The client's contact address is {seen[0]}."}]
        return Reply.json({"facts": facts if seen else []})
    if '"decisions"' in system:
        return Reply.json({"decisions": [{"fact": 0, "event": "ADD"}]})
    return Reply.ok("Summary: " + body["messages"][1]["content"][-300:])


def test_distiller_input_is_redacted_and_memories_are_redacted_per_recalling_session(
        make_keep) -> None:
    with FakeOpenAIServer(responder=_scripted_model) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        keep = make_keep(model=client, config={
            "privacy": {"anonymize_pii": True},
            "chat": {"max_history_tokens": 800, "summary_max_tokens": 150},
            "memory": {"distil_on_compress": True, "recall_in_history": True}})
        first = keep.sessions.create(ORG, actor=Ref("user", 1))
        for i in range(10):
            first.add_user(f"Turn {i}: the client is {EMAIL_A}, phone {PHONE}, card {CARD}. "
                           + "detail " * 30)
            first.add_assistant(f"Noted {EMAIL_A}. " + "reply " * 30)
            keep.compressor.build_history(first, "sys")
        assert first.refresh().row.distilled_through > 0, "compression must have distilled"
        (memory,) = keep.memory.list(ORG)
        # Stored with the real value: a placeholder would mean someone else elsewhere.
        assert EMAIL_A in memory.content

        second = keep.sessions.create(ORG, actor=Ref("user", 2))
        second.add_user(f"New matter: write to {EMAIL_B} about the client's address.")
        history = keep.compressor.build_history(second, "sys")
        bodies = server.bodies()
    assert any("extract durable memories" in b for b in bodies)
    for text in [*bodies, str(history)]:
        for value in PII_VALUES:
            assert value not in text
    # The recalled memory is redacted with the second session's own placeholders: its
    # address and the new one are two placeholders that restore to the right people.
    recalled, asked = history[0]["content"], history[1]["content"]
    assert "<EMAIL_" in recalled and "<EMAIL_" in asked
    assert EMAIL_A in keep.privacy.restore(second, recalled)
    assert EMAIL_B in keep.privacy.restore(second, asked)
    assert EMAIL_A not in keep.privacy.restore(second, asked)


def test_custom_recognizers_join_the_built_in_ones(make_keep) -> None:
    from chatkeep.privacy import Span

    class MatterNumber:
        entity_types = ("MATTER_NO",)

        def find(self, text: str):
            import re

            for m in re.finditer(r"\bMAT-\d{6}\b", text):
                yield Span(m.start(), m.end(), "MATTER_NO", m.group())

    keep = make_keep(config={"privacy": {"anonymize_pii": True}}, recognizers=[MatterNumber()])
    session = keep.sessions.create(ORG)
    session.add_user(f"File MAT-123456 for {EMAIL_A}")
    (message,) = keep.compressor.build_history(session, "")
    assert message["content"] == "File <MATTER_NO_1> for <EMAIL_1>"


# -- a worker started with default config (issue 20, item 9) -----------------------------
# The application switch lives in process config, off by default: a sweep or a Celery
# worker started without it must still redact what the application redacted.

def _app_and_worker(make_keep, server: FakeOpenAIServer) -> tuple[Chatkeep, Chatkeep]:
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    memory = {"distil_on_compress": False}
    app = make_keep(model=client, config={"privacy": {"anonymize_pii": True}, "memory": memory})
    worker = make_keep(model=client, config={"memory": memory})  # default privacy config
    assert worker.config.privacy.anonymize_pii is False
    return app, worker


def _talk(session) -> None:
    session.add_user(f"The client is {EMAIL_A}, phone {PHONE}, card {CARD}.")
    session.add_assistant(f"Noted {EMAIL_A}.")


def _no_raw_value_in(bodies: list[str]) -> None:
    assert any("extract durable memories" in b for b in bodies)
    for text in bodies:
        for value in PII_VALUES:
            assert value not in text


def test_a_default_config_sweep_redacts_a_session_the_app_redacted(make_keep) -> None:
    with FakeOpenAIServer(responder=_scripted_model) as server:
        app, worker = _app_and_worker(make_keep, server)
        session = app.sessions.create(ORG, actor=Ref("user", 1))
        _talk(session)
        app.compressor.build_history(session, "sys")  # redacts: the session's vault is stored
        assert session.id in worker.memory.sweep(idle_after=timedelta(0))
        bodies = server.bodies()
    _no_raw_value_in(bodies)
    (memory,) = worker.memory.list(ORG)
    assert EMAIL_A in memory.content  # the worker restored the placeholder it was sent


@pytest.mark.sync_api  # wires the session service as the facade does (see the next test)
def test_a_default_config_worker_redacts_a_session_created_under_the_app_switch(
        make_keep) -> None:
    """Nothing was redacted yet (no vault): the row itself records the protection."""
    with FakeOpenAIServer(responder=_scripted_model) as server:
        app, worker = _app_and_worker(make_keep, server)
        sessions = SessionService(app.repository, app.counter, app_anonymize_pii=True)
        session = sessions.create(ORG, actor=Ref("user", 1))
        assert session.row.pii_protected
        _talk(session)
        assert worker.repository.read_vault(session.id)[0] is None
        worker.memory.distil(session.id)
        bodies = server.bodies()
    _no_raw_value_in(bodies)
    assert not sessions.create(ORG, anonymize_pii=False).row.pii_protected
    assert not SessionService(app.repository).create(ORG).row.pii_protected
    worker_view = worker.sessions.get_unscoped(session.id)
    assert worker.privacy.redacts(worker_view)
    worker_view.set_anonymize_pii(False)  # the conversation's own switch still decides
    assert not worker.privacy.redacts(worker_view)


def test_the_facade_marks_sessions_created_under_the_app_switch(make_keep) -> None:
    with FakeOpenAIServer() as server:
        app, worker = _app_and_worker(make_keep, server)
        assert app.sessions.create(ORG).row.pii_protected
        assert not worker.sessions.create(ORG).row.pii_protected
