"""What the hosted LLM APIs reject with HTTP 400, as pure functions over a request body.

The fake servers call these so that a test talking to them fails the way production
would when history plumbing is broken: a tool result with no call, a call with no result,
a ``system`` message sent to Anthropic, an edited thinking signature. Each checker returns
a list of error messages (empty = the hosted API would accept the body); the messages
follow the providers' own wording so a failing test reads like the production incident.

Reasoning that the fakes hand out (Anthropic ``thinking`` signatures, Responses
``encrypted_content``, ``redacted_thinking`` data) is signed with an HMAC key that lives
only in this process, like the providers' keys: anything altered or invented fails.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

_KEY = secrets.token_bytes(32)

#: Roles the Chat Completions API accepts in ``messages``.
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
#: Item types this fake of the Responses API accepts in ``input``.
RESPONSES_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
#: Content block types this fake of the Messages API accepts.
ANTHROPIC_BLOCK_TYPES = ("text", "image", "document", "tool_use", "tool_result", "thinking",
                         "redacted_thinking")

_USER_PARTS = ("text", "image_url", "input_audio", "file")
_ASSISTANT_PARTS = ("text", "refusal")
_RESPONSES_INPUT_PARTS = ("input_text", "input_image", "input_file")
_RESPONSES_OUTPUT_PARTS = ("output_text", "refusal")
# Items the Responses fake emits after a reasoning item carry its id's token:
# ``rs_<tok>`` is followed by ``fc_<tok>_<n>`` / ``msg_<tok>_<n>`` (see ``linked_item_id``).
_LINKED_ID = re.compile(r"^(?:fc|msg)_([0-9a-f]+)_\d+$")


def sign(text: str) -> str:
    """HMAC-SHA256 of ``text`` under this process's key, base64: a fake provider signature."""
    digest = hmac.new(_KEY, text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def verify(text: str, sig: str) -> bool:
    """Whether ``sig`` is :func:`sign` of ``text``: the check the fakes run on returned
    reasoning, so history code that edits or reorders it fails as in production."""
    if not isinstance(text, str) or not isinstance(sig, str):
        return False
    return hmac.compare_digest(sign(text), sig)


def seal(text: str) -> str:
    """An opaque, signed blob carrying ``text`` (Responses ``encrypted_content``,
    Anthropic ``redacted_thinking.data``): only this process can make a valid one."""
    payload = base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii")
    return f"{payload}.{sign(payload)}"


def unseal(blob: str) -> str | None:
    """The text inside a :func:`seal` blob, or ``None`` if it was altered or not ours."""
    if not isinstance(blob, str) or "." not in blob:
        return None
    payload, _, sig = blob.partition(".")
    if not verify(payload, sig):
        return None
    try:
        return base64.urlsafe_b64decode(payload.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def linked_item_id(reasoning_id: str, prefix: str, n: int) -> str:
    """The id the Responses fake gives the ``n``-th item emitted after reasoning item
    ``reasoning_id`` (``fc``/``msg`` prefix). Sending such an item back without that
    reasoning item is rejected, as the hosted API does for reasoning models."""
    token = reasoning_id.removeprefix("rs_")
    return f"{prefix}_{token}_{n}"


def _type_name(value: Any) -> str:
    names = {str: "a string", dict: "an object", list: "an array", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


# --------------------------------------------------------------------------- chat completions


def check_chat_completions(body: Mapping[str, Any]) -> list[str]:
    """Errors the Chat Completions API would answer with 400 for ``body`` (empty = valid).

    Covers message shapes and the tool-call pairing rule: an assistant ``tool_calls`` turn
    must be followed by one ``tool`` message per call id before anything else, and a
    ``tool`` message must answer a call of the assistant turn it follows.
    """
    errors: list[str] = []
    if not _is_str(body.get("model")) or not body.get("model"):
        errors.append("you must provide a model parameter")
    if body.get("stream_options") is not None and not body.get("stream"):
        errors.append("The 'stream_options' parameter is only allowed when 'stream' is enabled.")
    messages = body.get("messages")
    if not isinstance(messages, list):
        errors.append(f"Invalid type for 'messages': expected an array, but got "
                      f"{_type_name(messages)} instead.")
        return errors
    if not messages:
        errors.append("[] is too short - 'messages'")
        return errors
    shapes_ok = True
    for i, message in enumerate(messages):
        found = _check_chat_message(i, message)
        errors.extend(found)
        shapes_ok = shapes_ok and not found
    if shapes_ok:
        errors.extend(_check_chat_tool_pairing(messages))
    return errors


def _check_chat_message(i: int, message: Any) -> list[str]:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        return [f"Invalid type for '{where}': expected an object, but got "
                f"{_type_name(message)} instead."]
    role = message.get("role")
    if role not in CHAT_ROLES:
        if role is None:
            return [f"Missing required parameter: '{where}.role'."]
        return [f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', "
                f"'user', 'function', 'tool', and 'developer'."]
    content = message.get("content")
    if role in ("user", "system", "developer"):
        allowed = _USER_PARTS if role == "user" else ("text",)
        return _check_chat_content(where, content, allowed, required=True)
    if role == "tool":
        errors = _check_chat_content(where, content, ("text",), required=True)
        if not _is_str(message.get("tool_call_id")):
            errors.append(f"Missing required parameter: '{where}.tool_call_id'.")
        return errors
    # assistant
    tool_calls = message.get("tool_calls")
    errors = _check_chat_content(where, content, _ASSISTANT_PARTS,
                                 required=tool_calls is None and not message.get("function_call"))
    if tool_calls is None:
        return errors
    if not isinstance(tool_calls, list):
        return [*errors, f"Invalid type for '{where}.tool_calls': expected an array, but got "
                         f"{_type_name(tool_calls)} instead."]
    if not tool_calls:
        return [*errors, f"Invalid '{where}.tool_calls': empty array. Expected an array with "
                         "minimum length 1, but got an empty array instead."]
    for j, call in enumerate(tool_calls):
        errors.extend(_check_chat_tool_call(f"{where}.tool_calls[{j}]", call))
    return errors


def _check_chat_content(where: str, content: Any, allowed: Sequence[str], *,
                        required: bool) -> list[str]:
    if content is None:
        return [f"Missing required parameter: '{where}.content'."] if required else []
    if _is_str(content):
        return []
    if not isinstance(content, list):
        return [f"Invalid type for '{where}.content': expected one of a string or array of "
                f"objects, but got {_type_name(content)} instead."]
    errors = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            supported = ", ".join(f"'{a}'" for a in allowed)
            errors.append(f"Invalid value: '{kind}'. Supported values are: {supported}. "
                          f"('{where}.content[{k}].type')")
        elif kind == "text" and not _is_str(part.get("text")):
            errors.append(f"Missing required parameter: '{where}.content[{k}].text'.")
    return errors


def _check_chat_tool_call(where: str, call: Any) -> list[str]:
    if not isinstance(call, dict):
        return [f"Invalid type for '{where}': expected an object, but got "
                f"{_type_name(call)} instead."]
    errors = []
    if not _is_str(call.get("id")) or not call.get("id"):
        errors.append(f"Missing required parameter: '{where}.id'.")
    if call.get("type") != "function":
        errors.append(f"Missing required parameter: '{where}.type'." if call.get("type") is None
                      else f"Invalid value: '{call.get('type')}'. Supported values are: "
                           f"'function'. ('{where}.type')")
    function = call.get("function")
    if not isinstance(function, dict):
        errors.append(f"Missing required parameter: '{where}.function'.")
        return errors
    if not _is_str(function.get("name")) or not function.get("name"):
        errors.append(f"Missing required parameter: '{where}.function.name'.")
    arguments = function.get("arguments")
    if arguments is None:
        errors.append(f"Missing required parameter: '{where}.function.arguments'.")
    elif not _is_str(arguments):
        errors.append(f"Invalid type for '{where}.function.arguments': expected a string, but "
                      f"got {_type_name(arguments)} instead.")
    return errors


def _check_chat_tool_pairing(messages: list[dict[str, Any]]) -> list[str]:
    errors: list[str] = []
    open_ids: list[str] = []  # calls of the assistant turn we are inside, not yet answered
    in_tool_block = False  # the previous message was an assistant tool_calls turn or a tool
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if not in_tool_block:
                errors.append("Invalid parameter: messages with role 'tool' must be a response "
                              "to a preceeding message with 'tool_calls'.")
            elif call_id in open_ids:
                open_ids.remove(call_id)
            else:
                errors.append(f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                              f"'tool_calls' of previous message. ('messages[{i}]')")
            continue
        if open_ids:
            errors.append(_unanswered_chat_calls(open_ids))
        open_ids = []
        in_tool_block = role == "assistant" and bool(message.get("tool_calls"))
        if in_tool_block:
            open_ids = [call["id"] for call in message["tool_calls"]]
    if open_ids:
        errors.append(_unanswered_chat_calls(open_ids))
    return errors


def _unanswered_chat_calls(ids: Sequence[str]) -> str:
    return ("An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(ids)}")


# --------------------------------------------------------------------------- responses


def check_responses(body: Mapping[str, Any]) -> list[str]:
    """Errors the Responses API would answer with 400 for ``body`` (empty = valid).

    ``input`` is a string or a list of items (messages, ``function_call``,
    ``function_call_output``, ``reasoning``). Every output must answer an earlier call,
    every call must get a later output, reasoning ``encrypted_content`` must be intact, a
    reasoning item needs the item that followed it, and an item this fake emitted after a
    reasoning item needs that reasoning item. Expand ``previous_response_id`` first.
    """
    errors: list[str] = []
    if not _is_str(body.get("model")) or not body.get("model"):
        errors.append("Missing required parameter: 'model'.")
    items = body.get("input")
    if items is None:
        return errors
    if _is_str(items):
        return errors
    if not isinstance(items, list):
        return [*errors, f"Invalid type for 'input': expected one of a string or array of "
                         f"input items, but got {_type_name(items)} instead."]
    shapes_ok = True
    for i, item in enumerate(items):
        found = _check_responses_item(i, item)
        errors.extend(found)
        shapes_ok = shapes_ok and not found
    if shapes_ok:
        errors.extend(_check_responses_links(items))
    return errors


def _item_type(item: dict[str, Any]) -> str | None:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if _is_str(kind) else None


# Complexity over the lint's bound, on purpose (pyproject's mccabe rule names these two):
# each is the provider's own table of item or block types, one branch per documented type
# as its API checks them; split apart, the rules of one type would stand in several places.
def _check_responses_item(i: int, item: Any) -> list[str]:  # noqa: C901
    where = f"input[{i}]"
    if not isinstance(item, dict):
        return [f"Invalid type for '{where}': expected an input item, but got "
                f"{_type_name(item)} instead."]
    kind = _item_type(item)
    if kind not in RESPONSES_ITEM_TYPES:
        return [f"Invalid value: '{item.get('type')}'. Supported values are: "
                + ", ".join(f"'{t}'" for t in RESPONSES_ITEM_TYPES) + f". ('{where}.type')"]
    errors: list[str] = []
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            return [f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', "
                    f"'developer', and 'user'. ('{where}.role')"]
        content = item.get("content")
        if _is_str(content):
            return []
        if not isinstance(content, list):
            return [f"Invalid type for '{where}.content': expected one of a string or array "
                    f"of input content parts, but got {_type_name(content)} instead."]
        allowed = _RESPONSES_OUTPUT_PARTS if role == "assistant" else _RESPONSES_INPUT_PARTS
        for k, part in enumerate(content):
            part_kind = part.get("type") if isinstance(part, dict) else None
            if part_kind not in allowed:
                supported = ", ".join(f"'{a}'" for a in allowed)
                errors.append(f"Invalid value: '{part_kind}'. Supported values are: "
                              f"{supported}. ('{where}.content[{k}]')")
            elif part_kind in ("input_text", "output_text") and not _is_str(part.get("text")):
                errors.append(f"Missing required parameter: '{where}.content[{k}].text'.")
    elif kind == "function_call":
        for field in ("call_id", "name", "arguments"):
            if field not in item:
                errors.append(f"Missing required parameter: '{where}.{field}'.")
            elif not _is_str(item[field]):
                errors.append(f"Invalid type for '{where}.{field}': expected a string, but got "
                              f"{_type_name(item[field])} instead.")
    elif kind == "function_call_output":
        if not _is_str(item.get("call_id")):
            errors.append(f"Missing required parameter: '{where}.call_id'.")
        output = item.get("output")
        if isinstance(output, list):
            errors.extend(_output_part_errors(output, f"{where}.output"))
        elif not _is_str(output):
            errors.append(f"Missing required parameter: '{where}.output'." if output is None
                          else f"Invalid type for '{where}.output': expected one of a string "
                               f"or array, but got {_type_name(output)} instead.")
    else:  # reasoning
        if not _is_str(item.get("id")):
            errors.append(f"Missing required parameter: '{where}.id'.")
        summary = item.get("summary")
        if not isinstance(summary, list):
            errors.append(f"Missing required parameter: '{where}.summary'." if summary is None
                          else f"Invalid type for '{where}.summary': expected an array, but "
                               f"got {_type_name(summary)} instead.")
        blob = item.get("encrypted_content")
        if blob is not None and unseal(blob) is None:
            errors.append(f"The encrypted content for item {item.get('id')} could not be "
                          "verified.")
    return errors


def _check_responses_links(items: list[dict[str, Any]]) -> list[str]:
    errors: list[str] = []
    kinds = [_item_type(item) for item in items]
    called: set[str] = set()
    answered = {item["call_id"] for item, kind in zip(items, kinds, strict=True)
                if kind == "function_call_output"}
    reasoning_seen: set[str] = set()
    for i, (item, kind) in enumerate(zip(items, kinds, strict=True)):
        if kind == "function_call":
            called.add(item["call_id"])
            if item["call_id"] not in answered:
                errors.append(f"No tool output found for function call {item['call_id']}.")
        elif kind == "function_call_output" and item["call_id"] not in called:
            errors.append("No tool call found for function call output with call_id "
                          f"{item['call_id']}.")
        elif kind == "reasoning":
            reasoning_seen.add(item["id"])
            following = kinds[i + 1] if i + 1 < len(items) else None
            if not (following == "function_call" or (
                    following == "message" and items[i + 1].get("role") == "assistant")):
                errors.append(f"Item '{item['id']}' of type 'reasoning' was provided without "
                              "its required following item.")
        item_id = item.get("id")
        match = _LINKED_ID.match(item_id) if isinstance(item_id, str) else None
        if match and kind in ("function_call", "message"):
            needed = f"rs_{match.group(1)}"
            if needed not in reasoning_seen:
                errors.append(f"Item '{item_id}' of type '{kind}' was provided without its "
                              f"required 'reasoning' item: '{needed}'.")
    return errors


# --------------------------------------------------------------------------- anthropic


def check_anthropic_messages(body: Mapping[str, Any]) -> list[str]:
    """Errors the Anthropic Messages API would answer with 400 for ``body`` (empty = valid).

    ``system`` is a top-level field only; roles are user/assistant, the first one user;
    consecutive same-role messages are merged (as the API does) before the pairing rule:
    every ``tool_use`` needs a ``tool_result`` in the very next user turn and every
    ``tool_result`` must answer a ``tool_use`` of the turn right before it. Thinking
    signatures must verify, and with thinking enabled the assistant turn whose tool calls
    are being answered must start with its thinking block.
    """
    errors: list[str] = []
    if not _is_str(body.get("model")) or not body.get("model"):
        errors.append("model: Field required")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        errors.append("max_tokens: Field required")
    elif not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        errors.append("max_tokens: Input should be a valid integer greater than or equal to 1")
    errors.extend(_check_anthropic_thinking_config(body.get("thinking"), max_tokens))
    errors.extend(_check_anthropic_system(body.get("system")))
    messages = body.get("messages")
    if not isinstance(messages, list):
        errors.append("messages: Field required" if messages is None
                      else "messages: Input should be a valid list")
        return errors
    if not messages:
        errors.append("messages: at least one message is required")
        return errors
    shapes_ok = True
    for i, message in enumerate(messages):
        found = _check_anthropic_message(i, message, last=i == len(messages) - 1)
        errors.extend(found)
        shapes_ok = shapes_ok and not found
    if not shapes_ok:
        return errors
    if messages[0]["role"] != "user":
        errors.append('messages: first message must use the "user" role')
    errors.extend(_check_anthropic_turns(messages, _thinking_enabled(body)))
    return errors


def _thinking_enabled(body: Mapping[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _check_anthropic_thinking_config(thinking: Any, max_tokens: Any) -> list[str]:
    if thinking is None:
        return []
    if not isinstance(thinking, dict):
        return ["thinking: Input should be a valid dictionary or object"]
    kind = thinking.get("type")
    if kind in ("disabled", "adaptive"):
        return []
    if kind != "enabled":
        return [f"thinking.type: Input should be 'enabled', 'disabled' or 'adaptive' "
                f"(got {kind!r})"]
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool):
        return ["thinking.enabled.budget_tokens: Field required"]
    if budget < 1024:
        return ["thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"]
    if isinstance(max_tokens, int) and max_tokens <= budget:
        return ["`max_tokens` must be greater than `thinking.budget_tokens`."]
    return []


def _check_anthropic_system(system: Any) -> list[str]:
    if system is None or _is_str(system):
        return []
    if not isinstance(system, list):
        return ["system: Input should be a valid string or a list of text blocks"]
    return [f"system.{k}.type: Input should be 'text'" for k, block in enumerate(system)
            if not (isinstance(block, dict) and block.get("type") == "text"
                    and _is_str(block.get("text")))]


def _check_anthropic_message(i: int, message: Any, *, last: bool) -> list[str]:
    where = f"messages.{i}"
    if not isinstance(message, dict):
        return [f"{where}: Input should be a valid dictionary"]
    role = message.get("role")
    if role == "system":
        return ['messages: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.']
    if role not in ("user", "assistant"):
        return [f"{where}.role: Input should be 'user' or 'assistant'"]
    content = message.get("content")
    if _is_str(content):
        if not content and not (last and role == "assistant"):
            return ["messages: all messages must have non-empty content except for the "
                    "optional final assistant message"]
        return []
    if not isinstance(content, list):
        return [f"{where}.content: Input should be a valid string or a list of content blocks"]
    if not content and not (last and role == "assistant"):
        return ["messages: all messages must have non-empty content except for the "
                "optional final assistant message"]
    errors: list[str] = []
    for k, block in enumerate(content):
        errors.extend(_check_anthropic_block(f"{where}.content.{k}", role, block))
    return errors


def _check_anthropic_block(where: str, role: str,  # noqa: C901 (see above)
                           block: Any) -> list[str]:
    if not isinstance(block, dict):
        return [f"{where}: Input should be a valid dictionary or object"]
    kind = block.get("type")
    if kind not in ANTHROPIC_BLOCK_TYPES:
        expected = ", ".join(f"'{t}'" for t in ANTHROPIC_BLOCK_TYPES)
        return [f"{where}.type: Input tag '{kind}' found using 'type' does not match any of "
                f"the expected tags: {expected}"]
    user_only = ("image", "document", "tool_result")
    assistant_only = ("tool_use", "thinking", "redacted_thinking")
    if (role == "assistant" and kind in user_only) or (role == "user" and kind in assistant_only):
        return [f"{where}: `{kind}` blocks are not allowed in `{role}` messages"]
    if kind == "text":
        if not _is_str(block.get("text")):
            return [f"{where}.text: Field required"]
        if not block["text"]:
            return ["messages: text content blocks must be non-empty"]
    elif kind == "tool_use":
        errors = [f"{where}.{field}: Field required" for field in ("id", "name")
                  if not _is_str(block.get(field)) or not block.get(field)]
        if "input" not in block:
            errors.append(f"{where}.input: Field required")
        elif not isinstance(block["input"], dict):
            errors.append(f"{where}.input: Input should be a valid dictionary")
        return errors
    elif kind == "tool_result":
        if not _is_str(block.get("tool_use_id")):
            return [f"{where}.tool_use_id: Field required"]
        content = block.get("content")
        if content is not None and not _is_str(content) and not (
                isinstance(content, list) and all(
                    isinstance(b, dict) and b.get("type") in ("text", "image", "document")
                    for b in content)):
            return [f"{where}.content: Input should be a valid string or a list of text, "
                    "image or document blocks"]
    elif kind == "thinking":
        if not _is_str(block.get("thinking")):
            return [f"{where}.thinking: Field required"]
        if not _is_str(block.get("signature")):
            return [f"{where}.signature: Field required"]
        if not verify(block["thinking"], block["signature"]):
            return [f"{where}: Invalid signature in thinking block"]
    elif kind == "redacted_thinking":
        if not _is_str(block.get("data")):
            return [f"{where}.data: Field required"]
        if unseal(block["data"]) is None:
            return [f"{where}: Invalid data in redacted_thinking block"]
    elif kind == "image" and not isinstance(block.get("source"), dict):
        return [f"{where}.source: Field required"]
    return []


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if _is_str(content) else list(content)


def _check_anthropic_turns(messages: list[dict[str, Any]], thinking: bool) -> list[str]:
    # The API merges consecutive same-role messages into one turn before these rules.
    turns: list[tuple[int, str, list[dict[str, Any]]]] = []  # (first index, role, blocks)
    for i, message in enumerate(messages):
        if turns and turns[-1][1] == message["role"]:
            turns[-1][2].extend(_blocks(message))
        else:
            turns.append((i, message["role"], _blocks(message)))
    errors: list[str] = []
    for t, (index, role, blocks) in enumerate(turns):
        where = f"messages.{index}"
        previous = turns[t - 1][2] if t > 0 and turns[t - 1][1] == "assistant" else []
        if role == "user":
            offered = {b["id"] for b in previous if b["type"] == "tool_use"}
            unexpected = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"
                          and b["tool_use_id"] not in offered]
            if unexpected:
                errors.append(f"{where}: unexpected tool_use_id found in tool_result blocks: "
                              f"{', '.join(unexpected)}. Each tool_result block must have a "
                              "corresponding tool_use block in the previous message.")
            seen_other = False
            for block in blocks:
                if block["type"] != "tool_result":
                    seen_other = True
                elif seen_other:
                    errors.append(f"{where}: tool_result blocks must come before any other "
                                  "content in a user message")
                    break
            continue
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        following = turns[t + 1][2] if t + 1 < len(turns) else None
        if uses and following is not None:
            results = {b["tool_use_id"] for b in following if b["type"] == "tool_result"}
            missing = [u for u in uses if u not in results]
            if missing:
                at = f"messages.{turns[t + 1][0]}"
                errors.append(f"{at}: tool_use ids were found without tool_result blocks "
                              f"immediately after: {', '.join(missing)}. Each tool_use block "
                              "must have a corresponding tool_result block in the next "
                              "message.")
        elif uses and t == len(turns) - 1:
            errors.append(f"{where}: tool_use ids were found without tool_result blocks "
                          f"immediately after: {', '.join(uses)}. Each tool_use block must "
                          "have a corresponding tool_result block in the next message.")
        if (thinking and uses and t == len(turns) - 2
                and blocks[0]["type"] not in ("thinking", "redacted_thinking")):
            errors.append(f"{where}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                          f"but found `{blocks[0]['type']}`. When `thinking` is enabled, a "
                          "final `assistant` message must start with a thinking block "
                          "(preceeding the lastmost set of `tool_use` and `tool_result` "
                          "blocks). We recommend you include thinking blocks from previous "
                          "turns. To avoid this requirement, disable `thinking`.")
    return errors


_OUTPUT_PART_SOURCES = {"input_image": ("image_url", "file_id"),
                        "input_file": ("file_data", "file_url", "file_id")}


def _output_part_errors(parts: list[Any], where: str) -> list[str]:
    """A tool output given as parts: text, images and files only, each with its source
    (an image needs ``image_url`` or ``file_id``; a file its data, URL or id)."""
    errors: list[str] = []
    for k, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _RESPONSES_INPUT_PARTS:
            supported = ", ".join(f"'{a}'" for a in _RESPONSES_INPUT_PARTS)
            errors.append(f"Invalid value: '{kind}'. Supported values are: {supported}. "
                          f"('{where}[{k}].type')")
        elif kind == "input_text" and not _is_str(part.get("text")):
            errors.append(f"Missing required parameter: '{where}[{k}].text'.")
        elif kind in _OUTPUT_PART_SOURCES and not any(
                _is_str(part.get(f)) for f in _OUTPUT_PART_SOURCES[kind]):
            errors.append(f"Missing required parameter: '{where}[{k}]' needs one of "
                          f"{', '.join(_OUTPUT_PART_SOURCES[kind])}.")
    return errors
