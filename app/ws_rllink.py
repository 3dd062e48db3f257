"""The WebSocket transport: the same RLlink frames inside WebSocket messages.

For clients that cannot open a raw TCP socket (browsers, Unity WebGL). Message
payloads are treated as one byte stream, exactly like the TCP bridge's, and each
reply goes out in the opcode of the message that completed its request.
"""

from __future__ import annotations

import logging
from typing import Literal

from fastapi import APIRouter, Depends, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from app.config import Settings
from app.connection import Connection, serve
from app.traffic import TrafficStats
from app.training.service import TrainingService
from app.dependencies import get_service, get_settings, get_traffic

log = logging.getLogger("app.ws_rllink")

router = APIRouter()

Opcode = Literal["text", "binary"]


@router.websocket("/rllink")
async def rllink_websocket(
    websocket: WebSocket,
    settings: Settings = Depends(get_settings),
    service: TrainingService = Depends(get_service),
    traffic: TrafficStats = Depends(get_traffic),
) -> None:
    """RLlink over WebSocket: text or binary messages carrying length-prefixed frames."""
    await websocket.accept()
    client = websocket.client
    peer = f"{client.host}:{client.port}" if client else "unknown"

    async def send(data: bytes, opcode: Opcode) -> None:
        if opcode == "text":
            try:
                await websocket.send_text(data.decode())
                return
            except UnicodeDecodeError:  # a msgpack reply cannot travel as text
                pass
        await websocket.send_bytes(data)

    async def receive() -> tuple[bytes, Opcode] | None:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return None
        if message["type"] == "websocket.disconnect":
            return None
        if message.get("bytes") is not None:
            return message["bytes"], "binary"
        return (message.get("text") or "").encode(), "text"

    async def close() -> None:
        if websocket.application_state == WebSocketState.CONNECTED:
            try:
                await websocket.close()
            except (WebSocketDisconnect, RuntimeError):  # the client left first
                pass

    connection = Connection(
        settings=settings,
        service=service,
        transport="ws",
        peer=peer,
        traffic=traffic,
        send=send,
    )
    await serve(connection, receive, close)
