"""What a deployment's extra request fields may be: names a model server reads beyond OpenAI's.

vLLM and servers like it take sampling and decoding fields OpenAI's API has no place for
(`top_k`, `min_p`, `repetition_penalty`, `structured_outputs`, `guided_json`, …). Mortar does not
know them, so it cannot check them: a deployment lists the ones its servers take, and those are
forwarded as the client sent them. A name Mortar reads or forwards itself (`model`, `messages`,
`max_tokens`, `stream`, the sampling fields, …) cannot be listed: what Mortar decided for those
must not be overwritten by the client's value. The config file and the admin both ask here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.contract.request import ChatCompletionRequest

MAX_EXTRA_FIELDS = 32
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# Every field of the chat request Mortar declares: it reads, checks or forwards each itself.
MORTAR_FIELDS = frozenset(ChatCompletionRequest.__required_keys__) | frozenset(
    ChatCompletionRequest.__optional_keys__
)


def extra_fields_problems(names: Sequence[object]) -> list[str]:
    """What is wrong with `names` as a deployment's extra fields; empty when nothing is."""
    problems = []
    if len(names) > MAX_EXTRA_FIELDS:
        problems.append(f"at most {MAX_EXTRA_FIELDS} extra fields")
    for name in names:
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"{name!r} is not a field name (letters, digits and _, up to 64)")
        elif name in MORTAR_FIELDS:
            problems.append(f"{name!r} is a field Mortar reads and forwards itself")
    if len(set(map(str, names))) != len(names):
        problems.append("a field is listed twice")
    return problems
