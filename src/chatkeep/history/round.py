"""One history round: read and plan, then store, or a named reason to plan again.

Every request chatkeep builds (``build_history`` in each format, the framework adapters)
is one round over a session. :meth:`HistoryRound.prepare` re-reads the session's row and
the messages after its watermark and asks the planner (:func:`~chatkeep.history.plan.
plan_history`) what goes out; the caller renders its body from that plan, through the
plan's egress; :meth:`HistoryRound.commit` then does the one write the plan needs (the
fold: claim, summarize, compare-and-set; or just storing new placeholders) and answers
with an outcome value:

* :class:`Ready`: the body may leave (its placeholders are stored);
* :class:`Folded`: the summary moved on; plan again from the new watermark;
* :class:`LostRace`: another writer stored the summary or the vault first; plan again;
* :class:`Deferred`: the fold is not this caller's to make now (another caller holds
  the fold's lease, or the session backs off after failed folds): plan without folding;
* :class:`SummaryFailed`: the summarizer failed; plan without folding, previous summary
  kept.

What follows an outcome is decided by :class:`RoundState` and :class:`RetryPolicy`,
plain values tested without a database (``tests/history/test_round.py``), as h11's state
machine is. :meth:`HistoryRound.run` is the driver every caller uses; quota
reservations and request manifests hook into the same two steps.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from chatkeep.errors import ChatkeepError, PrivacyError
from chatkeep.formats import History, HistoryInfo, get_format
from chatkeep.history.plan import HistoryPlan, plan_history
from chatkeep.history.recording import body_digest, record
from chatkeep.history.summary import StructuredSummary
from chatkeep.observability import tracing as telemetry
from chatkeep.privacy.egress import WITHHELD_NOTE, Egress
from chatkeep.sessions import ChatSession
from chatkeep.store.repository import Repository, SessionRow
from chatkeep.store.rows import utcnow

if TYPE_CHECKING:
    from chatkeep.history.compressor import HistoryCompressor, RecalledMemory
    from chatkeep.quotas.reservations import Reservation
    from chatkeep.quotas.service import PendingReservation

log = logging.getLogger("chatkeep.history")

T = TypeVar("T")
H = TypeVar("H", bound=History[Any])

__all__ = ["Deferred", "FoldResult", "Folded", "HistoryRound", "LostRace", "Outcome",
           "PreparedRound", "Ready", "RetryPolicy", "RoundState", "SummaryFailed",
           "over_budget_reason", "scrubbed"]


# -- outcomes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    """The rendered body may leave: every placeholder it holds is stored."""


@dataclass(frozen=True, slots=True)
class Folded:
    """The fold was stored: the summary now covers up to ``through`` (a seq)."""

    through: int
    messages: int
    """How many messages the fold took."""
    more: bool = False
    """The fold stopped at the round's bound on summarizer calls with more of the planned
    fold left: a backlog that later turns (or the background job) fold."""


@dataclass(frozen=True, slots=True)
class LostRace:
    """Another writer stored first: the ``summary`` (someone folded) or the ``vault``
    (someone stored placeholders). Plan again from what is stored now."""

    what: Literal["summary", "vault"]


@dataclass(frozen=True, slots=True)
class Deferred:
    """The fold is not this caller's to make now, and why."""

    reason: str
    quota: bool = False
    """The tenant's quota could not hold the summarizer's call (nothing was sent)."""


@dataclass(frozen=True, slots=True)
class SummaryFailed:
    """The summarizer failed (or gave nothing storable): the previous summary stays."""


Outcome = Ready | Folded | LostRace | Deferred | SummaryFailed


# -- what follows an outcome (no I/O) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many races a round may lose before it stops trying."""

    summary_races: int = 4
    """Folds lost to another writer before the round replays what is stored, unfolded."""
    vault_races: int = 8
    """Placeholder stores lost before the round fails closed (``PrivacyError``)."""


@dataclass(frozen=True, slots=True)
class RoundState:
    """What a round has been through so far; each outcome gives the next state."""

    summary_races: int = 0
    vault_races: int = 0
    compressed: bool = False
    """A fold of this round was stored."""
    summary_failed: bool = False
    deferred: str | None = None
    """Why the fold was not this caller's to make, once it was not."""
    backlog: bool = False
    """This round's fold stopped at its bound with more left to fold."""
    fold_refused: str | None = None
    """Why the tenant's quota refused this round's fold, once it did."""

    def may_fold(self, policy: RetryPolicy) -> bool:
        """Whether the next plan may fold: once per round, never after a failure or a
        deferral, and not after losing too many folds to other writers."""
        return not self.compressed and not self.summary_failed and self.deferred is None \
            and self.summary_races < policy.summary_races

    def after(self, outcome: Outcome) -> RoundState:
        """The state once ``outcome`` happened."""
        if isinstance(outcome, Folded):
            return dataclasses.replace(self, compressed=True, backlog=outcome.more)
        if isinstance(outcome, LostRace):
            if outcome.what == "summary":
                return dataclasses.replace(self, summary_races=self.summary_races + 1)
            return dataclasses.replace(self, vault_races=self.vault_races + 1)
        if isinstance(outcome, Deferred):
            return dataclasses.replace(self, deferred=outcome.reason,
                                       fold_refused=outcome.reason if outcome.quota
                                       else self.fold_refused)
        if isinstance(outcome, SummaryFailed):
            return dataclasses.replace(self, summary_failed=True)
        return self

    def exhausted(self, policy: RetryPolicy) -> bool:
        """Whether the round must give up: the vault could not be stored in time, so
        nothing may be sent (fail closed)."""
        return self.vault_races >= policy.vault_races


def over_budget_reason(plan: HistoryPlan, state: RoundState) -> str | None:
    """Why the planned history is over budget, with what the round went through."""
    reason = plan.over_budget_reason
    if reason is None:
        return None
    if state.summary_failed:
        return f"{reason} (the summarizer failed; the previous summary was kept)"
    if state.deferred is not None:
        return f"{reason} (not folded now: {state.deferred})"
    if state.backlog:
        return (f"{reason} (folding a backlog: this turn made as many summarizer calls as "
                "chat.max_fold_calls_per_turn allows; later turns or the fold job fold the "
                "rest)")
    return reason


# -- the round ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FoldResult:
    """What the summarizer made of a fold: the summary, the seq it covers, what it cost
    (stored with the fold), and whether part of the planned fold is left (``more``)."""

    summary: StructuredSummary
    through: int
    cost: dict[str, Any]
    more: bool = False


@dataclass(frozen=True, slots=True)
class PreparedRound:
    """One plan of a round, and what it was made from."""

    row: SessionRow
    """The session's row as read for this plan."""
    plan: HistoryPlan
    egress: Egress
    """The session's egress for this plan: render the body through it."""
    summary: StructuredSummary | None
    """The stored summary in its outgoing form (what the plan replays and a fold extends)."""
    last_seq: int = 0
    """The newest message the plan read (its replay manifest records it)."""
    read: int = 0
    """How many messages the plan read, pinned instructions included."""


class HistoryRound:
    """The round of one request over ``session`` (see the module docstring).

    Built by :meth:`HistoryCompressor.round`, which checks the arguments and recalls
    memories once. ``keep_closed_tool_turns`` replays closed turns' plumbing as recorded
    (a framework's own semantics); ``allow_fold=False`` plans without folding;
    ``max_fold_calls`` bounds the summarizer calls of its fold (``None``: no bound), and
    ``on_backlog`` hooks run when the bound left part of a fold for later."""

    def __init__(self, compressor: HistoryCompressor, session: ChatSession,
                 system_text: str, *, format: str = "openai_chat",
                 recalled: Sequence[str | RecalledMemory] = (),
                 keep_closed_tool_turns: bool = False, allow_fold: bool = True,
                 policy: RetryPolicy | None = None, max_fold_calls: int | None = None,
                 on_backlog: Sequence[Callable[[ChatSession], None]] = (),
                 prompt: str | None = None) -> None:
        self.compressor, self.session, self.format = compressor, session, format
        self.system_text = system_text
        self.prompt = system_text if prompt is None else prompt
        """The system prompt before the recalled memories joined it (``system_text``)."""
        self.recalled = tuple(recalled)
        self.records = True
        """Whether the request this round lets leave records its manifest (the background
        fold job's rounds send nothing, so they record none)."""
        self.turn: int | None = None
        """The turn the request this round let leave was recorded as (its replay
        manifest, :mod:`chatkeep.history.manifest`), once it did."""
        self.pending: PendingReservation | None = None
        """A reservation to hold for the call this round lets leave (its tokens plus the
        plan's estimate), written with the request's manifest, in its transaction."""
        self.held: Reservation | None = None
        """The reservation :attr:`pending` became, once the body was let leave."""
        self.keep_closed_tool_turns, self.allow_fold = keep_closed_tool_turns, allow_fold
        self.policy = policy or RetryPolicy()
        self.max_fold_calls, self._on_backlog = max_fold_calls, list(on_backlog)
        self.state = RoundState()
        self._known = [m.sealed_pii for m in recalled if not isinstance(m, str)]
        ids = (getattr(m, "id", None) for m in recalled)
        self.recalled_ids = tuple(i for i in ids if i is not None)
        """The ids of the memories recalled into this round (its span reports them)."""
        self.recall_refused: str | None = getattr(recalled, "quota_refused", None)
        """Why its recall was by words only for quota (``history.info.recall_refused``)."""
        self._repository = compressor._repository_for(session)
        self.traced = telemetry.live()
        """Whether this round's spans and measurements have anywhere to go (checked once,
        as it starts: :func:`chatkeep.observability.tracing.live`)."""

    def prepare(self) -> PreparedRound:
        """Re-read the session (its switches, summary and watermark may have moved
        elsewhere) and plan."""
        compressor, session = self.compressor, self.session
        read = self._repository.read_history
        row, pinned_before, messages = telemetry.read_history(read, session.id) \
            if self.traced else read(session.id)
        session.adopt_row(row)
        egress = compressor._egress(session, self._known)
        summary = compressor._model_summary(session, row.summary, egress)
        plan = plan_history(
            system_text=egress(self.system_text), pinned_before=pinned_before,
            summary=(summary.render() or None) if summary else None, messages=messages,
            config=compressor.config, counter=compressor.counter, redact=egress,
            format=self.format,
            allow_fold=self.allow_fold and self.state.may_fold(self.policy),
            keep_closed_tool_turns=self.keep_closed_tool_turns)
        last_seq = messages[-1].seq if messages else row.summary_watermark
        return PreparedRound(row, plan, egress, summary, last_seq,
                             len(pinned_before) + len(messages))

    def commit(self, prepared: PreparedRound) -> Outcome:
        """The write ``prepared`` needs: its fold, or the placeholders its rendered body
        allocated. Returns the outcome (and moves :attr:`state` on); fails closed with
        ``PrivacyError`` when the vault cannot be stored within the policy."""
        if prepared.plan.fold:
            outcome = self._fold(prepared)
        else:
            outcome = Ready() if prepared.egress.flush() else LostRace("vault")
        self.state = self.state.after(outcome)
        if isinstance(outcome, LostRace) and outcome.what == "vault":
            if self.state.exhausted(self.policy):
                raise PrivacyError(f"session {self.session.id}: could not store the "
                                   f"placeholder mapping after {self.policy.vault_races} "
                                   "attempts; nothing was sent")
            log.info("session %s: another writer stored placeholders first; planning again",
                     self.session.id)
        return outcome

    def run(self, render: Callable[[PreparedRound], T]) -> T:
        """Drive the round to :class:`Ready`: prepare, ``render`` the body from a plan that
        folds nothing, commit; returns the body that may leave, once its manifest is
        recorded (:attr:`turn`). A body that is not a built history (a framework's own
        messages) is recorded as the plan's history in the round's format, which
        ``keep.replay`` rebuilds."""
        while True:
            prepared = self.prepare()
            body = None if prepared.plan.fold else render(prepared)
            if isinstance(self.commit(prepared), Ready):
                assert body is not None
                self._release(prepared, body)
                return body

    def _release(self, prepared: PreparedRound, body: object) -> None:
        """What letting ``body`` leave writes, in one transaction: its manifest (with
        its SHA-256), and the call's reservation (:attr:`pending`, its tokens plus the
        plan's estimate) when one is asked for; a refused reservation
        (``QuotaExceeded``) leaves neither."""
        pending = self.pending
        if self.records:
            digest = body_digest(body if isinstance(body, History)
                                 else self._render(prepared, quiet=True))
            boarding = None if pending is None else pending.boarding(prepared.plan.tokens)
            self.turn = record(self, prepared, digest, reservation=boarding)
            if pending is not None and boarding is not None:
                self.held = pending.boarded(boarding)
        elif pending is not None:
            self.held = pending.hold(prepared.plan.tokens)

    def build(self) -> History[Any]:
        """The round as ``build_history`` runs it: the plan in the round's wire format,
        scrubbed as one body (in a ``chatkeep.build_history`` span when OpenTelemetry is
        installed)."""
        if self.traced:
            return telemetry.build_history(self, self._build)
        return self._build()

    def _build(self) -> History[Any]:
        return self.run(self._render)

    def _render(self, prepared: PreparedRound, *, quiet: bool = False) -> History[Any]:
        """The plan in the round's wire format, scrubbed as one body (``quiet``: only to
        be hashed, so its info is not worked out, nor an over-budget warning logged)."""
        outgoing = dataclasses.replace(prepared.plan.outgoing,
                                       summary_role=self.compressor.config.summary_role)
        info = HistoryInfo(prepared.plan.tokens, self.compressor.config.max_history_tokens,
                           format=self.format) if quiet else self.info(prepared)
        history = get_format(self.format).to_wire(outgoing, info)
        return scrubbed(history, prepared.egress, self.session)

    def info(self, prepared: PreparedRound) -> HistoryInfo:
        """What the caller learns of a plan: the estimate, the budget, whether this round
        folded, why it is over budget (if it is), and when a failed fold is retried."""
        plan, state = prepared.plan, self.state
        reason = over_budget_reason(plan, state)
        if reason is not None:
            log.warning("session %s: history over budget: %s", self.session.id, reason)
        retry_at = self.session.row.fold_retry_at
        return HistoryInfo(plan.tokens, self.compressor.config.max_history_tokens,
                           state.compressed, state.summary_failed, reason, plan.clipped,
                           self.format,
                           fold_deferred=state.deferred if reason is not None else None,
                           fold_retry_at=retry_at if retry_at and retry_at > utcnow()
                           else None, fold_refused=state.fold_refused,
                           recall_refused=self.recall_refused)

    def _fold(self, prepared: PreparedRound) -> Outcome:
        """Claim the fold before paying for it (concurrent callers of one session make
        one summarizer call per fold, not one each), summarize, store by compare-and-set."""
        repository, session, row = self._repository, self.session, prepared.row
        config = self.compressor.config
        lease = repository.claim_fold(session.id, row.summary_version,
                                      timedelta(seconds=config.fold_lease))
        if lease is None:
            now_row = repository.get_session(session.id)
            if now_row.summary_version != row.summary_version:
                return LostRace("summary")  # another caller folded meanwhile
            reason = why_deferred(now_row)
            log.info("session %s: not folding now: %s", session.id, reason)
            return Deferred(reason)
        held = [lease]

        def renew() -> bool:
            until = repository.renew_fold(session.id, held[0],
                                          timedelta(seconds=config.fold_lease))
            if until is not None:
                held[0] = until
            return until is not None

        try:
            summarize = functools.partial(
                self.compressor._summarize, session, prepared.summary, prepared.plan.fold,
                prepared.egress, max_calls=self.max_fold_calls, renew=renew)
            folded = telemetry.fold(session, prepared.plan.fold, summarize) \
                if self.traced else summarize()
            if isinstance(folded, Deferred):  # refused for quota: no back-off
                repository.release_fold(session.id, held[0])
                return folded
            if folded is None or isinstance(folded, LostRace):
                retry_at = None if folded is not None else \
                    self.compressor._retry_at(row.fold_failures + 1)
                repository.release_fold(session.id, held[0], retry_at=retry_at)
                return folded if folded is not None else SummaryFailed()
            new_row = repository.compare_and_set_summary(
                session.id, row.summary_version,
                self.compressor._stored_form(session, folded.summary), folded.through,
                fold={"from_seq": row.summary_watermark + 1, **folded.cost})
        except BaseException:
            release_quietly(repository, session.id, held[0])
            raise
        through = folded.through
        if new_row is None:
            repository.release_fold(session.id, held[0])
            log.info("session %s: another caller compressed first; re-reading", session.id)
            return LostRace("summary")
        session.adopt_row(new_row)
        taken = len([m for m in prepared.plan.fold if m.seq <= through])
        log.info("session %s: folded %d messages, watermark %d -> %d", session.id, taken,
                 row.summary_watermark, new_row.summary_watermark)
        self.compressor._after_compress(session)
        if folded.more:
            log.info("session %s: fold stopped at %s summarizer calls with a backlog left",
                     session.id, self.max_fold_calls)
            for hook in self._on_backlog:
                try:
                    hook(session)
                except Exception:
                    log.exception("session %s: on_backlog hook %r failed", session.id, hook)
        return Folded(through, taken, more=folded.more)

    @property
    def backlog(self) -> bool:
        """Whether this round's fold stopped at its bound with more left to fold."""
        return self.state.backlog


def why_deferred(row: SessionRow) -> str:
    """Why the fold a caller planned is not its to make now."""
    if row.fold_retry_at is not None and row.fold_retry_at > utcnow():
        return (f"backing off after {row.fold_failures} failed fold"
                f"{'s' if row.fold_failures != 1 else ''} until "
                f"{row.fold_retry_at.isoformat(timespec='seconds')}")
    return "another caller is folding this session"


def release_quietly(repository: Repository, session_id: str, lease: datetime) -> None:
    """Give the fold's claim back on the way out of a failure; if the store cannot be
    reached either, the lease simply ends on its own (the original error is what the
    caller sees)."""
    try:
        repository.release_fold(session_id, lease)
    except ChatkeepError as exc:
        log.info("session %s: could not give the fold's claim back (%s); it ends with "
                 "its lease", session_id, exc)


def scrubbed(history: H, egress: Egress, session: ChatSession) -> H:
    """``history`` as it may leave: its messages and its system text (Anthropic) scrubbed in
    one body, so a value detected anywhere in the request is redacted everywhere in it;
    signed blocks withheld are counted in ``info.withheld``."""
    system = getattr(history, "system", None)
    body: dict[str, Any] = egress.scrub({"system": system, "messages": list(history)})
    history[:] = body["messages"]
    if isinstance(system, str):
        history.system = body["system"]  # type: ignore[attr-defined]
    if egress.withheld:
        log.warning("session %s: %s (%d)", session.id, WITHHELD_NOTE, egress.withheld)
        history.info = dataclasses.replace(history.info, withheld=egress.withheld)
    return history
