"""The OpenAI Agents SDK on chatkeep (``chatkeep[agents]``): :class:`ChatkeepSession`,
the SDK's ``Session`` protocol over a chatkeep conversation, whose ``run*`` send every
request of a run (guardrails and nested agents included) through the session's egress.

``session``: the protocol and the runs; ``runs``: what a run on a redacting session
changes (the new input read with its context, guardrails fed scrubbed input, traces
without content, the user's own values back in what the app shows); ``graph``: the
run's clones of the agents it reaches (function tools given the user's own values, models
reserving each request); ``reserving``: every model request reserved on the tenant's
quota and settled at its usage; ``billing``: the run hooks that bill each model call,
estimated where the model reports no usage.
"""

from chatkeep.integrations.openai_agents.session import ChatkeepSession

__all__ = ["ChatkeepSession"]
