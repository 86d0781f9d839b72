"""The one table from a field the Messages request schema refused to Mortar's error and message.

Written like the chat contract's (`gateway.contract.refusals`, which also reads it): a field's path
is its `loc` without union tags and with list indexes as `*`; `REFUSALS` maps (path, error type)
— or (path, `*`) — to the refusal, whose message is a `str.format` template given the list
indexes as `{0}`, `{1}`, the field as `{at}`, the refused value as `{input}` and the error's
context. The route answers in Anthropic's envelope, which shows only the message (every 400 is an
`invalid_request_error`); the run records the code.

When several fields are wrong, the first in `PRECEDENCE` is reported.
"""

from __future__ import annotations

from pydantic import ValidationError

from core.errors import InvalidParameter, InvalidRequest
from gateway.contract.refusals import Refusal, refusal_from
from gateway.contract.request import MAX_STOP_SEQUENCES
from gateway.errors import InvalidRole, InvalidToolChoice, InvalidTools
from gateway.surfaces.messages.request import MIN_THINKING_BUDGET

PRECEDENCE = (
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "stream",
    "thinking",
)
_RANK = {field: rank for rank, field in enumerate(PRECEDENCE)}


def _parameter(message: str, param: str = "{at}") -> Refusal:
    return Refusal(InvalidParameter, message, param)


def _tools(message: str, param: str = "{at}") -> Refusal:
    return Refusal(InvalidTools, message, param)


def _tool_choice(message: str) -> Refusal:
    return Refusal(InvalidToolChoice, message, "tool_choice")


REQUIRED = _parameter("`{at}` is required.")
MUST_BE_OBJECT = _parameter("`{at}` must be an object.")
MUST_BE_STRING = _parameter("`{at}` must be a string.")
MUST_BE_BOOLEAN = _parameter("`{at}` must be a boolean.")
NON_EMPTY_STRING = _parameter("`{at}` must be a non-empty string.")
BLOCK = _parameter("`{at}` must be a content block: an object with a string `type`.")
WRONG_BLOCK = _parameter(
    "`{at}.type` {input[type]!r} cannot be used here: a user message holds `text`, `image` and "
    "`tool_result` blocks, an assistant message `text`, `tool_use` and `thinking` blocks.",
    "{at}.type",
)
TEXT_BLOCK = _parameter('`{at}` must be a text block, {{"type": "text", "text": "…"}}.')
TEXT_ONLY = _parameter("`{at}` must be `text`: only text blocks are allowed here.")
TOOL_CHOICE_SHAPE = _tool_choice(
    '`tool_choice` must be {{"type": "auto"}}, {{"type": "any"}}, {{"type": "none"}} or '
    '{{"type": "tool", "name": …}}.'
)
THINKING_SHAPE = _parameter(
    '`thinking` must be {{"type": "enabled", "budget_tokens": N}} or {{"type": "disabled"}}.',
    "thinking",
)
STOP_SEQUENCES = _parameter(
    f"`stop_sequences` must be a list of at most {MAX_STOP_SEQUENCES} non-empty strings.",
    "stop_sequences",
)
NUMBER = _parameter("`{at}` must be a number.")


def _between(low: str, high: str) -> dict[str, Refusal]:
    between = _parameter(f"`{{at}}` must be between {low} and {high}.")
    return {"greater_than_equal": between, "less_than_equal": between, "*": NUMBER}


# (path, error type) -> refusal; "*" is any type the path has no row for.
REFUSALS: dict[tuple[str, str], Refusal] = {
    ("model", "missing"): REQUIRED,
    ("model", "*"): _parameter("`model` must be a non-empty string."),
    ("max_tokens", "missing"): REQUIRED,
    ("max_tokens", "*"): _parameter("`max_tokens` must be a positive whole number."),
    # messages
    ("messages", "missing"): REQUIRED,
    ("messages", "too_short"): _parameter("`messages` must hold at least one message."),
    ("messages", "too_long"): _parameter(
        "`messages` holds {actual_length} messages; at most {max_length} are allowed."
    ),
    ("messages", "*"): _parameter("`messages` must be an array."),
    ("messages.*", "union_tag_not_found"): _parameter("`{at}.role` must be a string.", "{at}.role"),
    ("messages.*", "union_tag_invalid"): Refusal(
        InvalidRole,
        "`{at}.role` is {input[role]!r}; use user or assistant (the system prompt goes in "
        "`system`).",
        "{at}.role",
    ),
    ("messages.*", "*"): MUST_BE_OBJECT,
    ("messages.*.content", "missing"): REQUIRED,
    ("messages.*.content", "*"): _parameter(
        "`{at}` must be a string or an array of content blocks."
    ),
    ("messages.*.content.*", "union_tag_invalid"): WRONG_BLOCK,
    ("messages.*.content.*", "*"): BLOCK,
    ("messages.*.content.*.text", "*"): MUST_BE_STRING,
    # image blocks
    ("messages.*.content.*.source", "missing"): REQUIRED,
    ("messages.*.content.*.source", "*"): MUST_BE_OBJECT,
    ("messages.*.content.*.source.type", "*"): _parameter(
        "`{at}` must be `base64`: images are sent inline (Mortar never fetches an image URL)."
    ),
    ("messages.*.content.*.source.media_type", "*"): _parameter(
        "`{at}` must be image/png, image/jpeg, image/webp or image/gif."
    ),
    ("messages.*.content.*.source.data", "*"): _parameter(
        "`{at}` must be the image as a base64 string."
    ),
    # tool_use blocks
    ("messages.*.content.*.id", "*"): NON_EMPTY_STRING,
    ("messages.*.content.*.name", "*"): _parameter(
        "`{at}` must be 1 to 64 letters, digits, underscores or dashes."
    ),
    ("messages.*.content.*.input", "missing"): REQUIRED,
    ("messages.*.content.*.input", "*"): MUST_BE_OBJECT,
    # tool_result blocks
    ("messages.*.content.*.tool_use_id", "*"): _parameter(
        "`{at}` must name the `tool_use` block this result answers."
    ),
    ("messages.*.content.*.content", "*"): _parameter(
        "`{at}` must be a string or an array of text blocks."
    ),
    ("messages.*.content.*.content.*", "*"): TEXT_BLOCK,
    ("messages.*.content.*.content.*.type", "*"): TEXT_ONLY,
    ("messages.*.content.*.content.*.text", "*"): MUST_BE_STRING,
    ("messages.*.content.*.is_error", "*"): MUST_BE_BOOLEAN,
    # thinking blocks
    ("messages.*.content.*.thinking", "*"): MUST_BE_STRING,
    ("messages.*.content.*.signature", "*"): MUST_BE_STRING,
    ("messages.*.content.*.data", "*"): MUST_BE_STRING,
    # system
    ("system", "*"): _parameter("`system` must be a string or an array of text blocks."),
    ("system.*", "*"): TEXT_BLOCK,
    ("system.*.type", "*"): TEXT_ONLY,
    ("system.*.text", "*"): MUST_BE_STRING,
    # tools
    ("tools", "too_long"): _tools("`tools` holds at most {max_length} tools."),
    ("tools", "tool_name_repeated"): _tools(
        "`tools[{index}].name` repeats {name!r}; tool names must differ.", "tools[{index}].name"
    ),
    ("tools", "*"): _tools("`tools` must be an array."),
    ("tools.*", "*"): _tools("`{at}` must be a tool object."),
    ("tools.*.type", "*"): _tools(
        "`{at}` must be `custom` or left out: Mortar serves client tools only."
    ),
    ("tools.*.name", "*"): _tools("`{at}` must be 1 to 64 letters, digits, underscores or dashes."),
    ("tools.*.description", "*"): _tools("`{at}` must be a string."),
    ("tools.*.input_schema", "missing"): _tools(
        "`{at}` is required: a JSON Schema object describing the tool's input."
    ),
    ("tools.*.input_schema", "*"): _tools("`{at}` must be a JSON Schema object."),
    # tool_choice
    ("tool_choice", "needs_tools"): _tool_choice("`tool_choice` needs `tools`."),
    ("tool_choice", "unknown_tool"): _tool_choice(
        "`tool_choice` names {name!r}, which is not in `tools`."
    ),
    ("tool_choice", "*"): TOOL_CHOICE_SHAPE,
    ("tool_choice.type", "*"): TOOL_CHOICE_SHAPE,
    ("tool_choice.name", "*"): TOOL_CHOICE_SHAPE,
    ("tool_choice.disable_parallel_tool_use", "*"): _tool_choice(
        "`tool_choice.disable_parallel_tool_use` must be a boolean."
    ),
    # sampling, metadata, stream
    ("stop_sequences", "*"): STOP_SEQUENCES,
    ("stop_sequences.*", "*"): STOP_SEQUENCES,
    **{("temperature", kind): refusal for kind, refusal in _between("0", "1").items()},
    **{("top_p", kind): refusal for kind, refusal in _between("0", "1").items()},
    ("top_k", "*"): _parameter("`top_k` must be a whole number, 0 or more."),
    ("metadata", "*"): MUST_BE_OBJECT,
    ("stream", "*"): MUST_BE_BOOLEAN,
    # thinking
    ("thinking", "budget_over_max_tokens"): _parameter(
        "`thinking.budget_tokens` must be less than `max_tokens` ({max_tokens}).",
        "thinking.budget_tokens",
    ),
    ("thinking", "*"): THINKING_SHAPE,
    ("thinking.type", "*"): THINKING_SHAPE,
    ("thinking.budget_tokens", "missing"): _parameter(
        "`thinking.budget_tokens` is required when thinking is enabled."
    ),
    ("thinking.budget_tokens", "greater_than_equal"): _parameter(
        f"`thinking.budget_tokens` must be at least {MIN_THINKING_BUDGET}."
    ),
    ("thinking.budget_tokens", "*"): _parameter("`thinking.budget_tokens` must be a whole number."),
}


def refusal_for(invalid: ValidationError) -> InvalidRequest:
    """The error to refuse a Messages request with: the first refused field's."""
    return refusal_from(invalid, REFUSALS, _RANK)
