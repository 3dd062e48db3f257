"""FastAPI dependencies for the state every route shares: the one `Gateway`, its settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection

from app.settings.config import Settings

if TYPE_CHECKING:
    from app.gateway import Gateway


def get_gateway(connection: HTTPConnection) -> Gateway:
    """The gateway the app serves (set by `create_app`)."""
    return connection.app.state.gateway


def get_settings(connection: HTTPConnection) -> Settings:
    return connection.app.state.gateway.settings
