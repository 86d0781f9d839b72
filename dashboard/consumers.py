"""The dashboard's live feed: telemetry events over a websocket, for dashboard users only, each
seeing the events of the organizations they see (`dashboard.access`)."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from dashboard.access import Access, access_of
from telemetry.events import DASHBOARD_GROUP

FORBIDDEN = 4403


class TelemetryConsumer(AsyncJsonWebsocketConsumer):
    access: Access | None = None

    async def connect(self) -> None:
        self.access = await database_sync_to_async(access_of)(self.scope.get("user"))
        if self.access is None:
            await self.close(code=FORBIDDEN)
            return
        await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def telemetry_batch(self, message: dict[str, Any]) -> None:
        # Every connection gets every batch (one group); a member's events are picked here.
        # The role is read once, at connect: a role taken away applies from the next page.
        assert self.access is not None
        for event in message["events"]:
            if self.access.sees(event.get("organization")):
                await self.send_json(event)
