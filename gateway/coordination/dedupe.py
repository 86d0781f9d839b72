"""In-flight dedupe: concurrent, byte-identical non-streaming requests share one generation.

`X-Mortar-Dedupe: in-flight` needs a non-streaming request and an `Idempotency-Key`
(1 to 128 letters, digits, `.`, `_`, `-`, `:`), scoped to the tenant and combined with the exact
request and its optimization / session headers. The first request to claim the key is the
`leader` and generates; requests with the same key and the same fingerprint while it runs are
`shared`: they wait for the leader's answer and return it (with the leader's completion id).
The same key with a different request while one runs is refused with 409. Nothing is kept
after completion: the claim is released as the leader answers, so the next request leads anew.

The claim is a backplane key set if absent (on Redis, `SET NX` — every worker sees it); the
answer is handed over in a short-lived key, announced to every worker on a broadcast channel,
where the waiting requests pick it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from dataclasses import dataclass

import orjson
from django.http import HttpResponse

from core.backplane import Backplane, backplane
from core.errors import BackendUnavailable, InvalidParameter
from core.http.envelopes import Envelope
from core.http.requests import ApiRequest
from core.loops import PerLoop
from gateway.errors import IdempotencyConflict, UpstreamError

logger = logging.getLogger(__name__)

IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
CLAIM_SECONDS = 900  # longer than any generation; a crashed leader's claim expires
ANSWER_SECONDS = 60  # long enough for every waiter to pick the answer up
ANSWERED_CHANNEL = "dedupe-answered"  # a leader's id, once its answer is kept
LOOK_AGAIN_SECONDS = 1.0  # a waiter looks for the answer this often, should a message be lost


@dataclass(frozen=True)
class DedupeRequest:
    key: str
    fingerprint: str


def read_dedupe_request(
    request: ApiRequest, body: bytes, *, streaming: bool
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
    _claim_value: bytes
    _board: InFlightBoard

    async def answer(self, response: HttpResponse) -> None:
        await self._board.answer(
            self,
            Answer(response.status_code, response.content, response.get("Content-Type", "")),
        )

    async def abandon(self, envelope: Envelope) -> None:
        """The leader could not finish: waiters get an error (in the route's envelope) rather
        than waiting forever."""
        error = UpstreamError("The shared generation this request waited for was cancelled.")
        await self._board.answer(
            self, Answer(error.status, orjson.dumps(envelope.body(error)), "application/json")
        )

    async def wait(self) -> Answer:
        """The leader's answer; the caller bounds the wait with `asyncio.timeout`."""
        return await self._board.wait(self)


class InFlightBoard:
    """Claims and answers, on the backplane."""

    def __init__(self, plane: Backplane | None = None) -> None:
        self._backplane = plane or backplane()
        self._waiting: dict[str, set[asyncio.Event]] = {}  # leader id: its waiters' flags
        self._backplane.on(ANSWERED_CHANNEL, self._on_answered)

    async def claim(self, organization_id: int, request: DedupeRequest, run_id: str) -> Claim:
        claim_key = f"dedupe:{organization_id}:{request.key}"
        value = f"{request.fingerprint} {run_id}".encode()
        while True:
            if await self._backplane.set_if_absent(claim_key, value, CLAIM_SECONDS):
                return Claim("leader", run_id, claim_key, value, self)
            held = await self._backplane.get(claim_key)
            if held is not None:
                break  # else released between our set and get: try again
        fingerprint, _, leader_id = held.decode().partition(" ")
        if fingerprint != request.fingerprint:
            raise IdempotencyConflict(
                "This `Idempotency-Key` is in use by a different request that is still "
                "running; use a new key for a different request.",
                param="Idempotency-Key",
            )
        return Claim("shared", leader_id, claim_key, held, self)

    async def answer(self, claim: Claim, answer: Answer) -> None:
        plane = self._backplane
        try:
            await plane.set(_answer_key(claim.leader_id), answer.encode(), ANSWER_SECONDS)
            await plane.delete_if_equal(claim._claim_key, claim._claim_value)
            await plane.publish(ANSWERED_CHANNEL, claim.leader_id)
        except BackendUnavailable:
            # The leader's own answer stands; the requests sharing it time out (a 504), and
            # the claim expires after CLAIM_SECONDS.
            logger.warning(
                "dedupe: Redis went away; the answer to %s is not shared", claim.leader_id
            )

    async def wait(self, claim: Claim) -> Answer:
        plane = self._backplane
        answered = asyncio.Event()
        waiting = self._waiting.setdefault(claim.leader_id, set())
        waiting.add(answered)
        try:
            # Listen first, then look: an answer given in between is not missed.
            await plane.start()
            while True:
                raw = await plane.get(_answer_key(claim.leader_id))
                if raw is not None:
                    return Answer.decode(raw)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(answered.wait(), LOOK_AGAIN_SECONDS)
        finally:
            waiting.discard(answered)
            if not waiting:
                self._waiting.pop(claim.leader_id, None)

    def _on_answered(self, leader_id: str) -> None:
        for answered in self._waiting.get(leader_id, ()):
            answered.set()


def _answer_key(leader_id: str) -> str:
    return f"dedupe-answer:{leader_id}"


in_flight_board = PerLoop(InFlightBoard)
