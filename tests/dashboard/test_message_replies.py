"""The run page's reply and "Copy as curl" for Messages runs: Anthropic's events and Message
bodies read back as a chat run's are."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Organization
from dashboard.selectors.replies import reply_of
from dashboard.selectors.runs import run_curl
from gateway.generation.reply import Generation
from gateway.surfaces.messages.rendering import MessagesRendering
from telemetry.models import Run, RunChunk


def rendering() -> MessagesRendering:
    return MessagesRendering(
        message_id="msg_0123456789abcdef01234567",
        created=1,
        model="m",
        prompt_tokens=10,
        stop_sequences=(),
    )


def test_a_streamed_message_reads_back_text_thinking_and_tool_calls() -> None:
    streaming = rendering()
    generation = Generation(finish_reason="tool_calls")
    chunks = [
        *streaming.opening(),
        *streaming.delta({"reasoning_content": "Let me think. "}),
        *streaming.delta({"content": "It caps "}),
        *streaming.delta({"content": "tokens."}),
        *streaming.delta(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_abcdefgh1234",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        ),
        *streaming.delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}),
        streaming.ping,
        *streaming.closing(
            generation, {"prompt_tokens": 10, "completion_tokens": 5}, stopped=False
        ),
    ]
    reply = reply_of(chunks)
    assert (reply.content, reply.reasoning) == ("It caps tokens.", "Let me think. ")
    assert reply.tool_calls == [{"id": "toolu_abcdefgh1234", "name": "f", "arguments": '{"a":1}'}]
    assert reply.finish_reason == "tool_use"
    assert reply.error is None


def test_a_message_body_reads_back_the_same() -> None:
    generation = Generation(finish_reason="stop", content="Whole.")
    generation.reasoning["reasoning_content"] = "Hmm."
    body = rendering().body(generation, {"prompt_tokens": 10, "completion_tokens": 2})
    reply = reply_of([body])
    assert (reply.content, reply.reasoning, reply.finish_reason) == ("Whole.", "Hmm.", "end_turn")


def test_an_error_event_is_the_error_sent() -> None:
    reply = reply_of(
        [b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"boom"}}\n\n']
    )
    assert reply.error == {"type": "api_error", "message": "boom"}


def test_copy_as_curl_sends_a_messages_run_to_the_messages_route() -> None:
    accepted = datetime(2026, 1, 1, tzinfo=UTC)
    message_run = Run(id="msg_0123456789abcdef01234567", request_body=b"{}", accepted_at=accepted)
    chat_run = Run(id="chatcmpl-0123456789abcdef01234567", request_body=b"{}", accepted_at=accepted)
    assert "http://host/v1/messages " in (run_curl(message_run, base_url="http://host/") or "")
    assert "http://host/v1/chat/completions " in (run_curl(chat_run, base_url="http://host/") or "")


@pytest.mark.django_db
def test_the_run_page_shows_a_messages_runs_reply() -> None:
    generation = Generation(finish_reason="stop", content="It caps how many tokens.")
    run = Run.objects.create(
        id="msg_0123456789abcdef01234567",
        organization=Organization.objects.create(name="message-page-org"),
        status=Run.Status.COMPLETED,
        accepted_at=datetime(2030, 1, 1, tzinfo=UTC),
        stream=False,
        request_body=b'{"model": "m", "max_tokens": 10, "messages": []}',
    )
    body = rendering().body(generation, {"prompt_tokens": 10, "completion_tokens": 6})
    RunChunk.objects.create(run=run, seq=0, offset_us=10, data=body)
    client = Client()
    client.force_login(User.objects.create_user("message-page-staff", is_staff=True))

    page = client.get(f"/dashboard/runs/{run.pk}/")

    assert page.status_code == 200
    html = page.content.decode()
    assert '<pre class="reply" id="reply-text">It caps how many tokens.</pre>' in html
    assert "/v1/messages" in html  # Copy as curl sends it to the route it came in on
