"""The WebSocket transport: the same RLlink frames inside WebSocket messages.

For clients that cannot open a raw TCP socket (browsers, Unity WebGL). Message
payloads are treated as one byte stream, exactly like the TCP transport's, and each
reply goes out in the opcode of the message that completed its request. The route that
hands accepted sockets here is the app's (`app.main`).
"""

from __future__ import annotations

import logging
from typing import Literal

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from app.application.admission import bearer_token, token_matches
from app.settings.config import Settings
from app.transport.connection import ConnectionContext, refuse, serve
from rllink.errors import ErrorCode, ProtocolError

log = logging.getLogger("app.transport.websocket")

Opcode = Literal["text", "binary"]


async def serve_websocket(websocket: WebSocket, connections: ConnectionContext, settings: Settings) -> None:
    """RLlink over WebSocket: text or binary messages carrying length-prefixed frames.

    With auth on, the token comes as `Authorization: Bearer <token>`, as a `token` query
    parameter (browsers cannot set headers), or in the first PING as on TCP.
    """
    await websocket.accept()
    client = websocket.client
    peer = f"{client.host}:{client.port}" if client else "unknown"
    presented = bearer_token(websocket.headers.get("authorization")) or websocket.query_params.get("token")

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

    if presented is not None and not token_matches(settings, presented):
        # A wrong token is refused at once; no token at all may still come in a PING.
        log.warning("ws:%s refused: wrong token", peer)
        error = ProtocolError(ErrorCode.UNAUTHORIZED, "the token presented is not the gateway's", fatal=True)
        await refuse(connections.traffic, error, lambda frame: send(frame, "text"), close)
        return
    await serve(
        connections,
        transport="ws",
        peer=peer,
        receive=receive,
        send=send,
        close=close,
        default_tag="text",
        authenticated=settings.auth_token is None or presented is not None,
    )
