"""Generations in flight, across worker processes, and the Stop button behind them.

Each worker keeps its own running generations in memory: registering one and forgetting it
cost nothing on the request path (no Redis command per request). A stop is answered by the
worker that runs the generation:

- a stop for a generation of this worker is decided here, at once;
- otherwise it is announced to every worker (`core.backplane`: on Redis one PUBLISH, which
  returns how many workers heard it); each answers on a reply list whether it stopped it,
  and the asking worker waits for a yes, or for every answer to be no (`STOP_ANSWER_SECONDS`
  at most, should a worker never answer).

A worker stops a generation only if it runs for the caller's organization, and forgets it in
the same step; a generation that ended is forgotten before its response is complete. So
whoever comes first wins: a generation that finished first answers the stop with 404, one
stopped first ends as stopped, and another organization's stop is a 404 with the stream going
on.
"""

from __future__ import annotations

import time

from core.backplane import Backplane, backplane
from core.flags import Flag
from core.loops import PerLoop

STOP_CHANNEL = "stop"
STOP_ANSWER_SECONDS = 2.0  # how long a stop waits for a worker that does not answer
ANSWER_LIST_SECONDS = 30  # a reply list nobody reads expires
YES, NO = b"1", b"0"


class LiveGenerations:
    """This process's running generations: their organizations and stop flags."""

    def __init__(self, plane: Backplane | None = None) -> None:
        self._running: dict[str, tuple[int, Flag]] = {}
        # Set by `stop_all` (a worker shutting down): a generation starting after it is
        # stopped at once, so none outlives the shutdown.
        self._stopped_all_because = ""
        self._backplane = plane or backplane()
        self._backplane.on(STOP_CHANNEL, self._on_stop_request)

    async def start(self) -> None:
        """Listen for stops from the start, so the first one is as quick as any; connect."""
        await self._backplane.start()

    async def register(self, run_id: str, organization_id: int) -> Flag:
        """Register a starting generation; return the flag a stop will set."""
        flag = Flag()
        if self._stopped_all_because:
            flag.set(self._stopped_all_because)
            return flag
        self._running[run_id] = (organization_id, flag)
        return flag

    def stop_all(self, reason: str) -> int:
        """Stop every generation of this worker, and any that starts from now on; return how
        many were running."""
        self._stopped_all_because = reason
        running, self._running = self._running, {}
        for _, flag in running.values():
            flag.set(reason)
        return len(running)

    def unregister(self, run_id: str) -> None:
        """Forget a generation that ended; a stop for it is a 404 from now on."""
        self._running.pop(run_id, None)

    def _stop_here(self, run_id: str, organization_id: int) -> bool:
        running = self._running.get(run_id)
        if running is None or running[0] != organization_id:
            return False
        del self._running[run_id]
        running[1].set()
        return True

    async def stop(self, run_id: str, organization_id: int) -> bool:
        """Stop the generation if it runs for this organization, on any worker; True if it
        was stopped."""
        if self._stop_here(run_id, organization_id):
            return True
        plane = self._backplane
        answers = plane.new_reply_list()
        await plane.start()
        listeners = await plane.publish(STOP_CHANNEL, f"{run_id} {organization_id} {answers}")
        deadline = time.monotonic() + STOP_ANSWER_SECONDS
        try:
            for _ in range(listeners):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                answer = await plane.pop_reply(answers, left)
                if answer is None:
                    return False
                if answer == YES:
                    return True
            return False
        finally:
            await plane.drop_reply_list(answers)

    def _on_stop_request(self, message: str) -> None:
        """Another worker (or this one) asks every worker to stop a generation: answer."""
        run_id, organization_id, answers = message.split(" ", 2)
        stopped = self._stop_here(run_id, int(organization_id))
        self._backplane.push_reply(answers, YES if stopped else NO, ANSWER_LIST_SECONDS)


live_generations = PerLoop(LiveGenerations)
