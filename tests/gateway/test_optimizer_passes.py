"""The optimizer's passes: exact outputs, and properties over random JSON and random text."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.optimizer.json_text import compact_fenced_json, compact_json, is_json
from gateway.optimizer.passes import (
    collapse_spaces,
    json_compact,
    json_tool_blocks,
    run_passes,
)

# --- strategies: JSON text rendered with random whitespace, escapes and number spellings ---

JSON_WS = st.text(alphabet=" \t\n\r", max_size=3)
SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
# Characters that make string handling interesting, mixed with any other character.
STRING_CHARS = st.one_of(st.sampled_from(list(' "\\/\t\n\x00{}[]:,é€😀  ```')), st.characters())


def _renderings(char: str) -> list[str]:
    """Every way JSON may spell `char` inside a string."""
    code = ord(char)
    if code > 0xFFFF:
        high, low = divmod(code - 0x10000, 0x400)
        escaped = f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04X}"
    else:
        escaped = f"\\u{code:04x}"
    spellings = [escaped]
    if char in SHORT_ESCAPES:
        spellings.append(SHORT_ESCAPES[char])
    if char not in '"\\' and code >= 0x20:
        spellings.append(char)
    return spellings


@st.composite
def json_strings(draw: st.DrawFn) -> str:
    value = draw(st.text(alphabet=STRING_CHARS, max_size=10))
    return '"' + "".join(draw(st.sampled_from(_renderings(c))) for c in value) + '"'


NUMBERS = st.from_regex(
    r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,8})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)
SCALARS = st.one_of(NUMBERS, json_strings(), st.sampled_from(["true", "false", "null"]))
# Few keys, so objects often repeat one.
KEYS = st.one_of(st.sampled_from(['"a"', '"id"', '"a b"']), json_strings())


@st.composite
def _arrays(draw: st.DrawFn, values: st.SearchStrategy[str]) -> str:
    items = draw(st.lists(values, max_size=5))
    if not items:
        return "[" + draw(JSON_WS) + "]"
    return "[" + ",".join(draw(JSON_WS) + item + draw(JSON_WS) for item in items) + "]"


@st.composite
def _objects(draw: st.DrawFn, values: st.SearchStrategy[str]) -> str:
    pairs = draw(st.lists(st.tuples(KEYS, values), max_size=5))
    if not pairs:
        return "{" + draw(JSON_WS) + "}"
    members = [
        draw(JSON_WS) + key + draw(JSON_WS) + ":" + draw(JSON_WS) + value + draw(JSON_WS)
        for key, value in pairs
    ]
    return "{" + ",".join(members) + "}"


JSON_VALUES = st.recursive(
    SCALARS, lambda children: st.one_of(_arrays(children), _objects(children)), max_leaves=25
)


@st.composite
def json_documents(draw: st.DrawFn) -> str:
    """An object or array, the only JSON texts the passes compact, with outer whitespace."""
    body = draw(st.one_of(_arrays(JSON_VALUES), _objects(JSON_VALUES)))
    return draw(JSON_WS) + body + draw(JSON_WS)


# Python values rendered the way tools print them: indented, sorted or not, ASCII or not.
PY_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(alphabet=STRING_CHARS, max_size=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=25,
)


# --- oracles written independently of the implementation ---


def reference_strip(text: str) -> str:
    """Drop JSON whitespace outside strings, one character at a time."""
    out = []
    in_string = escaped = False
    for char in text:
        if in_string:
            out.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif char not in " \t\n\r":
            out.append(char)
    return "".join(out)


def exact(text: str) -> Any:
    """The JSON value with numbers as written, and every key in order, duplicates included."""
    return json.loads(text, parse_int=str, parse_float=str, object_pairs_hook=list)


def strict_json(text: str) -> bool:
    def refuse(name: str) -> None:
        raise ValueError(name)

    try:
        json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return True


def tool(content: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def calling(*arguments: str) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": a}}
        for i, a in enumerate(arguments)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


# --- json-compact: exact values ---


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[ 1.0 , 1e3 ,1E+2, 2.50e-07 ]", "[1.0,1e3,1E+2,2.50e-07]", id="floats"),
        pytest.param("[ -0, -0.0, 0 ]", "[-0,-0.0,0]", id="negative-zero"),
        pytest.param(
            '{ "big" : 123456789012345678901234567890 ,\n "neg": -98765432109876543210 }',
            '{"big":123456789012345678901234567890,"neg":-98765432109876543210}',
            id="big-ints",
        ),
        pytest.param("[ 1e999, -1e999 ]", "[1e999,-1e999]", id="overflowing-exponent"),
        pytest.param(
            '[ "héllo wörld", "日本語", "😀 ok" ]', '["héllo wörld","日本語","😀 ok"]', id="unicode"
        ),
        pytest.param(
            '[ "\\u00e9", "\\ud83d\\ude00", "\\/" ]',
            '["\\u00e9","\\ud83d\\ude00","\\/"]',
            id="escapes-kept-as-written",
        ),
        pytest.param('[ "\\ud800" ]', '["\\ud800"]', id="lone-surrogate-escape"),
        pytest.param(
            '{ "q" : "say \\"hi  there\\" , ok" ,\n  "p" : "a\\\\" , "r": "\\\\\\" x" }',
            '{"q":"say \\"hi  there\\" , ok","p":"a\\\\","r":"\\\\\\" x"}',
            id="escaped-quotes-and-backslashes-with-spaces",
        ),
        pytest.param('{ "a" : 1 , "b" : 2 , "a" : 3 }', '{"a":1,"b":2,"a":3}', id="duplicate-keys"),
        pytest.param('{\n  "z": 1,\n  "a": 2\n}', '{"z":1,"a":2}', id="key-order"),
        pytest.param("\r\n\t [ ] \n", "[]", id="outer-whitespace"),
        pytest.param("{ }", "{}", id="empty-object"),
        pytest.param('{"a":[1,{"b":null}]}', '{"a":[1,{"b":null}]}', id="already-compact"),
    ],
)
def test_json_compact_keeps_every_token_as_written(text: str, expected: str) -> None:
    assert compact_json(text) == expected
    assert exact(expected) == exact(text)


def test_duplicate_keys_are_all_kept_in_order() -> None:
    compact = compact_json('{ "a": 1, "a": 2, "b": 0, "a": 3 }')

    assert compact is not None
    assert exact(compact) == [("a", "1"), ("a", "2"), ("b", "0"), ("a", "3")]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"a": 1,}', id="trailing-comma"),
        pytest.param("{'a': 1}", id="single-quotes"),
        pytest.param("[1, NaN, 2]", id="nan"),
        pytest.param('{"a": Infinity}', id="infinity"),
        pytest.param('{"a": -Infinity}', id="minus-infinity"),
        pytest.param('{"a": 01}', id="leading-zero"),
        pytest.param('{"a": "tab\there"}', id="raw-control-character"),
        pytest.param('Result: {"a": 1}', id="text-before"),
        pytest.param('{"a": 1}\nDone.', id="text-after"),
        pytest.param('{"a": 1} {"b": 2}', id="two-documents"),
        pytest.param("[" * 5000 + "]" * 5000, id="deeper-than-any-parser"),
        pytest.param("", id="empty"),
        pytest.param("   ", id="only-whitespace"),
    ],
)
def test_json_compact_leaves_anything_that_is_not_json_untouched(text: str) -> None:
    assert compact_json(text) is None
    message = tool(text)

    messages, changed = json_compact([message])

    assert changed == 0
    assert messages[0] is message


@pytest.mark.parametrize("text", [" 42 ", '  "a  b"\n', "true\n", "null", " -0.0 "])
def test_json_compact_leaves_bare_scalars_untouched(text: str) -> None:
    assert is_json(text)
    assert compact_json(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true story", False),
        ("-- header --", False),
        ("Found 3 results", False),
        ("null\n", True),
        ('"quoted"', True),
        ("[1e999]", True),
    ],
)
def test_is_json_knows_prose_from_json(text: str, expected: bool) -> None:
    assert is_json(text) is expected


def test_json_compact_rewrites_only_tool_results_and_tool_call_arguments() -> None:
    pretty = '{\n  "city": "Paris",\n  "days": 3\n}'
    messages = [
        {"role": "system", "content": pretty},
        {"role": "user", "content": pretty},
        {**calling(pretty, "{}", "not json"), "content": pretty},
        tool(pretty, "call_0"),
        tool("The weather is  fine.", "call_1"),
    ]
    before = copy.deepcopy(messages)

    result, changed = json_compact(messages)

    assert changed == 2
    assert messages == before
    assert result[0] is messages[0]
    assert result[1] is messages[1]
    assert result[2]["content"] == pretty
    assert [c["function"]["arguments"] for c in result[2]["tool_calls"]] == [
        '{"city":"Paris","days":3}',
        "{}",
        "not json",
    ]
    assert [c["id"] for c in result[2]["tool_calls"]] == ["call_0", "call_1", "call_2"]
    assert result[3] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": '{"city":"Paris","days":3}',
    }
    assert result[4] is messages[4]


# --- json-compact: properties ---


@given(json_documents())
def test_json_compact_round_trips_to_the_same_value(text: str) -> None:
    compact = compact_json(text)

    assert compact is not None
    assert json.loads(compact) == json.loads(text)
    assert exact(compact) == exact(text)
    assert compact == reference_strip(text)


@given(json_documents())
def test_json_compact_is_idempotent(text: str) -> None:
    compact = compact_json(text)

    assert compact is not None
    assert compact_json(compact) == compact


@given(PY_VALUES, st.sampled_from([None, 0, 2, 4, "\t"]), st.booleans(), st.booleans())
def test_json_compact_round_trips_what_tools_print(
    value: Any, indent: int | str | None, ascii_only: bool, sort_keys: bool
) -> None:
    text = json.dumps([value], indent=indent, ensure_ascii=ascii_only, sort_keys=sort_keys)

    compact = compact_json(text)

    assert compact is not None
    assert json.loads(compact) == [value]
    assert compact == json.dumps(
        [value], separators=(",", ":"), ensure_ascii=ascii_only, sort_keys=sort_keys
    )


@given(SCALARS, JSON_WS, JSON_WS)
def test_json_compact_never_touches_a_bare_scalar(scalar: str, before: str, after: str) -> None:
    assert compact_json(before + scalar + after) is None


@given(st.text(), json_documents(), st.text())
def test_json_compact_never_touches_text_that_is_not_json(
    prefix: str, document: str, suffix: str
) -> None:
    text = prefix + document + suffix
    assume(not strict_json(text))
    messages = [tool(text), calling(text)]

    result, changed = json_compact(messages)

    assert changed == 0
    assert result == messages
    assert result[0] is messages[0]


@given(st.lists(json_documents(), min_size=1, max_size=4), st.text(max_size=30))
def test_json_compact_pass_round_trips_and_is_idempotent(documents: list[str], prose: str) -> None:
    messages = [
        {"role": "user", "content": prose},
        calling(*documents),
        *(tool(document, f"call_{i}") for i, document in enumerate(documents)),
    ]
    before = copy.deepcopy(messages)

    once, changed = json_compact(messages)
    twice, changed_again = json_compact(once)

    assert messages == before
    assert once[0] is messages[0]
    arguments = [c["function"]["arguments"] for c in once[1]["tool_calls"]]
    contents = [m["content"] for m in once[2:]]
    for document, argument, content in zip(documents, arguments, contents, strict=True):
        assert exact(argument) == exact(document)
        assert content == argument == reference_strip(document)
    assert changed == 2 * sum(reference_strip(d) != d for d in documents)
    assert changed_again == 0
    assert twice == once


# --- json-tool-blocks ---


def test_json_tool_blocks_compacts_json_fences_and_keeps_everything_else() -> None:
    content = (
        "Found 2 users:\n"
        "```json\n"
        '{\n  "id": 1,\n  "name": "Ada  Lovelace",\n  "score": 1.0\n}\n'
        "```\n"
        "And a config:\n"
        "``` JSON \r\n"
        "[ 1e3,\r\n  -0 ]\r\n"
        "```\r\n"
        "Not JSON:\n"
        "```json\n"
        "{ id: 1 }\n"
        "```\n"
        "```python\n"
        "x = { 'a' : 1 }\n"
        "```\n"
    )

    result, changed = json_tool_blocks([tool(content)])

    assert changed == 2
    assert result[0]["content"] == (
        "Found 2 users:\n"
        "```json\n"
        '{"id":1,"name":"Ada  Lovelace","score":1.0}\n'
        "```\n"
        "And a config:\n"
        "``` JSON \r\n"
        "[1e3,-0]\r\n"
        "```\r\n"
        "Not JSON:\n"
        "```json\n"
        "{ id: 1 }\n"
        "```\n"
        "```python\n"
        "x = { 'a' : 1 }\n"
        "```\n"
    )


def test_json_tool_blocks_leaves_json_results_user_text_and_unclosed_fences_alone() -> None:
    fenced = 'See:\n```json\n{ "a": 1 }\n```\n'
    messages = [
        tool(json.dumps({"log": fenced})),
        {"role": "user", "content": fenced},
        tool('```json\n{ "a": 1 }\n'),
        tool('Inline ```json { "a": 1 }``` is not a fence.'),
    ]

    result, changed = json_tool_blocks(messages)

    assert changed == 0
    assert all(after is before for after, before in zip(result, messages, strict=True))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(
            '   ```json\n{ "a": 1 }\n   ```\n',
            '   ```json\n{"a":1}\n   ```\n',
            id="indented-three-spaces",
        ),
        pytest.param(
            '    ```json\n{ "a": 1 }\n```\n', '    ```json\n{ "a": 1 }\n```\n', id="indented-four"
        ),
        pytest.param("x\n```json\n```\n", "x\n```json\n```\n", id="empty-body"),
        pytest.param(
            "```json\n[ 1 ]\n```\n```json\n[ 2 ]\n",
            "```json\n[1]\n```\n```json\n[ 2 ]\n",
            id="second-fence-unclosed",
        ),
        pytest.param(
            "```json\n[ 1 ]\n``` trailing\n```\n",
            "```json\n[ 1 ]\n``` trailing\n```\n",
            id="close-must-be-alone",
        ),
        pytest.param("```json\n[ 1 ]\n```", "```json\n[1]\n```", id="close-at-end-of-text"),
        pytest.param("```jsonc\n[ 1 ]\n```\n", "```jsonc\n[ 1 ]\n```\n", id="other-language"),
    ],
)
def test_json_tool_blocks_finds_fences_as_commonmark_does(content: str, expected: str) -> None:
    result, changed = json_tool_blocks([tool(content)])

    assert result[0]["content"] == expected
    assert changed == int(expected != content)


FENCE_FREE_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="`", blacklist_categories=["Cs"]), max_size=40
)


@given(FENCE_FREE_TEXT, json_documents(), FENCE_FREE_TEXT)
def test_json_tool_blocks_compacts_the_block_and_nothing_around_it(
    before: str, document: str, after: str
) -> None:
    prefix = before + "\n" if before else ""
    content = prefix + "```json\n" + document + "\n```" + ("\n" + after if after else "")
    assume(not strict_json(content))
    body = document + "\n"
    line_break = "\r\n" if body.endswith("\r\n") else "\n"

    result, changed = json_tool_blocks([tool(content)])
    again, changed_again = json_tool_blocks(result)

    block = "```json\n" + reference_strip(document) + line_break + "```"
    expected = prefix + block + ("\n" + after if after else "")
    assert result[0]["content"] == expected
    assert changed == int(expected != content)
    assert changed_again == 0
    assert again[0]["content"] == expected


@given(FENCE_FREE_TEXT, FENCE_FREE_TEXT)
def test_json_tool_blocks_never_touches_blocks_that_are_not_json(before: str, body: str) -> None:
    assume(not strict_json(body))
    content = before + "\n```json\n" + body + "\n```\n"

    assert compact_fenced_json(content) == (content, 0)


# --- collapse-spaces ---


def test_collapse_spaces_collapses_alignment_inside_lines_only() -> None:
    table = (
        "NAME        READY   STATUS    AGE\n"
        "web-1       1/1     Running   3d   \n"
        "    indented  line\n"
        "tab\t  then  spaces\r\n"
        "```json\n"
        '{"name": "Ada  Lovelace"}\n'
        "```\n"
        "last    cell"
    )

    result, changed = collapse_spaces([tool(table)])

    assert changed == 1
    assert result[0]["content"] == (
        "NAME READY STATUS AGE\n"
        "web-1 1/1 Running 3d   \n"
        "    indented line\n"
        "tab\t then spaces\r\n"
        "```json\n"
        '{"name": "Ada  Lovelace"}\n'
        "```\n"
        "last cell"
    )


def test_collapse_spaces_never_touches_json_results_or_other_roles() -> None:
    messages = [
        tool('{"name": "Ada  Lovelace",   "id": 1}'),
        tool('"two  spaces"'),
        {"role": "user", "content": "a    b"},
        {"role": "assistant", "content": "a    b"},
        tool("single spaces only"),
    ]

    result, changed = collapse_spaces(messages)

    assert changed == 0
    assert all(after is before for after, before in zip(result, messages, strict=True))


@given(st.text(alphabet=st.sampled_from(list("ab \t\n\r|-")), max_size=60))
def test_collapse_spaces_removes_only_alignment_spaces(text: str) -> None:
    assume(not strict_json(text))

    result, _ = collapse_spaces([tool(text)])
    collapsed = result[0]["content"]

    assert collapsed.replace(" ", "") == text.replace(" ", "")
    assert re.search(r"[^ \r\n]  +[^ \r\n]", collapsed) is None
    for line, original in zip(
        re.split(r"\r?\n|\r", collapsed), re.split(r"\r?\n|\r", text), strict=True
    ):
        assert len(line) - len(line.lstrip(" ")) == len(original) - len(original.lstrip(" "))
        assert len(line) - len(line.rstrip(" ")) == len(original) - len(original.rstrip(" "))
    assert collapse_spaces(result) == (result, 0)


# --- passes together ---


def test_passes_run_in_pass_order_whatever_order_they_are_named_in() -> None:
    content = 'id    name\n1     x\n```json\n{ "a":   1 }\n```\n'

    result, counts = run_passes([tool(content)], ["collapse-spaces", "json-tool-blocks"])

    assert counts == (("json-tool-blocks", 1), ("collapse-spaces", 1))
    assert result[0]["content"] == 'id name\n1 x\n```json\n{"a":1}\n```\n'


def test_run_passes_refuses_an_unknown_pass() -> None:
    with pytest.raises(ValueError, match="squash"):
        run_passes([], ["json-compact", "squash"])
