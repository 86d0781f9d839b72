"""The one table from a field the request schema refused to Mortar's error: code, param, message.

A pydantic error names the field by its `loc` (`("messages", 0, "message:user", "content")`)
and the failure by its `type` (`string_type`, `too_long`, …). The field's path is its `loc`
without the union tags (`request.py` writes those `kind:name`) and with list indexes as `*`:
`messages.*.content`. `REFUSALS` maps (path, type) — or (path, `*`) for any type — to the
refusal; its message and param are `str.format` templates given the list indexes of the `loc`
as `{0}`, `{1}`, the blamed param as `{at}`, the refused value as `{input}`, and the error's
context (`{max_length}`, `{name}`, …).

When several fields are wrong, the first in `PRECEDENCE` is reported (within one field, the
first error pydantic found: messages in order, a message's fields in declared order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from core.errors import InvalidParameter, InvalidRequest
from gateway.contract.messages import MAX_TOOL_CALLS
from gateway.contract.request import MAX_STOP_SEQUENCES
from gateway.errors import InvalidImage, InvalidRole, InvalidToolChoice, InvalidTools

# The request's fields in the order they are checked.
PRECEDENCE = (
    "model",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "messages",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "stop",
    "seed",
    "logprobs",
    "top_logprobs",
    "response_format",
)
_RANK = {field: rank for rank, field in enumerate(PRECEDENCE)}


@dataclass(frozen=True)
class Refusal:
    error: type[InvalidRequest]
    message: str
    param: str = "{at}"


def _parameter(message: str, param: str = "{at}") -> Refusal:
    return Refusal(InvalidParameter, message, param)


def _tools(message: str, param: str = "{at}") -> Refusal:
    return Refusal(InvalidTools, message, param)


def _tool_choice(message: str) -> Refusal:
    return Refusal(InvalidToolChoice, message, "tool_choice")


NOT_A_TOOL = _tools('`tools[{0}]` must be {{"type": "function", "function": {{…}}}}.', "tools[{0}]")
TOOL_CHOICE_SHAPE = _tool_choice(
    '`tool_choice` must be a string or {{"type": "function", "function": {{"name": …}}}}.'
)
NUMBER = _parameter("`{at}` must be a number.")
MUST_BE_OBJECT = _parameter("`{at}` must be an object.")
MUST_BE_STRING = _parameter("`{at}` must be a string.")
MUST_BE_BOOLEAN = _parameter("`{at}` must be a boolean.")
CONTENT = "`{at}` must be a string or an array of content parts"
STOP = _parameter(
    f"`stop` must be a non-empty string or a list of at most {MAX_STOP_SEQUENCES}.", "stop"
)
POSITIVE = _parameter("`{at}` must be a positive whole number.")
IMAGE_PART = "messages[{0}].content[{1}]"


def _between(low: str, high: str) -> dict[str, Refusal]:
    between = _parameter(f"`{{at}}` must be between {low} and {high}.")
    return {"greater_than_equal": between, "less_than_equal": between, "*": NUMBER}


# (path, error type) -> refusal; "*" is any type the path has no row for.
REFUSALS: dict[tuple[str, str], Refusal] = {
    ("model", "*"): _parameter("`model` must be a non-empty string."),
    # tools
    ("tools", "too_long"): _tools("`tools` holds at most {max_length} tools."),
    ("tools", "tool_name_repeated"): _tools(
        "`tools[{index}].function.name` repeats {name!r}; tool names must differ.",
        "tools[{index}].function.name",
    ),
    ("tools", "*"): _tools("`tools` must be an array."),
    ("tools.*", "*"): NOT_A_TOOL,
    ("tools.*.type", "*"): NOT_A_TOOL,
    ("tools.*.function", "*"): _tools("`{at}` must be an object."),
    ("tools.*.function.name", "*"): _tools(
        "`{at}` must be 1 to 64 letters, digits, underscores or dashes."
    ),
    ("tools.*.function.description", "*"): _tools("`{at}` must be a string."),
    ("tools.*.function.parameters", "*"): _tools("`{at}` must be a JSON Schema object."),
    ("tools.*.function.strict", "*"): _tools("`{at}` must be a boolean."),
    # tool_choice: a mode (a string), or a named function (anything else)
    ("tool_choice", "needs_tools"): _tool_choice("`tool_choice` needs `tools`."),
    ("tool_choice", "unknown_function"): _tool_choice(
        "`tool_choice` names {name!r}, which is not in `tools`."
    ),
    ("tool_choice", "literal_error"): _tool_choice(
        "`tool_choice` must be none, auto, required or name a function."
    ),
    ("tool_choice", "*"): TOOL_CHOICE_SHAPE,
    ("tool_choice.type", "*"): TOOL_CHOICE_SHAPE,
    ("tool_choice.function", "*"): TOOL_CHOICE_SHAPE,
    ("tool_choice.function.name", "*"): TOOL_CHOICE_SHAPE,
    ("parallel_tool_calls", "needs_tools"): _parameter("`parallel_tool_calls` needs `tools`."),
    ("parallel_tool_calls", "*"): MUST_BE_BOOLEAN,
    ("stream", "*"): MUST_BE_BOOLEAN,
    # messages
    ("messages", "missing"): _parameter("`messages` is required."),
    ("messages", "too_short"): _parameter("`messages` must hold at least one message."),
    ("messages", "too_long"): _parameter(
        "`messages` holds {actual_length} messages; at most {max_length} are allowed."
    ),
    ("messages", "*"): _parameter("`messages` must be an array."),
    ("messages.*", "union_tag_not_found"): _parameter("`{at}.role` must be a string.", "{at}.role"),
    ("messages.*", "union_tag_invalid"): Refusal(
        InvalidRole,
        "`{at}.role` is {input[role]!r}; use system, user, assistant or tool.",
        "{at}.role",
    ),
    ("messages.*", "*"): MUST_BE_OBJECT,
    ("messages.*.tool_calls", "assistant_only"): _parameter(
        "`{at}` is only allowed on assistant messages."
    ),
    ("messages.*.tool_calls", "*"): _parameter(
        f"`{{at}}` must be an array of at most {MAX_TOOL_CALLS} tool calls."
    ),
    ("messages.*.tool_calls.*", "*"): MUST_BE_OBJECT,
    ("messages.*.tool_calls.*.id", "*"): _parameter("`{at}` must be a non-empty string."),
    ("messages.*.tool_calls.*.type", "*"): _parameter("`{at}` must be `function`."),
    ("messages.*.tool_calls.*.function", "*"): MUST_BE_OBJECT,
    ("messages.*.tool_calls.*.function.name", "*"): MUST_BE_STRING,
    ("messages.*.tool_calls.*.function.arguments", "*"): MUST_BE_STRING,
    ("messages.*.content", "missing"): _parameter(
        CONTENT + "; only an assistant message with `tool_calls` may leave it out."
    ),
    ("messages.*.content", "*"): _parameter(CONTENT + "."),
    ("messages.*.content.*", "*"): _parameter(
        "`{at}` must be a content part object with a string `type`."
    ),
    ("messages.*.content.*.text", "*"): MUST_BE_STRING,
    # An image part's shape: refused whatever the model, at the part (its data: `images.py`).
    ("messages.*.content.*.image_url", "*"): Refusal(
        InvalidImage,
        "`{at}` must be an object holding the image's data URL: "
        '{{"url": "data:image/png;base64,…"}}.',
        IMAGE_PART,
    ),
    ("messages.*.content.*.image_url.url", "*"): Refusal(
        InvalidImage, "`{at}` must be a string: the image's data URL.", IMAGE_PART
    ),
    ("messages.*.tool_call_id", "*"): _parameter(
        "`{at}` must name the call this tool message answers."
    ),
    # stream options, output caps
    ("stream_options", "*"): MUST_BE_OBJECT,
    ("stream_options.include_usage", "*"): MUST_BE_BOOLEAN,
    ("max_tokens", "*"): POSITIVE,
    ("max_completion_tokens", "*"): POSITIVE,
    # sampling
    **{("temperature", kind): refusal for kind, refusal in _between("0", "2").items()},
    **{("top_p", kind): refusal for kind, refusal in _between("0", "1").items()},
    **{("presence_penalty", kind): refusal for kind, refusal in _between("-2", "2").items()},
    **{("frequency_penalty", kind): refusal for kind, refusal in _between("-2", "2").items()},
    ("n", "*"): _parameter("`n` must be 1: Mortar returns exactly one choice."),
    ("stop", "*"): STOP,
    ("stop.*", "*"): STOP,
    ("seed", "*"): _parameter("`seed` must be an integer."),
    ("logprobs", "*"): MUST_BE_BOOLEAN,
    ("top_logprobs", "*"): _parameter("`top_logprobs` must be a whole number from 0 to 20."),
    ("response_format", "*"): _parameter(
        "`response_format` must be an object with a string `type`.", "response_format"
    ),
    ("response_format.type", "*"): _parameter(
        "`response_format` must be an object with a string `type`.", "response_format"
    ),
}


def refusal_for(invalid: ValidationError) -> InvalidRequest:
    """The error to refuse the request with: the first refused field's, from `REFUSALS`."""
    return refusal_from(invalid, REFUSALS, _RANK)


def refusal_from(
    invalid: ValidationError,
    refusals: dict[tuple[str, str], Refusal],
    rank: dict[str, int],
) -> InvalidRequest:
    """The refusal of the first refused field (by its top-level field's `rank`), from a table
    written like `REFUSALS` (the Messages route has its own:
    `gateway.surfaces.messages.refusals`)."""

    def first(error: ErrorDetails) -> int:
        loc = error["loc"]
        return rank.get(str(loc[0]), len(rank)) if loc else -1

    return _refuse(min(invalid.errors(include_url=False), key=first), refusals)


def _refuse(error: ErrorDetails, refusals: dict[tuple[str, str], Refusal]) -> InvalidRequest:
    fields = [part for part in error["loc"] if not (isinstance(part, str) and ":" in part)]
    indexes = [part for part in fields if isinstance(part, int)]
    path = ".".join("*" if isinstance(part, int) else part for part in fields)
    kind = _kind(error)
    refusal = refusals.get((path, kind)) or refusals.get((path, "*"))
    values: dict[str, Any] = {
        **error.get("ctx", {}),
        "at": _param(fields),
        "input": error["input"],
    }
    if refusal is None:  # a field the table misses: still a clear 400, never a 500
        at = values["at"]
        where = f"`{at}`" if at else "The request body"
        return InvalidParameter(f"{where}: {error['msg']}.", param=at or None)
    return refusal.error(
        refusal.message.format(*indexes, **values), param=refusal.param.format(*indexes, **values)
    )


def _kind(error: ErrorDetails) -> str:
    """The error's type, read as the request's rules read it."""
    if error["input"] is None:
        return "missing"  # a field set to null counts as absent
    if error["type"] == "union_tag_not_found" and not isinstance(error["input"], dict):
        return "model_type"  # no tag to read from what is not an object: it is not one
    return error["type"]


def _param(fields: list[int | str]) -> str:
    """`messages[0].content[1].text` for ("messages", 0, "content", 1, "text")."""
    param = ""
    for part in fields:
        if isinstance(part, int):
            param += f"[{part}]"
        else:
            param += f".{part}" if param else part
    return param
