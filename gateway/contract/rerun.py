"""`POST /v1/chat/completions/runs/{run_id}/rerun`, declared for /v1/openapi.json.

The body holds overrides: fields of the chat-completions request (`request.py`) that replace the
stored request's own. They are validated where every body is, once merged into the stored
request (`gateway.reruns`), so a re-run accepts exactly what `POST /v1/chat/completions` does.
"""

from __future__ import annotations

from typing import Any

from core.http.openapi import error_responses, json_content
from gateway.contract.docs import CHAT_COMPLETION_DOCS
from gateway.contract.response import ChatCompletion

RERUN_EXAMPLES: dict[str, dict[str, Any]] = {
    "as_it_was": {"summary": "The stored request, as it was", "value": {}},
    "another_model": {
        "summary": "Another model, not streamed",
        "value": {"model": "Qwen/Qwen2.5-7B-Instruct", "stream": False},
    },
    "edited": {
        "summary": "Other messages and sampling",
        "value": {
            "messages": [{"role": "user", "content": "What does max_tokens limit? One line."}],
            "temperature": 0.2,
            "max_tokens": 64,
        },
    },
}

RERUN_RESPONSES = {
    200: ChatCompletion,
    **error_responses(400, 401, 402, 403, 404, 409, 410, 413, 429, 502, 503, 504, 529),
}

_chat_responses: dict[int, Any] = CHAT_COMPLETION_DOCS["responses"]

RERUN_DOCS: dict[str, Any] = {
    "parameters": CHAT_COMPLETION_DOCS["parameters"],
    "requestBody": {
        "required": False,
        "description": "Overrides: any fields of the chat-completions request body "
        "(`ChatCompletionRequest`), each replacing the stored request's own; `null` removes "
        "one. No body, or `{}`, sends the request as it was. The merged request is validated "
        "as `POST /v1/chat/completions` validates a body.",
        "content": json_content(
            {
                "type": "object",
                "additionalProperties": True,
                "description": "Fields of a ChatCompletionRequest, all optional.",
                "properties": {
                    "model": {"type": ["string", "null"]},
                    "messages": {"type": "array", "items": {"type": "object"}},
                    "stream": {"type": ["boolean", "null"]},
                    "temperature": {"type": ["number", "null"]},
                    "max_tokens": {"type": ["integer", "null"]},
                },
            },
            examples=RERUN_EXAMPLES,
        ),
    },
    "responses": {
        **_chat_responses,
        200: {
            **_chat_responses[200],
            "description": "The new run's reply, as `POST /v1/chat/completions` answers: one "
            "`chat.completion` object, or server-sent events. `X-Mortar-Run-Id` is the new run's "
            "id; the stored run records the one it re-ran. (A Messages run, `msg_…`, is re-run "
            "on the Messages route and answers a Message.)",
        },
        410: {
            "description": "No run with that ID for your organization (unknown, purged, or "
            "another organization's): `run_gone`; or the run's request was not kept "
            "(`retention=metadata`, or a body cut at the size limit): `request_not_kept`."
        },
    },
}
