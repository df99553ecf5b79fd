"""The distiller's two prompts: extract durable facts, then decide against existing memories.

Both ask for a JSON object (``json_mode``) that ``chatkeep.memory.replies`` validates.
The decision step follows mem0: each new fact is shown with the nearest live memories
of its own scope, under short ids (``m1``, ``m2`` ...) so the model cannot invent a
real row id, and answers ADD, UPDATE, DELETE or NONE.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from chatkeep.memory.scopes import Scope
from chatkeep.refs import Ref

EXTRACT_SYSTEM = """\
You extract durable memories from a conversation between a user and an AI assistant \
that works for an organisation.

A durable memory is a fact that will still be true and useful in later, unrelated \
conversations: rules and policies, decisions, commitments, deadlines and dates, who \
is who and their roles, and the user's stable preferences about how they work. \
Do not keep greetings, questions, one-off requests, the assistant's own suggestions \
that were not confirmed, intermediate tool output, or anything that only mattered \
at that moment.

Give every fact exactly one scope:
{scopes}

Write each fact as one self-contained sentence in {language} that makes sense \
without the conversation: name what it is about instead of writing "this", "it" \
or "the user said". Write personal facts without a name or pronoun, for example \
"Prefers replies in Spanish." Keep placeholders such as <EMAIL_1> or <PERSON_2> \
exactly as written. Do not list the same fact twice.

Reply with a JSON object only:
{{"facts": [{{"scope": "tenant" | "subject" | "personal", "content": "..."}}]}}
Reply {{"facts": []}} when nothing is worth keeping."""

SCOPE_HELP = {
    Scope.TENANT: '- "tenant": true for the whole organisation (a policy, a rule, a standard '
                  "practice, a fact about the organisation itself).",
    Scope.SUBJECT: '- "subject": about {subject}, the record this conversation is about '
                   "(its parties, facts, dates, status).",
    Scope.PERSONAL: '- "personal": about the user as a person: their role, their team, '
                    "their preferences about how they work.",
}
UNAVAILABLE = {
    Scope.SUBJECT: '- "subject" is not available: this conversation is not about a '
                   "particular record. Keep facts about one only if they are true for "
                   'the whole organisation ("tenant"); otherwise leave them out.',
    Scope.PERSONAL: '- "personal" is not available: no identified user takes part. '
                    "Never record facts about a person's role or preferences.",
}

EXTRACT_USER = """\
The conversation:

{transcript}"""

DECIDE_SYSTEM = """\
You keep a store of memories up to date. You receive new facts; each comes with the \
existing memories closest to it, under ids such as "m1". For every new fact choose \
one event:
- "ADD": the fact is new information that none of its listed memories states.
- "UPDATE": the fact is about the same thing as a listed memory and adds detail to \
it without contradicting it. Give "target" (that memory's id) and "text": one \
sentence that keeps everything still true from both.
- "DELETE": the fact contradicts a listed memory, which is no longer true (a date \
that moved, a decision reversed, a rule replaced, a preference changed). Give \
"target". The new fact replaces that memory.
- "NONE": a listed memory already states the fact (the same meaning in other \
words). Give "target".
Use only ids listed with that fact. Keep placeholders such as <EMAIL_1> exactly \
as written.

Reply with a JSON object only, one decision per new fact:
{"decisions": [{"fact": 0, "event": "ADD" | "UPDATE" | "DELETE" | "NONE", \
"target": "m1", "text": "..."}]}"""


@dataclass(frozen=True, slots=True)
class DecisionItem:
    """One new fact and its nearest existing memories (alias -> text) for the prompt."""

    index: int
    text: str
    candidates: Sequence[tuple[str, str]]


def extraction_messages(transcript: str, scopes: Sequence[Scope], subject: Ref | str | None,
                        language: str) -> list[dict[str, str]]:
    """The extraction request; only the scopes this session can hold are offered.
    ``subject`` is shown as given (the distiller passes it redacted)."""
    lines = []
    for scope in Scope:
        if scope in scopes:
            lines.append(SCOPE_HELP[scope].format(subject=subject))
        elif scope in UNAVAILABLE:
            lines.append(UNAVAILABLE[scope])
    system = EXTRACT_SYSTEM.format(scopes="\n".join(lines), language=language)
    return [{"role": "system", "content": system},
            {"role": "user", "content": EXTRACT_USER.format(transcript=transcript)}]


def decision_messages(items: Sequence[DecisionItem]) -> list[dict[str, str]]:
    """The ADD / UPDATE / DELETE / NONE request for ``items``."""
    payload = {"new_facts": [
        {"fact": item.index, "text": item.text,
         "memories": [{"id": alias, "text": text} for alias, text in item.candidates]}
        for item in items]}
    return [{"role": "system", "content": DECIDE_SYSTEM},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=False, indent=1)}]
