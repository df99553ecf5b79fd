"""Forgetting, as the store records it: legal holds (active and released), each tenant's
retention policy, the memories that expire (those expired, awaiting the sweep), and the
lifecycle log (deletes, erasures with their receipts' digests,
holds placed and released, retention sweeps). Nothing here holds personal content: the
log keeps counts and ids only, and a hold's reason is the operator's."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chatkeep.inspect.context import Inspector
from chatkeep.store.retention import RetentionStore
from chatkeep.store.rows import utcnow

#: Log lines shown (newest first).
LOG_LINES = 200


def lifecycle_page(request: Request) -> Response:
    """``GET /lifecycle``: holds, retention policies, memory expiry and the log, within the
    inspector's
    confinement (or the ``tenant`` asked for)."""
    ins: Inspector = request.app.state.inspector
    tenant = ins.tenant_filter(request)
    keep = ins.keep
    holds = keep.lifecycle.list_holds(tenant, include_released=True)
    retention = RetentionStore(ins.engine)
    policies = retention.policies(tenant)
    expiry = retention.memory_expiry(tenant, utcnow())
    default = (keep.config.privacy.session_retention_days,
               keep.config.privacy.memory_retention_days)
    log = keep.lifecycle.log(tenant, limit=LOG_LINES)
    return ins.render(request, "lifecycle.html", holds=holds, policies=policies,
                      default=default, expiry=expiry, log=log, tenant=tenant,
                      shown=LOG_LINES,
                      title="Lifecycle")


ROUTES = [Route("/lifecycle", lifecycle_page)]
