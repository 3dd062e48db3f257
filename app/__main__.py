"""`python -m app`: start the gateway (HTTP + WebSocket, and the TCP bridge) from settings."""

from __future__ import annotations

import logging

import uvicorn

from app.config import Settings
from app.main import create_app

WS_HEADER_ROOM = 1024  # a WebSocket message holds a frame header besides the body


def main() -> None:
    settings = Settings(_cli_parse_args=True)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.http_port,
        ws_max_size=settings.max_frame_bytes + WS_HEADER_ROOM,
        log_level=settings.log_level.lower(),
    )


if __name__ == "__main__":
    main()
