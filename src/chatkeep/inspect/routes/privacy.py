"""A session's redaction: the switches, its placeholder mapping, which detector reports each
value's type, and the values themselves only on a granted reveal."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chatkeep.inspect.context import Inspector
from chatkeep.inspect.masking import Masker, detectors_by_type, open_vault
from chatkeep.inspect.routes.reveal import session_page_routes
from chatkeep.privacy.vault import is_sealed
from chatkeep.store.rows import SessionRow


def _page(request: Request, ins: Inspector, row: SessionRow, masker: Masker, *,
          reveal_message: str | None = None, status: int = 200) -> Response:
    config = ins.keep.config.privacy
    redacts = ins.redacts(row)
    vault, problem = (masker.vault, None) if masker.revealed else \
        open_vault(row.pii_vault, ins.vault_key)
    detectors = detectors_by_type(ins.keep.privacy.redactor.detector)
    entries = [{"placeholder": placeholder, "type": entity_type,
                "detectors": detectors.get(entity_type, []),
                "value": value if masker.revealed else None}
               for placeholder, entity_type, _canonical, value in
               ((p, t, c, v) for (p, v), (t, c, _) in zip(vault.items(), vault.entries(),
                                                          strict=True))]
    return ins.render(
        request, "privacy.html", status, row=row, redacts=redacts, entries=entries,
        problem=problem if row.pii_vault is not None else None, masker=masker,
        sealed=row.pii_vault is not None and is_sealed(row.pii_vault),
        app_switch=config.anonymize_pii, reveal_message=reveal_message, tab="privacy",
        title=f"Privacy of {ins.labels(row, masker)[0] or row.id}")


ROUTES = session_page_routes("/sessions/{session_id}/privacy", "privacy", "privacy", _page)
