"""Ask a model server to count a reply's tokens, when its stream carried no usage.

Some model servers send no usage in a stream (llama-cpp-python's server never does). Mortar's
own count then uses its tokenizer, which need not be the model's, on the messages as sent,
without the chat template — a system prompt the template adds is processed, and billed, by the
model server all the same. A deployment's `usage_count` names the model server's own counting
endpoint, asked once the reply is over (never while the client waits for it):

    vllm              POST /tokenize {"messages", "add_generation_prompt": true} → {"count"}: the
                      server applies the chat template; the reply's text as {"prompt"}, without
                      special tokens
    llama.cpp         POST /apply-template {"messages"} → {"prompt"}; POST /tokenize
                      {"content", "add_special"} → {"tokens"}
    llama-cpp-python  POST /extras/tokenize/count {"input"} → {"count"}: text only, so Mortar
                      renders the conversation with the deployment's `chat_template` (ChatML
                      when none is set), as that server's chat handler does

Each of these is at the server's root, beside the `/v1` of its replica URL, on the replica that
served the reply. A count that fails or takes too long leaves the run on Mortar's estimate.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import jinja2
import jinja2.ext
import orjson
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.errors import UpstreamError
from gateway.models import Deployment
from gateway.upstream.client import ReplicaConfig, client_for

logger = logging.getLogger(__name__)

# The longest a count may take before the run is closed on Mortar's estimate: a run stays open
# (and its budget hold unsettled) until then.
COUNT_TIMEOUT_S = 10.0

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Rendered in place of the model's BOS and EOS tokens, whose text Mortar does not know: each is
# one token to the model server, counted as such.
_BOS, _EOS = "\x00mortar-bos\x00", "\x00mortar-eos\x00"


@dataclass(frozen=True)
class Counted:
    prompt_tokens: int
    completion_tokens: int

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True)
class UsageCounting:
    """How to ask the replica that served a reply to count it."""

    config: ReplicaConfig
    dialect: str  # a `Deployment.UsageCount` other than the estimate
    request: dict[str, Any]  # the chat request as forwarded (model, messages, tools, …)
    chat_template: str

    @classmethod
    def for_deployment(
        cls, deployment: Deployment, replica: str, request: dict[str, Any]
    ) -> UsageCounting | None:
        """How to count on `replica`, or None when the deployment keeps Mortar's estimate."""
        if deployment.usage_count in ("", Deployment.UsageCount.ESTIMATE):
            return None
        return cls(
            config=ReplicaConfig.for_deployment(deployment, replica),
            dialect=deployment.usage_count,
            request=request,
            chat_template=deployment.chat_template,
        )

    @property
    def root(self) -> str:
        """The server's root: the replica URL without its `/v1`."""
        base = self.config.base_url
        return base.removesuffix("/v1")


async def usage_counted(counting: UsageCounting, reply_text: str) -> Counted:
    """The prompt and reply in tokens, as the model server counts them; raise `UpstreamError`
    when it cannot say."""
    try:
        async with asyncio.timeout(COUNT_TIMEOUT_S):
            if counting.dialect == Deployment.UsageCount.VLLM:
                return await _vllm(counting, reply_text)
            if counting.dialect == Deployment.UsageCount.LLAMA_CPP:
                return await _llama_cpp(counting, reply_text)
            if counting.dialect == Deployment.UsageCount.LLAMA_CPP_PYTHON:
                return await _llama_cpp_python(counting, reply_text)
    except TimeoutError:
        raise UpstreamError("The model server did not count the tokens in time.") from None
    except httpx.HTTPError as exc:
        name = exc.__class__.__name__
        raise UpstreamError(f"The model server could not count ({name}).") from None
    raise UpstreamError(f"Unknown counting endpoint {counting.dialect!r}.")


async def _post(counting: UsageCounting, path: str, body: dict[str, Any]) -> dict[str, Any]:
    client = client_for(counting.config)
    response = await client.post(
        f"{counting.root}{path}",
        content=orjson.dumps(body),
        headers={"Content-Type": "application/json"},
    )
    raw = await response.aread()
    if response.status_code != 200:
        raise UpstreamError(f"The model server answered {response.status_code} to {path}.")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamError(f"The model server's {path} answer is not JSON.") from None
    if not isinstance(data, dict):
        raise UpstreamError(f"The model server's {path} answer is not an object.")
    return data


def _count_of(data: dict[str, Any], path: str) -> int:
    count = data.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count
    tokens = data.get("tokens")
    if isinstance(tokens, list):
        return len(tokens)
    raise UpstreamError(f"The model server's {path} answer holds no count.")


async def _vllm(counting: UsageCounting, reply_text: str) -> Counted:
    request = counting.request
    conversation: dict[str, Any] = {
        "model": request.get("model"),
        "messages": request.get("messages"),
        "add_generation_prompt": True,
    }
    for key in ("tools", "chat_template_kwargs"):
        if request.get(key) is not None:
            conversation[key] = request[key]
    prompt = _count_of(await _post(counting, "/tokenize", conversation), "/tokenize")
    completion = 0
    if reply_text:
        reply = {"model": request.get("model"), "prompt": reply_text, "add_special_tokens": False}
        completion = _count_of(await _post(counting, "/tokenize", reply), "/tokenize")
    return Counted(prompt, completion)


async def _llama_cpp(counting: UsageCounting, reply_text: str) -> Counted:
    request = counting.request
    conversation: dict[str, Any] = {"messages": request.get("messages")}
    if request.get("tools") is not None:
        conversation["tools"] = request["tools"]
    applied = await _post(counting, "/apply-template", conversation)
    prompt_text = applied.get("prompt")
    if not isinstance(prompt_text, str):
        raise UpstreamError("The model server's /apply-template answer holds no prompt.")
    # As the server tokenizes a chat prompt: with its special tokens (BOS where the model has
    # one), the template's own special tokens parsed as such.
    prompt = _count_of(
        await _post(
            counting,
            "/tokenize",
            {"content": prompt_text, "add_special": True, "parse_special": True},
        ),
        "/tokenize",
    )
    completion = 0
    if reply_text:
        reply = {"content": reply_text, "add_special": False, "parse_special": False}
        completion = _count_of(await _post(counting, "/tokenize", reply), "/tokenize")
    return Counted(prompt, completion)


async def _llama_cpp_python(counting: UsageCounting, reply_text: str) -> Counted:
    request = counting.request
    model = request.get("model")

    async def count(text: str) -> int:
        path = "/extras/tokenize/count"
        return _count_of(await _post(counting, path, {"model": model, "input": text}), path)

    # That endpoint adds the model's BOS token to any text, as its chat handler does not (the
    # template writes it where it belongs): the count of nothing is that token, or none.
    added = await count("")
    rendered = render_chat_template(counting.chat_template or CHATML, request)
    specials = rendered.count(_BOS) + rendered.count(_EOS)
    text = rendered.replace(_BOS, "").replace(_EOS, "")
    prompt = await count(text) - added + specials
    completion = await count(reply_text) - added if reply_text else 0
    return Counted(max(prompt, 0), max(completion, 0))


def _environment() -> ImmutableSandboxedEnvironment:
    """Jinja as chat templates are written for (Hugging Face's conventions, which
    llama-cpp-python follows), sandboxed."""
    environment = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols],
    )
    environment.filters["tojson"] = _tojson
    return environment


def chat_template_problem(template: str) -> str | None:
    """What makes `template` no Jinja template, or None."""
    try:
        _environment().parse(template)
    except jinja2.TemplateSyntaxError as exc:
        return f"the chat template is not valid Jinja (line {exc.lineno}: {exc.message})"
    return None


def render_chat_template(template: str, request: dict[str, Any]) -> str:
    """The conversation as the model's chat template renders it."""

    def raise_exception(message: str) -> None:
        raise UpstreamError(f"The chat template refused the conversation: {message}")

    try:
        return (
            _environment()
            .from_string(template)
            .render(
                messages=request.get("messages") or [],
                tools=request.get("tools"),
                add_generation_prompt=True,
                bos_token=_BOS,
                eos_token=_EOS,
                raise_exception=raise_exception,
                strftime_now=lambda format: datetime.now().strftime(format),
            )
        )
    except jinja2.TemplateError as exc:
        raise UpstreamError(f"The chat template could not be rendered: {exc}") from None


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """Jinja's `tojson` as chat templates expect it: JSON as Python writes it, not HTML-escaped."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


# Counts under way: each closes its run when it ends; shutdown waits for them.
_pending: set[asyncio.Task[None]] = set()


def count_in_background(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` beside the request, which does not wait for it."""
    task = asyncio.get_running_loop().create_task(work)
    _pending.add(task)
    task.add_done_callback(_pending.discard)


async def usage_counts_finished() -> None:
    """Wait for the counts under way (at shutdown, before the run writer's last flush)."""
    if _pending:
        await asyncio.gather(*_pending, return_exceptions=True)
