"""The mock's behaviour, set per request by a directive in the conversation's text (a message's
content, or the text parts of content parts, as beside an image), e.g.
`[mock fault=drop chunks=10 delay_ms=50]`, or for every request by `POST /_mock/config`:

    fault       none | hang | error500 | error400 | status | drop | runon | garbage |
                garbage_late | reset
    status      the HTTP status `fault=status` answers with (an OpenAI-style error body)
    retry_after the `Retry-After` seconds `fault=status` sends with it (0: no header)
    chunks      content tokens to send (capped by max_tokens, except for fault=runon)
    delay_ms    pause between chunks;   first_delay_ms   pause before the response starts
    reasoning   reasoning tokens before the content (sent as `reasoning_content`); none when
                the request turns thinking off (`chat_template_kwargs.enable_thinking: false`,
                as Qwen3's chat template does on vLLM)
    cached      `prompt_tokens_details.cached_tokens` to report;   usage=0 reports none
    count_delay_ms  pause before answering a token count (config only)
"""

from __future__ import annotations

import re
from typing import Any

DIRECTIVE = re.compile(r"\[mock ([^\]]*)\]")
DEFAULTS: dict[str, Any] = {
    "fault": "none",
    "chunks": 20,
    "delay_ms": 0,
    "first_delay_ms": 0,
    "reasoning": 0,
    "cached": 0,
    "usage": 1,
    "status": 500,
    "retry_after": 0,
    "count_delay_ms": 0,
}


def settings_for(body: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The settings of this request: `defaults`, and what its directives say."""
    settings = dict(defaults)
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, list):  # content parts (images beside text): their text
            content = "\n".join(
                part.get("text") or "" for part in content if isinstance(part, dict)
            )
        if isinstance(content, str):
            for directive in DIRECTIVE.findall(content):
                for pair in directive.split():
                    key, _, value = pair.partition("=")
                    settings[key] = value if key == "fault" else int(value)
    return settings
