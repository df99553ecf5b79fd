"""Personal-data redaction: find PII, swap it for stable placeholders, restore it after.

* :class:`PiiDetector` runs pattern :class:`Recognizer` objects (e-mail, phone,
  card, IBAN, IP, credential URLs, US SSN, Spanish DNI/NIE, UK NINO) and returns
  non-overlapping :class:`Span` objects; names and places need the optional
  :class:`~chatkeep.privacy.ner.PresidioRecognizer` (``chatkeep[ner]``).
* :class:`PlaceholderVault` remembers, per session, that ``<EMAIL_1>`` is one
  address; :func:`seal` / :func:`unseal` store it, Fernet-encrypted with a key
  (``chatkeep[encryption]``).
* :class:`Redactor` redacts user text and restores model output.

The names load on first use (:mod:`chatkeep._exports`): a module that needs one piece
(``chatkeep.privacy.escaping``, ``switches``) does not compile every recognizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatkeep._exports import lazy_exports

if TYPE_CHECKING:
    from chatkeep.privacy.base import Span as Span
    from chatkeep.privacy.detector import PiiDetector as PiiDetector
    from chatkeep.privacy.detector import Recognizer as Recognizer
    from chatkeep.privacy.detector import default_recognizers as default_recognizers
    from chatkeep.privacy.ner import PresidioRecognizer as PresidioRecognizer
    from chatkeep.privacy.redactor import Redactor as Redactor
    from chatkeep.privacy.vault import PlaceholderVault as PlaceholderVault
    from chatkeep.privacy.vault import new_key as new_key
    from chatkeep.privacy.vault import seal as seal
    from chatkeep.privacy.vault import unseal as unseal

#: Each public name, under the module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "chatkeep.privacy.base": ("Span",),
    "chatkeep.privacy.detector": ("PiiDetector", "Recognizer", "default_recognizers"),
    "chatkeep.privacy.ner": ("PresidioRecognizer",),
    "chatkeep.privacy.redactor": ("Redactor",),
    "chatkeep.privacy.vault": ("PlaceholderVault", "new_key", "seal", "unseal"),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ += ["ENTITY_TYPES", "PATTERN_ENTITY_TYPES"]  # defined below

#: The entity types the built-in pattern recognizers find (no model needed).
PATTERN_ENTITY_TYPES: tuple[str, ...] = (
    "CREDIT_CARD",
    "EMAIL",
    "ES_NIF",
    "IBAN",
    "IP_ADDRESS",
    "PHONE",
    "UK_NINO",
    "URL_CREDENTIALS",
    "US_SSN",
)

#: Every built-in entity type (PERSON and LOCATION need the NER backend).
ENTITY_TYPES: tuple[str, ...] = (*PATTERN_ENTITY_TYPES, "PERSON", "LOCATION")
