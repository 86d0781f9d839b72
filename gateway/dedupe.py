"""In-flight dedupe: concurrent, byte-identical non-streaming requests share one generation.

Spec, `X-Mortar-Dedupe: in-flight`: it needs a non-streaming request and an `Idempotency-Key`
(1 to 128 letters, digits, `.`, `_`, `-`, `:`), scoped to the tenant and combined with the exact
request and its optimization / session headers. The first request to claim the key is the
`leader` and generates; requests with the same key and the same fingerprint while it runs are
`shared`: they wait for the leader's answer and return it (with the leader's completion id).
The same key with a different request while one runs is refused with 409. Nothing is kept
after completion: the claim is released as the leader answers, so the next request leads anew.

Across worker processes the claim is a Redis key (`SET NX`), the answer is handed over in a
short-lived Redis key announced on a channel; on the embedded default, in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from dataclasses import dataclass

import orjson
from django.conf import settings
from django.http import HttpResponse

from gateway.api_request import AnyRequest
from gateway.errors import InvalidParameter, MortarError, UpstreamError

IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
CLAIM_SECONDS = 900  # longer than any generation; a crashed leader's claim expires
ANSWER_SECONDS = 60  # long enough for every waiter to pick the answer up
RELEASE_IF_OURS = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


class IdempotencyConflict(MortarError):
    status = 409
    type = "invalid_request_error"
    code = "idempotency_conflict"


@dataclass(frozen=True)
class DedupeRequest:
    key: str
    fingerprint: str


def read_dedupe_request(
    request: AnyRequest, body: bytes, *, streaming: bool
) -> DedupeRequest | None:
    """Validate `X-Mortar-Dedupe` and `Idempotency-Key`; None when dedupe isn't asked for."""
    mode = request.headers.get("X-Mortar-Dedupe", "").strip().lower()
    if not mode:
        return None
    if mode != "in-flight":
        raise InvalidParameter(
            f"`X-Mortar-Dedupe` has the unknown value {mode!r}; the only one is `in-flight`.",
            param="X-Mortar-Dedupe",
        )
    if streaming:
        raise InvalidParameter(
            "`X-Mortar-Dedupe: in-flight` needs a non-streaming request (`stream: false`).",
            param="stream",
        )
    key = request.headers.get("Idempotency-Key", "")
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidParameter(
            "`X-Mortar-Dedupe: in-flight` needs an `Idempotency-Key` of 1 to 128 letters, "
            "digits, `.`, `_`, `-` or `:`.",
            param="Idempotency-Key",
        )
    fingerprint = hashlib.sha256(body)
    for header in ("X-Mortar-Optimize", "X-Mortar-Session", "X-Mortar-Tool-Select"):
        fingerprint.update(b"\0" + request.headers.get(header, "").encode("latin-1", "replace"))
    return DedupeRequest(key=key, fingerprint=fingerprint.hexdigest())


@dataclass(frozen=True)
class Answer:
    """The leader's response, as shared requests return it."""

    status: int
    body: bytes
    content_type: str

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "status": self.status,
                "body": self.body.decode("utf-8", "replace"),
                "content_type": self.content_type,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> Answer:
        data = orjson.loads(raw)
        return cls(
            status=data["status"], body=data["body"].encode(), content_type=data["content_type"]
        )


@dataclass
class Claim:
    """This request's part: `leader` (generate, then `answer`) or `shared` (`wait`)."""

    role: str
    leader_id: str
    _claim_key: str
    _claim_value: str
    _board: InFlightBoard

    async def answer(self, response: HttpResponse) -> None:
        await self._board.answer(
            self,
            Answer(response.status_code, response.content, response.get("Content-Type", "")),
        )

    async def abandon(self) -> None:
        """The leader could not finish: waiters get an error rather than waiting forever."""
        error = UpstreamError("The shared generation this request waited for was cancelled.")
        await self._board.answer(
            self, Answer(error.status, orjson.dumps(error.envelope()), "application/json")
        )

    async def wait(self) -> Answer:
        """The leader's answer; the caller bounds the wait with `asyncio.timeout`."""
        return await self._board.wait(self)


class InFlightBoard:
    """Claims and answers: in Redis across processes, or in this process."""

    def __init__(self) -> None:
        self._local_claims: dict[str, str] = {}
        self._local_answers: dict[str, asyncio.Future[Answer]] = {}
        self._redis = None

    def _r(self):  # type: ignore[no-untyped-def]
        if self._redis is None:
            import redis.asyncio as redis

            self._redis = redis.from_url(settings.REDIS_URL)
        return self._redis

    def _claim_key(self, organization_id: int, key: str) -> str:
        return f"{settings.REDIS_PREFIX}:dedupe:{organization_id}:{key}"

    def _answer_key(self, leader_id: str) -> str:
        return f"{settings.REDIS_PREFIX}:dedupe-answer:{leader_id}"

    async def claim(self, organization_id: int, request: DedupeRequest, run_id: str) -> Claim:
        claim_key = self._claim_key(organization_id, request.key)
        value = f"{request.fingerprint} {run_id}"
        if settings.REDIS_URL:
            redis = self._r()
            if await redis.set(claim_key, value, nx=True, ex=CLAIM_SECONDS):
                return Claim("leader", run_id, claim_key, value, self)
            held = (await redis.get(claim_key) or b"").decode()
            if not held:  # released between our SET and GET: try once more
                return await self.claim(organization_id, request, run_id)
        else:
            held = self._local_claims.setdefault(claim_key, value)
            if held == value:
                self._local_answers[run_id] = asyncio.get_running_loop().create_future()
                return Claim("leader", run_id, claim_key, value, self)
        fingerprint, _, leader_id = held.partition(" ")
        if fingerprint != request.fingerprint:
            raise IdempotencyConflict(
                "This `Idempotency-Key` is in use by a different request that is still "
                "running; use a new key for a different request.",
                param="Idempotency-Key",
            )
        return Claim("shared", leader_id, claim_key, held, self)

    async def answer(self, claim: Claim, answer: Answer) -> None:
        if settings.REDIS_URL:
            redis = self._r()
            answer_key = self._answer_key(claim.leader_id)
            await redis.set(answer_key, answer.encode(), ex=ANSWER_SECONDS)
            await redis.eval(RELEASE_IF_OURS, 1, claim._claim_key, claim._claim_value)
            await redis.publish(answer_key, b"1")
            return
        if self._local_claims.get(claim._claim_key) == claim._claim_value:
            del self._local_claims[claim._claim_key]
        future = self._local_answers.pop(claim.leader_id, None)
        if future is not None and not future.done():
            future.set_result(answer)

    async def wait(self, claim: Claim) -> Answer:
        if not settings.REDIS_URL:
            future = self._local_answers.get(claim.leader_id)
            if future is None:
                raise UpstreamError("The shared generation ended before its answer was kept.")
            return await asyncio.shield(future)
        redis = self._r()
        answer_key = self._answer_key(claim.leader_id)
        pubsub = redis.pubsub()
        try:
            # Subscribe first, then look: an answer given in between is not missed.
            await pubsub.subscribe(answer_key)
            while True:
                raw = await redis.get(answer_key)
                if raw is not None:
                    return Answer.decode(raw)
                await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()


_boards: dict[asyncio.AbstractEventLoop, InFlightBoard] = {}


def in_flight_board() -> InFlightBoard:
    loop = asyncio.get_running_loop()
    board = _boards.get(loop)
    if board is None:
        board = _boards[loop] = InFlightBoard()
    return board
