"""Anthropic Messages ⇄ OpenAI chat completions, both directions, as pure functions over dicts.

The Messages route forwards to model servers that speak the chat-completions dialect: the request
goes there with `messages_to_chat`, the reply comes back with `completion_to_message` (JSON) or
`MessageStream` (server-sent events, `encode_event`). `chat_to_messages` is the inverse of the
request translation, for the property tests and the docs. No Django, no I/O.

    to_chat.py     Messages request → chat request
    from_chat.py   chat request → Messages request
    reply.py       chat.completion → Message; `stop_reason` and usage, shared with the stream
    stream.py      chat.completion.chunk → Anthropic stream events
    tool_calls.py  tool-call arguments ⇄ `input`, call ids → `toolu_` ids
"""

from gateway.surfaces.messages.translate.from_chat import chat_to_messages
from gateway.surfaces.messages.translate.reply import chat_stop_reason, completion_to_message
from gateway.surfaces.messages.translate.stream import MessageStream, encode_event
from gateway.surfaces.messages.translate.to_chat import messages_to_chat

__all__ = [
    "MessageStream",
    "chat_stop_reason",
    "chat_to_messages",
    "completion_to_message",
    "encode_event",
    "messages_to_chat",
]
