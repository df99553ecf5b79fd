"""Personal-data redaction: find PII, swap it for stable placeholders, restore it after.

* :class:`PiiDetector` runs pattern :class:`Recognizer` objects (e-mail, phone,
  card, IBAN, IP, credential URLs, US SSN, Spanish DNI/NIE, UK NINO) and returns
  non-overlapping :class:`Span` objects; names and places need the optional
  :class:`~chatkeep.privacy.ner.PresidioRecognizer` (``chatkeep[ner]``).
* :class:`PlaceholderVault` remembers, per session, that ``<EMAIL_1>`` is one
  address; :func:`seal` / :func:`unseal` store it, Fernet-encrypted with a key
  (``chatkeep[encryption]``).
* :class:`Redactor` redacts user text and restores model output.
"""

from __future__ import annotations

from chatkeep.privacy.base import Span
from chatkeep.privacy.detector import PiiDetector, Recognizer, default_recognizers
from chatkeep.privacy.ner import PresidioRecognizer
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault, new_key, seal, unseal

__all__ = [
    "ENTITY_TYPES",
    "PATTERN_ENTITY_TYPES",
    "PiiDetector",
    "PlaceholderVault",
    "PresidioRecognizer",
    "Recognizer",
    "Redactor",
    "Span",
    "default_recognizers",
    "new_key",
    "seal",
    "unseal",
]

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
