"""Two runs side by side — typically a run and its re-run — with what differs marked: the reply
text diffed word by word, the tool calls and requests line by line, and the facts (finish
reason, usage, cost, TTFT, duration) compared."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import orjson

from dashboard.selectors.images import body_as_received
from dashboard.selectors.replies import Reply
from dashboard.selectors.runs import body_text, run_detail, run_reply
from telemetry.models import Run

# Words and the spaces between them: a diff of replies in words reads as the reply does.
_WORDS = re.compile(r"\s+|[^\s]+")
# SequenceMatcher is quadratic at worst: replies longer than this (in words and spaces) are
# diffed by line instead, so a page of two long replies still answers at once.
MAX_WORD_DIFF = 20_000
# The facts compared, by the Run field (or ComparedRun property) that holds each.
FACTS = {
    "model": "Model",
    "deployment": "Deployment",
    "status": "Status",
    "http_status": "HTTP status",
    "finish_reason": "Finish reason",
    "prompt_tokens": "Prompt tokens",
    "completion_tokens": "Completion tokens",
    "cached_tokens": "Cached tokens",
    "cost": "Cost",
    "ttft": "TTFT",
    "duration": "Duration",
    "stream": "Stream",
}


@dataclass(frozen=True)
class DiffPiece:
    """A stretch of text both sides share (`same`), or that only one has (`removed`: the
    left's, `added`: the right's)."""

    kind: str
    text: str


@dataclass(frozen=True)
class ComparedRun:
    run: Run
    reply: Reply
    request: str | None  # the request as received, pretty JSON

    @property
    def ttft(self) -> timedelta | None:
        return _between(self.run.accepted_at, self.run.first_token_at)

    @property
    def duration(self) -> timedelta | None:
        return _between(self.run.accepted_at, self.run.finished_at)

    @property
    def tool_calls(self) -> str:
        if not self.reply.tool_calls:
            return ""
        return orjson.dumps(self.reply.tool_calls, option=orjson.OPT_INDENT_2).decode()

    def fact(self, name: str) -> object:
        return getattr(self, name) if name in ("ttft", "duration") else getattr(self.run, name)


@dataclass(frozen=True)
class Comparison:
    left: ComparedRun
    right: ComparedRun
    reply_diff: list[DiffPiece]
    tool_calls_diff: list[DiffPiece]
    request_diff: list[DiffPiece]

    @property
    def same_reply(self) -> bool:
        return self.left.reply.content == self.right.reply.content

    def facts(self) -> list[ComparedFact]:
        return [
            ComparedFact(name, label, self.left.fact(name), self.right.fact(name))
            for name, label in FACTS.items()
        ]


@dataclass(frozen=True)
class ComparedFact:
    name: str
    label: str
    left: object
    right: object

    @property
    def differs(self) -> bool:
        return self.left != self.right


def run_comparison(left_id: str, right_id: str) -> Comparison | None:
    """The two runs compared, or None when either is unknown."""
    left, right = _compared(left_id), _compared(right_id)
    if left is None or right is None:
        return None
    return Comparison(
        left=left,
        right=right,
        reply_diff=words_diff(left.reply.content, right.reply.content),
        tool_calls_diff=lines_diff(left.tool_calls, right.tool_calls),
        request_diff=lines_diff(left.request or "", right.request or ""),
    )


def _compared(run_id: str) -> ComparedRun | None:
    run = run_detail(run_id)
    if run is None:
        return None
    return ComparedRun(
        run=run,
        reply=run_reply(run.pk, accepted_at=run.accepted_at),
        request=body_text(body_as_received(run.pk, run.request_body)),
    )


def words_diff(left: str, right: str) -> list[DiffPiece]:
    """The two texts as one, word by word: what both have, what only the left or right has."""
    left_words, right_words = _WORDS.findall(left), _WORDS.findall(right)
    if max(len(left_words), len(right_words)) > MAX_WORD_DIFF:
        return lines_diff(left, right)
    return _diff(left_words, right_words, joiner="")


def lines_diff(left: str, right: str) -> list[DiffPiece]:
    return _diff(left.splitlines(keepends=True), right.splitlines(keepends=True), joiner="")


def _diff(left: list[str], right: list[str], *, joiner: str) -> list[DiffPiece]:
    pieces: list[DiffPiece] = []
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pieces.append(DiffPiece("same", joiner.join(left[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(DiffPiece("removed", joiner.join(left[i1:i2])))
        if j2 > j1:
            pieces.append(DiffPiece("added", joiner.join(right[j1:j2])))
    return pieces


def _between(start: datetime | None, end: datetime | None) -> timedelta | None:
    return end - start if start and end else None
