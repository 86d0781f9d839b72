"""The dashboard's live feed: telemetry events over a websocket, for staff only."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from telemetry.events import DASHBOARD_GROUP

FORBIDDEN = 4403


class TelemetryConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_active or not user.is_staff:
            await self.close(code=FORBIDDEN)
            return
        await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def telemetry_batch(self, message: dict[str, Any]) -> None:
        for event in message["events"]:
            await self.send_json(event)
