"""The two privacy switches, as rules: written once, read by every part that decides.

``privacy.anonymize_pii`` is the application's switch (off by default); a session's
``anonymize_pii`` is the conversation's own (on by default). A session created (or
imported) while both are on is marked ``pii_protected``, and then redacts in every
process, whatever that process's configuration: a sweep or a worker started on the
default config never sends its text with less protection than it was created under.
"""

from __future__ import annotations

__all__ = ["protected_at_creation", "redacts"]


def protected_at_creation(app_switch: bool, session_switch: bool) -> bool:
    """Whether a session created now is marked ``pii_protected``: both switches on."""
    return app_switch and session_switch


def redacts(session_switch: bool, app_switch: bool, protected: bool) -> bool:
    """Whether a session's text leaves redacted: its own switch on, and the application's
    on or the session protected since its creation."""
    return session_switch and (app_switch or protected)
