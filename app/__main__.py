"""`python -m app`: start the gateway (HTTP + WebSocket, and the TCP bridge) from settings."""

from __future__ import annotations

import gc
import logging

import uvicorn

from app.config import Settings
from app.main import create_app

WS_HEADER_ROOM = 1024  # a WebSocket message holds a frame header besides the body


def uvicorn_options(settings: Settings) -> dict:
    """What uvicorn must know of the settings besides where to listen."""
    options = {
        "ws_max_size": settings.max_frame_bytes + WS_HEADER_ROOM,
        "ws_per_message_deflate": settings.ws_per_message_deflate,
    }
    if settings.tls_enabled:
        options.update(ssl_certfile=str(settings.tls_certfile), ssl_keyfile=str(settings.tls_keyfile))
    return options


def main() -> None:
    settings = Settings(_cli_parse_args=True)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings)
    # The ~200k objects the imports made (torch's mostly) live as long as the process:
    # out of the collector's way, each full collection no longer walks them (~85 ms of
    # the event loop, every few seconds while experience streams in).
    gc.collect()
    gc.freeze()
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.http_port,
        log_level=settings.log_level.lower(),
        **uvicorn_options(settings),
    )


if __name__ == "__main__":
    main()
