"""The OpenAI Agents SDK on chatkeep (``chatkeep[agents]``): :class:`ChatkeepSession`,
the SDK's ``Session`` protocol over a chatkeep conversation, whose ``run*`` send every
request of a run (guardrails and nested agents included) through the session's egress.

``session``: the protocol and the runs; ``runs``: what a run on a redacting session
changes (the new input read with its context, guardrails fed scrubbed input, traces
without content, the user's own values back in what the app shows); ``billing``: the
run hooks that bill each model call, estimated where the model reports no usage.
"""

from chatkeep.integrations.openai_agents.session import ChatkeepSession

__all__ = ["ChatkeepSession"]
